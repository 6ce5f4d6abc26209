"""AK/SK authentication, the loopback rule and TLS (docs/protocol.md §2.5, §2.6)."""

from __future__ import annotations

import time

import grpc
import pytest

from tests.server._wire import Wire, run
from tests.support import self_signed
from thrust._codec.signature import signed_metadata
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.config import ServerConfig
from thrust.server.service import EmbeddedServer
from thrust.testing import embedded_server

CREDS = {"AK1": "secret-1"}


def _signed(ak: str, sk: str) -> list[tuple[str, str]]:
    return list(signed_metadata(ak, sk, time.time()).items())


def test_auth_accepts_a_correct_signature_everywhere() -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["t"], credentials=CREDS) as srv,
            Wire(srv.endpoints[0], metadata_fn=lambda: _signed("AK1", "secret-1")) as w,
        ):
            assert (await w.route("t")).status.code == Code.OK
            await w.producer("t")
            assert (await w.send_ok("t")) != []

    run(scenario())


@pytest.mark.parametrize(
    "extra",
    [
        [],
        [("authorization", "MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature=")],
        _signed("AK1", "wrong"),
        _signed("AK2", "secret-1"),
        [("x-mq-date-time", "20250101T000000Z"), ("authorization", "garbage")],
    ],
    ids=["missing", "empty-credential", "wrong-secret", "unknown-key", "malformed"],
)
def test_auth_rejects(extra: list[tuple[str, str]]) -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["t"], credentials=CREDS) as srv,
            Wire(srv.endpoints[0], extra_metadata=extra) as w,
        ):
            assert (await w.route("t")).status.code == Code.UNAUTHORIZED
            stream = [
                r async for r in w.stub.ReceiveMessage(s.ReceiveMessageRequest(), metadata=w.md, timeout=5)
            ]
            assert stream[0].status.code == Code.UNAUTHORIZED
            call = w.open_telemetry()
            # The server refuses at call start, before reading (a write may race with that refusal).
            assert (await call.read()).status.code == Code.UNAUTHORIZED
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call.read()
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED

    run(scenario())


def test_without_auth_any_authorization_header_is_tolerated() -> None:
    async def scenario() -> None:
        extra = [("authorization", "MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature=")]
        async with embedded_server(topics=["t"]) as srv, Wire(srv.endpoints[0], extra_metadata=extra) as w:
            assert (await w.route("t")).status.code == Code.OK

    run(scenario())


def test_non_loopback_bind_needs_auth_or_explicit_waiver() -> None:
    with pytest.raises(ValueError, match="non-loopback"):
        EmbeddedServer(ServerConfig(host="0.0.0.0"))
    # Auth over plaintext off loopback needs TLS or the waiver too (S7, docs/reliability.md §5).
    with pytest.raises(ValueError, match="plaintext"):
        EmbeddedServer(ServerConfig(host="0.0.0.0", credentials=CREDS))
    EmbeddedServer(ServerConfig(host="0.0.0.0", credentials=CREDS, insecure_allow_remote=True))
    EmbeddedServer(ServerConfig(host="0.0.0.0", insecure_allow_remote=True))
    EmbeddedServer(ServerConfig(host="localhost"))


def test_tls() -> None:
    cert, key = self_signed("localhost")

    async def scenario() -> None:
        async with embedded_server(topics=["t"], tls_cert=cert, tls_key=key) as srv:
            creds = grpc.ssl_channel_credentials(root_certificates=cert)
            options = [("grpc.ssl_target_name_override", "localhost")]
            async with Wire(srv.endpoints[0], credentials=creds, options=options) as w:
                assert (await w.route("t")).status.code == Code.OK

    run(scenario())

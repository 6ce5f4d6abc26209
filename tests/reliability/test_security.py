"""Security end to end with the thrust client (S1-S7, S10, S11, C1, C3 and B13 of docs/reliability.md §4-§6;
S8 and S12 are in test_limits.py).

- Wrong access key, wrong secret, a garbled `authorization` header (no space, no `Credential=`,
  non-hex signature), a missing `x-mq-date-time` and no credentials at all: `start()` fails with
  UnauthorizedError within its bound and without a retry storm (<= 1 attempt/s).
- Secrets never logged: the secret key and every signature the client computed are absent from the
  client's and the in-process server's logs at DEBUG (caplog), from stdout/stderr (capsys), and from the
  log of a `thrust serve` subprocess at DEBUG.
- Loopback by default: a non-loopback bind without auth is refused; the default bind is not reachable
  from a non-loopback address of this host.
- TLS: a client trusting the test CA round-trips messages; a client that does not trust it, a plaintext
  client against TLS, and a TLS client against plaintext all fail fast with a typed error.
- S5: a captured header replayed 20 min later is refused (freshness window on x-mq-date-time); the
  upstream clients' date formats still pass.
- S7: auth off loopback needs TLS (or an explicit waiver): start matrix in-process and `thrust serve`.
- S10: `thrust serve` refuses a TLS key file other users can read.
- S11: no admin, health, reflection or channelz service on the data port; no other listening port.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

import thrust
import thrust._io.metadata as client_metadata
from tests.reliability._util import assert_report, body, drain, run, send_recorded
from tests.server._wire import Wire
from tests.support import self_signed
from thrust._codec.signature import signed_metadata
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust.reliability.history import HistoryRecorder, check
from thrust.server.config import ServerConfig
from thrust.testing import EmbeddedServer, ServerProcess, embedded_server

AK, SK = "reliability-ak", "S3cr3t-never-logged-7f1d"
CREDS = {AK: SK}
REQUEST_TIMEOUT = 1.0
# start(): route query with up to 3 attempts plus the Settings wait (request timeout + 3 s), + 1 s.
START_BOUND = 3 * REQUEST_TIMEOUT + REQUEST_TIMEOUT + 3.0 + 1.0


def _garble(kind: str) -> Any:
    """A replacement for the client's `sign()` that produces one kind of broken header."""

    def sign(access_key: str, secret_key: str, date_time: str) -> str:
        good = real_sign(access_key, secret_key, date_time)
        if kind == "no-space":
            return good.replace(" ", "", 1)
        if kind == "no-credential":
            return good.replace("Credential=", "Cred=")
        if kind == "non-hex-signature":
            return good.rsplit("Signature=", 1)[0] + "Signature=zz-not-hex"
        raise AssertionError(kind)

    return sign


real_sign = client_metadata.sign


def _drop_date_header(monkeypatch: pytest.MonkeyPatch) -> None:
    real_call = client_metadata.Metadata.__call__

    def call(self: client_metadata.Metadata) -> tuple[tuple[str, str], ...]:
        return tuple(h for h in real_call(self) if h[0] != "x-mq-date-time")

    monkeypatch.setattr(client_metadata.Metadata, "__call__", call)


@pytest.mark.parametrize(
    "case",
    [
        "unknown-access-key",
        "wrong-secret",
        "no-credentials",
        "garbled-no-space",
        "garbled-no-credential",
        "garbled-non-hex-signature",
        "missing-date-header",
    ],
)
def test_b13_bad_credentials_fail_start_typed_bounded_without_retry_storm(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    creds: thrust.Credentials | None = thrust.Credentials(access_key=AK, secret_key=SK)
    if case == "unknown-access-key":
        creds = thrust.Credentials(access_key="nobody", secret_key=SK)
    elif case == "wrong-secret":
        creds = thrust.Credentials(access_key=AK, secret_key="wrong-secret")
    elif case == "no-credentials":
        creds = None
    elif case.startswith("garbled-"):
        monkeypatch.setattr(client_metadata, "sign", _garble(case.removeprefix("garbled-")))
    elif case == "missing-date-header":
        _drop_date_header(monkeypatch)

    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"], credentials=CREDS) as srv:
            ep = srv.endpoints[0]
            for make in (
                lambda: thrust.Producer(
                    endpoints=ep, topics=["t"], credentials=creds, request_timeout=REQUEST_TIMEOUT
                ),
                lambda: thrust.SimpleConsumer(
                    endpoints=ep,
                    group="g",
                    subscriptions={"t": "*"},
                    credentials=creds,
                    request_timeout=REQUEST_TIMEOUT,
                    await_duration=1,
                ),
                # A push consumer's start talks Telemetry first (no topic to route before its session);
                # several times, because how the refused stream ended once decided its error (the server
                # writes the status, then aborts: gRPC sometimes reported that as INTERNAL).
                *[
                    lambda: thrust.PushConsumer(
                        endpoints=ep,
                        group="g",
                        subscriptions={"t": "*"},
                        listener=lambda m: thrust.ConsumeResult.SUCCESS,
                        credentials=creds,
                        request_timeout=REQUEST_TIMEOUT,
                    )
                ]
                * 4,
            ):
                srv.stats.reset()
                started = time.monotonic()
                with pytest.raises(thrust.UnauthorizedError) as info:
                    async with make():
                        pass
                took = time.monotonic() - started
                assert info.value.code == Code.UNAUTHORIZED
                assert took <= START_BOUND, f"start took {took:.1f}s"
                calls = sum(srv.stats.calls.values())
                # No retry storm: an UNAUTHORIZED answer is final (at most ~1 attempt per second).
                assert calls <= 2 + took, dict(srv.stats.calls)

    run(scenario)


def test_b13_a_refused_telemetry_stream_completed_as_the_proxy_does_fails_push_start_typed() -> None:
    """The proxy answers a Telemetry command it refuses (refused credentials: ResponseBuilder.buildStatus
    maps AuthenticationException to UNAUTHORIZED) with `TelemetryCommand{status}` and completes the stream
    with gRPC OK (apache/rocketmq proxy/.../grpc/v2/GrpcMessagingApplication.telemetry). A push consumer,
    whose start waits for its Telemetry session first, fails `start()` with UnauthorizedError at once,
    not after reopening the stream until its Settings wait runs out. A stand-in server does exactly that
    (the embedded server aborts the stream after the status instead: D13 of docs/interop-findings.md)."""
    refused = pb.Status(code=pb.UNAUTHORIZED, message="access key nobody is not found")
    opened: list[int] = []

    async def telemetry(requests: Any, context: grpc.aio.ServicerContext) -> Any:  # type: ignore[type-arg]
        opened.append(1)
        await requests.__anext__()  # the client's Settings: refused on receipt, as the proxy's onNext
        yield spb.TelemetryCommand(status=refused)

    async def query_route(request: Any, context: grpc.aio.ServicerContext) -> Any:  # type: ignore[type-arg]
        return spb.QueryRouteResponse(status=refused)

    handler = grpc.method_handlers_generic_handler(
        "apache.rocketmq.v2.MessagingService",
        {
            "Telemetry": grpc.stream_stream_rpc_method_handler(
                telemetry,
                request_deserializer=spb.TelemetryCommand.FromString,
                response_serializer=spb.TelemetryCommand.SerializeToString,
            ),
            "QueryRoute": grpc.unary_unary_rpc_method_handler(
                query_route,
                request_deserializer=spb.QueryRouteRequest.FromString,
                response_serializer=spb.QueryRouteResponse.SerializeToString,
            ),
        },
    )

    async def scenario() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            creds = thrust.Credentials(access_key="nobody", secret_key=SK)
            with pytest.raises(thrust.UnauthorizedError) as info:
                async with thrust.PushConsumer(
                    endpoints=f"127.0.0.1:{port}",
                    group="g",
                    subscriptions={"t": "*"},
                    listener=lambda m: thrust.ConsumeResult.SUCCESS,
                    credentials=creds,
                    request_timeout=REQUEST_TIMEOUT,
                ):
                    pass
            assert info.value.code == Code.UNAUTHORIZED
            assert "nobody" in info.value.message
            assert len(opened) == 1  # the refusal was final: the stream was not reopened
        finally:
            await server.stop(None)

    run(scenario)


def _signatures_recorder(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []

    def sign(access_key: str, secret_key: str, date_time: str) -> str:
        value = real_sign(access_key, secret_key, date_time)
        seen.append(value.rsplit("Signature=", 1)[1])
        return value

    monkeypatch.setattr(client_metadata, "sign", sign)
    return seen


@pytest.mark.slow
def test_s4_c3_secrets_and_signatures_never_logged_in_process(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """Client and in-process server at DEBUG, good and bad credentials, full traffic: neither the secret
    key nor any signature appears in any log record, stdout or stderr, nor in reprs of the config."""
    signatures = _signatures_recorder(monkeypatch)
    caplog.set_level(logging.DEBUG)

    async def scenario() -> None:
        rec = HistoryRecorder()
        good = thrust.Credentials(access_key=AK, secret_key=SK, session_token="sess-t0ken-secret")
        async with embedded_server(topics=["t"], groups=["g"], credentials=CREDS) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.Producer(endpoints=ep, topics=["t"], credentials=good) as p,
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, credentials=good, await_duration=1
                ) as c,
            ):
                for i in range(5):
                    await send_recorded(rec, p, thrust.Message(topic="t", body=body(f"s{i}")), f"s{i}")
                await drain(rec, c, [f"s{i}" for i in range(5)], idle=0.3, budget=15)
                text = repr(p.config) + str(p.config) + repr(good)
                assert SK not in text and "sess-t0ken-secret" not in text
            for bad in (
                thrust.Credentials(access_key=AK, secret_key=SK + "x"),
                thrust.Credentials(access_key="nobody", secret_key=SK),
            ):
                with pytest.raises(thrust.UnauthorizedError) as info:
                    async with thrust.Producer(
                        endpoints=ep, topics=["t"], credentials=bad, request_timeout=1
                    ):
                        pass
                assert SK not in str(info.value) and SK not in repr(info.value)
        assert_report(check(rec), "P1", "P2")

    run(scenario)
    out = capsys.readouterr()
    logs = caplog.text + "\n".join(str(r.args) for r in caplog.records) + out.out + out.err
    assert caplog.records, "nothing was logged at DEBUG: the scan would prove nothing"
    assert signatures, "no request was signed"
    assert SK not in logs
    assert "sess-t0ken-secret" not in logs
    leaked = [s for s in set(signatures) if s in logs]
    assert not leaked, f"signatures in logs: {leaked[:3]}"


@pytest.mark.slow
def test_s4_secret_never_in_the_server_subprocess_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """`thrust serve --access-key ... --log-level DEBUG` with the secret from THRUST_SECRET_KEY: after
    good and bad clients, the server log holds neither the secret nor any submitted signature."""
    signatures = _signatures_recorder(monkeypatch)
    with ServerProcess(
        ["--topic", "t", "--access-key", AK, "--log-level", "DEBUG"], env={"THRUST_SECRET_KEY": SK}
    ) as proc:

        async def scenario() -> None:
            ep = proc.endpoints[0]
            good = thrust.Credentials(access_key=AK, secret_key=SK)
            async with thrust.Producer(endpoints=ep, topics=["t"], credentials=good) as p:
                await p.send(thrust.Message(topic="t", body=b"x"))
            with pytest.raises(thrust.UnauthorizedError):
                bad = thrust.Credentials(access_key=AK, secret_key="not-the-secret")
                async with thrust.Producer(endpoints=ep, topics=["t"], credentials=bad, request_timeout=1):
                    pass

        run(scenario)
        log = Path(proc.log_path).read_text(errors="replace")
    assert log.strip(), "the server logged nothing"
    assert SK not in log
    leaked = [s for s in set(signatures) if s in log]
    assert not leaked, f"signatures in the server log: {leaked[:3]}"


def _non_loopback_address() -> str | None:
    """A local IPv4 address that is not loopback (no packet is sent), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: only selects the outgoing interface
            addr = str(s.getsockname()[0])
        except OSError:
            return None
    return None if addr.startswith("127.") or addr == "0.0.0.0" else addr


def test_s1_s2_loopback_by_default_and_non_loopback_bind_needs_auth() -> None:
    """S2: binding 0.0.0.0 without auth is refused (in-process and `thrust serve`), allowed with auth (and
    TLS, S7). S1: the default bind answers on 127.0.0.1 and refuses connections to a non-loopback address."""
    with pytest.raises(ValueError, match="non-loopback"):
        EmbeddedServer(ServerConfig(host="0.0.0.0"))
    cert, key = self_signed("thrust-reliability", dns=["thrust.test"], ca=True)
    EmbeddedServer(ServerConfig(host="0.0.0.0", credentials=CREDS, tls_cert=cert, tls_key=key))
    # (start=False then close(): a ServerProcess whose constructor fails leaves its log file open.)
    refused = ServerProcess(host="0.0.0.0", port=0, startup_timeout=10, start=False)
    try:
        with pytest.raises(RuntimeError, match="did not start"):
            refused.start()
        assert "non-loopback" in refused.log_path.read_text(errors="replace")
    finally:
        refused.close()

    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv:
            port = srv.ports[0]
            assert srv.endpoints[0] == f"127.0.0.1:{port}"
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"]) as p:
                await p.send(thrust.Message(topic="t", body=b"loopback"))
            other = _non_loopback_address()
            if other is not None:
                with pytest.raises(OSError):
                    with socket.create_connection((other, port), timeout=2):
                        pass
                t0 = time.monotonic()
                # Refused by the host (nothing listens there): a transport failure, not a wait.
                with pytest.raises(thrust.ConnectionError) as info:
                    async with thrust.Producer(endpoints=f"{other}:{port}", topics=["t"], request_timeout=1):
                        pass
                assert "UNAVAILABLE" in str(info.value)
                assert time.monotonic() - t0 <= START_BOUND

    run(scenario)


@pytest.mark.slow
def test_s6_c1_tls_with_auth_end_to_end_and_every_mismatch_fails_fast(tmp_path: Path) -> None:
    """S6/C1: TLS plus auth round-trips messages (P1) for a client trusting the test CA; a client
    verifying against the system roots (the certificate is self-signed), a plaintext client against the
    TLS port and a TLS client against a plaintext port each fail with a typed error within the bound."""
    cert, key = self_signed("thrust-reliability", dns=["thrust.test"], ca=True)
    ca = tmp_path / "ca.pem"
    ca.write_bytes(cert)
    creds = thrust.Credentials(access_key=AK, secret_key=SK)

    async def scenario() -> None:
        rec = HistoryRecorder()
        async with embedded_server(
            topics=["t"], groups=["g"], tls_cert=cert, tls_key=key, credentials=CREDS
        ) as srv:
            ep = srv.endpoints[0]
            tls = thrust.TlsConfig(ca_file=str(ca), server_name="thrust.test")
            async with (
                thrust.Producer(endpoints=ep, topics=["t"], tls=tls, credentials=creds) as p,
                thrust.SimpleConsumer(
                    endpoints=ep,
                    group="g",
                    subscriptions={"t": "*"},
                    tls=tls,
                    credentials=creds,
                    await_duration=1,
                ) as c,
            ):
                for i in range(5):
                    await send_recorded(rec, p, thrust.Message(topic="t", body=body(f"tls{i}")), f"tls{i}")
                await drain(rec, c, [f"tls{i}" for i in range(5)], idle=0.3, budget=15)
            for wrong in (
                thrust.TlsConfig(server_name="thrust.test"),  # system roots: the test CA is not trusted
                None,  # plaintext against TLS
            ):
                t0 = time.monotonic()
                # The handshake fails (untrusted certificate, or plaintext the TLS port closes on): a
                # transport failure, UNAVAILABLE, not a timeout and not an authentication error.
                with pytest.raises(thrust.ConnectionError) as info:
                    async with thrust.Producer(
                        endpoints=ep,
                        topics=["t"],
                        tls=wrong,
                        credentials=creds,
                        request_timeout=REQUEST_TIMEOUT,
                    ):
                        pass
                assert "UNAVAILABLE" in str(info.value), info.value
                assert time.monotonic() - t0 <= START_BOUND
        async with embedded_server(topics=["t"]) as plain:
            t0 = time.monotonic()
            with pytest.raises(thrust.ConnectionError) as info:
                async with thrust.Producer(
                    endpoints=plain.endpoints[0],
                    topics=["t"],
                    tls=thrust.TlsConfig(ca_file=str(ca), server_name="thrust.test"),
                    request_timeout=REQUEST_TIMEOUT,
                ):
                    pass
            assert "UNAVAILABLE" in str(info.value), info.value
            assert time.monotonic() - t0 <= START_BOUND
        assert_report(check(rec), "P1", "P2")

    run(scenario)


# S5: freshness window on x-mq-date-time ----------------------------------------------------------------

REPLAY_AFTER = 20 * 60.0  # S5's "replay a captured header after 20 min"


def _signed_headers_recorder(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every (x-mq-date-time, authorization) pair the client signs: what an eavesdropper captures."""
    seen: list[tuple[str, str]] = []

    def sign(access_key: str, secret_key: str, date_time: str) -> str:
        value = real_sign(access_key, secret_key, date_time)
        seen.append((date_time, value))
        return value

    monkeypatch.setattr(client_metadata, "sign", sign)
    return seen


async def _route_code(ep: str, headers: list[tuple[str, str]]) -> int:
    async with Wire(ep, client_id="replayer", extra_metadata=headers) as w:
        return int((await w.route("t")).status.code)


def test_s5_a_header_replayed_20_min_later_is_rejected_a_current_one_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """S5 (default window +-15 min with auth and without TLS): headers captured from a real thrust client
    pass when replayed at once and 10 min later, and are refused (UNAUTHORIZED) 20 min later (the server's
    clock moved on). A client whose clock is 20 min behind fails `start()` with UnauthorizedError whose
    message names the skew but neither the signature nor the secret; a current client sends and consumes.
    With the window turned off (0) the 20-min-old header passes again: the check is what refuses it."""
    captured = _signed_headers_recorder(monkeypatch)

    async def scenario() -> None:
        creds = thrust.Credentials(access_key=AK, secret_key=SK)
        async with embedded_server(topics=["t"], groups=["g"], credentials=CREDS) as srv:
            ep = srv.endpoints[0]
            assert srv.authenticator.date_time_window == 15 * 60
            async with thrust.Producer(endpoints=ep, topics=["t"], credentials=creds) as p:
                receipt = await p.send(thrust.Message(topic="t", body=b"fresh"))
            async with thrust.SimpleConsumer(
                endpoints=ep, group="g", subscriptions={"t": "*"}, credentials=creds, await_duration=1
            ) as c:
                [m] = await c.receive()
                assert m.message_id == receipt.message_id
                await c.ack(m)
            date_time, authorization = captured[-1]
            replay = [("x-mq-date-time", date_time), ("authorization", authorization)]
            assert await _route_code(ep, replay) == Code.OK
            srv.authenticator.clock = lambda: time.time() + 10 * 60
            assert await _route_code(ep, replay) == Code.OK
            srv.authenticator.clock = lambda: time.time() + REPLAY_AFTER
            async with Wire(ep, client_id="replayer", extra_metadata=replay) as w:
                status = (await w.route("t")).status
            assert status.code == Code.UNAUTHORIZED
            assert "away from the server's clock" in status.message
            assert authorization.rsplit("=", 1)[1] not in status.message and SK not in status.message
            srv.authenticator.clock = time.time

            real_format = client_metadata.format_date_time
            with monkeypatch.context() as m:
                m.setattr(client_metadata, "format_date_time", lambda t: real_format(t - REPLAY_AFTER))
                with pytest.raises(thrust.UnauthorizedError) as info:
                    async with thrust.Producer(
                        endpoints=ep, topics=["t"], credentials=creds, request_timeout=REQUEST_TIMEOUT
                    ):
                        pass
            assert info.value.code == Code.UNAUTHORIZED
            assert re.search(r"120[01] s away from the server's clock", str(info.value)), str(info.value)
            assert SK not in str(info.value)
            assert not any(a.rsplit("=", 1)[1] in str(info.value) for _, a in captured)

        async with embedded_server(topics=["t"], credentials=CREDS, date_time_window=0) as off:
            off.authenticator.clock = lambda: time.time() + REPLAY_AFTER
            assert off.authenticator.date_time_window is None
            assert await _route_code(off.endpoints[0], replay) == Code.OK

    run(scenario)


def test_s5_window_defaults_and_upstream_date_formats() -> None:
    """The window is on by default with auth and without TLS, off with TLS (the replay needs the TLS
    session) and configurable. It accepts the upstream clients' date formats: in a server whose zone is
    UTC+05:45, thrust's UTC stamp, the Java/Python clients' local time with a literal `Z` (same zone as the
    server: the embedded server's usual case), and the Rust client's RFC 3339 local time all pass; the
    local time of a client in another zone (UTC+8, stamped with `Z`) is refused: that client must run in UTC
    or in the server's zone, or the window must be widened or turned off."""
    cert, key = self_signed("thrust-reliability", dns=["thrust.test"], ca=True)
    assert ServerConfig(credentials=CREDS).effective_date_time_window() == 900.0
    assert ServerConfig(credentials=CREDS, tls_cert=cert, tls_key=key).effective_date_time_window() is None
    assert ServerConfig(credentials=CREDS, date_time_window=60).effective_date_time_window() == 60.0
    assert ServerConfig(credentials=CREDS, date_time_window=None).effective_date_time_window() is None
    assert ServerConfig().effective_date_time_window() is None  # no auth, nothing to check

    saved = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Kathmandu"  # UTC+05:45 all year: no DST edge in the test
    time.tzset()
    try:
        now = time.time()
        utc = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        local_with_z = time.strftime("%Y%m%dT%H%M%SZ", time.localtime(now))  # Java, Python 5.1.2
        other_zone_with_z = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now + 8 * 3600))
        rfc3339 = datetime.datetime.fromtimestamp(now).astimezone().isoformat()  # Rust (chrono Local)
        assert local_with_z != utc

        async def scenario() -> dict[str, int]:
            codes = {}
            async with embedded_server(topics=["t"], credentials=CREDS) as srv:
                for name, stamp in (
                    ("utc", utc),
                    ("local-Z", local_with_z),
                    ("rfc3339", rfc3339),
                    ("other-zone-Z", other_zone_with_z),
                    ("garbage", "yesterday"),
                ):
                    headers = [("x-mq-date-time", stamp), ("authorization", real_sign(AK, SK, stamp))]
                    codes[name] = await _route_code(srv.endpoints[0], headers)
            return codes

        codes = run(scenario)
    finally:
        if saved is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = saved
        time.tzset()
    assert codes == {
        "utc": Code.OK,
        "local-Z": Code.OK,
        "rfc3339": Code.OK,
        "other-zone-Z": Code.UNAUTHORIZED,
        "garbage": Code.UNAUTHORIZED,
    }


# S7: no signed requests over plaintext off loopback ----------------------------------------------------


def _serve_args_tls(tmp_path: Path, key_mode: int = 0o600) -> list[str]:
    cert, key = self_signed("thrust-reliability", dns=["thrust.test"], ca=True)
    (tmp_path / "cert.pem").write_bytes(cert)
    key_file = tmp_path / "key.pem"
    key_file.write_bytes(key)
    key_file.chmod(key_mode)
    return ["--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(key_file)]


def _serve_outcome(host: str, args: list[str]) -> str:
    """ "started" or the log of a `thrust serve` that refused to start."""
    env = {"THRUST_SECRET_KEY": SK} if "--access-key" in args else {}
    proc = ServerProcess(args, host=host, port=0, startup_timeout=15, start=False, env=env)
    try:
        try:
            proc.start()
        except RuntimeError:
            return proc.log_path.read_text(errors="replace")
        return "started"
    finally:
        proc.close()


@pytest.mark.slow
def test_s7_start_matrix_auth_off_loopback_needs_tls_or_explicit_waiver(tmp_path: Path) -> None:
    """S7 (and S2): in-process and through `thrust serve`, a non-loopback bind with auth but without TLS
    is refused (the signature is replayable over plaintext) unless `--insecure-allow-remote`; auth + TLS
    starts; loopback starts in every combination."""
    cert, key = self_signed("thrust-reliability", dns=["thrust.test"], ca=True)
    tls = {"tls_cert": cert, "tls_key": key}
    matrix: list[tuple[str, dict[str, Any], bool]] = [
        ("127.0.0.1", {}, True),
        ("127.0.0.1", {"credentials": CREDS}, True),
        ("127.0.0.1", {"credentials": CREDS, **tls}, True),
        ("0.0.0.0", {}, False),
        ("0.0.0.0", {**tls}, False),
        ("0.0.0.0", {"credentials": CREDS}, False),
        ("0.0.0.0", {"credentials": CREDS, **tls}, True),
        ("0.0.0.0", {"credentials": CREDS, "insecure_allow_remote": True}, True),
        ("0.0.0.0", {"insecure_allow_remote": True}, True),
    ]
    for host, fields, allowed in matrix:
        config = ServerConfig(host=host, **fields)
        if allowed:
            EmbeddedServer(config)
        else:
            with pytest.raises(ValueError, match="non-loopback"):
                EmbeddedServer(config)
    with pytest.raises(ValueError, match="plaintext"):
        EmbeddedServer(ServerConfig(host="0.0.0.0", credentials=CREDS))

    auth = ["--access-key", AK]
    refused = _serve_outcome("0.0.0.0", auth)
    assert "plaintext" in refused and "non-loopback" in refused and SK not in refused
    assert _serve_outcome("0.0.0.0", [*auth, "--insecure-allow-remote"]) == "started"
    assert _serve_outcome("0.0.0.0", [*auth, *_serve_args_tls(tmp_path)]) == "started"
    assert _serve_outcome("127.0.0.1", auth) == "started"


# S10: secrets on disk ------------------------------------------------------------------------------------


def test_s10_serve_refuses_a_tls_key_file_other_users_can_read(tmp_path: Path) -> None:
    """S10: the server keeps its state in memory (no data dir) and takes the AK/SK from flags or the
    environment, so the one secret file it reads is the TLS private key: `thrust serve` refuses one that
    other users may read (exit 2, the fix named), and starts with the same key at 0600 (or 0640)."""
    for mode in (0o644, 0o604):
        args = _serve_args_tls(tmp_path, mode)
        result = subprocess.run(
            [sys.executable, "-m", "thrust.cli.main", "serve", "--port", "0", *args],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert result.returncode == 2, result
        assert "accessible to other users" in result.stderr and "chmod o-rwx" in result.stderr
        assert "listening on" not in result.stdout
    assert _serve_outcome("127.0.0.1", _serve_args_tls(tmp_path, 0o600)) == "started"
    assert _serve_outcome("127.0.0.1", _serve_args_tls(tmp_path, 0o640)) == "started"


# S11: no management surface on the data port -------------------------------------------------------------


_NOT_SERVED = (
    "/apache.rocketmq.v2.Admin/ChangeLogLevel",  # the wheel's admin.proto
    "/grpc.health.v1.Health/Check",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.channelz.v1.Channelz/GetServers",
)


def _listening_ports(pid: int) -> set[int]:
    """TCP ports process `pid` listens on (from /proc: its socket inodes in LISTEN rows)."""
    owned = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                owned.add(int(target[8:-1]))
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in (line.split() for line in f.readlines()[1:]):
                if row[3] == "0A" and int(row[9]) in owned:
                    ports.add(int(row[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.slow
def test_s11_no_admin_rpc_on_the_data_port_and_no_other_port() -> None:
    """S11: on a server with auth, upstream's Admin/ChangeLogLevel, gRPC health, reflection and channelz
    answer UNIMPLEMENTED whether the call is unauthenticated or correctly signed (there is no admin
    service to authorise); a `thrust serve` with two brokers listens on exactly its two broker ports."""

    async def scenario() -> None:
        async with embedded_server(topics=["t"], credentials=CREDS) as srv:
            channel = grpc.aio.insecure_channel(srv.endpoints[0])
            try:
                for headers in (
                    [("x-mq-client-id", "admin-probe")],
                    [("x-mq-client-id", "admin-probe"), *signed_metadata(AK, SK, time.time()).items()],
                ):
                    for method in _NOT_SERVED:
                        call = channel.unary_unary(method)
                        with pytest.raises(grpc.aio.AioRpcError) as info:
                            await call(b"\x08\x01", metadata=headers, timeout=5)
                        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED, method
                # The data port itself works for the signed caller (the probe reached a live server).
                signed = list(signed_metadata(AK, SK, time.time()).items())
                assert await _route_code(srv.endpoints[0], signed) == Code.OK
            finally:
                await channel.close()

    run(scenario)
    with ServerProcess(
        ["--topic", "t", "--access-key", AK], brokers=2, env={"THRUST_SECRET_KEY": SK}
    ) as proc:
        assert _listening_ports(proc.pid) == set(proc.ports)

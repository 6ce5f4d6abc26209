"""Client certificates (mutual TLS) against the embedded server: `TlsConfig(cert_file=..., key_file=...)` on
the client, `tls_client_ca` (`thrust serve --tls-client-ca`) on the server.

The server asks every client for a certificate chaining to its client CA; a client presenting one gets
through, a client presenting none, or one from another CA, fails the handshake with a typed, retriable
`ConnectionError` (UNAVAILABLE), never a hang and never an authentication error from the RocketMQ layer."""

from __future__ import annotations

from pathlib import Path

import pytest

import thrust
from tests.client._util import receive_n, run
from tests.support import CertificateAuthority
from thrust.cli.main import build_parser
from thrust.cli.serve import _config
from thrust.server.config import ServerConfig
from thrust.server.service import EmbeddedServer
from thrust.testing import embedded_server

SERVER_NAME = "thrust.test"


def _write(folder: Path, name: str, data: bytes) -> str:
    path = folder / name
    path.write_bytes(data)
    return str(path)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("mtls")
    ca, stranger = CertificateAuthority("thrust-test-ca"), CertificateAuthority("another-ca")
    server_cert, server_key = ca.issue("thrust-server", client=False, server_name=SERVER_NAME)
    client_cert, client_key = ca.issue("thrust-client", client=True, server_name=SERVER_NAME)
    foreign_cert, foreign_key = stranger.issue("thrust-client", client=True, server_name=SERVER_NAME)
    return {
        "ca": ca.pem,
        "server": (server_cert, server_key),
        "ca_file": _write(folder, "ca.pem", ca.pem),
        "client": (_write(folder, "client.pem", client_cert), _write(folder, "client.key", client_key)),
        "foreign": (_write(folder, "foreign.pem", foreign_cert), _write(folder, "foreign.key", foreign_key)),
    }


def _tls(pki: dict[str, object], which: str | None) -> thrust.TlsConfig:
    if which is None:
        return thrust.TlsConfig(ca_file=str(pki["ca_file"]), server_name=SERVER_NAME)
    cert_file, key_file = pki[which]  # type: ignore[misc]
    return thrust.TlsConfig(
        ca_file=str(pki["ca_file"]), cert_file=cert_file, key_file=key_file, server_name=SERVER_NAME
    )


def _server(pki: dict[str, object]) -> object:
    cert, key = pki["server"]  # type: ignore[misc]
    return embedded_server(topics=["t"], groups=["g"], tls_cert=cert, tls_key=key, tls_client_ca=pki["ca"])


def test_a_client_certificate_from_the_trusted_ca_gets_through(pki: dict[str, object]) -> None:
    async def scenario() -> None:
        async with _server(pki) as srv:  # type: ignore[attr-defined]
            ep = srv.endpoints[0]
            tls = _tls(pki, "client")
            async with (
                thrust.Producer(endpoints=ep, topics=["t"], tls=tls) as p,
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, tls=tls, await_duration=5
                ) as c,
            ):
                receipt = await p.send(thrust.Message(topic="t", body=b"mutual"))
                [m] = await receive_n(c, 1)
                assert (m.message_id, m.body) == (receipt.message_id, b"mutual")
                await m.ack()
            assert srv.stats.entries["SendMessage"] == 1 and srv.stats.entries["AckMessage"] == 1

    run(scenario)


@pytest.mark.parametrize("which", [None, "foreign"], ids=["no-certificate", "another-ca"])
def test_a_client_without_a_trusted_certificate_fails_the_handshake(
    pki: dict[str, object], which: str | None
) -> None:
    async def scenario() -> None:
        async with _server(pki) as srv:  # type: ignore[attr-defined]
            with pytest.raises(thrust.ConnectionError) as info:
                async with thrust.Producer(
                    endpoints=srv.endpoints[0], topics=["t"], tls=_tls(pki, which), request_timeout=10
                ):
                    pass
            # UNAVAILABLE on both transports. With TLS 1.3 the server checks the client's certificate after
            # the client has finished its side of the handshake, so the native transport may instead meet
            # the connection closing under its first call, which tonic reports as CANCELLED "connection
            # closed"; the extension reports that as UNAVAILABLE, as gRPC core does.
            text = str(info.value)
            assert "UNAVAILABLE" in text, text
            assert info.value.retriable
            # Refused in the handshake: no call reached the server.
            assert sum(srv.stats.calls.values()) == 0, dict(srv.stats.calls)

    run(scenario)


def test_client_ca_needs_tls_and_serve_takes_it_as_a_flag(pki: dict[str, object], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tls_client_ca"):
        EmbeddedServer(ServerConfig(tls_client_ca=pki["ca"]))  # type: ignore[arg-type]
    cert, key = pki["server"]  # type: ignore[misc]
    cert_file, key_file = _write(tmp_path, "s.pem", cert), _write(tmp_path, "s.key", key)
    Path(key_file).chmod(0o600)
    args = build_parser().parse_args(
        ["serve", "--tls-cert", cert_file, "--tls-key", key_file, "--tls-client-ca", str(pki["ca_file"])]
    )
    config = _config(args)
    assert config.tls_client_ca == pki["ca"] and config.tls_cert == cert

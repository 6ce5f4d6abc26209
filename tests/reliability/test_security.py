"""Security end to end with the thrust client (catalogue §4 S1-S4, S6, C1, C3, and B13).

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
"""

from __future__ import annotations

import datetime
import logging
import socket
import time
from pathlib import Path
from typing import Any

import pytest

import thrust
import thrust._io.metadata as client_metadata
from tests.reliability._util import assert_report, body, drain, run, send_recorded
from thrust._codec.status import Code
from thrust.reliability.history import HistoryRecorder, check
from thrust.server.app import ServerConfig
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
    """S2: binding 0.0.0.0 without auth is refused (in-process and `thrust serve`), allowed with auth.
    S1: the default bind answers on 127.0.0.1 and refuses connections to a non-loopback address."""
    with pytest.raises(ValueError, match="non-loopback"):
        EmbeddedServer(ServerConfig(host="0.0.0.0"))
    EmbeddedServer(ServerConfig(host="0.0.0.0", credentials=CREDS))
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
                with pytest.raises(thrust.ThrustError):
                    async with thrust.Producer(endpoints=f"{other}:{port}", topics=["t"], request_timeout=1):
                        pass
                assert time.monotonic() - t0 <= START_BOUND

    run(scenario)


def _self_signed() -> tuple[bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "thrust-reliability")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("thrust.test")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


@pytest.mark.slow
def test_s6_c1_tls_with_auth_end_to_end_and_every_mismatch_fails_fast(tmp_path: Path) -> None:
    """S6/C1: TLS plus auth round-trips messages (P1) for a client trusting the test CA; a client
    verifying against the system roots (the certificate is self-signed), a plaintext client against the
    TLS port and a TLS client against a plaintext port each fail with a typed error within the bound."""
    cert, key = _self_signed()
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
                with pytest.raises(thrust.ThrustError):
                    async with thrust.Producer(
                        endpoints=ep,
                        topics=["t"],
                        tls=wrong,
                        credentials=creds,
                        request_timeout=REQUEST_TIMEOUT,
                    ):
                        pass
                assert time.monotonic() - t0 <= START_BOUND
        async with embedded_server(topics=["t"]) as plain:
            t0 = time.monotonic()
            with pytest.raises(thrust.ThrustError):
                async with thrust.Producer(
                    endpoints=plain.endpoints[0],
                    topics=["t"],
                    tls=thrust.TlsConfig(ca_file=str(ca), server_name="thrust.test"),
                    request_timeout=REQUEST_TIMEOUT,
                ):
                    pass
            assert time.monotonic() - t0 <= START_BOUND
        assert_report(check(rec), "P1", "P2")

    run(scenario)

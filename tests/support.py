"""What every suite shares: one loop per test (`run`), waiting for a condition instead of sleeping
(`until`), slack for lower bounds on timers (`TIMER_SLACK`) and throwaway TLS certificates.

No pytest-asyncio: each test runs its own loop through `run`. A test waits for what it needs with
`until` on an event, a server counter or the client's stats, never with a fixed sleep: on a loaded
machine a sleep that was long enough at the desk is too short in CI. A fixed sleep stays only where the
test checks that nothing happens during a span (no duplicate, no extra call) or where the span is the
point (a lag probe holding the loop).
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import ipaddress
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

RUN_TIMEOUT = 55.0
"""The default bound of one `run`: below pytest-timeout's 90 s (pyproject.toml), so that a stuck
scenario fails with its own traceback rather than an alarm that aborts the xdist worker."""

UNTIL_TIMEOUT = 20.0
"""The default bound of `until`: generous, since it only ends a wait that would otherwise hang; a test
that means a deadline passes its own."""

TIMER_SLACK = 0.01
"""Subtract from a lower bound on elapsed time measured around a loop timer. asyncio runs a timer due
within the clock's resolution of now (`BaseEventLoop._run_once`) and uvloop rounds timers to whole
milliseconds, so a `sleep(d)` or a `wait_for(..., d)` can end a little before `d` has passed."""


def run(
    scenario: Callable[[], Awaitable[T]] | Awaitable[T],
    timeout: float = RUN_TIMEOUT,
    *,
    check_tasks: bool = True,
) -> T:
    """Run `scenario` (a coroutine, or a function returning one) on a fresh loop, bounded by `timeout`
    seconds; with `check_tasks`, fail if it leaves any thrust-* task running (every task is owned and
    cancelled on close: docs/CONVENTIONS.md)."""

    async def main() -> T:
        awaitable = scenario if inspect.isawaitable(scenario) else scenario()
        result = await asyncio.wait_for(awaitable, timeout)
        if check_tasks:
            leftovers = [
                t
                for t in asyncio.all_tasks()
                if t is not asyncio.current_task() and t.get_name().startswith("thrust-")
            ]
            assert not leftovers, f"tasks outlived close: {leftovers}"
        return result

    return asyncio.run(main())


async def until(
    condition: Callable[[], object] | asyncio.Event,
    timeout: float = UNTIL_TIMEOUT,
    what: str = "condition",
    step: float = 0.01,
) -> float:
    """Wait on the loop until `condition()` is true (polled every `step` s) or the event is set; the
    seconds it took. Fails (AssertionError, naming `what`) after `timeout` seconds."""
    start = time.monotonic()
    if isinstance(condition, asyncio.Event):
        try:
            await asyncio.wait_for(condition.wait(), timeout)
        except TimeoutError:
            raise AssertionError(f"{what} not reached within {timeout} s") from None
        return time.monotonic() - start
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what} not reached within {timeout} s")
        await asyncio.sleep(step)
    return time.monotonic() - start


def wait_until(
    condition: Callable[[], object],
    timeout: float = UNTIL_TIMEOUT,
    what: str = "condition",
    step: float = 0.01,
) -> float:
    """`until` for a thread without a loop (the sync client's callers, a listener thread): blocks."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what} not reached within {timeout} s")
        time.sleep(step)
    return time.monotonic() - start


# -- TLS -------------------------------------------------------------------------------------------


def _key_pem(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    pem: bytes = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return pem


def self_signed(
    common_name: str = "localhost",
    *,
    dns: Sequence[str] = ("localhost",),
    ips: Sequence[str] = (),
    ca: bool = False,
    valid: datetime.timedelta = datetime.timedelta(days=1),
) -> tuple[bytes, bytes]:
    """A self-signed EC certificate and its key, both PEM, valid for the `dns` names and `ips`
    (subject alternative names) from five minutes ago for `valid`. `ca` adds BasicConstraints(ca=True),
    which some TLS stacks want before they trust a self-signed certificate as its own root."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + valid)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
    )
    if ca:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    cert = builder.sign(key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


class CertificateAuthority:
    """A throwaway certificate authority that signs server and client certificates (mutual TLS)."""

    def __init__(self, name: str) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    @property
    def pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, common_name: str, *, client: bool, server_name: str) -> tuple[bytes, bytes]:
        """(certificate PEM, private key PEM) for a server (SAN `server_name`) or a client."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if not client:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(server_name)]), critical=False
            )
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def transport() -> str:
    """The transport ("native" or "grpcio") a client with the default `transport="auto"` gets in this run
    (`$THRUST_TRANSPORT`, set per phase by the Makefile; else native when it is installed)."""
    from thrust._io.native import resolve_transport
    from thrust.config import ClientConfig

    return resolve_transport(ClientConfig("127.0.0.1:1"))

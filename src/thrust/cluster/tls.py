"""The proxy's TLS certificate: made once per machine, so no proxy start makes one.

Upstream's proxy defaults to `tlsTestModeEnable=true` (`ProxyConfig`): at every start it generates two
self-signed RSA certificates in memory (`ProxyAndTlsProtocolNegotiator.loadSslContext` for gRPC,
`MultiProtocolTlsHelper.buildSslContext` for remoting, both netty's `SelfSignedCertificate`). With the
C1-only JIT the harness uses, that key generation was 5-8 s of a 20 s proxy boot on a loaded two-core
machine, paid again at every restart of the fault tests. No client can trust such a certificate either.

So the harness makes one certificate (CN and SAN `localhost`, SAN IP 127.0.0.1) in the jar cache, and
starts the proxy with `tlsTestModeEnable=false` and `tlsCertPath` / `tlsKeyPath` pointing at it; clients
that want TLS against the harness's proxy trust `ClusterInfo.tls_cert`. It is made with `cryptography`
when that is installed (the `dev` extra), else with the `openssl` command; with neither, `None`, and the
proxy keeps upstream's default.
"""

from __future__ import annotations

import datetime
import fcntl
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Final

from thrust.cluster.jars import cache_root

__all__ = ["harness_certificate"]

logger = logging.getLogger("thrust.cluster")

_CERT: Final = "proxy-cert.pem"
_KEY: Final = "proxy-key.pem"  # PKCS#8 PEM: what `GrpcSslContexts.forServer(cert, key)` reads
_DAYS: Final = 3650


def harness_certificate(folder: Path | None = None) -> tuple[Path, Path] | None:
    """(certificate, private key) PEM files for the harness's proxies, made on first use under
    `folder` (default: `<jar cache>/tls`); None when neither `cryptography` nor `openssl` is there."""
    folder = folder if folder is not None else cache_root() / "tls"
    cert, key = folder / _CERT, folder / _KEY
    if cert.exists() and key.exists():
        return cert, key
    folder.mkdir(parents=True, exist_ok=True)
    # Two clusters start at once (`--mode both`), and pytest workers may too: one makes the pair while
    # the others wait, so a certificate never meets another process's key.
    with open(folder / ".lock", "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        if cert.exists() and key.exists():
            return cert, key
        with tempfile.TemporaryDirectory(dir=folder) as work:
            tmp_cert, tmp_key = Path(work) / _CERT, Path(work) / _KEY
            if not (_with_cryptography(tmp_cert, tmp_key) or _with_openssl(tmp_cert, tmp_key)):
                logger.info("no cryptography module and no openssl: the proxy makes its own certificate")
                return None
            os.chmod(tmp_key, 0o600)
            os.replace(tmp_key, key)  # the key first: `cert` existing means both are in place
            os.replace(tmp_cert, cert)
    return cert, key


def _with_cryptography(cert_path: Path, key_path: Path) -> bool:
    try:
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID
    except ImportError:
        return False
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=_DAYS))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return True


def _with_openssl(cert_path: Path, key_path: Path) -> bool:
    openssl = shutil.which("openssl")
    if openssl is None:
        return False
    # OpenSSL 3 writes `-newkey` keys as PKCS#8 ("BEGIN PRIVATE KEY") already.
    done = subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            str(_DAYS),
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key_path),
            "-out",
            str(cert_path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not key_path.exists() or b"BEGIN PRIVATE KEY" not in key_path.read_bytes():
        logger.info("openssl could not make the harness certificate: %s", done.stderr.strip()[-300:])
        return False
    return True

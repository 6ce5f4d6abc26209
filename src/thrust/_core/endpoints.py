"""Endpoints: the hashable identity of a server (proxy or broker) and its gRPC target string.

An `Endpoint` mirrors `apache.rocketmq.v2.Endpoints{scheme, addresses}` (docs/protocol.md §3.1). It is the key
of every per-server table (channels, telemetry sessions, ack batches, isolation), so it is a frozen, slotted
value whose equality is its scheme and its ordered address tuple.

Who calls what:
- the public config parses the user's access point once with `parse_endpoint("host:port;host2:port")`;
- the codec builds `Endpoint(scheme, addresses)` from `Broker.endpoints` of every route;
- the io layer opens `grpc.aio` channels on `endpoint.target`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from enum import IntEnum

__all__ = ["Endpoint", "Scheme", "parse_endpoint"]


class Scheme(IntEnum):
    """`apache.rocketmq.v2.AddressScheme` (docs/protocol.md §3.1); UNSPECIFIED is never a valid endpoint."""

    IPV4 = 1
    IPV6 = 2
    DOMAIN_NAME = 3


# RFC 1123 labels; underscores are tolerated because container and test hostnames use them.
_LABEL = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One server, reachable at one or more addresses of the same scheme.

    `addresses` keeps the order it was given in: gRPC's `ipv4:`/`ipv6:` resolvers try them in that order and
    the `dns:` resolver takes exactly one name.
    """

    scheme: Scheme
    addresses: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        if not self.addresses:
            raise ValueError("an endpoint needs at least one address")
        if self.scheme is Scheme.DOMAIN_NAME and len(self.addresses) != 1:
            # gRPC's dns resolver resolves a single name; Java also uses only the first domain name.
            raise ValueError("a domain-name endpoint takes exactly one address")
        for host, port in self.addresses:
            _check_port(port)
            kind = _host_kind(host)
            if kind is not self.scheme:
                raise ValueError(f"address {host!r} is not of scheme {self.scheme.name}")

    @property
    def target(self) -> str:
        """The gRPC target: `ipv4:h:p,h:p`, `ipv6:[h]:p,[h]:p` or `dns:h:p`."""
        if self.scheme is Scheme.IPV4:
            return "ipv4:" + ",".join(f"{h}:{p}" for h, p in self.addresses)
        if self.scheme is Scheme.IPV6:
            return "ipv6:" + ",".join(f"[{h}]:{p}" for h, p in self.addresses)
        host, port = self.addresses[0]
        return f"dns:{host}:{port}"

    def __str__(self) -> str:
        """The user-facing form that `parse_endpoint` accepts back (`h:p;h:p`, IPv6 in brackets)."""
        if self.scheme is Scheme.IPV6:
            return ";".join(f"[{h}]:{p}" for h, p in self.addresses)
        return ";".join(f"{h}:{p}" for h, p in self.addresses)


def parse_endpoint(text: str) -> Endpoint:
    """Parse user input such as `"127.0.0.1:8081;127.0.0.1:8082"`, `"[::1]:8081"` or `"broker.local:8081"`.

    Addresses are separated by `;` (the Java client's separator) and all must be of one scheme. Raises
    `ValueError` on anything else: missing or invalid port, empty host, unbracketed IPv6, a URL scheme,
    mixed IPv4/IPv6, or more than one domain name.
    """
    if not isinstance(text, str):
        raise ValueError(f"endpoint must be a string, not {type(text).__name__}")
    parts = [p.strip() for p in text.strip().split(";")]
    if parts and parts[-1] == "":
        parts.pop()  # tolerate one trailing separator
    if not parts:
        raise ValueError("empty endpoint")
    addresses: list[tuple[str, int]] = []
    kinds: set[Scheme] = set()
    for part in parts:
        host, port = _split_host_port(part)
        kinds.add(_host_kind(host))
        addresses.append((host, port))
    if len(kinds) != 1:
        raise ValueError(f"endpoint {text!r} mixes address kinds")
    return Endpoint(kinds.pop(), tuple(addresses))


def _split_host_port(part: str) -> tuple[str, int]:
    if not part:
        raise ValueError("empty address")
    if "://" in part or "/" in part:
        raise ValueError(f"address {part!r} must be host:port, without a URL scheme or path")
    if part.startswith("["):
        end = part.find("]")
        if end < 0 or not part[end + 1 :].startswith(":"):
            raise ValueError(f"address {part!r}: expected [ipv6]:port")
        host, port_text = part[1:end], part[end + 2 :]
        if _host_kind(host) is not Scheme.IPV6:
            raise ValueError(f"address {part!r}: brackets are only for IPv6")
    else:
        host, sep, port_text = part.rpartition(":")
        if not sep:
            raise ValueError(f"address {part!r} has no port")
        if ":" in host:
            raise ValueError(f"address {part!r}: IPv6 addresses must be bracketed, e.g. [::1]:8081")
    if not port_text.isdigit() or not port_text.isascii():
        raise ValueError(f"address {part!r}: invalid port {port_text!r}")
    port = int(port_text)
    _check_port(port)
    return host, port


def _check_port(port: int) -> None:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"invalid port {port!r}")


def _host_kind(host: str) -> Scheme:
    if not host:
        raise ValueError("empty host")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        if "%" in host:
            raise ValueError(f"scoped IPv6 address {host!r} is not supported")
        return Scheme.IPV4 if ip.version == 4 else Scheme.IPV6
    name = host[:-1] if host.endswith(".") else host
    labels = name.split(".")
    if len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        raise ValueError(f"invalid host name {host!r}")
    if labels[-1].isdigit():
        # "1.2.3" or "999.1.1.1": looks like an IP but is not one; a DNS lookup of it would be a surprise.
        raise ValueError(f"invalid host {host!r}")
    return Scheme.DOMAIN_NAME

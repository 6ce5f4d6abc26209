from __future__ import annotations

import pytest

from thrust._core.endpoints import Endpoint, Scheme, parse_endpoint


def test_single_ipv4() -> None:
    ep = parse_endpoint("127.0.0.1:8081")
    assert ep == Endpoint(Scheme.IPV4, (("127.0.0.1", 8081),))
    assert ep.target == "ipv4:127.0.0.1:8081"
    assert str(ep) == "127.0.0.1:8081"


def test_several_ipv4_keep_order() -> None:
    ep = parse_endpoint(" 127.0.0.1:8081; 127.0.0.1:8082 ;")
    assert ep.scheme is Scheme.IPV4
    assert ep.target == "ipv4:127.0.0.1:8081,127.0.0.1:8082"
    assert parse_endpoint(str(ep)) == ep


def test_ipv6_bracketed() -> None:
    ep = parse_endpoint("[::1]:8081;[fe80::2]:9")
    assert ep.scheme is Scheme.IPV6
    assert ep.addresses == (("::1", 8081), ("fe80::2", 9))
    assert ep.target == "ipv6:[::1]:8081,[fe80::2]:9"
    assert parse_endpoint(str(ep)) == ep


def test_dns_name() -> None:
    ep = parse_endpoint("broker-1.example.com:8081")
    assert ep.scheme is Scheme.DOMAIN_NAME
    assert ep.target == "dns:broker-1.example.com:8081"
    assert parse_endpoint("localhost:80").target == "dns:localhost:80"


def test_hashable_value() -> None:
    a = parse_endpoint("127.0.0.1:8081")
    b = Endpoint(Scheme.IPV4, (("127.0.0.1", 8081),))
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    with pytest.raises(AttributeError):
        a.scheme = Scheme.IPV6  # type: ignore[misc]


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        ";",
        "127.0.0.1",
        "127.0.0.1:",
        "127.0.0.1:0",
        "127.0.0.1:65536",
        "127.0.0.1:80x",
        "127.0.0.1:-1",
        ":8081",
        "::1:8081",
        "[::1]",
        "[::1]8081",
        "[127.0.0.1]:80",
        "[nothex]:80",
        "http://127.0.0.1:8081",
        "host/path:80",
        "bad_host!:80",
        "-bad.example:80",
        "a..b:80",
        "999.1.1.1:80",
        "127.0.0.1:8081;[::1]:8081",
        "a.example:1;b.example:2",
        "127.0.0.1:8081;;127.0.0.1:8082",
        "127.0.0.1:٣",
    ],
)
def test_garbage_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        parse_endpoint(text)


def test_non_string_rejected() -> None:
    with pytest.raises(ValueError):
        parse_endpoint(8081)  # type: ignore[arg-type]


def test_constructor_validates() -> None:
    with pytest.raises(ValueError):
        Endpoint(Scheme.IPV4, ())
    with pytest.raises(ValueError):
        Endpoint(Scheme.IPV4, (("::1", 80),))
    with pytest.raises(ValueError):
        Endpoint(Scheme.DOMAIN_NAME, (("a.example", 1), ("b.example", 2)))
    with pytest.raises(ValueError):
        Endpoint(Scheme.IPV4, (("1.2.3.4", 0),))

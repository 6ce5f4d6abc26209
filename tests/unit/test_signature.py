from __future__ import annotations

import hashlib
import hmac

import pytest

from thrust._codec.signature import (
    ALGORITHM,
    Authorization,
    format_date_time,
    parse_authorization,
    sign,
    signed_metadata,
    verify,
)
from thrust._codec.status import Code
from thrust._codec.validation import Invalid

# RFC 2202 test case 2: HMAC-SHA1(key="Jefe", data="what do ya want for nothing?").
RFC2202_KEY = "Jefe"
RFC2202_DATA = "what do ya want for nothing?"
RFC2202_MAC = "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"


def test_format_date_time_is_utc() -> None:
    assert format_date_time(0) == "19700101T000000Z"
    assert format_date_time(1_700_000_000) == "20231114T221320Z"
    assert format_date_time(1_700_000_000.999) == "20231114T221320Z"


def test_sign_layout_and_uppercase_hex() -> None:
    value = sign("AK", RFC2202_KEY, RFC2202_DATA)
    assert value == (
        f"MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time, Signature={RFC2202_MAC.upper()}"
    )


def test_sign_matches_plain_hmac() -> None:
    date_time = "20240102T030405Z"
    expected = hmac.new(b"secret", date_time.encode(), hashlib.sha1).hexdigest().upper()
    assert sign("ak", "secret", date_time).endswith(f"Signature={expected}")


def test_sign_with_unicode_secret() -> None:
    date_time = "20240102T030405Z"
    expected = hmac.new("sécrét".encode(), date_time.encode(), hashlib.sha1).hexdigest().upper()
    assert sign("ak", "sécrét", date_time).endswith(expected)


def test_signed_metadata() -> None:
    headers = signed_metadata("AK", "SK", 1_700_000_000)
    assert headers["x-mq-date-time"] == "20231114T221320Z"
    auth = parse_authorization(headers["authorization"])
    assert verify(auth, "SK", headers["x-mq-date-time"])


# -- parse -----------------------------------------------------------------------------------------


def test_parse_own_output() -> None:
    auth = parse_authorization(sign("AK", RFC2202_KEY, RFC2202_DATA))
    assert auth == Authorization("AK", "x-mq-date-time", RFC2202_MAC.upper(), ALGORITHM)


def test_parse_lowercase_signature_like_python_and_rust() -> None:
    value = f"MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time, Signature={RFC2202_MAC}"
    auth = parse_authorization(value)
    assert auth.signature_hex == RFC2202_MAC
    assert verify(auth, RFC2202_KEY, RFC2202_DATA)


def test_parse_empty_credential_like_the_python_client() -> None:
    date_time = "20240101T000000Z"
    signature = hmac.new(b"", date_time.encode(), hashlib.sha1).hexdigest()
    value = f"MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature={signature}"
    auth = parse_authorization(value)
    assert auth.access_key == ""
    assert verify(auth, "", date_time)


def test_parse_credential_scope_is_cut_at_slash() -> None:
    auth = parse_authorization("MQv2-HMAC-SHA1 Credential=AK/20240101/region, Signature=00")
    assert auth.access_key == "AK"
    assert parse_authorization("X Credential=AK/, Signature=00").access_key == "AK"


def test_parse_is_lenient_where_the_proxy_is() -> None:
    # The algorithm is not checked, SignedHeaders is optional, unknown items are ignored, order is free,
    # items are trimmed, trailing commas are dropped and the last duplicate wins.
    auth = parse_authorization("Whatever Signature=AB,Credential=AK,Foo=bar, Credential=AK2,")
    assert auth.algorithm == "Whatever"
    assert auth.access_key == "AK2"
    assert auth.signature_hex == "AB"
    assert auth.signed_headers == ""
    assert parse_authorization("A Credential=a=b, Signature=ab").access_key == "a=b"


@pytest.mark.parametrize(
    "value",
    [
        "",
        "MQv2-HMAC-SHA1",
        "MQv2-HMAC-SHA1 ",
        "MQv2-HMAC-SHA1 Credential",
        "MQv2-HMAC-SHA1 Credential=AK, , Signature=00",
        "MQv2-HMAC-SHA1 ,Credential=AK, Signature=00",
        "MQv2-HMAC-SHA1 Credential=/, Signature=00",
        "MQv2-HMAC-SHA1 Credential=AK, Signature=XYZ",
        "MQv2-HMAC-SHA1 Credential=AK, Signature=ABC",
        "MQv2-HMAC-SHA1 Credential=AK, Signature=",
        "MQv2-HMAC-SHA1 Credential=AK, Signature=AB CD",
        "MQv2-HMAC-SHA1 Credential=AK",
        "MQv2-HMAC-SHA1 Signature=00",
        "Basic dXNlcjpwYXNz",
    ],
)
def test_parse_garbage(value: str) -> None:
    with pytest.raises(Invalid) as info:
        parse_authorization(value)
    assert info.value.code is Code.UNAUTHORIZED


# -- verify ----------------------------------------------------------------------------------------


def test_verify_rejects_wrong_inputs() -> None:
    date_time = "20240101T000000Z"
    auth = parse_authorization(sign("AK", "SK", date_time))
    assert verify(auth, "SK", date_time)
    assert not verify(auth, "sk", date_time)
    assert not verify(auth, "SK", "20240101T000001Z")
    assert not verify(auth, "SK", "")


def test_verify_with_truncated_or_malformed_signature() -> None:
    date_time = "20240101T000000Z"
    good = parse_authorization(sign("AK", "SK", date_time))
    short = Authorization(good.access_key, good.signed_headers, good.signature_hex[:-2])
    assert not verify(short, "SK", date_time)
    assert not verify(Authorization("AK", "", "zz"), "SK", date_time)
    assert not verify(Authorization("AK", "", ""), "SK", date_time)

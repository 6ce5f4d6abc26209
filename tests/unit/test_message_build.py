"""`thrust.Message` checks its fields as it is built (the Java client's `MessageBuilderImpl` rules plus the
server's limits that depend on nothing else), raising typed thrust errors, never protobuf's or a
memoryview's at send; a payload over the limits is both a `ValidationError` and a `PayloadTooLargeError`."""

from __future__ import annotations

from typing import Any

import pytest

import thrust
from thrust._codec.status import Code
from thrust.errors import PayloadTooLargeValidationError, error_for_status


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"body": "text"}, Code.BAD_REQUEST),  # a str body: was accepted, then a memoryview TypeError at send
        ({"body": None}, Code.BAD_REQUEST),
        ({"body": b"x", "keys": [""]}, Code.ILLEGAL_MESSAGE_KEY),  # blank key: was accepted
        ({"body": b"x", "keys": ["ok", " "]}, Code.ILLEGAL_MESSAGE_KEY),
        ({"body": b"x", "keys": [1]}, Code.ILLEGAL_MESSAGE_KEY),
        ({"body": b"x", "properties": {"": "v"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),  # was accepted
        ({"body": b"x", "properties": {"k": " "}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),  # was accepted
        ({"body": b"x", "properties": {"k": ""}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({"body": b"x", "properties": {"k": 1}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({"body": b"x", "properties": {"UNIQ_KEY": "v"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({"body": b"x", "tag": ""}, Code.ILLEGAL_MESSAGE_TAG),
        ({"body": b"x", "tag": "a|b"}, Code.ILLEGAL_MESSAGE_TAG),
        ({"body": b"x", "message_group": " "}, Code.ILLEGAL_MESSAGE_GROUP),
        ({"body": b"x", "priority": 2**31}, Code.BAD_REQUEST),  # was protobuf's bare ValueError at send
        ({"body": b"x", "priority": -1}, Code.BAD_REQUEST),
        ({"body": b"x", "priority": 1.5}, Code.BAD_REQUEST),
        ({"body": b"x", "priority": 1, "message_group": "g"}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        ({"body": b"x", "delay": 5, "message_group": "g"}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        ({"body": b"x", "topic": "bad topic"}, Code.ILLEGAL_TOPIC),
        ({"body": b"x", "topic": None}, Code.ILLEGAL_TOPIC),
    ],
)
def test_invalid_fields_raise_a_validation_error_with_the_servers_code_when_built(
    fields: dict[str, Any], code: Code
) -> None:
    with pytest.raises(thrust.ValidationError) as info:
        thrust.Message(**{"topic": "t", **fields})
    assert info.value.code == code, info.value
    assert not info.value.retriable
    assert isinstance(info.value, ValueError)  # an invalid argument, for `except ValueError` too


def test_valid_edge_values_are_built() -> None:
    m = thrust.Message(topic="t", body=bytearray(b"x"), keys="k", properties={"k": "v"}, priority=2**31 - 1)
    assert (m.body, m.keys, m.priority) == (b"x", ("k",), 2**31 - 1)
    assert thrust.Message(topic="t", body=memoryview(b"y"), tag="a", message_group="g").body == b"y"
    # Exactly 16 KiB of properties, tag and keys together is within the limit.
    thrust.Message(topic="t", body=b"x", tag="ab", keys=["cd"], properties={"k": "v" * (16 * 1024 - 5)})


def test_properties_over_16_kib_are_a_payload_too_large_error_and_a_validation_error() -> None:
    for fields in (
        {"properties": {"k": "v" * (16 * 1024)}},
        {"properties": {f"k{i}": "v" for i in range(129)}},
        {"tag": "a" * (16 * 1024 + 1)},
    ):
        with pytest.raises(thrust.PayloadTooLargeError) as info:
            thrust.Message(topic="t", body=b"x", **fields)  # type: ignore[arg-type]
        assert isinstance(info.value, thrust.ValidationError)
        assert info.value.code == Code.MESSAGE_PROPERTIES_TOO_LARGE


def test_a_server_refusal_for_size_is_a_payload_too_large_error_but_no_validation_error() -> None:
    err = error_for_status(Code.MESSAGE_BODY_TOO_LARGE, "too big")
    assert type(err) is thrust.PayloadTooLargeError
    assert not isinstance(err, thrust.ValidationError)
    assert issubclass(PayloadTooLargeValidationError, thrust.PayloadTooLargeError)
    assert issubclass(PayloadTooLargeValidationError, thrust.ValidationError)

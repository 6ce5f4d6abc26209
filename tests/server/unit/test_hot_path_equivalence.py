"""The send/ack hot-path shortcuts of the server give the same values as the plain constructions they
replace (`inbound()` vs `InboundMessage(...)`, reused `Caller`s, the fast validation helpers)."""

from __future__ import annotations

import dataclasses

import pytest

from thrust._codec.status import Code
from thrust._codec.validation import Invalid, contains_control_character, is_blank
from thrust.server.auth import Authenticator, Caller
from thrust.server.core.model import InboundMessage, MessageType, inbound


def test_inbound_equals_the_dataclass_and_stays_frozen() -> None:
    fields = dict(
        topic="t",
        body=b"x",
        message_id="01",
        tag="a",
        keys=("k",),
        properties={"p": "v"},
        message_type=MessageType.FIFO,
        message_group="g",
        delivery_timestamp=None,
        born_timestamp=1.5,
        born_host="h",
        body_encoding_gzip=True,
        trace_context="tc",
        transaction_recovery_after=None,
        priority=3,
        producer_client_id="c",
        lite_topic="lt",
    )
    built = inbound(**fields)  # type: ignore[arg-type]
    assert type(built) is InboundMessage
    assert built == InboundMessage(**fields)  # type: ignore[arg-type]
    assert dataclasses.asdict(built) == fields
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.topic = "u"  # type: ignore[misc]


def test_callers_are_reused_per_client_and_version() -> None:
    auth = Authenticator()
    a = auth.check((("x-mq-client-id", "c1"), ("x-mq-client-version", "5"), ("x-mq-request-id", "1")))
    b = auth.check((("x-mq-client-id", "c1"), ("x-mq-client-version", "5"), ("x-mq-request-id", "2")))
    c = auth.check((("x-mq-client-id", "c1"),))
    d = auth.check((("x-mq-client-id", "c2"), ("x-mq-client-version", b"bytes")))
    assert a is b and a == Caller("c1", "5")
    assert c == Caller("c1", None) and d == Caller("c2", None)
    with pytest.raises(Invalid) as err:
        auth.check((("x-mq-client-id", " "),))
    assert err.value.code == Code.CLIENT_ID_REQUIRED


@pytest.mark.parametrize(
    ("text", "blank"),
    [("", True), (" \t\n", True), ("\u3000\u2028", True), ("\u00a0", False), ("a", False), (" a", False)],
)
def test_is_blank(text: str, blank: bool) -> None:
    assert is_blank(text) is blank


def test_control_characters_match_the_per_character_rule() -> None:
    for code in range(0x00, 0x2100):
        c = chr(code)
        expected = c <= "\x1f" or "\x7f" <= c <= "\x9f"
        assert contains_control_character(f"ab{c}cd") is expected, hex(code)
    assert not contains_control_character("")

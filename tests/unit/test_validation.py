from __future__ import annotations

import math
import pickle

import pytest

from thrust._codec import validation as v
from thrust._codec.digest import compute_digest
from thrust._codec.status import Code
from thrust._codec.validation import Invalid


def code_of(fn: object, *args: object, **kwargs: object) -> Code:
    assert callable(fn)
    with pytest.raises(Invalid) as info:
        fn(*args, **kwargs)
    return info.value.code


# -- Invalid ---------------------------------------------------------------------------------------


def test_invalid_carries_code_and_message() -> None:
    error = Invalid(Code.ILLEGAL_TOPIC, "bad")
    assert isinstance(error, ValueError)
    assert error.code is Code.ILLEGAL_TOPIC
    assert error.message == "bad"
    assert str(error) == "ILLEGAL_TOPIC: bad"


def test_invalid_pickles() -> None:
    error = pickle.loads(pickle.dumps(Invalid(Code.ILLEGAL_TOPIC, "bad")))
    assert error.code is Code.ILLEGAL_TOPIC
    assert error.message == "bad"


# -- helpers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "blank"),
    [
        ("", True),
        (" ", True),
        ("\t\n\r\x0b\x0c", True),
        ("\u3000", True),  # ideographic space is a Java whitespace
        ("\u2003", True),
        ("\u00a0", False),  # no-break space is not Character.isWhitespace
        ("\u202f", False),
        (" a ", False),
        ("x", False),
    ],
)
def test_is_blank(value: str, blank: bool) -> None:
    assert v.is_blank(value) is blank


@pytest.mark.parametrize(
    ("value", "control"),
    [
        ("abc", False),
        ("a\x00b", True),
        ("a\x1fb", True),
        ("a\x7fb", True),
        ("a\x85b", True),
        ("a\x9fb", True),
        ("a\xa0b", False),
        ("é漢字🙂", False),
        ("\t", True),
    ],
)
def test_contains_control_character(value: str, control: bool) -> None:
    assert v.contains_control_character(value) is control


# -- topic / group ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "topic", ["a", "Topic-1_x", "%RETRY%group", "%DLQ%group", "ns%topic", "a|b", "t" * 127]
)
def test_topic_ok(topic: str) -> None:
    assert v.check_topic(topic) is None


@pytest.mark.parametrize(
    "topic", ["", "  ", "t" * 128, "a b", "a.b", "a/b", "тема", "a\x00", "topic!", "a:b"]
)
def test_topic_illegal(topic: str) -> None:
    assert code_of(v.check_topic, topic) is Code.ILLEGAL_TOPIC


@pytest.mark.parametrize(
    "topic",
    ["TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_anything", "BenchmarkTest"],
)
def test_system_topics(topic: str) -> None:
    assert v.is_system_topic(topic)
    assert code_of(v.check_topic, topic) is Code.ILLEGAL_TOPIC
    assert v.check_topic(topic, allow_system=True) is None


def test_topic_messages_are_specific() -> None:
    with pytest.raises(Invalid, match="blank"):
        v.check_topic("")
    with pytest.raises(Invalid, match="longer"):
        v.check_topic("t" * 128)
    with pytest.raises(Invalid, match="illegal characters"):
        v.check_topic("a b")
    with pytest.raises(Invalid, match="system topic"):
        v.check_topic("TBW102")


@pytest.mark.parametrize(
    "group", ["g", "GID-order_1", "a|b%c", "g" * 120, "DEFAULT_CONSUMERS", "CID_ONSAPI_X"]
)
def test_group_ok(group: str) -> None:
    assert v.check_group(group) is None


@pytest.mark.parametrize("group", ["", " ", "g" * 121, "g" * 256, "g g", "g.x", "grüppe"])
def test_group_illegal(group: str) -> None:
    assert code_of(v.check_group, group) is Code.ILLEGAL_CONSUMER_GROUP


def test_system_group() -> None:
    assert v.is_system_group("CID_RMQ_SYS_TRANS")
    assert code_of(v.check_group, "CID_RMQ_SYS_TRANS") is Code.ILLEGAL_CONSUMER_GROUP
    assert v.check_group("CID_RMQ_SYS_TRANS", allow_system=True) is None
    assert v.check_group("CID_RMQ_SY") is None


@pytest.mark.parametrize(
    "group",
    [
        "DEFAULT_CONSUMER",
        "DEFAULT_PRODUCER",
        "TOOLS_CONSUMER",
        "SCHEDULE_CONSUMER",
        "FILTERSRV_CONSUMER",
        "__MONITOR_CONSUMER",
        "CLIENT_INNER_PRODUCER",
        "SELF_TEST_P_GROUP",
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_OWNER",
        "CID_ONSAPI_PULL",
        "CID_SYS_RMQ_TRANS",
        "CID_RMQ_SYS_anything",
        "CID_HOUSEKEEPING_x",
    ],
)
def test_reserved_consumer_groups_refused(group: str) -> None:
    """B5 (docs/reliability.md §4): system consumer groups -> ILLEGAL_CONSUMER_GROUP (40003)."""
    assert v.is_system_group(group)
    assert code_of(v.check_group, group) is Code.ILLEGAL_CONSUMER_GROUP
    assert v.check_group(group, allow_system=True) is None


# -- tag / keys / message group --------------------------------------------------------------------


@pytest.mark.parametrize("tag", [None, "", "TagA", "tag with spaces", "标签", "*", "a&b"])
def test_tag_ok(tag: str | None) -> None:
    assert v.check_tag(tag) is None


@pytest.mark.parametrize("tag", [" ", "\t", "a|b", "||", "a\nb", "a\x00"])
def test_tag_illegal(tag: str) -> None:
    assert code_of(v.check_tag, tag) is Code.ILLEGAL_MESSAGE_TAG


def test_keys() -> None:
    assert v.check_keys([]) is None
    assert v.check_keys(["k1", "k 2", "ключ"]) is None
    assert v.check_keys(["", "k"]) is None  # the proxy skips empty keys
    assert v.check_keys("single") is None
    assert code_of(v.check_keys, ["ok", "  "]) is Code.ILLEGAL_MESSAGE_KEY
    assert code_of(v.check_keys, ["a\x01b"]) is Code.ILLEGAL_MESSAGE_KEY
    assert code_of(v.check_keys, " ") is Code.ILLEGAL_MESSAGE_KEY
    assert v.check_keys(k for k in ["a", "b"]) is None


def test_message_group() -> None:
    assert v.check_message_group(None) is None
    assert v.check_message_group("") is None
    assert v.check_message_group("order-42") is None
    assert v.check_message_group("g" * 63) is None
    assert code_of(v.check_message_group, "g" * 64) is Code.ILLEGAL_MESSAGE_GROUP
    # 21 three-byte characters = 63 bytes (accepted); 22 = 66 bytes (rejected).
    assert v.check_message_group("漢" * 21) is None
    assert code_of(v.check_message_group, "漢" * 22) is Code.ILLEGAL_MESSAGE_GROUP
    assert code_of(v.check_message_group, "   ") is Code.ILLEGAL_MESSAGE_GROUP
    assert code_of(v.check_message_group, "a\tb") is Code.ILLEGAL_MESSAGE_GROUP
    assert v.check_message_group("g" * 500, max_size=0) is None
    assert code_of(v.check_message_group, "abcd", max_size=4) is Code.ILLEGAL_MESSAGE_GROUP


# -- properties ------------------------------------------------------------------------------------


def test_properties_ok() -> None:
    assert v.check_properties({}) is None
    assert v.check_properties({"k": "v", "region": "eu", "": ""}) is None
    assert v.check_properties({f"k{i}": "v" for i in range(128)}) is None


def test_properties_too_many() -> None:
    props = {f"k{i}": "v" for i in range(129)}
    assert code_of(v.check_properties, props) is Code.MESSAGE_PROPERTIES_TOO_LARGE
    assert v.check_properties(props, max_count=0) is None


@pytest.mark.parametrize("key", sorted(v.RESERVED_PROPERTY_KEYS))
def test_reserved_keys(key: str) -> None:
    assert code_of(v.check_properties, {key: "x"}) is Code.ILLEGAL_MESSAGE_PROPERTY_KEY


def test_reserved_keys_include_the_well_known_ones() -> None:
    for key in ("TAGS", "KEYS", "UNIQ_KEY", "DELAY", "TIMER_DELIVER_MS", "__BORNHOST", "__CRC32#"):
        assert key in v.RESERVED_PROPERTY_KEYS
    # Case matters: only the exact system names are reserved.
    assert v.check_properties({"tags": "x", "Keys": "y"}) is None


def test_property_control_characters() -> None:
    assert code_of(v.check_properties, {"a\x01": "v"}) is Code.ILLEGAL_MESSAGE_PROPERTY_KEY
    assert code_of(v.check_properties, {"a": "v\x02"}) is Code.ILLEGAL_MESSAGE_PROPERTY_KEY


def test_property_total_size() -> None:
    limit = v.MAX_USER_PROPERTY_SIZE
    assert v.check_properties({"k": "v" * (limit - 1)}) is None
    assert code_of(v.check_properties, {"k": "v" * limit}) is Code.MESSAGE_PROPERTIES_TOO_LARGE
    # The tag and the message keys count too, in UTF-8 bytes.
    assert code_of(v.check_properties, {"k": "v" * (limit - 3)}, tag="ab", keys=["c"]) is (
        Code.MESSAGE_PROPERTIES_TOO_LARGE
    )
    assert v.check_properties({"k": "v" * (limit - 4)}, tag="ab", keys="c") is None
    assert code_of(v.check_properties, {"k": "é" * (limit // 2)}) is Code.MESSAGE_PROPERTIES_TOO_LARGE
    assert v.check_properties({"k": "v" * (2 * limit)}, max_size=0) is None


def test_property_count_is_checked_before_keys() -> None:
    props = {f"k{i}": "v" for i in range(129)}
    props["TAGS"] = "x"
    assert code_of(v.check_properties, props) is Code.MESSAGE_PROPERTIES_TOO_LARGE


# -- body / message id -----------------------------------------------------------------------------


def test_body() -> None:
    assert v.check_body(b"x") is None
    assert v.check_body(bytearray(b"x")) is None
    assert v.check_body(memoryview(b"xyz")) is None
    assert v.check_body(b"x" * v.MAX_BODY_SIZE) is None
    assert code_of(v.check_body, b"") is Code.MESSAGE_BODY_EMPTY
    assert code_of(v.check_body, b"x" * (v.MAX_BODY_SIZE + 1)) is Code.MESSAGE_BODY_TOO_LARGE
    assert code_of(v.check_body, b"12345", 4) is Code.MESSAGE_BODY_TOO_LARGE
    assert v.check_body(b"x" * (v.MAX_BODY_SIZE + 1), 0) is None
    assert code_of(v.check_body, b"", 0) is Code.MESSAGE_BODY_EMPTY


@pytest.mark.parametrize("kind", [1, 2, 3], ids=["CRC32", "MD5", "SHA1"])
def test_body_digest_matches_in_either_case(kind: int) -> None:
    """B15 (docs/reliability.md §4): a producer's digest is checked against the body; hex case does not
    matter."""
    body = b"payload"
    good = compute_digest(kind, body)
    assert v.check_body_digest(kind, good, body) is None
    assert v.check_body_digest(kind, good.lower(), body) is None
    assert v.check_body_digest(kind, good, memoryview(body)) is None
    assert code_of(v.check_body_digest, kind, compute_digest(kind, b"other"), body) is Code.BAD_REQUEST
    assert code_of(v.check_body_digest, kind, "", body) is Code.BAD_REQUEST
    assert code_of(v.check_body_digest, kind, "not hex", body) is Code.BAD_REQUEST


def test_body_digest_absent_or_unverifiable() -> None:
    # The field left unset (type UNSPECIFIED, no checksum): nothing to check.
    assert v.check_body_digest(0, "", b"x") is None
    # A checksum whose type is unspecified or unknown cannot be verified: refused.
    assert code_of(v.check_body_digest, 0, "ABCD", b"x") is Code.BAD_REQUEST
    assert code_of(v.check_body_digest, 9, "ABCD", b"x") is Code.BAD_REQUEST


@pytest.mark.parametrize(
    "message_id",
    ["0156F7E71C361B21BC024CCDBE00000000", "C0A8010A1F4C18B4AAC2726F1F340000", "anything-opaque"],
)
def test_message_id_ok(message_id: str) -> None:
    assert v.check_message_id(message_id) is None


@pytest.mark.parametrize("message_id", ["", "   ", "a\x00b", "x" * 129])
def test_message_id_illegal(message_id: str) -> None:
    assert code_of(v.check_message_id, message_id) is Code.ILLEGAL_MESSAGE_ID


# -- times -----------------------------------------------------------------------------------------


def test_delivery_timestamp() -> None:
    now = 1_700_000_000.0
    assert v.check_delivery_timestamp(now, now) is None
    assert v.check_delivery_timestamp(now - 3600, now) is None  # past: deliver now
    assert v.check_delivery_timestamp(now + 86400, now) is None
    assert code_of(v.check_delivery_timestamp, now + 86400.001, now) is Code.ILLEGAL_DELIVERY_TIME
    assert code_of(v.check_delivery_timestamp, now + 61, now, max_delay=60) is Code.ILLEGAL_DELIVERY_TIME
    assert v.check_delivery_timestamp(now + 10 * 86400, now, max_delay=0) is None
    assert code_of(v.check_delivery_timestamp, math.nan, now) is Code.ILLEGAL_DELIVERY_TIME
    assert code_of(v.check_delivery_timestamp, math.inf, now) is Code.ILLEGAL_DELIVERY_TIME


def test_receive_invisible_duration() -> None:
    assert v.check_receive_invisible_duration(10) is None
    assert v.check_receive_invisible_duration(12 * 3600) is None
    assert code_of(v.check_receive_invisible_duration, 9.999) is Code.ILLEGAL_INVISIBLE_TIME
    assert code_of(v.check_receive_invisible_duration, 0) is Code.ILLEGAL_INVISIBLE_TIME
    assert code_of(v.check_receive_invisible_duration, 12 * 3600 + 0.001) is Code.ILLEGAL_INVISIBLE_TIME


def test_change_invisible_duration() -> None:
    assert v.check_change_invisible_duration(0) is None
    assert v.check_change_invisible_duration(1) is None
    assert v.check_change_invisible_duration(12 * 3600) is None
    assert code_of(v.check_change_invisible_duration, -0.001) is Code.ILLEGAL_INVISIBLE_TIME
    assert code_of(v.check_change_invisible_duration, 12 * 3600 + 1) is Code.ILLEGAL_INVISIBLE_TIME
    assert code_of(v.check_change_invisible_duration, math.nan) is Code.ILLEGAL_INVISIBLE_TIME


def test_generic_invisible_duration() -> None:
    assert v.check_invisible_duration(100_000, maximum=0) is None
    assert code_of(v.check_invisible_duration, 4, minimum=5) is Code.ILLEGAL_INVISIBLE_TIME


def test_polling_time_explicit() -> None:
    assert v.check_polling_time(15, 30, 3) == 15
    assert v.check_polling_time(1, 30, 3) == 5  # clamped up to the minimum
    assert v.check_polling_time(60, 30, 3) == 20  # clamped down to the maximum
    assert v.check_polling_time(20, 12, 3) == 12  # more than remains: use what remains (>= 5 s)
    assert v.check_polling_time(20, None, 3) == 20  # no deadline


def test_polling_time_derived_from_deadline() -> None:
    # Unset: remaining - request_timeout / 2, then clamped.
    assert v.check_polling_time(None, 13, 6) == 10
    assert v.check_polling_time(None, 60, 6) == 20
    assert v.check_polling_time(None, 6, 6) == 5
    assert v.check_polling_time(None, None, 3) == 20


def test_polling_time_not_enough_time_left() -> None:
    with pytest.raises(Invalid) as info:
        v.check_polling_time(20, 4.9, 3, client_version="5.0.7")
    assert info.value.code is Code.ILLEGAL_POLLING_TIME
    assert code_of(v.check_polling_time, 20, 4.9, 3, client_version="5.1.2") is Code.ILLEGAL_POLLING_TIME
    # Old (or unknown) clients get BAD_REQUEST, with Java's lexicographic version comparison.
    assert code_of(v.check_polling_time, 20, 4.9, 3, client_version="5.0.2") is Code.BAD_REQUEST
    assert code_of(v.check_polling_time, 20, 4.9, 3) is Code.BAD_REQUEST
    assert code_of(v.check_polling_time, 20, 4.9, 3, client_version="5.0.10") is Code.BAD_REQUEST
    assert v.check_polling_time(20, 5, 3) == 5


def test_transaction_recovery() -> None:
    assert v.check_transaction_recovery(3600) is None
    assert code_of(v.check_transaction_recovery, 3601) is Code.BAD_REQUEST
    assert v.check_transaction_recovery(10**6, maximum=0) is None


# -- whole message ---------------------------------------------------------------------------------

MID = "0156F7E71C361B21BC024CCDBE00000000"


def test_send_message_ok() -> None:
    assert (
        v.check_send_message(
            body=b"hello",
            message_id=MID,
            properties={"k": "v"},
            tag="TagA",
            keys=["k1"],
            message_group="g",
            delivery_timestamp=100.0,
            now=50.0,
        )
        is None
    )
    assert v.check_send_message(body=b"x", message_id=MID) is None


def test_send_message_reports_the_first_problem_in_proxy_order() -> None:
    # body before everything
    assert code_of(v.check_send_message, body=b"", message_id="", tag="a|b") is Code.MESSAGE_BODY_EMPTY
    # properties before tag
    assert code_of(v.check_send_message, body=b"x", message_id=MID, properties={"TAGS": "x"}, tag="|") is (
        Code.ILLEGAL_MESSAGE_PROPERTY_KEY
    )
    # tag before keys
    assert code_of(v.check_send_message, body=b"x", message_id=MID, tag="|", keys=[" "]) is (
        Code.ILLEGAL_MESSAGE_TAG
    )
    # keys before the combined size
    big = {"k": "v" * v.MAX_USER_PROPERTY_SIZE}
    assert code_of(v.check_send_message, body=b"x", message_id=MID, properties=big, keys=[" "]) is (
        Code.ILLEGAL_MESSAGE_KEY
    )
    assert code_of(v.check_send_message, body=b"x", message_id=MID, properties=big) is (
        Code.MESSAGE_PROPERTIES_TOO_LARGE
    )
    # size before message id
    assert code_of(v.check_send_message, body=b"x", message_id="", properties=big) is (
        Code.MESSAGE_PROPERTIES_TOO_LARGE
    )
    # message id before delivery time and message group
    assert code_of(
        v.check_send_message, body=b"x", message_id="", delivery_timestamp=1e12, now=0.0, message_group=" "
    ) is (Code.ILLEGAL_MESSAGE_ID)
    # delivery time before message group
    assert code_of(
        v.check_send_message, body=b"x", message_id=MID, delivery_timestamp=1e12, now=0.0, message_group=" "
    ) is (Code.ILLEGAL_DELIVERY_TIME)
    assert code_of(v.check_send_message, body=b"x", message_id=MID, message_group=" ") is (
        Code.ILLEGAL_MESSAGE_GROUP
    )


def test_send_message_body_limit_parameter() -> None:
    assert code_of(v.check_send_message, body=b"xyz", message_id=MID, max_body_size=2) is (
        Code.MESSAGE_BODY_TOO_LARGE
    )


def test_limits_match_the_proxy_defaults() -> None:
    assert v.MAX_BODY_SIZE == 4 * 1024 * 1024
    assert v.MAX_USER_PROPERTIES == 128
    assert v.MAX_USER_PROPERTY_SIZE == 16 * 1024
    assert v.MESSAGE_GROUP_MAX_SIZE == 64
    assert v.MAX_DELAY_SECONDS == 86400
    assert v.MIN_RECEIVE_INVISIBLE_SECONDS == 10
    assert v.MAX_INVISIBLE_SECONDS == 12 * 3600
    assert (v.MIN_POLLING_SECONDS, v.MAX_POLLING_SECONDS) == (5, 20)
    assert v.TOPIC_MAX_LENGTH == 127
    assert v.GROUP_MAX_LENGTH == 120

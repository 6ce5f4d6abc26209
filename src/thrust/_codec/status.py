"""Status codes of `apache.rocketmq.v2.Code` as a plain IntEnum.

Values follow definition.proto (rocketmq-apis) exactly; the server core and the error
mapping use this enum so that neither needs the generated protobuf module.
"""

from __future__ import annotations

from enum import IntEnum


class Code(IntEnum):
    """`apache.rocketmq.v2.Code`: the `Status.code` carried in every response body."""

    CODE_UNSPECIFIED = 0
    OK = 20000
    MULTIPLE_RESULTS = 30000
    BAD_REQUEST = 40000
    ILLEGAL_ACCESS_POINT = 40001
    ILLEGAL_TOPIC = 40002
    ILLEGAL_CONSUMER_GROUP = 40003
    ILLEGAL_MESSAGE_TAG = 40004
    ILLEGAL_MESSAGE_KEY = 40005
    ILLEGAL_MESSAGE_GROUP = 40006
    ILLEGAL_MESSAGE_PROPERTY_KEY = 40007
    INVALID_TRANSACTION_ID = 40008
    ILLEGAL_MESSAGE_ID = 40009
    ILLEGAL_FILTER_EXPRESSION = 40010
    ILLEGAL_INVISIBLE_TIME = 40011
    ILLEGAL_DELIVERY_TIME = 40012
    INVALID_RECEIPT_HANDLE = 40013
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = 40014
    UNRECOGNIZED_CLIENT_TYPE = 40015
    MESSAGE_CORRUPTED = 40016
    CLIENT_ID_REQUIRED = 40017
    ILLEGAL_POLLING_TIME = 40018
    ILLEGAL_OFFSET = 40019
    ILLEGAL_LITE_TOPIC = 40020
    INVALID_CLIENT_PROPERTIES = 40021
    UNAUTHORIZED = 40100
    PAYMENT_REQUIRED = 40200
    FORBIDDEN = 40300
    NOT_FOUND = 40400
    MESSAGE_NOT_FOUND = 40401
    TOPIC_NOT_FOUND = 40402
    CONSUMER_GROUP_NOT_FOUND = 40403
    OFFSET_NOT_FOUND = 40404
    REQUEST_TIMEOUT = 40800
    PAYLOAD_TOO_LARGE = 41300
    MESSAGE_BODY_TOO_LARGE = 41301
    MESSAGE_BODY_EMPTY = 41302
    PRECONDITION_FAILED = 42800
    TOO_MANY_REQUESTS = 42900
    LITE_TOPIC_QUOTA_EXCEEDED = 42901
    LITE_SUBSCRIPTION_QUOTA_EXCEEDED = 42902
    REQUEST_HEADER_FIELDS_TOO_LARGE = 43100
    MESSAGE_PROPERTIES_TOO_LARGE = 43101
    INTERNAL_ERROR = 50000
    INTERNAL_SERVER_ERROR = 50001
    HA_NOT_AVAILABLE = 50002
    NOT_IMPLEMENTED = 50100
    PROXY_TIMEOUT = 50400
    MASTER_PERSISTENCE_TIMEOUT = 50401
    SLAVE_PERSISTENCE_TIMEOUT = 50402
    UNSUPPORTED = 50500
    VERSION_UNSUPPORTED = 50501
    VERIFY_FIFO_MESSAGE_UNSUPPORTED = 50502
    FAILED_TO_CONSUME_MESSAGE = 60000

    @classmethod
    def of(cls, value: int) -> Code | int:
        """The enum member for `value`, or the bare int for a code this version does not know."""
        try:
            return cls(value)
        except ValueError:
            return value


class StatusFailure(Exception):
    """A failure that carries the `Status{code, message}` a server answers it with: the base of the
    shared validator's `Invalid` (client and server) and of the embedded broker core's `BrokerError`."""

    code: Code
    message: str

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"

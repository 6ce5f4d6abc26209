"""The exception hierarchy: one root, typed subclasses keyed by status code.

Every failure that reaches user code is a `ThrustError`. Each carries the RocketMQ status code
(`Code`, or None when the failure never reached the server), the server's message, the request id
of the call (`x-mq-request-id`) and `retriable`: whether trying the same call again can help.
The mapping from codes follows the Java client's `StatusChecker` (docs/protocol.md §2.3): 400xx is a bad
request, 404xx not found, 42900 too many requests, 5000x internal, 5040x proxy timeout.
gRPC transport errors are translated in exactly one place, `thrust._io.rpc`.
"""

from __future__ import annotations

import builtins

from thrust._codec.status import Code

__all__ = [
    "BadRequestError",
    "ClientClosedError",
    "Code",
    "ConnectionError",
    "ForbiddenError",
    "InternalError",
    "InvalidReceiptHandleError",
    "LiteSubscriptionQuotaExceededError",
    "LiteTopicQuotaExceededError",
    "MessageCorruptedError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PayloadTooLargeValidationError",
    "ThrustError",
    "TimeoutError",
    "TooManyRequestsError",
    "UnauthorizedError",
    "UnsupportedError",
    "ValidationError",
    "error_for_status",
]


class ThrustError(Exception):
    """Root of every error raised by thrust.

    Attributes:
        code: the RocketMQ status code, or None when the failure is local (transport, closed client).
        message: human-readable detail, from the server when it sent one.
        request_id: the `x-mq-request-id` of the failed call, when there was one.
        retriable: True when repeating the same call may succeed.
    """

    default_retriable: bool = False
    # Set by `RpcClient.receive` on a ReceiveMessage stream that failed after the server's OK status: the
    # server had taken a batch for it, and what did not arrive may be held for this client (push
    # consumers: `ClientSession.release_held`). Not part of the public API.
    _after_ok: bool = False

    def __init__(
        self,
        message: str,
        *,
        code: Code | int | None = None,
        request_id: str | None = None,
        retriable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.request_id = request_id
        self.retriable = self.default_retriable if retriable is None else retriable

    def __str__(self) -> str:
        parts = [self.message]
        if self.code is not None:
            name = self.code.name if isinstance(self.code, Code) else str(self.code)
            parts.append(f"code={name}")
        if self.request_id:
            parts.append(f"request_id={self.request_id}")
        return " ".join(parts) if len(parts) == 1 else f"{parts[0]} ({', '.join(parts[1:])})"


class BadRequestError(ThrustError):
    """The server (or local validation) refused the request as malformed: 400xx."""


class ValidationError(BadRequestError, ValueError):
    """Refused by local validation before any I/O; the same limits the server applies.

    Also a builtin `ValueError` (an invalid argument), so `except ValueError:` catches it too. A body or
    properties over the limits raise its subclass `PayloadTooLargeValidationError`, which is also a
    `PayloadTooLargeError`."""


class InvalidReceiptHandleError(BadRequestError):
    """INVALID_RECEIPT_HANDLE (40013): the handle expired or is unknown. Never retried."""


class UnauthorizedError(ThrustError):
    """UNAUTHORIZED (40100): credentials missing or wrong."""


class ForbiddenError(ThrustError):
    """FORBIDDEN (40300)."""


class NotFoundError(ThrustError):
    """404xx other than MESSAGE_NOT_FOUND on receive: topic, group or offset not found."""


class PayloadTooLargeError(BadRequestError):
    """413xx / 431xx: body or properties over the limits."""


class PayloadTooLargeValidationError(ValidationError, PayloadTooLargeError):
    """A body or properties over the limits, refused by local validation before any I/O (the code is the
    one the server answers for the same message: MESSAGE_BODY_TOO_LARGE, MESSAGE_PROPERTIES_TOO_LARGE).

    Both a `ValidationError` (nothing was sent) and a `PayloadTooLargeError` (what a server refusal of the
    same message raises), so either `except` clause catches it."""


class TooManyRequestsError(ThrustError):
    """TOO_MANY_REQUESTS (42900): the server is shedding load; back off and retry."""

    default_retriable = True


class LiteTopicQuotaExceededError(TooManyRequestsError):
    """LITE_TOPIC_QUOTA_EXCEEDED (42901): the send would create a lite topic beyond the parent topic's quota
    (the Java client's `LiteTopicQuotaExceededException`, from its StatusChecker). Not retriable."""

    default_retriable = False


class LiteSubscriptionQuotaExceededError(TooManyRequestsError):
    """LITE_SUBSCRIPTION_QUOTA_EXCEEDED (42902): a lite push consumer would subscribe to more lite topics
    than its `lite_subscription_quota` (raised before any I/O when the client knows the quota, as the Java
    `LiteSubscriptionManager.checkLiteSubscriptionQuota`, else by the server). Not retriable."""

    default_retriable = False


class InternalError(ThrustError):
    """5000x and other server-side failures; a retry may help."""

    default_retriable = True


class TimeoutError(ThrustError, builtins.TimeoutError):
    """The call's deadline passed (client side), or PROXY_TIMEOUT / persistence timeouts (5040x).

    Also a builtin `TimeoutError` (an `OSError`), so `except TimeoutError:` in code that never heard of
    thrust catches it too. Its `errno` and `strerror` are None."""

    default_retriable = True


class ConnectionError(ThrustError, builtins.ConnectionError):
    """The transport failed before a status came back: gRPC UNAVAILABLE and friends, or a call the server
    side cancelled (a proxy going down), or whose channel was replaced.

    Also a builtin `ConnectionError` (an `OSError`), so `except ConnectionError:` / `except OSError:` catch
    it too. Its `errno` and `strerror` are None."""

    default_retriable = True


class UnsupportedError(ThrustError):
    """505xx, NOT_IMPLEMENTED, or a status code this client does not know."""


class MessageCorruptedError(ThrustError):
    """MESSAGE_CORRUPTED, or a received body whose digest does not match."""


class ClientClosedError(ThrustError):
    """The client was closed; no new work is accepted."""


_EXACT: dict[int, type[ThrustError]] = {
    Code.INVALID_RECEIPT_HANDLE: InvalidReceiptHandleError,
    Code.MESSAGE_CORRUPTED: MessageCorruptedError,
    Code.UNAUTHORIZED: UnauthorizedError,
    Code.FORBIDDEN: ForbiddenError,
    Code.TOO_MANY_REQUESTS: TooManyRequestsError,
    Code.LITE_TOPIC_QUOTA_EXCEEDED: LiteTopicQuotaExceededError,
    Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED: LiteSubscriptionQuotaExceededError,
    Code.REQUEST_TIMEOUT: TimeoutError,
    Code.PAYLOAD_TOO_LARGE: PayloadTooLargeError,
    Code.MESSAGE_BODY_TOO_LARGE: PayloadTooLargeError,
    Code.REQUEST_HEADER_FIELDS_TOO_LARGE: PayloadTooLargeError,
    Code.MESSAGE_PROPERTIES_TOO_LARGE: PayloadTooLargeError,
    Code.NOT_IMPLEMENTED: UnsupportedError,
}


def validation_error(message: str, code: Code) -> ValidationError:
    """The typed error of a local validation failure with the status `code` the server would answer."""
    cls = PayloadTooLargeValidationError if _EXACT.get(code) is PayloadTooLargeError else ValidationError
    return cls(message, code=code)


def error_for_status(code: int, message: str, *, request_id: str | None = None) -> ThrustError:
    """Build the typed error for a non-OK `Status` from a response body."""
    typed = Code.of(code)
    cls = _EXACT.get(code)
    if cls is None:
        family = code // 100
        if family == 400 or 40000 <= code < 40100 or 41300 <= code < 41400:
            cls = BadRequestError
        elif family == 404:
            cls = NotFoundError
        elif family == 429:
            cls = TooManyRequestsError
        elif family == 504:
            cls = TimeoutError
        elif family in (500, 502, 503) or 50000 <= code < 50100:
            cls = InternalError
        elif 40000 <= code < 50000:
            cls = BadRequestError
        else:
            cls = UnsupportedError
    # ILLEGAL_POLLING_TIME stays a BadRequestError (the Java client's StatusChecker), but it is the one
    # "bad request" a retry can cure: the proxy sends it only when the call arrived with less than the 5 s
    # minimum poll left of its deadline ("please check network condition", ReceiveMessageActivity), i.e.
    # the request was delayed on its way, not malformed.
    retriable = True if code == Code.ILLEGAL_POLLING_TIME else None
    return cls(
        message or (typed.name if isinstance(typed, Code) else str(code)),
        code=typed,
        request_id=request_id,
        retriable=retriable,
    )

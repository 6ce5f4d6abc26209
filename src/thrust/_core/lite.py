"""A lite push consumer's lite subscription (RocketMQ 5.5, RIP-83): its lite topics and the server's limits.

Pure state and checks, as the Java client's `LiteSubscriptionManager` keeps them (apache/rocketmq-clients
`java/client/.../impl/consumer/LiteSubscriptionManager.java`): the set of subscribed lite topics, the
`lite_subscription_quota` and `max_lite_topic_size` the server sends in Settings, the name and quota
checks before a subscription is sent, and the server's unsubscribe notice. The RPCs and the periodic
full resync live in `thrust.lite_push_consumer`.
"""

from __future__ import annotations

from thrust._codec.status import Code
from thrust._codec.validation import LITE_TOPIC_MAX_SIZE, Invalid, check_lite_topic

__all__ = ["LiteSubscription"]


class LiteSubscription:
    """One consumer's lite topics (insertion-ordered) and the server's limits.

    `quota` is None until a server sends one: then only the server's own check applies (the Java client
    starts at 0 and refuses everything until Settings arrive; a server without lite topics sends none).
    """

    __slots__ = ("_names", "max_size", "quota")

    def __init__(self) -> None:
        self._names: dict[str, None] = {}
        self.quota: int | None = None
        self.max_size: int = LITE_TOPIC_MAX_SIZE

    @property
    def names(self) -> tuple[str, ...]:
        """The subscribed lite topics, in subscription order."""
        return tuple(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __len__(self) -> int:
        return len(self._names)

    def apply_settings(self, quota: int | None, max_size: int | None) -> None:
        """The server's Settings: each limit it carries replaces the current one."""
        if quota is not None:
            self.quota = quota
        if max_size is not None and max_size > 0:
            self.max_size = max_size

    def check_add(self, name: str) -> None:
        """Before subscribing `name` (not yet subscribed): its name, then the quota.

        Raises:
            Invalid(ILLEGAL_LITE_TOPIC): not a str, blank, longer than `max_size` UTF-8 bytes or outside
                `[a-zA-Z0-9_-]` (the proxy's rules; Java checks only blank and length).
            Invalid(LITE_SUBSCRIPTION_QUOTA_EXCEEDED): one more would exceed the quota
                (`checkLiteSubscriptionQuota(1)`).
        """
        if not isinstance(name, str):
            raise Invalid(Code.ILLEGAL_LITE_TOPIC, f"lite topic must be a str, not {type(name).__name__}")
        check_lite_topic(name, max_size=self.max_size)
        self.check_quota(1)

    def check_quota(self, delta: int) -> None:
        """Raises Invalid(LITE_SUBSCRIPTION_QUOTA_EXCEEDED) when `delta` more would exceed the quota."""
        if self.quota is not None and len(self._names) + delta > self.quota:
            raise Invalid(
                Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED, f"Lite subscription quota exceeded {self.quota}"
            )

    def add(self, name: str) -> None:
        """The server accepted the subscription."""
        self._names[name] = None

    def discard(self, name: str) -> bool:
        """Unsubscribed (by the client, or by the server's notice); False when it was not subscribed."""
        return self._names.pop(name, 0) is None

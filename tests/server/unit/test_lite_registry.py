"""`thrust.server.core.lite.LiteRegistry`, pure: the subscription actions, exclusive groups, the quota,
and idle lite topics expiring (upstream LiteSubscriptionRegistryImpl, AbstractLiteLifecycleManager)."""

from __future__ import annotations

import pytest

from thrust._codec.status import Code
from thrust.server.core.lite import LiteRegistry, lmq_name
from thrust.server.core.model import BrokerError


def test_lmq_names_cannot_collide_with_topics() -> None:
    assert lmq_name("chat", "s-1") == "%LMQ%chat$s-1"


def test_partial_and_complete_actions() -> None:
    r = LiteRegistry(ttl=0, max_lite_topics=10)
    assert r.add("c1", "g", "t", ["a", "b", "a"], quota=5, exclusive=False) == []
    assert r.lite_topics("c1", "g", "t") == ["a", "b"]
    assert r.lite_topics("c1", "other", "t") == []
    r.remove("c1", "g", "t", ["a", "zz"])
    assert r.lite_topics("c1", "g", "t") == ["b"]
    r.replace("c1", "g", "t", ["c", "b"], quota=5)
    assert r.lite_topics("c1", "g", "t") == ["b", "c"]
    with pytest.raises(BrokerError):
        r.add("c1", "g", "t", ["x", "y", "z", "w"], quota=5, exclusive=False)
    r.drop_client("c1")
    assert r.subscription("c1") is None


def test_the_quota_counts_the_clients_own_lite_topics() -> None:
    r = LiteRegistry(ttl=0, max_lite_topics=10)
    r.add("c1", "g", "t", ["a", "b"], quota=2, exclusive=False)
    r.add("c2", "g", "t", ["a", "b"], quota=2, exclusive=False)  # another client: its own quota
    r.add("c1", "g", "t", ["a"], quota=2, exclusive=False)  # already subscribed: nothing new
    with pytest.raises(BrokerError) as info:
        r.add("c1", "g", "t", ["c"], quota=2, exclusive=False)
    assert info.value.code == Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED
    with pytest.raises(BrokerError):
        r.replace("c1", "g", "t", ["a", "b", "c"], quota=2)
    assert r.lite_topics("c1", "g", "t") == ["a", "b"]


def test_an_exclusive_group_moves_a_lite_topic_between_its_clients() -> None:
    r = LiteRegistry(ttl=0, max_lite_topics=10)
    r.add("c1", "g", "t", ["a", "b"], quota=10, exclusive=True)
    r.add("other-group", "h", "t", ["a"], quota=10, exclusive=True)
    assert r.add("c2", "g", "t", ["a"], quota=10, exclusive=True) == [("c1", "a")]
    assert r.lite_topics("c1", "g", "t") == ["b"]
    assert r.lite_topics("other-group", "h", "t") == ["a"]  # another group keeps it


def test_one_subscription_per_client() -> None:
    r = LiteRegistry(ttl=0, max_lite_topics=10)
    r.add("c1", "g", "t", ["a"], quota=10, exclusive=False)
    r.add("c1", "g", "u", ["b"], quota=10, exclusive=False)
    assert r.subscription("c1") == ("g", "u", ["b"])


def test_idle_lite_topics_expire_and_leave_the_subscriptions() -> None:
    r = LiteRegistry(ttl=60, max_lite_topics=2)
    r.stored("t", "a", 0.0)
    r.stored("t", "b", 10.0)
    r.add("c1", "g", "t", ["a", "b"], quota=10, exclusive=False)
    assert r.next_time() == 60.0
    r.check_create("t", "a")  # exists: no new lite topic
    with pytest.raises(BrokerError) as info:
        r.check_create("t", "c")
    assert info.value.code == Code.LITE_TOPIC_QUOTA_EXCEEDED
    r.stored("t", "a", 30.0)  # written again: its expiry moves
    assert r.expire(60.0) == []
    assert r.expire(70.5) == [("t", "b")]
    assert r.of_parent("t") == ["a"] and not r.exists("t", "b")
    assert r.lite_topics("c1", "g", "t") == ["a"]
    assert r.expire(95.0) == [("t", "a")]
    assert r.next_time() is None


def test_no_ttl_never_expires() -> None:
    r = LiteRegistry(ttl=0, max_lite_topics=2)
    r.stored("t", "a", 0.0)
    assert r.next_time() is None and r.expire(1e9) == []

"""`thrust._core.lite.LiteSubscription`, pure: the Java LiteSubscriptionManager's checks before a lite
subscription is sent (name, quota) and the limits from Settings."""

from __future__ import annotations

import pytest

from thrust._codec.status import Code
from thrust._codec.validation import Invalid
from thrust._core.lite import LiteSubscription
from thrust._core.settings import ClientSettings, ServerSettings, merge


def test_names_and_quota() -> None:
    lite = LiteSubscription()
    lite.check_add("a")  # no quota known yet: only the server checks
    lite.apply_settings(2, 8)
    lite.add("a")
    lite.add("b")
    assert lite.names == ("a", "b") and "a" in lite and len(lite) == 2
    with pytest.raises(Invalid) as quota:
        lite.check_add("c")
    assert quota.value.code == Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED
    lite.check_quota(0)
    assert lite.discard("a") and not lite.discard("a")
    lite.check_add("c")
    for bad in ("x" * 9, "", " ", "a.b", 3):
        with pytest.raises(Invalid) as name:
            lite.check_add(bad)  # type: ignore[arg-type]
        assert name.value.code == Code.ILLEGAL_LITE_TOPIC, bad


def test_settings_keep_what_the_server_did_not_send() -> None:
    lite = LiteSubscription()
    lite.apply_settings(None, None)
    assert (lite.quota, lite.max_size) == (None, 64)
    lite.apply_settings(0, 0)
    assert (lite.quota, lite.max_size) == (0, 64)  # a quota of 0 refuses everything; size 0 is unset


def test_client_settings_carry_the_lite_limits() -> None:
    local = ClientSettings.for_consumer()
    assert (local.lite_subscription_quota, local.max_lite_topic_size) == (None, 64)
    merged = merge(local, ServerSettings(lite_subscription_quota=2000, max_lite_topic_size=32))
    assert (merged.lite_subscription_quota, merged.max_lite_topic_size) == (2000, 32)
    assert merge(local, ServerSettings()).lite_subscription_quota is None  # a server that sent none

"""The thrust.sync clients take exactly the keyword options of the asyncio clients, with the same defaults.

They spell the options out (so that type checkers check them) rather than forwarding `**options`; this
keeps the two lists from drifting apart.
"""

from __future__ import annotations

import inspect
import re

import pytest

import thrust
import thrust.sync
from thrust import push_consumer

# Defaults the sync client leaves to the asyncio one (None there means "the asyncio default").
DEFERRED = {("PushConsumer", "ack_retry_window"): push_consumer.ACK_RETRY_WINDOW}


@pytest.mark.parametrize("name", ["Producer", "SimpleConsumer", "PushConsumer"])
def test_sync_client_takes_the_asyncio_clients_options(name: str) -> None:
    sync_params = inspect.signature(getattr(thrust.sync, name)).parameters
    async_params = inspect.signature(getattr(thrust, name)).parameters
    assert list(sync_params) == list(async_params)
    for param, theirs in async_params.items():
        ours = sync_params[param]
        assert ours.kind == theirs.kind, param
        if (name, param) in DEFERRED:
            assert ours.default is None and theirs.default == DEFERRED[name, param], param
        else:
            assert ours.default == theirs.default, param
            # Annotations are strings (postponed); sync.py names some types through its module aliases.
            assert re.sub(r"\b_\w+\.", "", ours.annotation) == theirs.annotation, param

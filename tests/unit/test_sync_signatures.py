"""The thrust.sync clients take exactly the keyword options of the asyncio clients, with the same defaults.

Each sync client takes them from the asyncio client's signature, their one declaration
(`thrust.sync._options_of`: ParamSpec for type checkers, `__wrapped__` for `inspect`), so the two lists
cannot drift apart.
"""

from __future__ import annotations

import inspect
import re

import pytest

import thrust
import thrust.sync

CLIENTS = ["Producer", "SimpleConsumer", "PushConsumer", "LitePushConsumer"]


@pytest.mark.parametrize("name", CLIENTS)
def test_sync_client_takes_the_asyncio_clients_options(name: str) -> None:
    sync_params = inspect.signature(getattr(thrust.sync, name)).parameters
    async_params = inspect.signature(getattr(thrust, name)).parameters
    assert list(sync_params) == list(async_params)
    for param, theirs in async_params.items():
        ours = sync_params[param]
        assert ours.kind == theirs.kind, param
        assert ours.default == theirs.default, param
        # Annotations are strings (postponed); sync.py names some types through its module aliases.
        assert re.sub(r"\b_\w+\.", "", ours.annotation) == theirs.annotation, param


@pytest.mark.parametrize("name", CLIENTS)
def test_sync_client_declares_no_option_of_its_own(name: str) -> None:
    # Its options are the asyncio client's: one list, so an option added there cannot be missing here.
    sync_init = getattr(thrust.sync, name).__init__
    assert sync_init.__wrapped__ is getattr(thrust, name).__init__
    assert [p.kind for p in inspect.signature(sync_init, follow_wrapped=False).parameters.values()] == [
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
        inspect.Parameter.VAR_KEYWORD,
    ]


REQUIRED = {
    "Producer": {},
    "SimpleConsumer": {"group": "g", "subscriptions": {"t": "*"}},
    "PushConsumer": {"group": "g", "subscriptions": {"t": "*"}, "listener": print},
    "LitePushConsumer": {"group": "g", "bind_topic": "t", "listener": print},
}


@pytest.mark.parametrize("name", CLIENTS)
def test_an_unknown_option_is_refused_before_anything_starts(name: str) -> None:
    # Refused by the asyncio client's constructor, so before the sync client starts its loop thread.
    with pytest.raises(TypeError, match=rf"^{name}\(\) got an unexpected keyword argument 'max_attemps'$"):
        getattr(thrust.sync, name)(endpoints="127.0.0.1:1", max_attemps=2, **REQUIRED[name])

"""`thrust.TimeoutError` and `thrust.ConnectionError` are also the builtin `TimeoutError` and
`ConnectionError`."""

from __future__ import annotations

import builtins
import pickle

import pytest

import thrust
from thrust.errors import error_for_status


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [(thrust.TimeoutError, builtins.TimeoutError), (thrust.ConnectionError, builtins.ConnectionError)],
)
def test_thrust_transport_errors_are_builtin_errors_too(cls: type[thrust.ThrustError], builtin: type) -> None:
    assert issubclass(cls, thrust.ThrustError) and issubclass(cls, builtin) and issubclass(cls, OSError)
    err = cls("deadline passed", code=40800, request_id="req-1", retriable=False)
    # ThrustError's constructor and attributes are unchanged by the second base.
    assert (err.message, err.code, err.request_id) == ("deadline passed", 40800, "req-1")
    assert err.retriable is False
    assert str(err) == "deadline passed (code=40800, request_id=req-1)"
    assert cls("x").retriable is True  # the class default
    with pytest.raises(builtin):
        raise err
    # `except TimeoutError:` in code that never heard of thrust catches it.
    try:
        raise cls("boom")
    except builtin as caught:
        assert isinstance(caught, thrust.ThrustError)
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is cls and (copy.code, copy.request_id, copy.retriable) == (40800, "req-1", False)


def test_status_mapping_still_builds_the_thrust_timeout() -> None:
    err = error_for_status(50400, "proxy timeout")
    assert type(err) is thrust.TimeoutError and isinstance(err, TimeoutError)

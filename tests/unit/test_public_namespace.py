"""`dir(thrust)` is the public API: what `__all__` names and the lazily imported names, not the helpers
and modules the package imports for itself."""

from __future__ import annotations

import thrust


def test_dir_shows_the_public_names_only() -> None:
    names = set(dir(thrust))
    assert names == {*thrust.__all__, "__version__", "sync"}
    assert not names & {"Any", "TYPE_CHECKING", "os", "sys", "logging", "annotations"}


def test_every_listed_name_resolves() -> None:
    for name in dir(thrust):
        assert getattr(thrust, name) is not None, name

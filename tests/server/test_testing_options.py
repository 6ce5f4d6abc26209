"""`thrust.testing.ServerOptions` (the typed `**options` of `embedded_server`) is every ServerConfig field
that `embedded_server` does not name itself, with the same type, so a new server limit is never missing."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect

import pytest

from thrust.server.config import ServerConfig
from thrust.testing import ServerOptions, embedded_server

# embedded_server's own parameters that carry a ServerConfig field under another name, or no field at all.
RENAMED = {"auto_create": "auto_create_topics"}
# ...and the ServerConfig fields that one embedded_server parameter sets together with its own.
ALSO_SET = {"auto_create_groups"}
NOT_FIELDS = {"faults", "clock", "options"}


def test_server_options_are_the_remaining_server_config_fields() -> None:
    named = {RENAMED.get(p, p) for p in inspect.signature(embedded_server).parameters} - NOT_FIELDS
    fields = {f.name: f.type for f in dataclasses.fields(ServerConfig)}
    assert named <= set(fields), named - set(fields)
    options = ServerOptions.__annotations__
    assert set(options) == set(fields) - named - ALSO_SET
    for name, annotation in options.items():
        text = annotation if isinstance(annotation, str) else annotation.__forward_arg__
        assert text == fields[name], name


def test_an_option_reaches_the_server() -> None:
    async def scenario() -> float:
        async with embedded_server(channel_expiry=7.0) as srv:
            return srv.config.channel_expiry

    assert asyncio.run(scenario()) == pytest.approx(7.0)

"""Helpers every public client shares (`Producer`, `SimpleConsumer`, `PushConsumer`), in a module of their
own so that no client imports another's private names."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from thrust._codec import validation
from thrust.config import ClientConfig, ClientConfigFields
from thrust.errors import validation_error

__all__ = ["check", "client_config", "join_start"]


def client_config(client: str, config: ClientConfig | None, fields: ClientConfigFields) -> ClientConfig:
    """The `ClientConfig` of a `client` built with `config=` (the keyword fields given, i.e. not None,
    replace its own) or with `endpoints=` and those fields; exactly one of the two is required.

    The clients take these fields as `**connection: Unpack[ClientConfigFields]`, their one declaration, so
    a keyword that is none of the client's options lands here: it is refused as Python refuses an unknown
    keyword, with a TypeError naming it."""
    unknown = sorted(fields.keys() - ClientConfigFields.__optional_keys__)
    if unknown:
        raise TypeError(f"{client}() got an unexpected keyword argument {unknown[0]!r}")
    given: dict[str, Any] = {k: v for k, v in fields.items() if v is not None}
    endpoints = given.pop("endpoints", None)
    if config is not None:
        if endpoints is not None:
            raise ValueError("give either config= or endpoints=, not both")
        return config.replace(**given) if given else config
    if endpoints is None:
        raise ValueError("endpoints= (or config=) is required")
    return ClientConfig(endpoints, **given)


def check(fn: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    """Run a validation check, raising the public ValidationError with the proxy's status code."""
    try:
        fn(*args, **kwargs)
    except validation.Invalid as exc:
        raise validation_error(exc.message, exc.code) from None


async def join_start(task: asyncio.Task[None], close: Callable[[], Awaitable[None]]) -> None:
    """Wait for a client's start task. Shielded: a caller cancelled while it waits leaves the start running
    for the others waiting on it (`start()` is idempotent and may be awaited by several). A start that
    failed closes the client (`close`, which releases what the start had opened) before its error
    propagates; a start still running when this caller was cancelled is left alone."""
    try:
        await asyncio.shield(task)
    except BaseException:
        if task.done():
            await close()
        raise

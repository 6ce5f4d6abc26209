"""`thrust._client`: the helpers the public clients share, and no client importing another's private names."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
from typing import Any

import pytest

import thrust
from thrust._client import check, client_config
from thrust._codec import validation
from thrust.config import ClientConfig, ClientConfigFields
from thrust.errors import ValidationError

CLIENTS = ("thrust.producer", "thrust.simple_consumer", "thrust.push_consumer")


@pytest.mark.parametrize("module", CLIENTS)
def test_no_client_imports_a_private_name_of_another(module: str) -> None:
    tree = ast.parse(inspect.getsource(importlib.import_module(module)))
    borrowed = [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in CLIENTS
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert borrowed == []


def test_client_config_takes_config_or_endpoints() -> None:
    built = client_config("Producer", None, {"endpoints": "127.0.0.1:8081", "namespace": "ns"})
    assert built.namespace == "ns"
    assert client_config("Producer", built, {}) is built
    assert client_config("Producer", built, {"request_timeout": 2.0}).request_timeout == 2.0
    with pytest.raises(ValueError, match="not both"):
        client_config("Producer", built, {"endpoints": "127.0.0.1:8081"})
    with pytest.raises(ValueError, match="required"):
        client_config("Producer", None, {})
    assert isinstance(built, ClientConfig)


def test_a_connection_keyword_given_as_none_is_not_given() -> None:
    # The clients' keywords used to default to None; a caller passing None on purpose keeps that meaning.
    built = client_config("Producer", None, {"endpoints": "127.0.0.1:8081", "namespace": "ns"})
    fields: dict[str, Any] = {"namespace": None, "request_timeout": None, "credentials": None}
    assert client_config("Producer", built, fields) is built  # type: ignore[arg-type]


def test_an_unknown_keyword_is_a_type_error_naming_it_and_the_client() -> None:
    with pytest.raises(
        TypeError, match=r"^SimpleConsumer\(\) got an unexpected keyword argument 'namespce'$"
    ):
        client_config("SimpleConsumer", None, {"endpoints": "127.0.0.1:8081", "namespce": "ns"})  # type: ignore[typeddict-unknown-key]


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("Producer", {}),
        ("SimpleConsumer", {"group": "g", "subscriptions": {"t": "*"}}),
        ("PushConsumer", {"group": "g", "subscriptions": {"t": "*"}, "listener": lambda m: None}),
    ],
)
def test_every_client_takes_every_config_field_as_a_keyword(name: str, options: dict[str, Any]) -> None:
    # One declaration (ClientConfigFields) for ClientConfig.replace and the three clients: each field
    # given to a client reaches its config, and a misspelt one is refused before anything starts.
    client = getattr(thrust, name)(
        endpoints="127.0.0.1:1",
        namespace="ns",
        request_timeout=1.5,
        keepalive_interval=120.0,
        keepalive_timeout=20.0,
        tls=True,
        **options,
    )
    config = client.config
    assert (config.namespace, config.request_timeout, config.keepalive_interval) == ("ns", 1.5, 120.0)
    assert config.keepalive_timeout == 20.0 and config.tls is not None
    assert set(ClientConfigFields.__optional_keys__) == {f.name for f in dataclasses.fields(ClientConfig)}
    with pytest.raises(TypeError, match="keepalive_intervall"):
        getattr(thrust, name)(endpoints="127.0.0.1:1", keepalive_intervall=1.0, **options)


def test_check_raises_the_public_validation_error() -> None:
    check(validation.check_topic, "t")
    with pytest.raises(ValidationError) as info:
        check(validation.check_topic, "bad topic")
    assert info.value.code is not None

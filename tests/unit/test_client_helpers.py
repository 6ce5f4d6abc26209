"""`thrust._client`: the helpers the public clients share, and no client importing another's private names."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

from thrust._client import check, client_config
from thrust._codec import validation
from thrust.config import ClientConfig
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
    built = client_config(None, "127.0.0.1:8081", namespace="ns", request_timeout=None)
    assert built.namespace == "ns"
    assert client_config(built, None) is built
    assert client_config(built, None, request_timeout=2.0).request_timeout == 2.0
    with pytest.raises(ValueError, match="not both"):
        client_config(built, "127.0.0.1:8081")
    with pytest.raises(ValueError, match="required"):
        client_config(None, None)
    assert isinstance(built, ClientConfig)


def test_check_raises_the_public_validation_error() -> None:
    check(validation.check_topic, "t")
    with pytest.raises(ValidationError) as info:
        check(validation.check_topic, "bad topic")
    assert info.value.code is not None

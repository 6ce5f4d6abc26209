"""Unit tests for ClientConfig, request metadata and public message types."""

from __future__ import annotations

import pytest

from thrust._io.metadata import Metadata
from thrust.config import ClientConfig, Credentials, TlsConfig
from thrust.message import FilterExpression, Message


def test_endpoints_forms() -> None:
    assert ClientConfig("127.0.0.1:8081").endpoints == "127.0.0.1:8081"
    assert ClientConfig(["10.0.0.1:1", "10.0.0.2:2"]).endpoints == "10.0.0.1:1;10.0.0.2:2"
    assert ClientConfig("[::1]:8081").access_point.target == "ipv6:[::1]:8081"
    assert ClientConfig("10.0.0.1:1,10.0.0.2:2").access_point.target == "ipv4:10.0.0.1:1,10.0.0.2:2"
    for bad in ("", "host", "::1:80", "http://x:1", "h:0"):
        with pytest.raises(ValueError):
            ClientConfig(bad)


def test_timeout_tls_and_repr_hides_secrets() -> None:
    c = ClientConfig(
        "h.example:1",
        request_timeout=0.25,
        tls=True,
        credentials=Credentials(access_key="AK", secret_key="SECRET", session_token="TOKEN"),
    )
    assert c.request_timeout == 0.25 and c.tls == TlsConfig()
    assert "SECRET" not in repr(c) and "TOKEN" not in repr(c) and "AK" in repr(c)
    assert ClientConfig("h.example:1", tls=False).tls is None
    with pytest.raises(ValueError):
        ClientConfig("h.example:1", request_timeout=0)
    with pytest.raises(ValueError):
        TlsConfig(cert_file="c.pem")


def test_from_env() -> None:
    env = {
        "ROCKETMQ_ENDPOINTS": "127.0.0.1:8081",
        "ROCKETMQ_NAMESPACE": "ns",
        "ROCKETMQ_ACCESS_KEY": "ak",
        "ROCKETMQ_SECRET_KEY": "sk",
        "ROCKETMQ_TLS": "1",
        "ROCKETMQ_TLS_SERVER_NAME": "srv",
        "ROCKETMQ_REQUEST_TIMEOUT": "1.5",
    }
    c = ClientConfig.from_env(env)
    assert (c.namespace, c.request_timeout) == ("ns", 1.5)
    assert c.credentials is not None and c.credentials.access_key == "ak"
    assert c.tls is not None and c.tls.server_name == "srv"
    assert ClientConfig.from_env(env, namespace="other").namespace == "other"
    with pytest.raises(ValueError):
        ClientConfig.from_env({})


def test_metadata_static_headers_and_signature_only_with_credentials() -> None:
    md = Metadata(ClientConfig("h.example:1", namespace="ns"), "cid")
    headers = dict(md())
    assert headers["x-mq-client-id"] == "cid" and headers["x-mq-language"] == "PYTHON"
    assert headers["x-mq-protocol"] == "v2" and headers["x-mq-namespace"] == "ns"
    assert headers["x-mq-date-time"].endswith("Z") and "authorization" not in headers
    assert md()[-1][1] != md()[-1][1]  # a fresh request id per call
    signed = dict(
        Metadata(ClientConfig("h.example:1", credentials=Credentials(access_key="a", secret_key="s")), "c")()
    )
    assert signed["authorization"].startswith("MQv2-HMAC-SHA1 Credential=a,")


def test_message_is_immutable_and_delay() -> None:
    m = Message(topic="t", body=bytearray(b"x"), keys="k", delay=10)
    assert m.body == b"x" and m.keys == ("k",) and m.delivery_timestamp is not None
    with pytest.raises(AttributeError):
        m.topic = "u"  # type: ignore[misc]
    with pytest.raises(ValueError):
        Message(topic="t", body=b"x", delay=1, delivery_time=1.0)
    assert FilterExpression.of("a") == FilterExpression.tag("a")


def test_replace_changes_some_fields_validates_them_and_leaves_the_original_alone() -> None:
    creds = Credentials(access_key="AK", secret_key="SECRET")
    base = ClientConfig("10.0.0.1:8081", namespace="ns", credentials=creds, tls=True, request_timeout=2)
    moved = base.replace(endpoints=["10.0.0.2:1", "10.0.0.3:2"], request_timeout=0.5)
    assert moved.endpoints == "10.0.0.2:1;10.0.0.3:2" and moved.request_timeout == 0.5
    assert moved.access_point.target == "ipv4:10.0.0.2:1,10.0.0.3:2"
    # Every other field is kept, the original is unchanged (frozen), and the copy is a new object.
    assert (moved.namespace, moved.credentials, moved.tls) == ("ns", creds, TlsConfig())
    assert (moved.keepalive_interval, moved.keepalive_timeout) == (300.0, 30.0)
    assert base.endpoints == "10.0.0.1:8081" and base.request_timeout == 2.0 and moved is not base
    assert base.replace() == base
    # The constructor's conversions and checks run on the new values.
    assert base.replace(tls=False).tls is None
    assert base.replace(tls=TlsConfig(enabled=False)).tls is None
    assert base.replace(namespace=None).namespace == ""  # type: ignore[arg-type]
    assert "SECRET" not in repr(base.replace(namespace="other"))
    with pytest.raises(ValueError, match="request_timeout"):
        base.replace(request_timeout=0)
    with pytest.raises(ValueError):
        base.replace(endpoints="not-an-endpoint")
    with pytest.raises(ValueError, match="keepalive"):
        base.replace(keepalive_interval=0.01)
    with pytest.raises(TypeError):
        base.replace(no_such_field=1)


def test_from_env_credentials_keyword_wins_over_a_half_set_environment() -> None:
    only_secret = {"ROCKETMQ_ENDPOINTS": "127.0.0.1:8081", "ROCKETMQ_SECRET_KEY": "env-sk"}
    given = Credentials(access_key="ak", secret_key="sk")
    assert ClientConfig.from_env(only_secret, credentials=given).credentials is given
    assert ClientConfig.from_env(only_secret, credentials=None).credentials is None
    # Without the keyword, a half pair is a ValueError naming the missing variable.
    with pytest.raises(ValueError, match="ROCKETMQ_ACCESS_KEY"):
        ClientConfig.from_env(only_secret)
    with pytest.raises(ValueError, match="ROCKETMQ_SECRET_KEY"):
        ClientConfig.from_env({"ROCKETMQ_ENDPOINTS": "127.0.0.1:8081", "ROCKETMQ_ACCESS_KEY": "ak"})
    both = {**only_secret, "ROCKETMQ_ACCESS_KEY": "env-ak", "ROCKETMQ_SESSION_TOKEN": "tok"}
    creds = ClientConfig.from_env(both).credentials
    assert creds == Credentials(access_key="env-ak", secret_key="env-sk", session_token="tok")

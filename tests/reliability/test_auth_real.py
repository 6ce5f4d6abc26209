"""Refused credentials on a real Apache RocketMQ proxy with authentication on (B13 of docs/reliability.md):
every client type fails `start()` with UnauthorizedError, as on the embedded server (test_security.py).

The shared test clusters run without authentication, so this module starts its own local-mode cluster
with it (a RocketMQ 5.3+ ACL 2.0 configuration, read from apache/rocketmq):

- the proxy authenticates every gRPC request (`authenticationEnabled`, `AuthenticationPipeline`) with
  `DefaultAuthenticationProvider`, looking users up through `ProxyAuthenticationMetadataProvider`, which
  in local mode asks the broker inside the proxy (`LocalMetadataService.getUser`);
- that broker keeps users in `LocalAuthenticationMetadataProvider` (RocksDB under `authConfigPath`) and
  creates `initAuthenticationUser` at start (`AuthenticationMetadataManagerImpl.initUser`); its own
  remoting stays unauthenticated, so the harness's admin calls work unchanged;
- QueryRoute is on the proxy's whitelist (`authenticationWhitelist`, matched against the request's full
  name in `AbstractAuthenticationStrategy`): the harness's readiness probe is unsigned. So every client
  here is refused on its Telemetry stream, which the proxy answers with `TelemetryCommand{status:
  UNAUTHORIZED}` and completes with gRPC OK (`GrpcMessagingApplication.telemetry`): the path a push
  consumer always takes first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

import thrust
from tests.reliability._util import run
from thrust._codec.status import Code
from thrust.cluster.process import RocketMQCluster

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.timeout(90, func_only=True)]

AK, SK = "thrust-auth-ak", "thrust-auth-sk-7c2e"
TOPIC, GROUP = "auth-t", "auth-g"
REQUEST_TIMEOUT = 2.0


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    users = tmp_path_factory.mktemp("acl")
    with RocketMQCluster(
        "local",
        topics=[TOPIC],
        groups=[GROUP],
        proxy_config={
            "authenticationEnabled": True,
            "authenticationProvider": "org.apache.rocketmq.auth.authentication.provider"
            ".DefaultAuthenticationProvider",
            "authenticationMetadataProvider": "org.apache.rocketmq.proxy.auth"
            ".ProxyAuthenticationMetadataProvider",
            "authenticationWhitelist": "apache.rocketmq.v2.QueryRouteRequest",
        },
        broker_config={
            "authConfigPath": str(users),
            "authenticationMetadataProvider": "org.apache.rocketmq.auth.authentication.provider"
            ".LocalAuthenticationMetadataProvider",
            "initAuthenticationUser": json.dumps({"username": AK, "password": SK}),
        },
        startup_timeout=300,
    ) as cluster:
        yield cluster.endpoint


def _clients(endpoint: str, creds: thrust.Credentials) -> list[Any]:
    common: dict[str, Any] = {"endpoints": endpoint, "credentials": creds, "request_timeout": REQUEST_TIMEOUT}
    return [
        lambda: thrust.Producer(topics=[TOPIC], **common),
        lambda: thrust.SimpleConsumer(group=GROUP, subscriptions={TOPIC: "*"}, await_duration=5, **common),
        lambda: thrust.PushConsumer(
            group=GROUP,
            subscriptions={TOPIC: "*"},
            listener=lambda m: thrust.ConsumeResult.SUCCESS,
            **common,
        ),
    ]


@pytest.mark.parametrize(
    "creds",
    [
        thrust.Credentials(access_key="nobody", secret_key=SK),
        thrust.Credentials(access_key=AK, secret_key="wrong-secret"),
    ],
    ids=["unknown-access-key", "wrong-secret"],
)
def test_b13_refused_credentials_fail_every_clients_start_typed_on_the_real_proxy(
    proxy: str, creds: thrust.Credentials
) -> None:
    async def scenario() -> None:
        for make in _clients(proxy, creds):
            started = time.monotonic()
            with pytest.raises(thrust.UnauthorizedError) as info:
                async with make():
                    pass
            assert info.value.code == Code.UNAUTHORIZED
            # Not the Settings wait running out (request timeout + 3 s): the refusal is the answer.
            assert time.monotonic() - started < REQUEST_TIMEOUT + 3.0, info.value

    run(scenario)


def test_the_right_credentials_pass_on_the_real_proxy(proxy: str) -> None:
    # The control: the same configuration lets the configured user in.
    async def scenario() -> None:
        creds = thrust.Credentials(access_key=AK, secret_key=SK)
        async with thrust.Producer(endpoints=proxy, topics=[TOPIC], credentials=creds) as producer:
            receipt = await producer.send(thrust.Message(topic=TOPIC, body=b"signed"))
            assert receipt.message_id

    run(scenario)

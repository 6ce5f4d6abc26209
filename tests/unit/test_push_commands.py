"""`thrust._push.commands.PushCommands` works from what it is given (resources, listener, a callback),
with no consumer behind it."""

from __future__ import annotations

import asyncio

from thrust._codec.status import Code
from thrust._core.endpoints import parse_endpoint
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust._push.commands import PushCommands
from thrust.message import ConsumeResult, ReceivedMessage


def _commands(changed: list[int], listener: object, is_async: bool) -> PushCommands:
    return PushCommands(
        group_pb=pb.Resource(resource_namespace="ns", name="g"),
        topic_pb={"t": pb.Resource(resource_namespace="ns", name="t")},
        filter_pb={"t": pb.FilterExpression(type=pb.TAG, expression="a||b")},
        listener=listener,  # type: ignore[arg-type]
        listener_is_async=is_async,
        settings_changed=lambda: changed.append(1),
    )


def test_settings_name_the_subscription_and_server_settings_reach_the_callback() -> None:
    changed: list[int] = []
    commands = _commands(changed, lambda m: None, False)
    sub = commands.settings_command().subscription
    assert (sub.group.resource_namespace, sub.group.name) == ("ns", "g")
    assert [(e.topic.name, e.expression.expression) for e in sub.subscriptions] == [("t", "a||b")]
    commands.on_settings(parse_endpoint("127.0.0.1:8081"), pb.Settings())
    assert changed == [1]


def test_verify_message_runs_an_async_listener_on_the_loop() -> None:
    seen: list[bytes] = []

    async def listener(m: ReceivedMessage) -> ConsumeResult:
        seen.append(m.body)
        return ConsumeResult.FAILURE

    command = spb.VerifyMessageCommand()
    command.message.body = b"x"
    command.message.topic.name = "t"
    command.message.system_properties.message_id = "01" + "AB" * 16
    commands = _commands([], listener, True)
    code, _text = asyncio.run(commands.on_verify_message(parse_endpoint("127.0.0.1:8081"), command))
    assert code == Code.FAILED_TO_CONSUME_MESSAGE and seen == [b"x"]

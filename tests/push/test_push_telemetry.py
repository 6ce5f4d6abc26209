"""Push consumer answers to server telemetry commands, against the embedded server over real gRPC."""

from __future__ import annotations

import threading

from tests.push._util import run
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust.message import ConsumeResult, ReceivedMessage
from thrust.push_consumer import PushConsumer
from thrust.testing import embedded_server


def _message(body: bytes) -> d.Message:
    m = d.Message(body=body)
    m.topic.name = "t"
    m.system_properties.message_id = "01" + "AB" * 16
    m.system_properties.tag = "verify"
    return m


def test_verify_message_consumes_once_with_a_thread_listener_and_reports_the_outcome() -> None:
    seen: list[tuple[bytes, str | None, str]] = []

    def listener(m: ReceivedMessage) -> ConsumeResult:
        seen.append((m.body, m.tag, threading.current_thread().name))
        if m.body == b"boom":
            raise RuntimeError("listener exploded")
        return ConsumeResult.SUCCESS if m.body == b"good" else ConsumeResult.FAILURE

    async def main() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with PushConsumer(
                endpoints=ep, group="g", subscriptions={"t": "*"}, listener=listener
            ) as c:
                cid = c.client_id
                assert cid is not None
                ok = await srv.verify_message(cid, _message(b"good"))
                assert ok.status.code == Code.OK
                assert ok.HasField("verify_message_result") and ok.verify_message_result.nonce
                failed = await srv.verify_message(cid, _message(b"bad"))
                assert failed.status.code == Code.FAILED_TO_CONSUME_MESSAGE
                raised = await srv.verify_message(cid, _message(b"boom"))
                assert raised.status.code == Code.FAILED_TO_CONSUME_MESSAGE
                assert "listener exploded" in raised.status.message
                # Verification consumes only: nothing is acked or nacked.
                assert srv.stats.calls["AckMessage"] == 0
                assert srv.stats.calls["ChangeInvisibleDuration"] == 0
        assert [(b, t) for b, t, _ in seen] == [(b"good", "verify"), (b"bad", "verify"), (b"boom", "verify")]
        assert all(name != threading.main_thread().name for _, _, name in seen)

    run(main())


def test_verify_message_with_an_async_listener() -> None:
    async def listener(m: ReceivedMessage) -> ConsumeResult:
        return ConsumeResult.SUCCESS if m.body == b"good" else ConsumeResult.FAILURE

    async def main() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with PushConsumer(
                endpoints=ep, group="g", subscriptions={"t": "*"}, listener=listener
            ) as c:
                assert c.client_id is not None
                assert (await srv.verify_message(c.client_id, _message(b"good"))).status.code == Code.OK
                bad = await srv.verify_message(c.client_id, _message(b"bad"))
                assert bad.status.code == Code.FAILED_TO_CONSUME_MESSAGE

    run(main())

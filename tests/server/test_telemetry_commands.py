"""Server-initiated Telemetry commands: transaction checks, stack traces, verify, reconnect."""

from __future__ import annotations

import asyncio

from tests.server._wire import Wire, message, messages_of, run
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.testing import embedded_server


def test_orphaned_transaction_is_checked_over_telemetry_and_committed() -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["tx:1:TRANSACTION"], groups=["g"], transaction_check_after=0.2) as srv,
            Wire(srv.endpoints[0], client_id="producer-1") as p,
            Wire(srv.endpoints[0], client_id="consumer-1") as c,
        ):
            telemetry = await p.producer("tx")
            await c.consumer("g", "tx")
            half = message("tx", message_type=d.MessageType.TRANSACTION)
            sent = await p.send(half)
            assert sent.status.code == Code.OK
            transaction_id = sent.entries[0].transaction_id
            assert transaction_id
            command = await asyncio.wait_for(telemetry.read(), 5)
            assert command.WhichOneof("command") == "recover_orphaned_transaction_command"
            recover = command.recover_orphaned_transaction_command
            assert recover.transaction_id == transaction_id
            assert recover.message.system_properties.message_id == half.system_properties.message_id
            assert recover.message.topic.name == "tx"
            # Not deliverable before the commit.
            assert srv.brokers[0].backlog("tx", "g") == 0
            end = await p.stub.EndTransaction(
                s.EndTransactionRequest(
                    topic=d.Resource(name="tx"),
                    message_id=half.system_properties.message_id,
                    transaction_id=transaction_id,
                    resolution=d.TransactionResolution.COMMIT,
                    source=d.TransactionSource.SOURCE_SERVER_CHECK,
                ),
                metadata=p.md,
            )
            assert end.status.code == Code.OK
            [got] = messages_of(await c.receive("g", "tx"))
            assert got.system_properties.message_id == half.system_properties.message_id
            assert got.system_properties.message_type == d.MessageType.TRANSACTION

    run(scenario())


def test_end_transaction_with_unknown_id() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["tx:1:TRANSACTION"]) as srv, Wire(srv.endpoints[0]) as w:
            request = s.EndTransactionRequest(
                topic=d.Resource(name="tx"),
                message_id="M",
                transaction_id="nope",
                resolution=d.TransactionResolution.ROLLBACK,
            )
            end = await w.stub.EndTransaction(request, metadata=w.md)
            assert end.status.code == Code.INVALID_TRANSACTION_ID
            request.transaction_id = ""
            end = await w.stub.EndTransaction(request, metadata=w.md)
            assert end.status.code == Code.INVALID_TRANSACTION_ID

    run(scenario())


def test_stack_trace_verify_and_reconnect_round_trips() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, Wire(srv.endpoints[0], client_id="c1") as w:
            call = await w.producer("t")

            async def client_side() -> None:
                while True:
                    command = await call.read()
                    which = command.WhichOneof("command")
                    if which == "print_thread_stack_trace_command":
                        answer = s.TelemetryCommand(status=d.Status(code=Code.OK))
                        answer.thread_stack_trace.nonce = command.print_thread_stack_trace_command.nonce
                        answer.thread_stack_trace.thread_stack_trace = "main: idle"
                        await call.write(answer)
                    elif which == "verify_message_command":
                        answer = s.TelemetryCommand(status=d.Status(code=Code.FAILED_TO_CONSUME_MESSAGE))
                        answer.verify_message_result.nonce = command.verify_message_command.nonce
                        await call.write(answer)
                    elif which == "reconnect_endpoints_command":
                        return

            responder = asyncio.ensure_future(client_side())
            trace = await srv.print_thread_stack_trace("c1", timeout=5)
            assert trace.thread_stack_trace.thread_stack_trace == "main: idle"
            verdict = await srv.verify_message("c1", message("t"), timeout=5)
            assert verdict.status.code == Code.FAILED_TO_CONSUME_MESSAGE
            assert srv.reconnect_endpoints("c1") == 1
            await asyncio.wait_for(responder, 5)

    run(scenario())

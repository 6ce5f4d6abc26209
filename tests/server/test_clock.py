"""The embedded server on a `ManualClock`: protocol timers fire when the test advances the clock, not
after real seconds (invisibility expiry, transaction checks; test_receive.py's
test_nack_wakes_parked_poll_via_the_timer, redelivery after a nack)."""

from __future__ import annotations

import asyncio

import pytest

from tests.server._wire import Wire, handles, message, messages_of, run, until_parked
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust.server.clock import ManualClock, SystemClock
from thrust.server.config import ServerConfig
from thrust.server.service import EmbeddedServer


def test_manual_clock_moves_only_forward_and_notifies_subscribers() -> None:
    clock = ManualClock(start=100.0)
    seen: list[float] = []
    unsubscribe = clock.subscribe(lambda: seen.append(clock.time()))
    clock.advance(2.5)
    assert clock.time() == 102.5 and seen == [102.5]
    with pytest.raises(ValueError):
        clock.advance(-1)
    unsubscribe()
    clock.advance(1)
    assert seen == [102.5]
    assert isinstance(SystemClock().time(), float)


def test_invisibility_expires_when_the_clock_passes_it() -> None:
    # On the wall clock this waits the 30 s invisible time; here the parked poll is woken by `advance`.
    clock = ManualClock()

    async def scenario() -> None:
        config = ServerConfig.build(topics=["t:1"], groups=["g"])
        async with EmbeddedServer(config, clock=clock) as srv, Wire(srv.endpoints[0]) as w:
            await w.consumer("g", "t")
            [mid] = await w.send_ok("t")
            [(_, handle)] = handles(await w.receive("g", "t", invisible=30))
            parked = asyncio.ensure_future(w.receive("g", "t", invisible=30, polling=20, rpc_timeout=25))
            await until_parked(srv, "g")
            clock.advance(29)
            assert not parked.done() and srv.brokers[0].inflight("g", "t") == 1
            clock.advance(1)
            [again] = messages_of(await parked)
            assert again.system_properties.message_id == mid
            assert again.system_properties.delivery_attempt == 2
            stale = await w.ack("g", "t", [(mid, handle)])
            assert stale.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE

    run(scenario())


def test_transaction_check_is_sent_when_the_clock_reaches_it() -> None:
    clock = ManualClock()

    async def scenario() -> None:
        config = ServerConfig.build(topics=["tx:1:TRANSACTION"], transaction_check_after=6.0)
        async with (
            EmbeddedServer(config, clock=clock) as srv,
            Wire(srv.endpoints[0], client_id="producer-1") as p,
        ):
            telemetry = await p.producer("tx")
            half = message("tx", message_type=d.MessageType.TRANSACTION)
            sent = await p.send(half)
            assert sent.status.code == Code.OK
            assert srv.brokers[0].next_event_time() == pytest.approx(clock.time() + 6.0)
            clock.advance(6.0)
            command = await telemetry.read()
            assert command.WhichOneof("command") == "recover_orphaned_transaction_command"
            assert (
                command.recover_orphaned_transaction_command.transaction_id == sent.entries[0].transaction_id
            )

    run(scenario())

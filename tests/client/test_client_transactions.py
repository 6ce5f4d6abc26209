"""EndTransaction retries against the embedded server (fault injection, real gRPC)."""

from __future__ import annotations

import pytest

import thrust
from tests.client._util import receive_n, run
from thrust._codec.status import Code
from thrust.testing import embedded_server


def test_commit_succeeds_after_a_transient_end_transaction_failure() -> None:
    async def scenario() -> None:
        # No transaction check within the test: only the client's retry can make the message visible.
        async with embedded_server(
            topics=["tx:1:TRANSACTION"], groups=["g"], transaction_check_after=600.0
        ) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"tx": "*"}, await_duration=5
                ) as c,
                thrust.Producer(endpoints=ep, topics=["tx"]) as p,
            ):
                srv.faults.fail_next("EndTransaction", Code.INTERNAL_SERVER_ERROR, 1)
                async with p.transaction() as t:
                    receipt = await t.send(thrust.Message(topic="tx", body=b"commit"))
                assert srv.stats.calls["EndTransaction"] == 2
                [m] = await receive_n(c, 1)
                assert m.message_id == receipt.message_id
                await m.ack()

    run(scenario)


def test_end_transaction_refusal_is_not_retried() -> None:
    async def scenario() -> None:
        async with embedded_server(
            topics=["tx:1:TRANSACTION"], groups=["g"], transaction_check_after=600.0
        ) as srv:
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["tx"]) as p:
                srv.faults.fail_next("EndTransaction", Code.INVALID_TRANSACTION_ID, 1)
                t = p.transaction()
                await t.send(thrust.Message(topic="tx", body=b"x"))
                with pytest.raises(thrust.BadRequestError) as info:
                    await t.commit()
                assert info.value.code == Code.INVALID_TRANSACTION_ID and not info.value.retriable
                assert srv.stats.calls["EndTransaction"] == 1

    run(scenario)


@pytest.mark.slow
def test_a_rolled_back_message_stays_undelivered_even_when_a_check_would_commit_it() -> None:
    """ROLLBACK is final: the half message is dropped at once. The server checks prepared transactions after
    1 s here and the checker would COMMIT anything it is asked about, so a rollback that was not applied
    would surface as a delivery; it is never asked about, never stored and never delivered, while a
    committed message of the same producer is."""
    asked: list[str] = []

    def checker(message: thrust.ReceivedMessage) -> thrust.TransactionResolution:
        asked.append(message.message_id)
        return thrust.TransactionResolution.COMMIT

    async def scenario() -> None:
        async with embedded_server(
            topics=["tx:1:TRANSACTION"],
            groups=["g"],
            transaction_check_after=1.0,
            transaction_check_interval=1.0,
        ) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"tx": "*"}, await_duration=5
                ) as c,
                thrust.Producer(endpoints=ep, topics=["tx"], transaction_checker=checker) as p,
            ):
                t = p.transaction()
                rolled_back = await t.send(thrust.Message(topic="tx", body=b"rollback"))
                await t.rollback()
                assert srv.stats.calls["EndTransaction"] == 1
                async with p.transaction() as t2:
                    committed = await t2.send(thrust.Message(topic="tx", body=b"commit"))
                [m] = await receive_n(c, 1)
                assert m.message_id == committed.message_id
                await m.ack()
                # A whole 5 s long poll (past the 1 s check time) brings nothing else.
                assert await c.receive(32) == []
                assert rolled_back.message_id not in asked
                assert [s.message_id for s in srv.brokers[0].messages("tx")] == [committed.message_id]

    run(scenario)

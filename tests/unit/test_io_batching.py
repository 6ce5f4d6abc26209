"""The one driver pattern of `thrust._io.batching`: a flusher task that wakes on events and at the
batcher's next wake-up, owned request tasks, a bounded drain and a close that leaves no task behind.
Event-driven: each test waits for what it counts, never for a time."""

from __future__ import annotations

import asyncio

from thrust._core.ack import AckBatch, AckBatcher, AckConfig, AckEntry, AckKey, Fate, Outcome, results_for
from thrust._core.backoff import BackoffPolicy
from thrust._core.endpoints import parse_endpoint
from thrust._core.linger import LingerConfig
from thrust._io.batching import AckDriver, BatchingDriver, LingerDriver, LingerEntry
from thrust.errors import ClientClosedError
from thrust.errors import ConnectionError as ThrustConnectionError

KEY = AckKey(parse_endpoint("127.0.0.1:8081"), "g", "t")


class Fates(list[tuple[AckEntry, Fate]]):
    """`on_finished`: keeps every fate and signals each report."""

    def __init__(self) -> None:
        super().__init__()
        self.reported = asyncio.Event()

    def __call__(self, finished: list[tuple[AckEntry, Fate]]) -> None:
        self.extend(finished)
        self.reported.set()


def _ack_driver(send: object, finished: Fates, config: AckConfig | None = None) -> AckDriver:
    return AckDriver(
        "ack",
        AckBatcher(config or AckConfig(max_batch=4, linger=0.0)),
        send,  # type: ignore[arg-type]
        finished,
    )


def test_an_entry_finished_by_its_add_is_reported_on_the_next_turn() -> None:
    """An entry past its deadline never reaches a request; the flusher's turn reports its fate."""

    async def main() -> None:
        finished = Fates()
        sent: list[AckBatch] = []

        async def send(batch: AckBatch) -> list[tuple[AckEntry, Outcome]]:
            sent.append(batch)
            return results_for(batch, 20000)

        driver = _ack_driver(send, finished)
        driver.add(KEY, AckEntry("m", "h", deadline=0.0))
        await finished.reported.wait()
        assert [fate for _e, fate in finished] == [Fate.DROPPED_EXPIRED] and not sent
        await driver.close()

    asyncio.run(main())


def test_a_failed_request_is_retried_by_the_flusher_at_its_backoff() -> None:
    """Nothing but the batcher's next wake-up brings a failed entry back: the flusher sleeps until then."""

    async def main() -> None:
        finished = Fates()
        attempts = 0

        async def send(batch: AckBatch) -> list[tuple[AckEntry, Outcome]]:
            nonlocal attempts
            attempts += 1
            if attempts == 1:
                raise ThrustConnectionError("down")
            return results_for(batch, 20000)

        config = AckConfig(max_batch=4, linger=0.0, backoff=BackoffPolicy(initial=0.01, maximum=0.01))
        driver = _ack_driver(send, finished, config)
        driver.add(KEY, AckEntry("m", "h", deadline=1e12))
        await finished.reported.wait()
        assert attempts == 2 and [fate for _e, fate in finished] == [Fate.ACKED]
        assert driver.rpc_failures == 1
        await driver.close()

    asyncio.run(main())


def test_close_leaves_no_task_of_either_driver_running() -> None:
    async def main() -> None:
        before = asyncio.all_tasks()
        hang = asyncio.Event()
        acks_sent, entries_sent = asyncio.Event(), asyncio.Event()

        async def send_acks(batch: AckBatch) -> list[tuple[AckEntry, Outcome]]:
            acks_sent.set()
            await hang.wait()
            return results_for(batch, 20000)

        async def send_entries(entries: object) -> list[object]:
            entries_sent.set()
            await hang.wait()
            return []

        finished = Fates()
        acks = _ack_driver(send_acks, finished)
        linger = LingerDriver(
            LingerConfig(
                max_messages=4, max_bytes=1 << 20, linger=0.0, max_pending=8, max_pending_bytes=1 << 21
            ),
            send_entries,
            asyncio.Semaphore(4),
        )
        drivers: list[BatchingDriver] = [acks, linger]
        assert all(not d._flusher.done() for d in drivers)
        acks.add(KEY, AckEntry("m", "h", deadline=1e12))
        future = await linger.submit(
            LingerEntry(("t", None), 10, "id", object(), 0.0, asyncio.get_running_loop().create_future())
        )
        await acks_sent.wait()
        await entries_sent.wait()
        assert not await acks.drain(0.0)
        await acks.close()
        await linger.close(0.0)
        assert asyncio.all_tasks() - before == set()
        assert len(finished) == 1  # the cancelled ack was given up, and reported
        assert isinstance(future.exception(), ClientClosedError)

    asyncio.run(main())

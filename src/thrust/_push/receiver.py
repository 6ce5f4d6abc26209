"""The per-queue receive loop: receives in flight while the cache has room, each stream's messages
decoded, cached and handed to the listener pool (bench scenario 6; docs/benchmarks.md#scenarios).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence

from thrust._codec import convert
from thrust._codec.convert import Corrupted
from thrust._consumption import RateLimitedLog
from thrust._core.fifo import FifoSequencer
from thrust._core.process_queue import ReceiveTicket
from thrust._instrument import Instrumentation
from thrust._io.rpc import Renewal
from thrust._io.session import ClientSession
from thrust._io.tasks import Spawn
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust._push.model import _Delivery, _Queue, logger
from thrust._push.settler import Submit
from thrust.errors import ThrustError, TooManyRequestsError
from thrust.message import ReceivedMessage


def _split(items: Sequence[ReceivedMessage | Corrupted]) -> tuple[list[ReceivedMessage], list[Corrupted]]:
    good: list[ReceivedMessage] = []
    bad: list[Corrupted] = []
    for m in items:
        if isinstance(m, Corrupted):
            bad.append(m)
        else:
            good.append(m)
    return good, bad


class _Stream:
    """The messages of one ReceiveMessage stream on their way to the listener (bench scenario 5a).

    Java acts on a ReceiveMessage only once its stream has completed (docs/protocol.md §6.4: the response
    observer collects the messages and completes the receive in `onCompleted`), and thrust did the same. But
    the server writes the status first and then one message per gRPC write, and each message is final once
    written; reading a 32-message stream to its end takes several ms, during which an idle queue's listener
    has nothing to do (scenario 5a: the first message reached the client after ~4 ms and the listener after
    ~10 ms). So thrust deviates: the *first* message after the OK status is decoded, cached and handed to the
    listener pool at once (`ClientSession.receive(..., on_message=)`), and the rest are held and handed over
    together when the stream ends. That is at most two hand-offs per receive, never one per message: the rule
    of scenario 6 that nothing crosses a thread per message when it can cross per batch still holds (a second
    chunk per burst, flushed by `call_soon`, would not help: gRPC resumes the reader once per message, so it
    would flush after every message). The process queue accounts the first message as a partial result
    (`ProcessQueue.on_partial`). FIFO order holds: the stream is in order, and the sequencer chains the rest
    behind the first.

    Only an idle queue's receive hands its first message over early (`ReceiveTicket.first_early`): an
    active queue's listener has the messages of the receives before to work on, and there the early
    hand-off was a second wake-up of the loop and of a listener thread per receive, about a tenth of a
    backlog drain's client CPU on the native transport (docs/benchmarks.md, "One hand-off per receive
    under a backlog"). An active queue's stream is handed over once, when it ends; `arrived` then sees
    only what a broken stream brought.
    """

    __slots__ = ("held", "queue", "receiver", "ticket")

    def __init__(self, receiver: QueueReceiver, queue: _Queue, ticket: ReceiveTicket) -> None:
        self.receiver = receiver
        self.queue = queue
        self.ticket = ticket
        # None until the first message was handed over; then the messages that arrived after it.
        self.held: list[ReceivedMessage | Corrupted] | None = None

    def arrived(self, message: ReceivedMessage | Corrupted) -> None:
        """`RpcClient.receive`'s `on_message`: called on the loop for each message after the OK status."""
        held = self.held
        if held is not None:
            held.append(message)
            return
        self.held = []
        try:
            if isinstance(message, Corrupted):
                self.receiver._take(self.queue, self.ticket, (), (message,), final=False)
            else:
                self.receiver._take(self.queue, self.ticket, (message,), (), final=False)
        except Exception:  # never break the stream's reader: the message is then left to redelivery
            logger.exception("handing over the first message of a receive from %s failed", self.queue.id)


class QueueReceiver:
    """Owns receiving: each queue's runner (`run`, the task `AssignmentScanner` starts per queue) and its
    receive tasks, the streams, decoding and the hand-off to the listener pool, and the receive counters.
    `PushConsumer` binds it to the session and the listener pool at start (`start`) and stops it at close
    (`stop`); corrupted messages go to `on_corrupted` (`Settler.corrupted`).

    `client` is the consumer the receive spans are reported for (the instrumentation reads its identity);
    the receiver never calls it."""

    def __init__(
        self,
        *,
        fifo_parallel_groups: bool,
        instrumentation: Instrumentation | None,
        client: object,
        on_corrupted: Callable[[_Queue, Sequence[convert.Corrupted]], None],
        spawn: Spawn,
    ) -> None:
        self._fifo_parallel_groups = fifo_parallel_groups
        self._instrumentation = instrumentation
        self._client = client
        self._on_corrupted = on_corrupted
        self._spawn = spawn
        self._session: ClientSession | None = None
        self._submit: Submit | None = None
        self._closing = False
        self._receive_log = RateLimitedLog(10.0, "%s")
        self.received = 0
        self.receive_failures = 0
        self.last_receive_error: ThrustError | None = None

    def start(self, session: ClientSession, submit: Submit) -> None:
        self._session = session
        self._submit = submit

    def stop(self) -> None:
        """Close begins: what a cancelled stream still held is left to the server's redelivery."""
        self._closing = True

    @property
    def session(self) -> ClientSession:
        if self._session is None:
            raise RuntimeError("the consumer is not started")
        return self._session

    async def run(self, q: _Queue) -> None:
        """Start receives while the plan allows, else await the queue's event. No polling, no recursion."""
        loop = asyncio.get_running_loop()
        spawn = self._spawn
        pq = q.pq
        while not pq.dropped and not self._closing:
            q.event.clear()
            now = time.monotonic()
            n = pq.receive_plan(now)
            if n == 0:
                wake = pq.wake_at(now)
                if wake is not None and q.timer is None:
                    q.timer = loop.call_at(loop.time() + (wake - now), self._wake_queue, q)
                await q.event.wait()
                continue
            idle = not pq.active
            # an idle queue's poll that does not follow an empty one starts a chain: of a random length
            # (`ClientSettings.push_spread_poll`), so that chains started together do not stay in step
            spread = idle and not pq.chained
            ticket = pq.on_receive_started(n, now)
            task = spawn(self._receive(q, ticket, idle, spread), None)
            q.receivers.add(task)
            task.add_done_callback(q.receivers.discard)

    def _wake_queue(self, q: _Queue) -> None:
        q.timer = None
        q.event.set()

    async def _receive(
        self, q: _Queue, ticket: ReceiveTicket, idle: bool = False, spread: bool = False
    ) -> None:
        """One ReceiveMessage on `q`. An idle queue's first message goes to the listener as soon as it
        arrives, the rest together when the stream ends (`_Stream`). An idle queue's receive renews its
        empty long polls itself on the native transport (`Renewal`): the loop then wakes for an idle queue
        once in `renewal_window` rather than once a long poll (a consumer of 1,000 topics keeps 2,000 idle
        polls; docs/benchmarks.md, "A consumer of a thousand topics"). A `spread` receive (the first of a
        chain of idle polls) asks for a long polling of random length and is not renewed: the polls after it
        keep the phase it gives them."""
        session = self.session
        settings = session.settings
        request = spb.ReceiveMessageRequest()
        assert q.request is not None
        request.CopyFrom(q.request)
        request.batch_size = ticket.requested
        poll = settings.push_spread_poll(random.random()) if spread else settings.push_long_polling
        if idle:
            # idle polls end on a grid of the wall clock, so that their answers come together
            # (`thrust._core.settings.poll_on_grid`); the transport's renewals keep to it
            poll = settings.push_poll_on_grid(poll, time.time())
        request.long_polling_timeout.CopyFrom(convert.duration(poll))
        request.attempt_id = ticket.attempt_id
        stream = _Stream(self, q, ticket)
        renewal = None
        if idle and not spread:
            renewal = q.renewal = Renewal(
                q.pq.budget.renewal_window, settings.push_long_polling, settings.push_poll_grid
            )
        try:
            result = await session.receive(
                q.endpoint,
                request,
                timeout=settings.push_receive_deadline,
                on_message=stream.arrived,
                renewal=renewal,
                first_early=ticket.first_early,
            )
        except asyncio.CancelledError:
            q.renewal = None
            self._stream_broke(stream)
            q.pq.on_receive_failed(ticket, False, time.monotonic())
            q.event.set()
            return  # cancelled because the queue was dropped or the consumer closes
        except ThrustError as exc:
            q.renewal = None
            self.receive_failures += 1
            self.last_receive_error = exc
            if exc._after_ok and not self._closing:
                # The server took a batch for this receive and we did not get all of it: what is missing
                # is renewed for us by the proxy until we re-register (`ClientSession.release_held`).
                session.release_held(q.endpoint)
            if not self._closing and not q.pq.dropped:
                # A failure no retry cures (a refused subscription, a missing permission) fails every
                # receive of the queue: say so, so that the consumer does not look idle.
                hint = (
                    "; retrying"
                    if exc.retriable
                    else "; not retriable: this queue receives nothing until the cause is fixed"
                )
                self._receive_log.failure(f"receive from {q.id} failed: {exc}{hint}", None)
            self._stream_broke(stream)
            q.pq.on_receive_failed(ticket, isinstance(exc, TooManyRequestsError), time.monotonic())
            q.event.set()
            return
        q.renewal = None
        held = stream.held
        if held:
            # (only a stream without any status collects messages in the result)
            good, bad = _split(held)
            good.extend(result.messages)
            bad.extend(result.corrupted)
        else:
            good, bad = result.messages, result.corrupted
        self._take(q, ticket, good, bad, final=True)

    def _stream_broke(self, stream: _Stream) -> None:
        """A receive failed or was cancelled after some of its messages arrived. What was handed over stays
        delivered; what arrived after it is handed over too, a dropped queue's as well (the proxy holds those
        messages invisible for this client, renewing them, until they are settled or the client leaves:
        `AssignmentScanner._drop_queue`), except when the consumer closes (the server makes them visible again
        once the client has left)."""
        held = stream.held
        if not held:
            return
        stream.held = []
        q = stream.queue
        if self._closing:
            return
        good, bad = _split(held)
        self._take(q, stream.ticket, good, bad, final=False)

    def _take(
        self,
        q: _Queue,
        ticket: ReceiveTicket,
        good: Sequence[ReceivedMessage],
        bad: Sequence[Corrupted],
        *,
        final: bool,
    ) -> None:
        """Decoded messages of `ticket`'s stream: cache them (`on_partial` for a chunk of a stream still open,
        `on_received` for the rest once it completed), hand the good ones to the listener, settle the
        corrupted ones."""
        now = time.monotonic()
        # One pass per chunk: the deliveries carry their body size, which is what the cache counts.
        deliveries = [_Delivery(m, q, now) for m in good]
        nbytes = 0
        largest = 0
        for d in deliveries:
            size = d.nbytes
            nbytes += size
            if size > largest:
                largest = size
        n = len(deliveries)
        if final:
            q.pq.on_received(ticket, n, nbytes, now, largest if n else None)
        elif not q.pq.on_partial(ticket, n, nbytes, now, largest if n else None):
            return  # the ticket is closed: cannot happen, chunks always come before its end
        if bad:
            self._on_corrupted(q, bad)
        if n:
            q.received += n
            self.received += n
            instrumentation = self._instrumentation
            if instrumentation is not None:
                # A receive span only for what arrived (a push consumer's long polls that return nothing
                # are not reported), from when the receive started; at most two per receive (`_Stream`).
                start = time.time() - (now - ticket.started_at)
                instrumentation.receive(self._client, q.id.topic, start).end(q.endpoint, good, None)
            self._dispatch(q, deliveries)
        q.event.set()

    def _dispatch(self, q: _Queue, deliveries: list[_Delivery]) -> None:
        submit = self._submit
        assert submit is not None
        if self.session.settings.fifo:
            if q.fifo is None:
                q.fifo = FifoSequencer(
                    parallel_groups=self._fifo_parallel_groups, group_of=lambda d: d.message.message_group
                )
            ready = q.fifo.add(deliveries)
        else:
            ready = deliveries
        submit(ready)

"""Blocking clients for plain threaded code: `thrust.sync.Producer`, `SimpleConsumer`, `PushConsumer`,
`LitePushConsumer` and `LiteSimpleConsumer`.

They run the asyncio clients on **one background event-loop thread owned by the library**, started when
the first sync client is created and stopped when the last one is closed (a daemon thread, so it never
blocks interpreter exit). Calls are safe from any number of threads.

- Calling a sync method from inside a running event loop raises `ThrustError` at once: it would block
  that loop (and deadlock if it were the library's own). Use `thrust.Producer` there.
- A client created before `os.fork()` cannot be used in the child (its loop thread does not exist
  there): every call raises `ThrustError`. Create new clients in the child; they start a fresh loop.
  That needs a parent whose gRPC runtime was stopped at the fork (every client closed): grpc.aio cannot
  run in a child forked while it ran, so a client constructed there raises `ThrustError` at once
  (`thrust._io.rpc.check_grpc_usable`).
- Nothing here waits without a deadline: the constructor gives up after `START_TIMEOUT` (raising
  `thrust.TimeoutError`) when the asyncio start cannot finish, and calls end within their own deadlines.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterator, Sequence
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Protocol, Self, TypeVar

from thrust import lite_push_consumer as _lite
from thrust import lite_simple_consumer as _lite_simple
from thrust import producer as _producer
from thrust import push_consumer as _push
from thrust import simple_consumer as _simple
from thrust._io.rpc import check_grpc_usable
from thrust.errors import ClientClosedError, ThrustError, TimeoutError
from thrust.message import FilterExpression, Message, ReceivedMessage, SendReceipt

__all__ = [
    "LitePushConsumer",
    "LiteSimpleConsumer",
    "Producer",
    "PushConsumer",
    "SimpleConsumer",
    "Transaction",
]

T = TypeVar("T")
S = TypeVar("S")
P = ParamSpec("P")

# The longest a constructor waits for the asyncio start (routes, sessions), each step of which is bounded
# by the request timeout already; this backstop only turns a start that can never finish into an error.
START_TIMEOUT = 60.0
# The loop thread signals that it runs within microseconds; this bounds a thread that cannot start.
_LOOP_START_TIMEOUT = 10.0


class _LoopThread:
    """The library's event loop thread, reference-counted by live sync clients."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _users = 0
    _generation = 0  # bumped on fork: clients of an older generation are unusable

    @classmethod
    def acquire(cls) -> tuple[asyncio.AbstractEventLoop, int]:
        with cls._lock:
            if cls._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=run, name="thrust-sync-loop", daemon=True)
                thread.start()
                if not ready.wait(_LOOP_START_TIMEOUT):
                    loop.call_soon_threadsafe(loop.stop)
                    raise TimeoutError(
                        f"the thrust.sync loop thread did not start in {_LOOP_START_TIMEOUT} s"
                    )
                cls._loop, cls._thread = loop, thread
            cls._users += 1
            return cls._loop, cls._generation

    @classmethod
    def release(cls, generation: int) -> None:
        with cls._lock:
            if generation != cls._generation or cls._loop is None:
                return
            cls._users -= 1
            if cls._users > 0:
                return
            loop, thread = cls._loop, cls._thread
            cls._loop = cls._thread = None
        assert thread is not None
        try:
            asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result(timeout=5.0)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5.0)
        if not thread.is_alive():
            loop.close()

    @classmethod
    def _after_fork_in_child(cls) -> None:
        # The loop thread does not exist in the child; forget it (without closing it: its selector is
        # shared with the parent) so that new clients start a fresh one.
        cls._lock = threading.Lock()
        cls._loop = None
        cls._thread = None
        cls._users = 0
        cls._generation += 1


# No fork() on Windows, so no `os.register_at_fork` there either (and nothing to guard against).
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_LoopThread._after_fork_in_child)


async def _cancel_all() -> None:
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    for t in tasks:
        t.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=2.0)


class _Runner:
    """Runs coroutines of one sync client on the library loop."""

    __slots__ = ("_closed", "_generation", "_loop", "_pid")

    def __init__(self) -> None:
        _refuse_inside_loop()
        # Before the loop thread starts: in a fork child of a process that ran gRPC nothing could work.
        check_grpc_usable()
        self._loop, self._generation = _LoopThread.acquire()
        self._pid = os.getpid()
        self._closed = False

    def check(self) -> None:
        if os.getpid() != self._pid or self._generation != _LoopThread._generation:
            raise ThrustError(
                "this thrust client was created before os.fork() and cannot be used in the child process; "
                "create a new client after the fork"
            )
        _refuse_inside_loop()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        try:
            self.check()
            if self._closed:
                raise ClientClosedError("the client is closed")
        except BaseException:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except BaseException as exc:
            # Ctrl-C (or any interruption, or the timeout) while waiting: do not leave the call running.
            # A thrust.TimeoutError the call itself raised is a builtin TimeoutError too: the future is done.
            timed_out = isinstance(exc, concurrent.futures.TimeoutError) and not future.done()
            future.cancel()
            if timed_out:
                raise TimeoutError(f"the call did not complete within {timeout} s") from None
            raise

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if os.getpid() == self._pid:
            _LoopThread.release(self._generation)


def _refuse_inside_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise ThrustError(
        "a thrust.sync client was called from inside a running event loop, which would block it; "
        "use the asyncio clients (thrust.Producer, thrust.SimpleConsumer) there"
    )


def _options_of(
    init: Callable[Concatenate[Any, P], None],
) -> Callable[[Callable[Concatenate[S, ...], None]], Callable[Concatenate[S, P], None]]:
    """Give a sync client's `__init__(self, *args, **options)`, which hands everything to its asyncio
    twin, that twin's parameters: for type checkers (ParamSpec: the same names, types and defaults, so a
    misspelt or mistyped option is an error) and for `inspect.signature` and `help()` (`__wrapped__`).
    The asyncio client's signature is the one declaration of a client's options, so an option added
    there is an option of the sync client too."""

    def declare(sync_init: Callable[Concatenate[S, ...], None]) -> Callable[Concatenate[S, P], None]:
        sync_init.__wrapped__ = init  # type: ignore[attr-defined]
        return sync_init

    return declare


class _SyncClient:
    """What the three blocking clients share: start on the library loop, close once, `with` support."""

    _runner: _Runner

    def _start(self, start: Callable[[], Coroutine[Any, Any, None]]) -> None:
        # The runner first: it refuses a call from inside a running loop before any coroutine exists.
        self._runner = _Runner()
        try:
            self._runner.run(start(), START_TIMEOUT)
        except BaseException:
            self._runner.close()
            raise

    def _close(self, stop: Callable[[], Coroutine[Any, Any, None]]) -> None:
        # Idempotent; the runner is released even when the asyncio close raises, so the last sync
        # client always stops the loop thread.
        if self._runner._closed:
            return
        try:
            self._runner.check()
            self._runner.run(stop())
        finally:
            self._runner.close()

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class Producer(_SyncClient):
    """Blocking `thrust.Producer`; it takes exactly the arguments of [`thrust.Producer`][thrust.Producer]
    (its signature is that one's, for type checkers and `help()` too).

    ```
    with thrust.sync.Producer(endpoints="127.0.0.1:8081", topics=["t"]) as p:
        receipt = p.send(thrust.Message(topic="t", body=b"hi"))
    ```
    """

    @_options_of(_producer.Producer.__init__)
    def __init__(self, *args: Any, **options: Any) -> None:
        self._async = _producer.Producer(*args, **options)
        self._start(self._async.start)

    @property
    def aio(self) -> _producer.Producer:
        """The asyncio producer underneath (runs on the library loop thread)."""
        return self._async

    def send(self, message: Message) -> SendReceipt:
        """Send one message and block until its receipt arrives.

        With the linger batch (`batch_max_messages` > 1), sends from several threads share SendMessage
        requests; each thread gets its own receipt or error."""
        return self._runner.run(self._async.send(message))

    def send_async(self, message: Message) -> concurrent.futures.Future[SendReceipt]:
        """Start sending; returns a `concurrent.futures.Future` of the receipt (pipelining; with the
        linger batch, the messages of many `send_async` calls share requests)."""
        return self._runner.submit(self._async.send(message))

    def send_batch(self, messages: Sequence[Message]) -> list[SendReceipt]:
        """Send several messages of one topic in one call (see `thrust.Producer.send_batch`)."""
        return self._runner.run(self._async.send_batch(messages))

    def stats(self) -> _producer.ProducerStats:
        """A `ProducerStats` snapshot (sends, retries, failures, in flight, latency)."""
        return self._runner.run(_call(self._async.stats))

    def recall(self, topic: str, recall_handle: str) -> str:
        """Recall a delay message before delivery; returns its message id."""
        return self._runner.run(self._async.recall(topic, recall_handle))

    def transaction(self) -> Transaction:
        """A blocking transaction (`with producer.transaction() as tx: tx.send(msg)`)."""
        return Transaction(self._runner, self._async.transaction())

    def close(self, timeout: float = 5.0) -> None:
        """Close the producer (bounded by `timeout`); idempotent. The last sync client stops the loop."""
        self._close(lambda: self._async.close(timeout))


class Transaction:
    """Blocking view of `thrust.producer.Transaction`: commit on a clean exit, roll back on an exception."""

    def __init__(self, runner: _Runner, tx: _producer.Transaction) -> None:
        self._runner = runner
        self._tx = tx

    def send(self, message: Message) -> SendReceipt:
        """Send a half message (invisible until commit)."""
        return self._runner.run(self._tx.send(message))

    def commit(self) -> None:
        """Commit every message of the transaction."""
        self._runner.run(self._tx.commit())

    def rollback(self) -> None:
        """Roll back every message of the transaction."""
        self._runner.run(self._tx.rollback())

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._runner.run(self._tx.__aexit__(exc_type, exc, tb))


class _Settled:
    """What a sync message's `ack()` returns: the work is already done, so there is nothing to await (and,
    unlike a coroutine, nothing to warn about when it is dropped). `await`ing it is a no-op."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # a generator function: `await _Settled()` returns None at once


_SETTLED = _Settled()


class _SyncSettler:
    """Settles messages received by a sync `SimpleConsumer`: `msg.ack()` from a plain thread runs the ack on
    the library loop and blocks until it is done, as `consumer.ack(msg)` does. Bound to the asyncio
    consumer, `msg.ack()` would return a coroutine a thread never awaits: no ack is sent and the message
    silently comes back after its invisible duration."""

    __slots__ = ("_consumer", "_runner")

    def __init__(
        self, runner: _Runner, consumer: _simple.SimpleConsumer | _lite_simple.LiteSimpleConsumer
    ) -> None:
        self._runner = runner
        self._consumer = consumer

    def ack(self, message: ReceivedMessage) -> Awaitable[None]:
        self._runner.run(self._consumer.ack(message))
        return _SETTLED

    def change_invisible_duration(self, message: ReceivedMessage, seconds: float) -> Awaitable[None]:
        self._runner.run(self._consumer.change_invisible_duration(message, seconds))
        return _SETTLED


class SimpleConsumer(_SyncClient):
    """Blocking `thrust.SimpleConsumer`; it takes exactly the arguments of
    [`thrust.SimpleConsumer`][thrust.SimpleConsumer] (`await_duration` below the server's 5 s
    minimum long poll becomes 5 s, with one warning at construction, as there).

    ```
    with thrust.sync.SimpleConsumer(endpoints=..., group="g", subscriptions={"t": "*"}) as c:
        for msg in c.receive(max_messages=32, invisible_duration=30):
            msg.ack()  # or c.ack(msg); both block until the ack is done
    ```
    Messages it returns settle through this blocking consumer: `msg.ack()` and
    `msg.change_invisible_duration(seconds)` block until done (they return an already-finished awaitable,
    so there is nothing to await). Iterating (`for msg in c`) blocks until messages arrive and ends when
    the consumer is closed.
    """

    @_options_of(_simple.SimpleConsumer.__init__)
    def __init__(self, *args: Any, **options: Any) -> None:
        self._async = _simple.SimpleConsumer(*args, **options)
        self._start(self._async.start)
        self._settler = _SyncSettler(self._runner, self._async)

    @property
    def aio(self) -> _simple.SimpleConsumer:
        """The asyncio consumer underneath (runs on the library loop thread)."""
        return self._async

    def receive(
        self, max_messages: int = 32, invisible_duration: float | None = None
    ) -> list[ReceivedMessage]:
        """Receive up to `max_messages`; an empty list when none arrived within `await_duration` (which the
        server clamps to 5..20 s: below 5 s, an empty receive still takes 5 s). `msg.ack()` on them blocks
        until the ack is done."""
        messages = self._runner.run(self._async.receive(max_messages, invisible_duration))
        for m in messages:
            m._bind(self._settler)
        return messages

    def ack(self, message: ReceivedMessage) -> None:
        """Acknowledge one message (raises `InvalidReceiptHandleError` when its handle expired)."""
        self._runner.run(self._async.ack(message))

    def ack_many(self, messages: Sequence[ReceivedMessage]) -> list[ThrustError | None]:
        """Acknowledge many messages in batched calls; per message None or its error."""
        return self._runner.run(self._async.ack_many(messages))

    def change_invisible_duration(self, message: ReceivedMessage, seconds: float) -> None:
        """Hide `message` for `seconds` from now; its receipt handle is replaced by the new one."""
        self._runner.run(self._async.change_invisible_duration(message, seconds))

    def stats(self) -> _simple.SimpleConsumerStats:
        """A `SimpleConsumerStats` snapshot (receives, acks, renewals and their failures)."""
        return self._runner.run(_call(self._async.stats))

    def subscribe(self, topic: str, expression: str | FilterExpression = "*") -> None:
        """Add or change a subscription."""
        self._runner.run(self._async.subscribe(topic, expression))

    def unsubscribe(self, topic: str) -> None:
        """Remove a subscription."""
        self._runner.run(_call(self._async.unsubscribe, topic))

    def __iter__(self) -> Iterator[ReceivedMessage]:
        while not self._runner._closed:
            try:
                batch = self.receive(32)
            except ClientClosedError:
                return
            yield from batch

    def close(self, timeout: float = 5.0) -> None:
        """Close the consumer (bounded by `timeout`); idempotent."""
        self._close(lambda: self._async.close(timeout))


class PushConsumer(_SyncClient):
    """Blocking `thrust.PushConsumer`; it takes exactly the arguments of
    [`thrust.PushConsumer`][thrust.PushConsumer] (its signature is that one's, for type checkers and
    `help()` too).

    ```
    def handle(message):
        process(message.body)
        return thrust.ConsumeResult.SUCCESS

    with thrust.sync.PushConsumer(endpoints=..., group="g", subscriptions={"t": "*"}, listener=handle):
        wait_for_shutdown()
    ```
    Consumption starts in the constructor and runs in the background: receives and acks on the library
    loop thread, a plain-function listener on the consumer's own pool of `consumption_thread_count`
    threads. `close()` stops receiving, lets running listeners finish within the grace, and flushes acks.
    """

    @_options_of(_push.PushConsumer.__init__)
    def __init__(self, *args: Any, **options: Any) -> None:
        self._async = _push.PushConsumer(*args, **options)
        self._start(self._async.start)

    @property
    def aio(self) -> _push.PushConsumer:
        """The asyncio consumer underneath (runs on the library loop thread)."""
        return self._async

    def stats(self) -> _push.PushConsumerStats:
        """A `PushConsumerStats` snapshot (cache, listeners, receives and acks in flight)."""
        return self._runner.run(_call(self._async.stats))

    def close(self) -> None:
        """Stop consuming, finish in-flight listeners within the grace, flush acks; idempotent."""
        self._close(self._async.close)

    def __repr__(self) -> str:
        return f"sync.{self._async!r}"


class _LiteSubscriber(Protocol):
    """What both asyncio lite consumers offer to change their lite subscriptions."""

    async def subscribe_lite(self, lite_topic: str, offset: _lite.OffsetOption | None = None) -> None: ...

    async def unsubscribe_lite(self, lite_topic: str) -> None: ...

    @property
    def lite_topics(self) -> frozenset[str]: ...


class _LiteSubscriptions(_SyncClient):
    """The lite subscription methods of both blocking lite consumers, blocking until every broker
    answered."""

    _async: _LiteSubscriber

    def subscribe_lite(self, lite_topic: str, offset: _lite.OffsetOption | None = None) -> None:
        """Subscribe `lite_topic` (the asyncio consumer's `subscribe_lite`), blocking."""
        self._runner.run(self._async.subscribe_lite(lite_topic, offset))

    def unsubscribe_lite(self, lite_topic: str) -> None:
        """Unsubscribe `lite_topic` (the asyncio consumer's `unsubscribe_lite`), blocking."""
        self._runner.run(self._async.unsubscribe_lite(lite_topic))

    @property
    def lite_topics(self) -> frozenset[str]:
        """The subscribed lite topics."""
        return self._runner.run(_call(lambda: self._async.lite_topics))


class LitePushConsumer(_LiteSubscriptions):
    """Blocking `thrust.LitePushConsumer`; it takes exactly the arguments of
    [`thrust.LitePushConsumer`][thrust.LitePushConsumer].

    ```
    with thrust.sync.LitePushConsumer(endpoints=..., group="g", bind_topic="chat", listener=handle) as c:
        c.subscribe_lite("session-42")
        wait_for_shutdown()
    ```
    Consumption starts in the constructor, as `thrust.sync.PushConsumer`'s; `subscribe_lite` and
    `unsubscribe_lite` block until every broker answered.
    """

    _async: _lite.LitePushConsumer

    @_options_of(_lite.LitePushConsumer.__init__)
    def __init__(self, *args: Any, **options: Any) -> None:
        self._async = _lite.LitePushConsumer(*args, **options)
        self._start(self._async.start)

    @property
    def aio(self) -> _lite.LitePushConsumer:
        """The asyncio consumer underneath (runs on the library loop thread)."""
        return self._async

    def stats(self) -> _push.PushConsumerStats:
        """A `PushConsumerStats` snapshot of the push consumer underneath."""
        return self._runner.run(_call(self._async.stats))

    def close(self) -> None:
        """Stop consuming, finish in-flight listeners within the grace, flush acks; idempotent."""
        self._close(self._async.close)

    def __repr__(self) -> str:
        return f"sync.{self._async!r}"


class LiteSimpleConsumer(_LiteSubscriptions):
    """Blocking `thrust.LiteSimpleConsumer`; it takes exactly the arguments of
    [`thrust.LiteSimpleConsumer`][thrust.LiteSimpleConsumer].

    ```
    with thrust.sync.LiteSimpleConsumer(endpoints=..., group="g", bind_topic="chat") as c:
        c.subscribe_lite("session-42")
        for msg in c.receive(16):
            msg.ack()  # or c.ack(msg); both block until the ack is done
    ```
    As `thrust.sync.SimpleConsumer`: messages it returns settle through it (`msg.ack()` and
    `msg.change_invisible_duration(seconds)` block until done, naming the lite topic); `subscribe_lite`
    and `unsubscribe_lite` block until every broker answered.
    """

    _async: _lite_simple.LiteSimpleConsumer

    @_options_of(_lite_simple.LiteSimpleConsumer.__init__)
    def __init__(self, *args: Any, **options: Any) -> None:
        self._async = _lite_simple.LiteSimpleConsumer(*args, **options)
        self._start(self._async.start)
        self._settler = _SyncSettler(self._runner, self._async)

    @property
    def aio(self) -> _lite_simple.LiteSimpleConsumer:
        """The asyncio consumer underneath (runs on the library loop thread)."""
        return self._async

    def receive(
        self, max_messages: int = 32, invisible_duration: float | None = None
    ) -> list[ReceivedMessage]:
        """Messages of the subscribed lite topics (each in order), or [] after the long poll; `msg.ack()`
        on them blocks until the ack is done."""
        messages = self._runner.run(self._async.receive(max_messages, invisible_duration))
        for m in messages:
            m._bind(self._settler)
        return messages

    def ack(self, message: ReceivedMessage) -> None:
        """Acknowledge one message, naming its lite topic (raises `InvalidReceiptHandleError` when its
        handle expired)."""
        self._runner.run(self._async.ack(message))

    def change_invisible_duration(self, message: ReceivedMessage, seconds: float) -> None:
        """Hide `message` for `seconds` from now; its receipt handle is replaced by the new one."""
        self._runner.run(self._async.change_invisible_duration(message, seconds))

    def close(self) -> None:
        """Stop the resync and close the consumer; idempotent."""
        self._close(self._async.close)

    def __repr__(self) -> str:
        return f"sync.{self._async!r}"


async def _call(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    return fn(*args, **kwargs)

# mypy: ignore-errors
"""`thrust bench --client official`: the official rocketmq-python-client 5.1.2, driven through its public
API only. Runs in the official client's own venv (its generated protobuf modules register the same
package as thrust's, so the two never share a process); it never imports thrust.

argv[1] is a JSON config: {"endpoints", "group", "topics": [...], "threads", "listener_sleep" (s),
"warmup" (s), "window" (s), "timer" (bool), "first_timeout" (s)}. It prints JSON lines on stdout:
`started`, `window_start`, `window_end` (consumed in the window, per topic, peak concurrent listener
calls, p99 lateness of a 10 ms timer on an asyncio loop in the main thread, `total` consumed since the
start), then exits without waiting for the client's threads (its shutdown is bounded separately).
`window_start` and `window_end` carry `cpu`: this process's user + system CPU seconds, every thread
(`os.times()`). `"mode"`: `produce` (full-rate sends), `e2e` (scenario 6), `sends` (scenario 3), `first`
(scenario 5a) instead.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import sys
import threading
import time

_lock = threading.Lock()


def emit(event, **fields):
    with _lock:
        sys.stdout.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")
        sys.stdout.flush()


class Counters:
    def __init__(self, topics):
        self.per_topic = {t: itertools.count() for t in topics}
        self.total = itertools.count()
        self.lock = threading.Lock()
        self.running = 0
        self.peak = 0

    def snapshot(self):
        # itertools.count: reading by copying its repr is racy; advance a private copy instead
        return {t: _value(c) for t, c in self.per_topic.items()}


def _value(counter):
    return int(repr(counter)[6:-1])


def _cpu():
    t = os.times()
    return t.user + t.system


def _percentile(ordered, q):
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else None


def produce(cfg):
    """Full-rate sends: `Producer.send_async` with at most `in_flight` sends pending (a semaphore the
    receipt's callback releases), for `warmup` s, then a `window` s window: receipts in the window and
    their send -> receipt latency."""
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    topic = cfg["topic"]
    producer = Producer(ClientConfiguration(cfg["endpoints"], Credentials()), (topic,))
    producer.startup()
    emit("started")
    body = b"x" * int(cfg.get("size", 64))
    slots = threading.Semaphore(int(cfg.get("in_flight", 128)))
    lock = threading.Lock()
    state = {"measuring": False, "sent": 0, "errors": 0}
    latencies = []
    stop = threading.Event()

    def done(future, t0):
        slots.release()
        if not state["measuring"]:
            return
        failed = future.cancelled() or future.exception() is not None
        with lock:
            if failed:
                state["errors"] += 1
            else:
                state["sent"] += 1
                latencies.append((time.perf_counter() - t0) * 1000.0)

    def send_loop():
        while not stop.is_set():
            slots.acquire()
            message = Message()
            message.topic = topic
            message.body = body
            t0 = time.perf_counter()
            try:
                future = producer.send_async(message)
            except Exception:
                slots.release()
                with lock:
                    state["errors"] += 1
                continue
            future.add_done_callback(lambda f, t0=t0: done(f, t0))

    threading.Thread(target=send_loop, daemon=True).start()
    time.sleep(float(cfg.get("warmup", 1.0)))
    emit("window_start", cpu=_cpu())
    t0 = time.monotonic()
    state["measuring"] = True
    time.sleep(float(cfg["window"]))
    state["measuring"] = False
    seconds = time.monotonic() - t0
    cpu = _cpu()
    stop.set()
    with lock:
        ordered = sorted(latencies)
        sent, errors = state["sent"], state["errors"]
    emit(
        "window_end",
        seconds=seconds,
        sent=sent,
        errors=errors,
        p50_ms=_percentile(ordered, 0.5),
        p99_ms=_percentile(ordered, 0.99),
        cpu=cpu,
    )
    os._exit(0)


async def _timer(stop, samples):
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        t = loop.time()
        await asyncio.sleep(0.01)
        samples.append((loop.time() - t - 0.01) * 1000.0)


def e2e(cfg):
    """Scenario 6: a producer at `rate` msg/s for `seconds` and a push consumer in the same process;
    per 1 s interval, the messages consumed and the p99 of born time -> listener (ms)."""
    from rocketmq import (
        ClientConfiguration,
        ConsumeResult,
        Credentials,
        FilterExpression,
        Message,
        MessageListener,
        Producer,
        PushConsumer,
    )

    topic = cfg["topics"][0]
    lock = threading.Lock()
    current = []

    class Listener(MessageListener):
        def consume(self, message):
            latency = time.time() * 1000.0 - (message.born_timestamp or 0)
            with lock:
                current.append(latency)
            return ConsumeResult.SUCCESS

    config = ClientConfiguration(cfg["endpoints"], Credentials())
    consumer = PushConsumer(config, cfg["group"], Listener(), {topic: FilterExpression("*")})
    consumer.startup()
    producer = Producer(config, (topic,))
    producer.startup()
    emit("started")
    rate = float(cfg["rate"])
    seconds = float(cfg["seconds"])
    body = b"x" * int(cfg.get("size", 64))
    errors = [0]

    def send_loop():
        start = time.monotonic()
        i = 0
        while time.monotonic() - start < seconds:
            due = start + i / rate
            now = time.monotonic()
            if now < due:
                time.sleep(due - now)
            message = Message()
            message.topic = topic
            message.body = body
            try:
                producer.send_async(message)
            except Exception:
                errors[0] += 1
            i += 1

    sender = threading.Thread(target=send_loop, daemon=True)
    sender.start()
    intervals = []
    t_end = time.monotonic() + seconds + float(cfg.get("drain", 5.0))
    while time.monotonic() < t_end:
        time.sleep(1.0)
        with lock:
            batch = current[:]
            current.clear()
        batch.sort()
        p99 = batch[min(len(batch) - 1, int(len(batch) * 0.99))] if batch else None
        intervals.append({"count": len(batch), "p99": p99})
    emit("e2e_result", intervals=intervals, send_errors=errors[0])
    os._exit(0)


def sends(cfg):
    """Scenario 3: `senders` threads call `Producer.send` on topic `healthy` back to back; after
        `warmup` s a 3 s baseline window, then one send to topic `slow` (a new broker whose settings reply
        is held) and another `slow_window` s, then a control window of `slow_window` s once the slow send is
    over. Emits every healthy send as [completion, latency] (monotonic
        seconds of this process) with the window starts."""
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.ERROR)
    logging.getLogger("rocketmq-python-client").addHandler(handler)
    config = ClientConfiguration(cfg["endpoints"], Credentials())
    producer = Producer(config, (cfg["healthy"],))
    producer.startup()
    emit("started")
    body = b"x" * 64
    done = []
    lock = threading.Lock()
    stop = threading.Event()

    def message(topic):
        m = Message()
        m.topic = topic
        m.body = body
        return m

    def send_loop():
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                producer.send(message(cfg["healthy"]))
            except Exception:
                continue
            t1 = time.monotonic()
            with lock:
                done.append((t1, t1 - t0))

    threads = [threading.Thread(target=send_loop, daemon=True) for _ in range(int(cfg["senders"]))]
    for thread in threads:
        thread.start()
    window = float(cfg["slow_window"])
    time.sleep(float(cfg["warmup"]))
    base0 = time.monotonic()
    time.sleep(window)
    slow0 = time.monotonic()
    slow_took = []

    def slow_send():
        t0 = time.monotonic()
        try:
            producer.send(message(cfg["slow"]))
        except Exception:
            pass
        slow_took.append(time.monotonic() - t0)

    slow = threading.Thread(target=slow_send, daemon=True)
    slow.start()
    time.sleep(window)
    slow.join(30.0)
    after0 = time.monotonic()  # control window: nothing slow pending
    time.sleep(window)
    stop.set()
    with lock:
        pairs = list(done)
    emit(
        "sends_result",
        done=pairs,
        base0=base0,
        slow0=slow0,
        after0=after0,
        slow_s=slow_took[0] if slow_took else None,
    )
    os._exit(0)


def first(cfg):
    """Scenario 5a: a push consumer; emits `first` with this process's `time.monotonic()` (system-wide
    CLOCK_MONOTONIC on Linux, so comparable with the server's) when the listener gets its first message."""
    from rocketmq import (
        ClientConfiguration,
        ConsumeResult,
        Credentials,
        FilterExpression,
        MessageListener,
        PushConsumer,
    )

    got = threading.Event()

    class Listener(MessageListener):
        def consume(self, message):
            if not got.is_set():
                got.set()
                emit("first", mono=time.monotonic())
            return ConsumeResult.SUCCESS

    topic = cfg["topics"][0]
    consumer = PushConsumer(
        ClientConfiguration(cfg["endpoints"], Credentials()),
        cfg["group"],
        Listener(),
        {topic: FilterExpression("*")},
    )
    consumer.startup()
    emit("started")
    got.wait(float(cfg["seconds"]))
    os._exit(0)


def main():
    cfg = json.loads(sys.argv[1])
    if cfg.get("mode") == "e2e":
        e2e(cfg)
        return
    if cfg.get("mode") == "sends":
        sends(cfg)
        return
    if cfg.get("mode") == "first":
        first(cfg)
        return
    if cfg.get("mode") == "produce":
        produce(cfg)
        return
    from rocketmq import (
        ClientConfiguration,
        ConsumeResult,
        Credentials,
        FilterExpression,
        MessageListener,
        PushConsumer,
    )

    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.ERROR)
    logging.getLogger("rocketmq-python-client").addHandler(handler)
    topics = cfg["topics"]
    counters = Counters(topics)
    sleep = float(cfg.get("listener_sleep", 0.0))

    class Listener(MessageListener):
        def consume(self, message):
            with counters.lock:
                counters.running += 1
                if counters.running > counters.peak:
                    counters.peak = counters.running
            try:
                if sleep > 0:
                    time.sleep(sleep)
                next(counters.per_topic[message.topic])
                return ConsumeResult.SUCCESS
            finally:
                with counters.lock:
                    counters.running -= 1

    consumer = PushConsumer(
        ClientConfiguration(cfg["endpoints"], Credentials()),
        cfg["group"],
        Listener(),
        {t: FilterExpression("*") for t in topics},
        consumption_thread_count=int(cfg.get("threads", 20)),
    )
    consumer.startup()
    emit("started")
    deadline = time.monotonic() + float(cfg.get("first_timeout", 30.0))
    while sum(counters.snapshot().values()) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(float(cfg.get("warmup", 1.0)))
    with counters.lock:
        counters.peak = counters.running
    before = counters.snapshot()
    t0 = time.monotonic()
    emit("window_start", consumed=sum(before.values()), cpu=_cpu())
    samples = []
    if cfg.get("timer"):

        async def timed():
            stop = asyncio.Event()
            task = asyncio.create_task(_timer(stop, samples))
            await asyncio.sleep(float(cfg["window"]))
            stop.set()
            await task

        asyncio.run(timed())
    else:
        time.sleep(float(cfg["window"]))
    after = counters.snapshot()
    seconds = time.monotonic() - t0
    cpu = _cpu()
    per_topic = {t: after[t] - before[t] for t in topics}
    samples.sort()
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))] if samples else None
    emit(
        "window_end",
        seconds=seconds,
        consumed=sum(per_topic.values()),
        per_topic=per_topic,
        peak=counters.peak,
        timer_p99_ms=p99,
        cpu=cpu,
        total=sum(after.values()),
    )

    def shutdown():
        try:
            consumer.shutdown()
        except Exception:
            pass

    worker = threading.Thread(target=shutdown, daemon=True)
    worker.start()
    worker.join(5.0)
    emit("exit")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

"""`thrust.bench.cpu.thread_cpu_seconds` and `thread_wakeups`: each live thread's CPU time and name, and how
many times it went to sleep and was woken, from /proc."""

from __future__ import annotations

import os
import threading
import time

from thrust.bench.cpu import proc_cpu_seconds, thread_cpu_seconds, thread_wakeups


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_each_thread_is_listed_with_its_name_and_the_cpu_it_used() -> None:
    started, stop = threading.Event(), threading.Event()

    def idle() -> None:
        started.set()
        stop.wait()

    worker = threading.Thread(target=idle)
    worker.start()
    started.wait()
    try:
        me = threading.get_native_id()
        before = thread_cpu_seconds()[me][1]
        _burn(0.2)
        threads = thread_cpu_seconds()
        assert worker.native_id in threads  # a thread that used no CPU is listed too
        name, after = threads[me]
        assert name  # the kernel's comm of the thread
        # 0.2 s of this thread's CPU, in clock ticks (1/100 s here): at least 0.15 s more
        assert after - before >= 0.15
        # the threads' CPU adds up to no more than the process's
        total = sum(seconds for _, seconds in threads.values())
        assert total <= proc_cpu_seconds(os.getpid()) + 0.05
    finally:
        stop.set()
        worker.join()


def test_a_thread_that_slept_n_times_counts_at_least_n_wake_ups() -> None:
    go, slept, stop = threading.Event(), threading.Event(), threading.Event()

    def sleeper() -> None:
        go.wait()
        for _ in range(20):
            time.sleep(0.001)  # off the CPU until its timer wakes it
        slept.set()
        stop.wait()

    worker = threading.Thread(target=sleeper)
    worker.start()
    try:
        tid = worker.native_id
        assert tid is not None
        before = thread_wakeups()[tid]
        go.set()
        assert slept.wait(30)
        assert thread_wakeups()[tid] - before >= 20
        assert threading.get_native_id() in thread_wakeups()  # every live thread is listed
    finally:
        go.set()
        stop.set()
        worker.join()

"""`thrust.bench.cpu.thread_cpu_seconds`: each live thread's CPU time and name, from /proc."""

from __future__ import annotations

import os
import threading
import time

from thrust.bench.cpu import proc_cpu_seconds, thread_cpu_seconds


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

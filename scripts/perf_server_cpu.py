"""`thrust perf ARGS` against a `thrust serve` started here (topic perf:8, group perf-group), with the
server's CPU time over the run read from /proc (Linux): one JSON line with the messages sent and
received, their rates and latencies, the SendMessage calls, the CPU seconds of the server and of the
perf process, and the server's CPU per message.

    .venv/bin/python scripts/perf_server_cpu.py produce --duration 10 --size 128 --batch-max-messages 32

With `--embedded` (first) perf starts the embedded server itself, as `thrust perf` does without
`--endpoints` (its per-interval lines then show the server's loop lag), and the server's CPU is read
from perf's child process (perf's own CPU from /proc too, sampled with it). For e2e, the line also has
the received count over the produced count of every whole interval (`recv_pct`: whether the consumer
kept up) and the transport of each side. `--keep-json PATH` (first) keeps perf's JSON.

    .venv/bin/python scripts/perf_server_cpu.py --embedded e2e --rate 1000 --duration 30 --transport native
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _received_pct(produce: dict[str, Any], consume: dict[str, Any]) -> list[float]:
    """Per whole interval, the consumer's count over the producer's (the two sides report together)."""
    pairs = zip(produce["intervals"], consume["intervals"], strict=False)
    return [round(100 * c["count"] / p["count"], 1) for p, c in pairs if p["count"] and not p.get("partial")]


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as fh:
        return [int(x) for x in fh.read().split()]


Run = tuple[subprocess.CompletedProcess[str], float, float, float | None]


def _against_own_server(argv: list[str], out: str) -> Run:
    """perf against a `thrust serve` started here: (perf, server CPU seconds, seconds, None: perf's CPU
    is its rusage as a waited-for child)."""
    serve = [sys.executable, "-m", "thrust.cli.main", "serve", "--port", "0", "--log-level", "WARNING"]
    server = subprocess.Popen(
        [*serve, "--topic", "perf:8", "--group", "perf-group"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert server.stdout is not None
    found = re.search(rb":(\d+)", server.stdout.readline())
    assert found is not None, "thrust serve did not start"
    c0, t0 = _cpu_seconds(server.pid), time.monotonic()
    perf = [sys.executable, "-m", "thrust.cli.main", "perf", *argv]
    proc = subprocess.run(
        [*perf, "--endpoints", f"127.0.0.1:{found.group(1).decode()}", "--json", out],
        capture_output=True,
        text=True,
        check=False,
    )
    c1, t1 = _cpu_seconds(server.pid), time.monotonic()
    server.terminate()
    server.wait()
    return proc, c1 - c0, t1 - t0, None


def _embedded(argv: list[str], out: str) -> Run:
    """perf starting its own embedded server (`thrust perf` without --endpoints, as a user runs it): the
    server is perf's child, whose CPU is sampled every 0.2 s from the moment perf says it listens until
    it is gone (perf stops it at the end), so up to 0.2 s of its CPU at the end may be missed."""
    perf = [sys.executable, "-m", "thrust.cli.main", "perf", *argv, "--json", out]
    proc = subprocess.Popen(perf, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None and proc.stdout is not None
    stderr: list[str] = []
    for line in proc.stderr:
        stderr.append(line)
        if "embedded server (subprocess) on" in line:
            break
    [server] = _children(proc.pid)
    c0 = c1 = _cpu_seconds(server)
    p0 = p1 = _cpu_seconds(proc.pid)
    t0 = t1 = time.monotonic()
    rest: dict[str, str] = {}

    def read(name: str, stream: Any) -> None:
        rest[name] = stream.read()

    readers = [
        threading.Thread(target=read, args=(n, st)) for n, st in (("out", proc.stdout), ("err", proc.stderr))
    ]
    for r in readers:
        r.start()
    while True:
        try:
            c1, t1 = _cpu_seconds(server), time.monotonic()
            p1 = _cpu_seconds(proc.pid)
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            break
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.wait()
    for r in readers:
        r.join()
    done = subprocess.CompletedProcess(
        perf, proc.returncode, rest.get("out", ""), "".join(stderr) + rest.get("err", "")
    )
    return done, c1 - c0, t1 - t0, p1 - p0


def main() -> int:
    argv = sys.argv[1:]
    keep = None
    embedded = False
    while argv[:1] in (["--keep-json"], ["--embedded"]):
        if argv[0] == "--embedded":
            embedded, argv = True, argv[1:]
        else:
            keep, argv = argv[1], argv[2:]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "perf.json")
        children0 = os.times()
        proc, server_cpu, wall, own_cpu = (_embedded if embedded else _against_own_server)(argv, out)
        children1 = os.times()  # the perf process (waited for)
        if proc.returncode != 0:
            print(proc.stderr[-2000:], file=sys.stderr)
        with open(out) as fh:
            data = json.load(fh)
        if keep is not None:
            shutil.copyfile(out, keep)
    produce, consume = data.get("produce"), data.get("consume")
    line: dict[str, object] = {"rc": proc.returncode, "load": round(os.getloadavg()[0], 2)}
    line["wall_s"] = round(wall, 1)
    line["server_cpu_s"] = round(server_cpu, 2)
    line["server_cpu_pct"] = round(100 * server_cpu / max(wall, 1e-9), 1)  # of one core, over the run
    perf_cpu = own_cpu
    if perf_cpu is None:
        perf_cpu = (children1.children_user + children1.children_system) - (
            children0.children_user + children0.children_system
        )
    line["perf_cpu_s"] = round(perf_cpu, 2)
    messages = 0
    if produce:
        messages += data["sent_ok"]
        line |= {"sent": data["sent_ok"], "send_msg_s": round(produce["rate"])}
        line |= {"send_calls": produce["extra"].get("send_calls")}
        line |= {"send_p50_ms": round(produce["latency"]["p50"], 2)}
        line |= {"send_p99_ms": round(produce["latency"]["p99"], 2)}
    if consume:
        messages += data["received_unique"]
        line |= {"received": data["received_unique"], "recv_msg_s": round(consume["rate"])}
        line |= {"e2e_p50_ms": round(consume["latency"]["p50"], 1)}
        line |= {"e2e_p99_ms": round(consume["latency"]["p99"], 1)}
    if produce and consume:
        line["recv_pct"] = _received_pct(produce, consume)
    line["transport"] = data.get("transport")
    line["server_us_per_msg"] = round(server_cpu / max(1, messages) * 1e6, 1)
    print(json.dumps(line), flush=True)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())

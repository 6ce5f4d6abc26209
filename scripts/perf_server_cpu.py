"""`thrust perf ARGS` against a `thrust serve` started here (topic perf:8, group perf-group), with the
server's CPU time over the run read from /proc (Linux): one JSON line with the messages sent and
received, their rates and latencies, the SendMessage calls, the CPU seconds of the server and of the
perf process, and the server's CPU per message.

    .venv/bin/python scripts/perf_server_cpu.py produce --duration 10 --size 128 --batch-max-messages 32

For e2e, the line also has the received count over the produced count of every whole interval
(`recv_pct`: whether the consumer kept up) and the transport of each side. `--keep-json PATH` (first)
keeps perf's JSON.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
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


def main() -> int:
    argv = sys.argv[1:]
    keep = None
    if argv[:1] == ["--keep-json"]:
        keep, argv = argv[1], argv[2:]
    serve = [sys.executable, "-m", "thrust.cli.main", "serve", "--port", "0", "--log-level", "WARNING"]
    server = subprocess.Popen(
        [*serve, "--topic", "perf:8", "--group", "perf-group"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert server.stdout is not None
    found = re.search(rb":(\d+)", server.stdout.readline())
    assert found is not None, "thrust serve did not start"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "perf.json")
        c0, t0 = _cpu_seconds(server.pid), time.monotonic()
        children0 = os.times()
        perf = [sys.executable, "-m", "thrust.cli.main", "perf", *argv]
        proc = subprocess.run(
            [*perf, "--endpoints", f"127.0.0.1:{found.group(1).decode()}", "--json", out],
            capture_output=True,
            text=True,
            check=False,
        )
        c1, t1 = _cpu_seconds(server.pid), time.monotonic()
        children1 = os.times()  # the perf process (waited for); the server is not waited for yet
        server.terminate()
        server.wait()
        if proc.returncode != 0:
            print(proc.stderr[-2000:], file=sys.stderr)
        with open(out) as fh:
            data = json.load(fh)
        if keep is not None:
            shutil.copyfile(out, keep)
    produce, consume = data.get("produce"), data.get("consume")
    line: dict[str, object] = {"rc": proc.returncode, "load": round(os.getloadavg()[0], 2)}
    line["wall_s"] = round(t1 - t0, 1)
    line["server_cpu_s"] = round(c1 - c0, 2)
    line["server_cpu_pct"] = round(100 * (c1 - c0) / max(t1 - t0, 1e-9), 1)  # of one core, over the run
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
    line["server_us_per_msg"] = round((c1 - c0) / max(1, messages) * 1e6, 1)
    print(json.dumps(line), flush=True)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())

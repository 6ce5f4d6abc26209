"""Full-rate `thrust perf produce` without and with the producer's linger batch, against ONE `thrust serve`.

Starts one embedded server (`thrust serve --topic perf:8`) and, against it, alternates unbatched runs
(one message per SendMessage, `--max-in-flight` messages in flight) and linger-batch runs
(`--linger-batch N`: plain sends batched by the producer), `--rounds` of each. Prints one JSON line per
run and a markdown table of medians (min-max): msg/s, p50/p99 send latency, the perf process's CPU time
while producing per message sent (the client's cost), the server's CPU per message, SendMessage calls
per message, and the load average.

    .venv/bin/python scripts/perf_linger.py --rounds 3 --duration 10
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _run(endpoint: str, server_pid: int, extra: list[str], args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "perf.json")
        cmd = [
            sys.executable, "-m", "thrust.cli.main", "perf", "produce", "--endpoints", endpoint,
            "--topic", "perf", "--size", str(args.size), "--duration", str(args.duration),
            "--interval", str(args.duration), "--warmup", str(args.warmup), "--live", "off",
            "--json", out, *extra,
        ]  # fmt: skip
        load = os.getloadavg()[0]
        c0 = _cpu_seconds(server_pid)
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        c1 = _cpu_seconds(server_pid)
        if proc.returncode != 0:
            print(proc.stderr[-2000:], file=sys.stderr)
            raise SystemExit(proc.returncode)
        with open(out) as fh:
            data = json.load(fh)
    produce = data["produce"]
    sent = data["sent_ok"]
    return {
        "args": " ".join(extra) or "(unbatched)",
        "load": round(load, 2),
        "sent": sent,
        "msg_s": round(produce["rate"]),
        "p50_ms": round(produce["latency"]["p50"], 2),
        "p99_ms": round(produce["latency"]["p99"], 2),
        "client_us_per_msg": round(produce["extra"]["cpu_s"] / max(1, sent) * 1e6, 1),
        "server_us_per_msg": round((c1 - c0) / max(1, sent) * 1e6, 1),
        "calls_per_msg": round(produce["extra"]["send_calls"] / max(1, sent), 4),
    }


def _median(rows: list[dict[str, object]], key: str) -> str:
    values = [float(r[key]) for r in rows]  # type: ignore[arg-type]
    med = statistics.median(values)
    if med >= 100:
        fmt = "{:,.0f}".format
    elif med >= 10:
        fmt = "{:.1f}".format
    elif med >= 0.1:
        fmt = "{:.2f}".format
    else:
        fmt = "{:.4f}".format
    return f"{fmt(med)} ({fmt(min(values))}-{fmt(max(values))})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--max-in-flight", type=int, default=128, help="unbatched: messages in flight")
    p.add_argument("--linger-batch", type=int, default=64)
    p.add_argument("--linger-batch-ms", type=float, default=2.0)
    p.add_argument("--linger-max-in-flight", type=int, default=8, help="linger: requests in flight")
    args = p.parse_args()
    serve = [sys.executable, "-m", "thrust.cli.main", "serve", "--port", "0", "--log-level", "WARNING"]
    server = subprocess.Popen(
        [*serve, "--topic", "perf:8"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert server.stdout is not None
    found = re.search(rb":(\d+)", server.stdout.readline())
    assert found is not None, "thrust serve did not start"
    endpoint = f"127.0.0.1:{found.group(1).decode()}"
    variants = {
        "unbatched": ["--max-in-flight", str(args.max_in_flight)],
        "linger": [
            "--linger-batch", str(args.linger_batch), "--linger-batch-ms", str(args.linger_batch_ms),
            "--max-in-flight", str(args.linger_max_in_flight),
        ],
    }  # fmt: skip
    rows: dict[str, list[dict[str, object]]] = {k: [] for k in variants}
    try:
        for _ in range(args.rounds):
            for name, extra in variants.items():
                row = _run(endpoint, server.pid, extra, args)
                rows[name].append(row)
                print(json.dumps({"variant": name, **row}), flush=True)
    finally:
        server.terminate()
        server.wait()
    keys = ["msg_s", "p50_ms", "p99_ms", "client_us_per_msg", "server_us_per_msg", "calls_per_msg", "load"]
    print()
    print("| variant | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name, rs in rows.items():
        print(f"| {name} ({rs[0]['args']}) | " + " | ".join(_median(rs, k) for k in keys) + " |")
    ratio = statistics.median(float(r["msg_s"]) for r in rows["linger"]) / max(  # type: ignore[arg-type]
        1.0,
        statistics.median(float(r["msg_s"]) for r in rows["unbatched"]),  # type: ignore[arg-type]
    )
    print(f"\nlinger / unbatched msg/s (medians): {ratio:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The sync facade: one library loop thread, in-loop and fork guards."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading

import pytest

import thrust
import thrust.sync
from tests.support import transport
from thrust.testing import ServerProcess


@pytest.fixture(scope="module")
def server() -> object:
    with ServerProcess(["--auto-create"]) as proc:
        yield proc


def _loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "thrust-sync-loop"]


def test_sync_round_trip_and_loop_thread_lifecycle(server: ServerProcess) -> None:
    ep = server.endpoints[0]
    with thrust.sync.Producer(endpoints=ep, topics=["st"]) as p:
        assert len(_loop_threads()) == 1
        receipt = p.send(thrust.Message(topic="st", body=b"x"))
        futures = [p.send_async(thrust.Message(topic="st", body=b"y")) for _ in range(20)]
        ids = {receipt.message_id} | {f.result(timeout=10).message_id for f in futures}
        with p.transaction() as tx:
            ids.add(tx.send(thrust.Message(topic="st", body=b"tx")).message_id)
        with thrust.sync.SimpleConsumer(
            endpoints=ep, group="sg", subscriptions={"st": "*"}, await_duration=5
        ) as c:
            assert len(_loop_threads()) == 1  # shared by every sync client
            seen: set[str] = set()
            for m in c:
                seen.add(m.message_id)
                c.ack(m)
                if seen == ids:
                    break
    assert _loop_threads() == []  # stopped with the last client


def test_sync_call_inside_event_loop_raises(server: ServerProcess) -> None:
    async def inside() -> None:
        with pytest.raises(thrust.ThrustError, match="running event loop"):
            thrust.sync.Producer(endpoints=server.endpoints[0])

    asyncio.run(inside())
    assert _loop_threads() == []


_FORK_SCRIPT = """
import os, sys, time
import thrust, thrust.sync
with thrust.sync.Producer(endpoints=sys.argv[1], topics=["st"]) as p:
    p.send(thrust.Message(topic="st", body=b"before the fork"))
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            p.send(thrust.Message(topic="st", body=b"x"))
            result = "no error"
        except thrust.ThrustError as exc:
            result = f"error: {exc}"
        os.write(writer, result.encode())
        os._exit(0)  # leave without finalizers: the parent's gRPC state must not be torn down here
    os.close(writer)
    deadline = time.monotonic() + 20
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            print("child hung")
            sys.exit(3)
        time.sleep(0.02)
    print(f"child exit {done[1]}")
    print(os.read(reader, 4096).decode())
    p.send(thrust.Message(topic="st", body=b"parent still works"))
    print("parent ok")
"""


@pytest.mark.slow
def test_client_used_in_forked_child_raises(server: ServerProcess) -> None:
    # In a fresh interpreter: fork() from the pytest process, where other tests left gRPC threads of
    # their own, would test the suite's state rather than thrust's. Repeated, because the crash that
    # GRPC_ENABLE_FORK_SUPPORT=0 (set by `import thrust`) prevents showed up in about one fork in eight.
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    for _ in range(5):
        out = subprocess.run(
            [sys.executable, "-c", _FORK_SCRIPT, server.endpoints[0]],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        lines = out.stdout.splitlines()
        assert lines[0] == "child exit 0", out.stdout + out.stderr
        assert lines[1].startswith("error:") and "fork" in lines[1]
        assert lines[-1] == "parent ok"


# A new client created in a forked child, after the parent used gRPC in three ways. The child reports its
# outcome through a pipe and is bounded by a generous deadline: a hang is an outcome too ("child hung").
_NEW_CLIENT_IN_CHILD_SCRIPT = """
import asyncio, os, sys, time
import thrust, thrust.sync
endpoint, parent_mode = sys.argv[1], sys.argv[2]
kept = None
if parent_mode == "sync-open":
    kept = thrust.sync.Producer(endpoints=endpoint, topics=["st"])
    kept.send(thrust.Message(topic="st", body=b"parent"))
elif parent_mode == "sync-closed":
    with thrust.sync.Producer(endpoints=endpoint, topics=["st"]) as p:
        p.send(thrust.Message(topic="st", body=b"parent"))
else:  # asyncio-closed
    async def use():
        async with thrust.Producer(endpoints=endpoint, topics=["st"]) as p:
            await p.send(thrust.Message(topic="st", body=b"parent"))
    asyncio.run(use())
reader, writer = os.pipe()
pid = os.fork()
if pid == 0:  # the child: a brand-new client, as a pre-fork server's post-fork hook creates one
    try:
        with thrust.sync.Producer(endpoints=endpoint, topics=["st"]) as p:
            p.send(thrust.Message(topic="st", body=b"child"))
        result = "sent"
    except thrust.ThrustError as exc:
        result = f"{type(exc).__name__}: {exc}"
    os.write(writer, result.encode())
    os._exit(0)
os.close(writer)
deadline = time.monotonic() + 40
while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
    if time.monotonic() > deadline:
        os.kill(pid, 9)
        print("child hung")
        sys.exit(3)
    time.sleep(0.02)
print(f"child exit {done[1]}")
print(os.read(reader, 4096).decode())
if kept is not None:
    kept.send(thrust.Message(topic="st", body=b"parent still works"))
    kept.close()
print("parent ok")
"""


def _new_client_in_child(server: ServerProcess, parent_mode: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    out = subprocess.run(
        [sys.executable, "-c", _NEW_CLIENT_IN_CHILD_SCRIPT, server.endpoints[0], parent_mode],
        capture_output=True,
        text=True,
        timeout=80,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "child exit 0", out.stdout + out.stderr
    assert lines[-1] == "parent ok", out.stdout + out.stderr
    return lines


@pytest.mark.slow
@pytest.mark.parametrize("parent_mode", ["asyncio-closed", "sync-closed"])
def test_new_client_in_forked_child_works_after_parent_closed_its_clients(
    server: ServerProcess, parent_mode: str
) -> None:
    # gRPC stopped with the parent's last client, so the child starts it afresh.
    for _ in range(3):
        assert _new_client_in_child(server, parent_mode)[1] == "sent"


@pytest.mark.slow
def test_new_client_in_child_forked_with_a_client_open_works_or_raises_instead_of_hanging(
    server: ServerProcess,
) -> None:
    # grpcio: grpc.aio's poller thread and gRPC core's threads ran in the parent at fork(): the child cannot
    # use gRPC (thrust._io.rpc says why), so the constructor raises a typed error before touching it.
    # native: the child starts a tokio runtime of its own (thrust_native's `runtime()`), so it works.
    for _ in range(3):
        result = _new_client_in_child(server, "sync-open")[1]
        if transport() == "native":
            assert result == "sent", result
        else:
            assert result.startswith("ThrustError: gRPC cannot be used in this process"), result

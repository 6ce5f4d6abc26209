"""OpenTelemetry is optional: `import thrust` (and every client module) imports none of it, messages of an
uninstrumented producer carry no trace context, and `thrust.otel` without the extra names the extra."""

from __future__ import annotations

import subprocess
import sys

import thrust
from tests.client._util import run
from thrust.testing import embedded_server


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_import_thrust_imports_no_opentelemetry_module() -> None:
    done = _python(
        "import sys, thrust, thrust.sync, thrust.producer, thrust.simple_consumer, thrust.push_consumer\n"
        "thrust.PushConsumer, thrust.SimpleConsumer\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'opentelemetry'))\n"
        "import thrust.otel\n"
        "print(any(m.split('.')[0] == 'opentelemetry' for m in sys.modules))\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[]", "True"]  # (the second line: the check sees thrust.otel's)


def test_thrust_otel_without_the_extra_says_which_extra() -> None:
    done = _python("import sys; sys.modules['opentelemetry'] = None\nimport thrust.otel\n")
    assert done.returncode != 0
    assert "pip install 'thrust[otel]'" in done.stderr


def test_an_uninstrumented_producer_sends_no_trace_context_and_a_set_one_is_read_back() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=5
                ) as c,
            ):
                await p.send(thrust.Message(topic="t", body=b"x"))
                got: list[thrust.ReceivedMessage] = []
                while not got:
                    got = await c.receive(32)
                assert got[0].trace_context is None
                await got[0].ack()

    run(scenario)

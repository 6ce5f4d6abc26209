"""thrust and the official rocketmq-python-client imported into one process, against the embedded server.

Before thrust's generated modules had a descriptor pool of their own, the second import failed with
`TypeError: Couldn't build proto file into descriptor pool: duplicate symbol 'apache.rocketmq.v2...'`.
The driver runs in the official client's cached venv (tests/official_client.py) with thrust's sources on
PYTHONPATH; thrust's runtime dependencies (grpcio, protobuf) are already there for the official client.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.interop.harness import run, run_driver
from thrust.testing import embedded_server

pytestmark = pytest.mark.interop

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.timeout(90, func_only=True)
@pytest.mark.parametrize("order", ["thrust-first", "official-first"])
def test_both_clients_in_one_process(order: str, official_python: Path, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["side"], groups=["side-thrust", "side-official"]) as srv:
            driver = await run_driver(
                "side_by_side",
                {
                    "endpoints": srv.endpoints[0],
                    "order": order,
                    "topic": "side",
                    "thrust_group": "side-thrust",
                    "official_group": "side-official",
                    "deadline_s": 40,
                },
                home=tmp_path / "home",
                within=70,
                env={"PYTHONPATH": str(SRC)},
            )
            driver.check()
            [imported] = driver.of("imported")
            expected = ["thrust", "rocketmq"] if order == "thrust-first" else ["rocketmq", "thrust"]
            assert imported["order"] == expected, driver.describe()
            # The thrust under test, not some other installed copy.
            assert imported["thrust"].startswith(str(SRC)), driver.describe()
            [official_sent] = driver.of("official_sent")
            [thrust_received] = driver.of("thrust_received")
            assert thrust_received == {**thrust_received, "id": official_sent["id"], "body": "from-official"}
            [thrust_sent] = driver.of("thrust_sent")
            [official_received] = driver.of("official_received")
            assert official_received == {**official_received, "id": thrust_sent["id"], "body": "from-thrust"}

    run(scenario(), timeout=85)

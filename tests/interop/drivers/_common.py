"""Shared by the drivers: config from argv, JSON-line events on stdout, bounded exit.

Drivers run in the official client's venv (tests/official_client.py), never in ours. Everything they
observe is printed as one JSON object per line; the tests decide pass/fail from those lines.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from typing import Any

_lock = threading.Lock()


def config() -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads(sys.argv[1])
    return cfg


def client_configuration(cfg: dict[str, Any]) -> Any:
    """ClientConfiguration from `endpoints` and optional `ak`/`sk` (MQv2-HMAC-SHA1 signing).

    With `"tls": true` the driver passes `tls_enable=True`; the client then uses
    `grpc.ssl_channel_credentials()`, whose roots come from GRPC_DEFAULT_SSL_ROOTS_FILE_PATH.
    """
    from rocketmq import ClientConfiguration, Credentials

    return ClientConfiguration(cfg["endpoints"], Credentials(cfg.get("ak", ""), cfg.get("sk", "")))


def emit(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, "t": time.time(), **fields}, sort_keys=True)
    with _lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def client_log_to_stderr() -> None:
    # The client logs to ~/logs/rocketmq_python (HOME is a per-test temp dir); warnings and errors
    # also go to stderr so a failing test shows them.
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(threadName)s %(message)s"))
    logging.getLogger("rocketmq-python-client").addHandler(handler)


def message_fields(message: Any) -> dict[str, Any]:
    """What the tests look at in a received `rocketmq.Message`."""
    return {
        "id": message.message_id,
        "topic": message.topic,
        "tag": message.tag,
        "keys": sorted(message.keys),
        "properties": dict(message.properties),
        "body": message.body.decode("utf-8", "replace"),
        "group": message.message_group,
        "attempt": message.delivery_attempt,
        "type": message.message_type,
        "delivery_timestamp": message.delivery_timestamp,
        "corrupted": message.corrupted,
    }


def finish(clients: list[Any], code: int = 0, shutdown_timeout: float = 8.0) -> None:
    """Shut the clients down (bounded), then exit without waiting for the client's worker threads."""

    def shutdown() -> None:
        for client in clients:
            try:
                client.shutdown()
            except Exception as exc:
                emit("shutdown_error", error=repr(exc))

    worker = threading.Thread(target=shutdown, daemon=True)
    worker.start()
    worker.join(shutdown_timeout)
    emit("exit", code=code, shutdown_clean=not worker.is_alive())
    sys.stdout.flush()
    sys.stderr.flush()
    # Executor threads of the official client may still be parked; os._exit skips joining them.
    os._exit(code)

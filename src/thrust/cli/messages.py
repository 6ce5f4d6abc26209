"""`thrust send` and `thrust consume`: one message (or a few) by hand, like `kcat`, `nats pub/sub` or
upstream's `mqadmin sendMessage` / `consumeMessage`.

Both connect with `ClientConfig.from_env` (`ROCKETMQ_ENDPOINTS`, `ROCKETMQ_ACCESS_KEY`, ...), and the
flags win over the environment. A bad flag is argparse's one-line usage error (exit 2); a server that
refuses or cannot be reached is one line on stderr naming the error type (exit 1), never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TextIO

from thrust.config import ClientConfig, TlsConfig, credentials_from
from thrust.errors import ThrustError
from thrust.message import FilterExpression, Message, ReceivedMessage

if TYPE_CHECKING:
    from thrust.simple_consumer import SimpleConsumer

__all__ = ["message_to_json", "register"]


def register(subparsers: Any) -> None:
    """Add `send` and `consume` to the `thrust` parser."""
    send = subparsers.add_parser(
        "send",
        help="send messages: the body from an argument, stdin, or one message per line",
        description=(
            "Send one message (BODY, or stdin when BODY is absent or '-'), or one message per stdin line "
            "with --lines, and print each message id. The topic must exist with the matching message "
            "type (NORMAL; FIFO for --group; DELAY for --delay; LITE for --lite-topic)."
        ),
    )
    _connection(send)
    send.add_argument("-t", "--topic", required=True)
    send.add_argument("body", nargs="?", default=None, help="the body (UTF-8); '-' or absent: stdin")
    send.add_argument("--tag", default=None)
    send.add_argument("--key", action="append", default=[], help="a message key (repeatable)")
    send.add_argument(
        "--property", action="append", default=[], type=_property, metavar="K=V", help="repeatable"
    )
    send.add_argument("--group", default=None, help="message group: a FIFO message")
    send.add_argument("--delay", type=_non_negative, default=None, metavar="SECONDS", help="a delay message")
    send.add_argument(
        "--lite-topic", default=None, metavar="NAME", help="a lite topic of the (LITE) topic: a LITE message"
    )
    send.add_argument("--lines", action="store_true", help="one message per stdin line (empty lines skipped)")
    send.add_argument(
        "--keep-newline",
        action="store_true",
        help="a body read from stdin keeps its trailing newline (by default one \\n or \\r\\n is removed, as"
        " kcat does: `echo hi | thrust send` sends 'hi'); with --lines each line keeps its own",
    )
    send.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: the ids; json: receipts (message_id, topic, offset, recall_handle; no queue id: the"
        " proxy picks the queue and its answer does not name it, ReceivedMessage.queue_id has it)",
    )
    send.set_defaults(func=run_send)

    consume = subparsers.add_parser(
        "consume",
        help="receive messages and print them with all their fields",
        description=(
            "Receive messages of TOPIC for GROUP (a simple consumer) and print each one, as a JSON line "
            "(every field; the body as UTF-8 text, or base64 with body_encoding 'base64') or as text. "
            "Each message is acknowledged after it is printed, unless --no-ack (it then comes back after "
            "its invisible duration). Stops after --count messages, after --idle seconds with none, or "
            "on Ctrl-C."
        ),
    )
    _connection(consume)
    consume.add_argument("-t", "--topic", required=True)
    consume.add_argument("-g", "--group", required=True, help="the consumer group (it must exist)")
    consume.add_argument(
        "--filter", default="*", help="tag expression ('a||b', default '*') or SQL92 with --sql"
    )
    consume.add_argument("--sql", action="store_true", help="--filter is a SQL92 expression")
    consume.add_argument("-c", "--count", type=_positive_int, default=None, help="stop after N messages")
    consume.add_argument("--idle", type=_positive, default=None, metavar="SECONDS", help="stop when idle")
    consume.add_argument("--format", choices=("json", "text"), default="json")
    consume.add_argument("--no-ack", action="store_true", help="print only; do not acknowledge")
    consume.add_argument("--invisible", type=_positive, default=30.0, metavar="SECONDS", help="default 30")
    consume.set_defaults(func=run_consume)


def _connection(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("connection (flags win over ROCKETMQ_* environment variables)")
    g.add_argument("--endpoints", default=None, help="proxy host:port (default $ROCKETMQ_ENDPOINTS)")
    g.add_argument("--namespace", default=None)
    g.add_argument(
        "--access-key", default=None, help="with the secret in $ROCKETMQ_SECRET_KEY or --secret-key"
    )
    g.add_argument(
        "--secret-key", default=None, help="prefer $ROCKETMQ_SECRET_KEY: argv is visible to others"
    )
    g.add_argument("--tls", action="store_true")
    g.add_argument("--tls-ca", default=None, help="PEM CA bundle for --tls")
    g.add_argument("--tls-server-name", default=None)
    g.add_argument("--request-timeout", type=_positive, default=None, metavar="SECONDS")


def _property(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


# argparse words a type function's ValueError as "invalid <function name> value": each says what is
# wrong in words instead.
def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None


def _positive(text: str) -> float:
    value = _seconds(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not > 0")
    return value


def _non_negative(text: str) -> float:
    value = _seconds(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not >= 0")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not >= 1")
    return value


def _config(args: argparse.Namespace) -> ClientConfig:
    overrides: dict[str, Any] = {}
    if args.endpoints:
        overrides["endpoints"] = args.endpoints
    elif not os.environ.get("ROCKETMQ_ENDPOINTS"):
        raise ValueError("no endpoints: give --endpoints HOST:PORT or set ROCKETMQ_ENDPOINTS")
    if args.namespace is not None:
        overrides["namespace"] = args.namespace
    if args.access_key or args.secret_key:
        # A flag wins over its variable; the other half may come from the environment (the --access-key
        # help recommends the secret in $ROCKETMQ_SECRET_KEY).
        env = os.environ
        overrides["credentials"] = credentials_from(
            args.access_key or env.get("ROCKETMQ_ACCESS_KEY"),
            args.secret_key or env.get("ROCKETMQ_SECRET_KEY"),
            env.get("ROCKETMQ_SESSION_TOKEN"),
            access_key_source="--access-key or $ROCKETMQ_ACCESS_KEY",
            secret_key_source="--secret-key or $ROCKETMQ_SECRET_KEY",
        )
    if args.tls or args.tls_ca or args.tls_server_name:
        overrides["tls"] = TlsConfig(ca_file=args.tls_ca, server_name=args.tls_server_name)
    if args.request_timeout is not None:
        overrides["request_timeout"] = args.request_timeout
    return ClientConfig.from_env(**overrides)


def _fail(command: str, exc: BaseException, status: int = 1) -> int:
    kind = type(exc).__name__ if isinstance(exc, ThrustError) else "error"
    print(f"thrust {command}: {kind}: {exc}", file=sys.stderr)
    return status


# -- send --------------------------------------------------------------------------------------------


def _strip_newline(data: bytes) -> bytes:
    """`data` without one trailing line end (`\\r\\n` or `\\n`), the one `echo` and most tools write."""
    if data.endswith(b"\r\n"):
        return data[:-2]
    return data[:-1] if data.endswith(b"\n") else data


def _bodies(args: argparse.Namespace, stdin: TextIO) -> Iterator[bytes]:
    keep = getattr(args, "keep_newline", False)
    if args.lines:
        if args.body not in (None, "-"):
            raise ValueError("--lines reads stdin: give no BODY")
        for line in stdin:
            if line.rstrip("\r\n"):
                yield line.encode() if keep else line.rstrip("\r\n").encode()
        return
    if args.body is not None and args.body != "-":
        yield args.body.encode()
        return
    data = stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read().encode()
    yield data if keep else _strip_newline(data)


def run_send(args: argparse.Namespace) -> int:
    try:
        config = _config(args)
    except ValueError as exc:  # the flags or the environment: a usage error
        return _fail("send", exc, 2)
    return asyncio.run(_send(args, config, sys.stdin, sys.stdout))


async def _send(args: argparse.Namespace, config: ClientConfig, stdin: TextIO, out: TextIO) -> int:
    from thrust.producer import Producer

    try:
        async with Producer(config, topics=[args.topic]) as producer:
            for body in _bodies(args, stdin):
                message = Message(
                    topic=args.topic,
                    body=body,
                    tag=args.tag,
                    keys=tuple(args.key),
                    properties=dict(args.property),
                    message_group=args.group,
                    delay=args.delay,
                    lite_topic=args.lite_topic,
                )
                receipt = await producer.send(message)
                if args.format == "json":
                    record = {
                        "message_id": receipt.message_id,
                        "topic": args.topic,
                        "offset": receipt.offset,
                        "recall_handle": receipt.recall_handle or None,
                    }
                    print(json.dumps(record), file=out, flush=True)
                else:
                    print(receipt.message_id, file=out, flush=True)
    except (ThrustError, ValueError) as exc:
        return _fail("send", exc)
    return 0


# -- consume -----------------------------------------------------------------------------------------


def message_to_json(m: ReceivedMessage) -> dict[str, Any]:
    """Every field of a received message, JSON-ready: the body as UTF-8 text when it is valid UTF-8,
    else base64 (`body_encoding` says which)."""
    try:
        body, encoding = m.body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(m.body).decode("ascii"), "base64"
    return {
        "topic": m.topic,
        "message_id": m.message_id,
        "tag": m.tag,
        "keys": list(m.keys),
        "properties": dict(m.properties),
        "message_group": m.message_group,
        "lite_topic": m.lite_topic,
        "message_type": m.message_type.name,
        "priority": m.priority,
        "delivery_attempt": m.delivery_attempt,
        "born_timestamp": m.born_timestamp,
        "store_timestamp": m.store_timestamp,
        "delivery_timestamp": m.delivery_timestamp,
        "born_host": m.born_host,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "body_size": len(m.body),
        "body_encoding": encoding,
        "body": body,
    }


def _text(m: ReceivedMessage) -> str:
    head = f"{m.message_id} {m.topic}"
    if m.tag:
        head += f" tag={m.tag}"
    if m.keys:
        head += f" keys={','.join(m.keys)}"
    if m.message_group:
        head += f" group={m.message_group}"
    if m.lite_topic:
        head += f" lite_topic={m.lite_topic}"
    if m.properties:
        # JSON: a key or value may hold spaces, '=' or ','
        head += f" properties={json.dumps(dict(m.properties), ensure_ascii=False, separators=(',', ':'))}"
    head += f" attempt={m.delivery_attempt}"
    return f"{head}\n{m.body.decode('utf-8', errors='replace')}"


def run_consume(args: argparse.Namespace) -> int:
    try:
        config = _config(args)
    except ValueError as exc:
        return _fail("consume", exc, 2)
    try:
        return asyncio.run(_consume(args, config, sys.stdout))
    except KeyboardInterrupt:
        return 130


async def _receive_within(consumer: SimpleConsumer, want: int, left: float) -> list[ReceivedMessage] | None:
    """`consumer.receive(want)` given `left` seconds: None when they ran out first (the receive is then
    cancelled). Not `asyncio.wait_for`: its TimeoutError is also the class of a receive's own timeout
    (`thrust.TimeoutError`), which must not pass for idling."""
    if left <= 0:
        return None
    task = asyncio.ensure_future(consumer.receive(want))
    done, _ = await asyncio.wait({task}, timeout=left)
    if done:
        return task.result()
    task.cancel()
    try:
        return await task  # answered before the cancel took effect: keep it
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # this command is being cancelled, not only the receive
        return None


async def _consume(args: argparse.Namespace, config: ClientConfig, out: TextIO) -> int:
    from thrust.simple_consumer import SimpleConsumer

    expression = FilterExpression.sql(args.filter) if args.sql else FilterExpression.tag(args.filter)
    seen = 0
    # A receive long-polls for 20 s, the proxy's longest; --idle is not given to the server as the
    # await duration, which the proxy raises to its 5 s minimum (grpcClientConsumerMinLongPollingTimeout
    # Millis, apache/rocketmq proxy/.../ReceiveMessageActivity.java): idling ends at its own deadline,
    # cancelling the receive in flight. The proxy makes visible again within 1 s any message it could not
    # write to the cancelled stream (ReceiveMessageResponseStreamWriter: NACK_INVISIBLE_TIME).
    last = time.monotonic()
    try:
        async with SimpleConsumer(
            config,
            group=args.group,
            subscriptions={args.topic: expression},
            await_duration=20.0,
            invisible_duration=args.invisible,
        ) as consumer:
            while args.count is None or seen < args.count:
                want = 32 if args.count is None else min(32, args.count - seen)
                if args.idle is None:
                    batch = await consumer.receive(want)
                else:
                    got = await _receive_within(consumer, want, last + args.idle - time.monotonic())
                    if got is None:
                        break
                    batch = got
                if not batch:
                    continue
                last = time.monotonic()
                for m in batch:
                    print(json.dumps(message_to_json(m)) if args.format == "json" else _text(m), file=out)
                out.flush()
                if not args.no_ack:
                    errors = [e for e in await consumer.ack_many(batch) if e is not None]
                    if errors:
                        raise errors[0]
                seen += len(batch)
    except (ThrustError, ValueError) as exc:
        return _fail("consume", exc)
    return 0

"""Create topics and consumer groups on RocketMQ brokers over the remoting protocol, as mqadmin does.

`mqadmin updateTopic` and `updateSubGroup` each start a JVM (~5 s on two cores); tests that want a
fresh topic per test cannot wait that long. These are the same two requests, sent from Python:

- frame: `int32 length` (what follows), `int32 (serialize type << 24) | header length`, the JSON header,
  the body (apache/rocketmq `remoting/.../protocol/RemotingCommand.java`, `encodeHeader` / `decode`);
- `UPDATE_AND_CREATE_TOPIC` (17) with `CreateTopicRequestHeader` in `extFields`;
- `UPDATE_AND_CREATE_SUBSCRIPTIONGROUP` (200) with a `SubscriptionGroupConfig` JSON body
  (`RequestCode.java`; the broker's `AdminBrokerProcessor.updateAndCreateTopic` /
  `updateAndCreateSubscriptionGroup`);
- `UPDATE_BROKER_CONFIG` (25) with a properties body (`mqadmin updateBrokerConfig`).

A reply's code 0 is SUCCESS; anything else raises `AdminError` with the broker's remark.
"""

from __future__ import annotations

import itertools
import json
import socket
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

__all__ = ["MESSAGE_TYPES", "AdminError", "RemotingAdmin"]

UPDATE_AND_CREATE_TOPIC: Final = 17
UPDATE_BROKER_CONFIG: Final = 25
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: Final = 200
_RESPONSE_FLAG: Final = 1  # RemotingCommand RPC_TYPE bit: set on replies
_SUCCESS: Final = 0

MESSAGE_TYPES: Final = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "PRIORITY", "MIXED", "LITE")
"""Values of the topic attribute `message.type` (apache/rocketmq `common/.../TopicMessageType.java`;
LITE from 5.5.0, whose brokers need `enableLmq` and `enableMultiDispatch` for it)."""


class AdminError(RuntimeError):
    """A broker refused an admin request, or did not answer it."""


class RemotingAdmin:
    """Admin requests to the brokers at `broker_addresses` (`host:port` of each master's remoting port).

    Topics and groups are per broker: each request goes to every broker, as `mqadmin -c CLUSTER` does.
    One short-lived TCP connection per request keeps it free of state and safe to use from any thread.
    """

    def __init__(self, broker_addresses: Iterable[str], *, timeout: float = 10.0) -> None:
        self.broker_addresses = tuple(broker_addresses)
        if not self.broker_addresses:
            raise ValueError("RemotingAdmin needs at least one broker address")
        self.timeout = timeout
        self._opaque = itertools.count(1)

    def create_topic(
        self,
        name: str,
        message_type: str = "NORMAL",
        *,
        queues: int = 8,
        brokers: Iterable[int] | None = None,
    ) -> None:
        """Create (or update) `name` with `queues` read and write queues on each broker (or only on the
        broker indexes in `brokers`), accepting `message_type` (one of `MESSAGE_TYPES`)."""
        kind = message_type.upper()
        if kind not in MESSAGE_TYPES:
            raise ValueError(f"unknown message type {message_type!r}; one of {MESSAGE_TYPES}")
        if queues < 1:
            raise ValueError(f"a topic needs at least one queue, got {queues}")
        fields = {
            "topic": name,
            "defaultTopic": "TBW102",
            "readQueueNums": str(queues),
            "writeQueueNums": str(queues),
            "perm": "6",  # PermName.PERM_READ | PERM_WRITE
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0",
            "order": "false",
            # AttributeParser.parseToString: "+key=value" adds the attribute.
            "attributes": f"+message.type={kind}",
        }
        for address in self._targets(brokers):
            self._call(address, UPDATE_AND_CREATE_TOPIC, fields, b"", f"create topic {name!r}")

    def create_group(
        self,
        name: str,
        *,
        fifo: bool = False,
        max_attempts: int | None = None,
        retry_delays: Sequence[float] | None = None,
        lite_bind_topic: str | None = None,
        lite_quota: int | None = None,
        lite_exclusive: bool = False,
        brokers: Iterable[int] | None = None,
    ) -> None:
        """Create (or update) consumer group `name`. `fifo` is upstream's `consumeMessageOrderly` (the
        proxy then tells clients `Settings.subscription.fifo`); `max_attempts` delivery attempts before
        the dead-letter queue (the group's `retryMaxTimes` is `max_attempts - 1`; default 16 retries);
        `retry_delays` the group's customized retry policy in seconds (upstream's default is 1 s, 5 s,
        10 s, 30 s, 1 min, ...), which the proxy sends to consumers as
        `Settings.backoff_policy.customized_backoff.next` (`GrpcClientSettingsManager`).

        RocketMQ 5.5's lite topics: `lite_bind_topic` makes it a lite consumer group of that LITE topic
        (group attribute `lite.bind.topic`; the proxy refuses lite subscriptions of a group without it),
        `lite_quota` the lite topics one client of the group may subscribe to (`lite.sub.client.quota`,
        default 2000, sent to clients as `Settings.subscription.lite_subscription_quota`),
        `lite_exclusive` one client per lite topic (`lite.sub.model=Exclusive`)
        (`SubscriptionGroupAttributes`)."""
        if max_attempts is not None and max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if retry_delays is not None and (not retry_delays or min(retry_delays) < 0):
            raise ValueError(f"retry_delays must be non-empty and non-negative, got {retry_delays}")
        config: dict[str, Any] = {
            "groupName": name,
            "consumeEnable": True,
            "consumeFromMinEnable": True,
            "consumeBroadcastEnable": True,
            "consumeMessageOrderly": fifo,
            "retryQueueNums": 1,
            "retryMaxTimes": 16 if max_attempts is None else max_attempts - 1,
            "brokerId": 0,
            "whichBrokerWhenConsumeSlowly": 1,
            "notifyConsumerIdsChangedEnable": True,
        }
        if retry_delays is not None:
            # SubscriptionGroupConfig.groupRetryPolicy (GroupRetryPolicy / CustomizedRetryPolicy.next, ms).
            config["groupRetryPolicy"] = {
                "type": "CUSTOMIZED",
                "customizedRetryPolicy": {"next": [round(d * 1000) for d in retry_delays]},
            }
        attributes: dict[str, str] = {}
        if lite_bind_topic is not None:
            attributes["lite.bind.topic"] = lite_bind_topic
        if lite_quota is not None:
            attributes["lite.sub.client.quota"] = str(lite_quota)
        if lite_exclusive:
            attributes["lite.sub.model"] = "Exclusive"
        if attributes:
            # AttributeParser's form, as `mqadmin updateSubGroup -a +key=value` sends it: "+" adds the
            # attribute (SubscriptionGroupManager checks and applies it through AttributeUtil).
            config["attributes"] = {f"+{k}": v for k, v in attributes.items()}
        body = json.dumps(config).encode()
        for address in self._targets(brokers):
            self._call(address, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body, f"create group {name!r}")

    def update_broker_config(
        self, settings: Mapping[str, str], *, brokers: Iterable[int] | None = None
    ) -> None:
        """Change broker settings at run time, as `mqadmin updateBrokerConfig` does: `UPDATE_BROKER_CONFIG`
        with a properties body; the broker applies and persists them (`AdminBrokerProcessor`)."""
        body = "".join(f"{k}={v}\n" for k, v in settings.items()).encode()
        for address in self._targets(brokers):
            self._call(address, UPDATE_BROKER_CONFIG, {}, body, f"update broker config {dict(settings)}")

    def _targets(self, brokers: Iterable[int] | None) -> list[str]:
        if brokers is None:
            return list(self.broker_addresses)
        return [self.broker_addresses[i] for i in brokers]

    def _call(self, address: str, code: int, fields: Mapping[str, str], body: bytes, what: str) -> None:
        opaque = next(self._opaque)
        header = json.dumps(
            {
                "code": code,
                "language": "PYTHON",
                "version": 0,
                "opaque": opaque,
                "flag": 0,
                "extFields": dict(fields),
                "serializeTypeCurrentRPC": "JSON",
            }
        ).encode()
        frame = struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=self.timeout) as sock:
                sock.sendall(frame)
                reply = _read_frame(sock)
        except OSError as exc:
            raise AdminError(f"{what} on {address}: {exc}") from exc
        if reply.get("opaque") != opaque or not reply.get("flag", 0) & _RESPONSE_FLAG:
            raise AdminError(f"{what} on {address}: unexpected reply {reply}")
        if reply.get("code") != _SUCCESS:
            raise AdminError(f"{what} on {address}: code {reply.get('code')}: {reply.get('remark')}")


def _read_exact(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(chunks)} of {n} bytes")
        chunks += chunk
    return bytes(chunks)


def _read_frame(sock: socket.socket) -> dict[str, Any]:
    (length,) = struct.unpack(">i", _read_exact(sock, 4))
    payload = _read_exact(sock, length)
    (mark,) = struct.unpack(">i", payload[:4])
    header_len = mark & 0xFFFFFF
    if mark >> 24 != 0:  # ROCKETMQ binary serialization; we only ever ask for JSON
        raise ConnectionError(f"reply is not JSON-serialized (type {mark >> 24})")
    header: dict[str, Any] = json.loads(payload[4 : 4 + header_len])
    return header

"""Producing: SendMessage, EndTransaction, RecallMessage (docs/protocol.md §5)."""

from __future__ import annotations

import grpc

from thrust._codec.status import Code
from thrust._codec.validation import Invalid
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.auth import Caller
from thrust.server.core.model import BrokerError
from thrust.server.faults import Rpc
from thrust.server.message_codec import inbound_message
from thrust.server.service.port import Port
from thrust.server.service.status import _STATUS_OK


class ProducerRpcs:
    """SendMessage, EndTransaction, RecallMessage."""

    def __init__(self, port: Port) -> None:
        self._port = port

    async def SendMessage(
        self,
        request: s.SendMessageRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.SendMessageResponse:
        def work(caller: Caller) -> s.SendMessageResponse:
            messages = request.messages
            if not messages:
                raise Invalid(Code.MESSAGE_CORRUPTED, "no message to send")
            topic = messages[0].topic.name
            if len(messages) > 1:
                for message in messages:
                    if message.topic.name != topic:
                        raise Invalid(
                            Code.MESSAGE_CORRUPTED, "all messages of one request must share a topic"
                        )
            self._port.topic(topic)
            now = self._port.now()
            client_id = caller.client_id
            # The proxy builds every message before it sends any (SendMessageActivity.buildMessage): the
            # first invalid one fails the whole request with its code as the top status and no entries.
            lite_size = self._port.server.config.max_lite_topic_size
            valid = [
                inbound_message(message, client_id, now, max_lite_topic_size=lite_size)
                for message in messages
            ]
            # A refusal by the broker (type conflict, not hosted, delivery time, held-message limit) fails
            # the whole request too: the proxy makes entries only from the broker's SendResults.
            results = self._port.broker.send(valid, now)
            response = s.SendMessageResponse()
            entry = response.entries.add()
            entry.status.CopyFrom(_STATUS_OK)
            first = results[0]
            if len(results) > 1:
                # The proxy sends a batch as one MessageBatch and answers one entry for the broker's one
                # SendResult (SendMessageActivity.convertToSendMessageResponse): the first message's queue
                # offset, the first message's key as transaction id, and the broker's offset message id
                # (store host, port, commit-log offset: never the client's).
                entry.message_id = f"7F000001{self._port.index:08X}{first.offset:016X}"
            else:
                entry.message_id = messages[0].system_properties.message_id
                if first.recall_handle:
                    entry.recall_handle = first.recall_handle
            # The broker's SendResult carries the (first) message's unique key as its transaction id for
            # every message, not only for transactional ones (SendMessageActivity).
            entry.transaction_id = first.transaction_id or messages[0].system_properties.message_id
            entry.offset = first.offset
            self._port.server.stats.entries[Rpc.SEND_MESSAGE.value] += len(valid)
            self._port.server.changed(self._port.index, topic)
            response.status.CopyFrom(_STATUS_OK)
            return response

        return await self._port.unary(
            Rpc.SEND_MESSAGE, context, work, lambda st: s.SendMessageResponse(status=st)
        )

    async def EndTransaction(
        self,
        request: s.EndTransactionRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.EndTransactionResponse:
        def work(caller: Caller) -> s.EndTransactionResponse:
            topic = request.topic.name
            self._port.topic(topic)
            if not request.transaction_id.strip():
                raise Invalid(Code.INVALID_TRANSACTION_ID, "transaction id cannot be empty")
            commit: bool | None = None
            if request.resolution == d.TransactionResolution.COMMIT:
                commit = True
            elif request.resolution == d.TransactionResolution.ROLLBACK:
                commit = False
            # Any other resolution is upstream's TransactionStatus.UNKNOWN (EndTransactionActivity): OK,
            # nothing resolved, the message stays prepared and is checked later.
            now = self._port.now()
            # The producer sends EndTransaction to the broker it sent to; try the others if not.
            brokers = [
                self._port.broker,
                *(b for b in self._port.server.brokers if b is not self._port.broker),
            ]
            for i, broker in enumerate(brokers):
                try:
                    broker.end_transaction(
                        topic=topic,
                        message_id=request.message_id,
                        transaction_id=request.transaction_id,
                        commit=commit,
                        now=now,
                    )
                except BrokerError as exc:
                    if exc.code != Code.INVALID_TRANSACTION_ID or i == len(brokers) - 1:
                        raise
                    continue
                if commit:
                    self._port.server.changed(self._port.server.brokers.index(broker), topic)
                break
            return s.EndTransactionResponse(status=_STATUS_OK)

        return await self._port.unary(
            Rpc.END_TRANSACTION, context, work, lambda st: s.EndTransactionResponse(status=st)
        )

    async def RecallMessage(
        self,
        request: s.RecallMessageRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.RecallMessageResponse:
        def work(caller: Caller) -> s.RecallMessageResponse:
            self._port.topic(request.topic.name)
            if not request.recall_handle:
                raise Invalid(Code.BAD_REQUEST, "recall handle cannot be empty")
            broker = self._port.broker_for(request.recall_handle)
            message_id = broker.recall(
                topic=request.topic.name, recall_handle=request.recall_handle, now=self._port.now()
            )
            return s.RecallMessageResponse(status=_STATUS_OK, message_id=message_id)

        return await self._port.unary(
            Rpc.RECALL_MESSAGE, context, work, lambda st: s.RecallMessageResponse(status=st)
        )

"""The embedded server's broker state: pure, synchronous, no grpc and no asyncio.

`Catalog` holds topics and groups, `Broker` one broker's queues and consumption state; the value types
live in `thrust.server.core.model`. Time is always passed in as `now` (epoch seconds).
"""

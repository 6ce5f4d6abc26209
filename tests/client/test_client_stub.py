"""The client's own MessagingService stub and the descriptor pool its messages live in.

The generated modules come from an old protoc (scripts/gen_proto.py, for the wide dependency range) and
register in `thrust._proto.POOL`, not protobuf's default pool (so that the official client can be
imported beside thrust: tests/interop/test_side_by_side.py runs both in one process).
"""

from __future__ import annotations

import grpc.aio
import pytest
from google.protobuf import descriptor_pool, timestamp_pb2

from tests.client._util import run
from thrust._codec import convert
from thrust._io import rpc
from thrust._proto import POOL
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust._proto.apache.rocketmq.v2 import service_pb2_grpc as g
from thrust.testing import embedded_server

REGISTERED = tuple(int(part) for part in grpc.__version__.split(".")[:2]) >= (1, 63)


def test_messages_live_in_thrusts_own_pool_under_upstreams_full_names() -> None:
    # The wire carries no type names, but the server routes by the gRPC path, which is built from the
    # package and service name: both must stay upstream's.
    assert d.Message.DESCRIPTOR.full_name == "apache.rocketmq.v2.Message"
    assert (
        s.DESCRIPTOR.services_by_name["MessagingService"].full_name == "apache.rocketmq.v2.MessagingService"
    )
    assert POOL.FindMessageTypeByName("apache.rocketmq.v2.Message") is d.Message.DESCRIPTOR
    with pytest.raises(KeyError):
        descriptor_pool.Default().FindMessageTypeByName("apache.rocketmq.v2.Message")
    with pytest.raises(KeyError):
        descriptor_pool.Default().FindFileByName("apache/rocketmq/v2/definition.proto")


def test_timestamps_and_durations_come_from_the_same_pool() -> None:
    # A message of our pool refuses a sub-message of another pool (upb compares classes).
    props = d.SystemProperties(
        born_timestamp=convert.timestamp(1.5), invisible_duration=convert.duration(2.25)
    )
    assert convert.timestamp_seconds(props.born_timestamp) == 1.5
    assert props.invisible_duration.ToSeconds() == 2  # the well-known-type helpers are there
    with pytest.raises(TypeError):
        d.SystemProperties(born_timestamp=timestamp_pb2.Timestamp(seconds=1))


def test_stub_calls_the_same_paths_as_the_generated_one_and_works() -> None:
    async def scenario() -> None:
        async with embedded_server() as srv:
            channel = grpc.aio.insecure_channel(srv.endpoints[0])
            try:
                ours, generated = rpc._Stub(channel), g.MessagingServiceStub(channel)
                names = [m.name for m in s.DESCRIPTOR.services_by_name["MessagingService"].methods]
                assert "SendMessage" in names and "Telemetry" in names
                for name in names:
                    mine, theirs = getattr(ours, name), getattr(generated, name)
                    assert type(mine) is type(theirs), name
                    assert (
                        mine._method
                        == theirs._method
                        == f"/apache.rocketmq.v2.MessagingService/{name}".encode()
                    )
                    # Registered with gRPC core where grpcio has registered methods (>= 1.63; `make
                    # compat` runs this on the oldest grpcio allowed too).
                    assert bool(getattr(mine, "_registered_call_handle", 0)) == REGISTERED, name
                request = s.QueryRouteRequest(topic=d.Resource(name="t"))
                response = await ours.QueryRoute(request, timeout=10)
                # A decoded answer: the server read the request and refused it for its missing metadata.
                assert response.status.code == d.Code.CLIENT_ID_REQUIRED, response
            finally:
                await channel.close()

    run(scenario)

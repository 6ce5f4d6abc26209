"""A real Apache RocketMQ 5 on this machine, from the published Maven Central jars (no Docker).

    with thrust.cluster.RocketMQCluster(mode="local") as cluster:   # namesrv + proxy with a broker inside
        cluster.create_topic("orders", "FIFO")
        cluster.create_group("billing", fifo=True, max_attempts=3)
        cluster.endpoint                                             # "127.0.0.1:PORT", the gRPC proxy

`mode="cluster"` starts a namesrv, two brokers and one cluster-mode proxy. `thrust cluster` starts one
for a person and prints its endpoint; `thrust cluster --exec CMD ...` runs CMD with it (the test suite
does so). The jars are fetched by Maven once per version into a cache outside the work tree
(`fetch_jars`). Topics and groups are created over the broker's remoting protocol (`admin`), the same
requests `mqadmin updateTopic` / `updateSubGroup` send; `mqadmin` itself creates the standard set.

Nothing in the client library imports this package.
"""

from __future__ import annotations

from thrust.cluster.admin import AdminError, RemotingAdmin
from thrust.cluster.control import ClusterControl
from thrust.cluster.errors import ClusterError
from thrust.cluster.jars import LITE_VERSION, ROCKETMQ_VERSION, JarsError, fetch_jars
from thrust.cluster.process import (
    STANDARD_GROUPS,
    STANDARD_TOPICS,
    ClusterInfo,
    RocketMQCluster,
    attach_from_env,
)

__all__ = [
    "LITE_VERSION",
    "ROCKETMQ_VERSION",
    "STANDARD_GROUPS",
    "STANDARD_TOPICS",
    "AdminError",
    "ClusterControl",
    "ClusterError",
    "ClusterInfo",
    "JarsError",
    "RemotingAdmin",
    "RocketMQCluster",
    "attach_from_env",
    "fetch_jars",
]

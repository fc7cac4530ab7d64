"""The cluster: how Conveyor nodes (and C Disque 1.0-rc1 nodes) work as one.

Owns: the cluster bus (transport on client port + 10000, and its byte-compatible codec:
`messages`, `layout`, `framing`, `codec`), membership and failure detection, replication,
requeue coordination, ack garbage collection, and federation.

Must not touch: client connections and sockets (the protocol and node packages own them),
or job state directly. The core decides what happens to a job; this package carries the
messages that make other nodes learn of it and brings their messages back to the core.

Everything here but the transport is sans-IO (no sockets, no asyncio, no clock): the
node drives it (conveyor.node.cluster) and so does the deterministic simulator
(tests/sim). Nodes form a cluster with Conveyor and C Disque nodes alike.
"""

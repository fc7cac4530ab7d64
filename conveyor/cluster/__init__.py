"""The cluster: how Conveyor nodes (and C Disque 1.0-rc1 nodes) work as one.

Owns: the cluster bus (transport on client port + 10000, and its byte-compatible codec:
`messages`, `layout`, `framing`, `codec`), membership and failure detection, replication,
requeue coordination, ack garbage collection, and federation.

Must not touch: client connections and sockets (the protocol and node packages own them),
or job state directly. The core decides what happens to a job; this package carries the
messages that make other nodes learn of it and brings their messages back to the core.

Built so far: the codec, the transport and membership (`nodes`, `membership`: sans-IO,
no sockets, no asyncio, no clock; driven by conveyor.node.cluster). Nodes form a cluster
with Conveyor and C Disque nodes alike; jobs are not replicated yet.
"""

"""The cluster: how Conveyor nodes (and C Disque 1.0-rc1 nodes) work as one.

Owns: the cluster bus (transport on client port + 10000, and its byte-compatible codec:
`messages`, `layout`, `framing`, `codec`), membership and failure detection, replication,
requeue coordination, ack garbage collection, and federation.

Must not touch: client connections and sockets (the protocol and node packages own them),
or job state directly. The core decides what happens to a job; this package carries the
messages that make other nodes learn of it and brings their messages back to the core.

Built so far: the codec, sans-IO (no sockets, no asyncio, no clock). A node still answers
CLUSTER commands as a cluster of one.
"""

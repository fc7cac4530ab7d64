"""Cluster bus, message codec, membership, replication, ack GC and federation.

Not built yet: a node currently answers CLUSTER commands as a cluster of one."""

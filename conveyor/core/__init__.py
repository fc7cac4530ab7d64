"""Pure job, queue and ack state machine (sans-IO), shared by the node and the simulator.

Owns: jobs, queues, blocked clients as data, acks, timers as data, job IDs, Disque's
serialized-job codec, and the effects a command produces. Layout:
- `node.NodeCore`: the facade a driver uses (node policy: default REPLICATE, LEAVING,
  whether GETJOB blocks, memory limit and eviction);
- `engine.Engine`: the state machine, split by concern into `jobs`, `queueing`,
  `blocking` and `acks` over `state.CoreState`;
- `effects`: what a batch leaves for the driver; `args`: typed command arguments;
- `job`, `queue`, `waiters`, `timers`, `scan`, `jobid`: the data structures;
- `codec` and `records`: Disque's serialized job, for the AOF and the bus;
- `untracked`: jobs out of the cycle collector's sight (compiled only).
Must not touch: sockets, asyncio, files, the wall clock or global randomness. Time (ms)
and random sources are passed in, so a deterministic simulator can drive it.
"""

"""Pure job, queue and ack state machine.

Owns: jobs, queues, job IDs, timers as data, the effects a command produces.
Must not touch: sockets, asyncio, the wall clock or global randomness. Time (ms)
and random sources are passed in, so a deterministic simulator can drive it."""

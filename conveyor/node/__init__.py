"""The asyncio server for one node.

Owns: client connections, the command table, argument parsing into typed values,
blocked clients, the one event-loop timer for core deadlines, config and INFO.
Must not touch: job state directly; every change goes through conveyor.core."""

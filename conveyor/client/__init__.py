"""Python client for Conveyor/Disque nodes on redis-py.

Owns: connections, typed Job objects and typed errors.
Must not touch: server internals; it speaks only the public protocol."""

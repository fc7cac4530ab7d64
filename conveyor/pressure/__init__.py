"""The pressure protocol (bounded, blocking, exclusive, closable FIFO queues) over Redis."""

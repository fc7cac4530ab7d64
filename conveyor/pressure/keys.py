"""The 12 Redis keys of a pressure queue, named exactly as the specification says."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PREFIX = "__pressure__"


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """Key names of queue `name` under `prefix` (`${prefix}:${name}` plus 11 suffixed keys)."""

    prefix: str
    name: str

    @property
    def queue(self) -> str:
        return f"{self.prefix}:{self.name}"

    def _sub(self, suffix: str) -> str:
        return f"{self.prefix}:{self.name}:{suffix}"

    @property
    def bound(self) -> str:
        return self._sub("bound")

    @property
    def producer(self) -> str:
        return self._sub("producer")

    @property
    def consumer(self) -> str:
        return self._sub("consumer")

    @property
    def producer_free(self) -> str:
        return self._sub("producer_free")

    @property
    def consumer_free(self) -> str:
        return self._sub("consumer_free")

    @property
    def produced_messages(self) -> str:
        return self._sub("stats:produced_messages")

    @property
    def produced_bytes(self) -> str:
        return self._sub("stats:produced_bytes")

    @property
    def consumed_messages(self) -> str:
        return self._sub("stats:consumed_messages")

    @property
    def consumed_bytes(self) -> str:
        return self._sub("stats:consumed_bytes")

    @property
    def not_full(self) -> str:
        return self._sub("not_full")

    @property
    def closed(self) -> str:
        return self._sub("closed")

    def all(self) -> tuple[str, ...]:
        """All 12 keys, in the order the specification lists them."""
        return (
            self.queue,
            self.bound,
            self.producer,
            self.consumer,
            self.producer_free,
            self.consumer_free,
            self.produced_messages,
            self.produced_bytes,
            self.consumed_messages,
            self.consumed_bytes,
            self.not_full,
            self.closed,
        )


def bound_key_pattern(prefix: str) -> str:
    """SCAN MATCH pattern for every queue's `:bound` key, with glob characters in prefix escaped."""
    escaped = "".join("\\" + ch if ch in "*?[]\\" else ch for ch in prefix)
    return f"{escaped}:*:bound"


def name_from_bound_key(prefix: str, key: str) -> str | None:
    """Queue name of a `:bound` key, or None when the key is not one under `prefix`."""
    head, tail = f"{prefix}:", ":bound"
    if key.startswith(head) and key.endswith(tail) and len(key) > len(head) + len(tail):
        return key[len(head) : -len(tail)]
    return None

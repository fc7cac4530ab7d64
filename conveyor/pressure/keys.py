"""The 12 Redis keys of a pressure queue, named exactly as the specification says."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PREFIX = "__pressure__"
# How key names go to and come back from Redis: UTF-8, with the bytes that are not UTF-8
# carried as lone surrogates (as Python decodes argv and file names), so a queue whose name
# is not UTF-8 keeps its exact bytes both ways. The steps send keys as bytes encoded so:
# redis-py's hiredis packer would encode str strictly whatever the client's settings.
KEY_ENCODING = "utf-8"
KEY_ENCODING_ERRORS = "surrogateescape"


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


def key_bytes(text: str) -> bytes:
    """The bytes Redis gets for a key name (see KEY_ENCODING_ERRORS)."""
    return text.encode(KEY_ENCODING, KEY_ENCODING_ERRORS)


def key_text(raw: bytes) -> str:
    """A key name read from Redis, as text that `key_bytes` turns back into the same bytes."""
    return raw.decode(KEY_ENCODING, KEY_ENCODING_ERRORS)


def check_key_text(text: str, what: str) -> None:
    """Refuse text no client could send as a key: a lone surrogate that stands for no byte."""
    try:
        key_bytes(text)
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end]
        raise ValueError(
            f"{what} {text!r} cannot be a Redis key: {bad!r} is neither a character nor an "
            "undecodable byte"
        ) from None


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

"""The data source's options, parsed and checked once, with errors that name the option.

Spark hands options over as strings in a case-insensitive map; everything here turns
them into typed values so that a typo fails the query at start-up with a clear message
instead of deep inside a task.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from threading import TIMEOUT_MAX

from conveyor.client._address import Address, parse_address

DEFAULT_NODES = "127.0.0.1:7711"
# With no maxJobsPerTrigger (Spark's ReadAllAvailable), one batch still never leases more
# than this: a safety cap on driver memory, not a throughput knob.
ALL_AVAILABLE_CAP = 1_000_000
ACK_MODES = ("ackjob", "fastack")


class OptionError(ValueError):
    """A data source option is missing or has a bad value."""


CONNECTION_OPTIONS = ("nodes", "password", "timeoutMs")
READ_OPTIONS = (
    *CONNECTION_OPTIONS,
    *("queues", "maxJobsPerTrigger", "ack", "journal", "lease", "numPartitions"),
    *("prefetch", "state", "exchange"),
)
WRITE_OPTIONS = (
    *CONNECTION_OPTIONS,
    *("queue", "replicate", "retry", "ttl", "delay", "maxlen", "async", "timeout", "batchSize"),
)
# Spark puts these in every data source's options itself: load(path) or start(path),
# writeStream's checkpointLocation and queryName.
SPARK_OPTIONS = ("path", "checkpointLocation", "queryName")


def _refuse_unknown(options: Mapping[str, str], known: tuple[str, ...]) -> None:
    """A misspelt option would otherwise be ignored: `jornal` silently runs without the
    journal, `queues` on a write falls back to no queue at all."""
    allowed = {name.lower() for name in (*known, *SPARK_OPTIONS)}
    unknown = sorted(key for key in options if key.lower() not in allowed)
    if unknown:
        raise OptionError(f"unknown option {unknown[0]}; the options are {', '.join(known)}")


def _get(options: Mapping[str, str], name: str) -> str | None:
    # Spark's map is case-insensitive already; plain dicts from tests may not be.
    if name in options:
        return options[name]
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return value
    return None


def _int(
    options: Mapping[str, str], name: str, default: int | None, minimum: int = 0
) -> int | None:
    raw = _get(options, name)
    if raw is None or raw == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option {name} must be >= {minimum}, got {value}")
    return value


def _float(
    options: Mapping[str, str], name: str, default: float, maximum: float = TIMEOUT_MAX
) -> float:
    raw = _get(options, name)
    if raw is None or raw == "":
        return default
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {name} must be a number, got {raw!r}") from None
    # inf, nan and 1e300 parse, but as a socket timeout or a wait they raise (or kill a
    # background thread) far from the option that caused it.
    if not 0 <= value <= maximum:
        raise OptionError(f"option {name} must be a number from 0 to {maximum:g}, got {raw!r}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None or raw == "":
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise OptionError(f"option {name} must be true or false, got {raw!r}")


def parse_nodes(raw: str | None) -> tuple[Address, ...]:
    text = DEFAULT_NODES if raw is None or not raw.strip() else raw
    try:
        nodes = tuple(parse_address(part) for part in text.split(",") if part.strip())
    except ValueError as error:
        raise OptionError(f"option nodes: {error}") from None
    if not nodes:
        raise OptionError("option nodes is empty")
    return nodes


def parse_queues(raw: str | None, name: str = "queues") -> tuple[str, ...]:
    queues = tuple(part.strip() for part in (raw or "").split(",") if part.strip())
    if not queues:
        raise OptionError(f"option {name} is required: a comma-separated list of queue names")
    return queues


def address_text(address: Address) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class Connection:
    nodes: tuple[Address, ...]
    password: str | None
    timeout_s: float


def parse_connection(options: Mapping[str, str]) -> Connection:
    return Connection(
        nodes=parse_nodes(_get(options, "nodes")),
        password=_get(options, "password") or None,
        timeout_s=_float(options, "timeoutMs", 10_000.0, TIMEOUT_MAX * 1000) / 1000.0 or 10.0,
    )


@dataclass(frozen=True)
class ReadOptions:
    """Options of the streaming and batch readers."""

    connection: Connection
    queues: tuple[str, ...]
    max_jobs_per_trigger: int | None  # None: Spark's ReadAllAvailable
    ack: str  # "ackjob" or "fastack"
    lease_s: float  # 0: never send WORKING; else the interval between WORKING rounds
    journal: str | None  # directory of the per-batch lease journal; None: no journal
    num_partitions: int
    prefetch: bool
    state: str  # batch read: the JSCAN state filter ("queued", ... or "any")
    exchange: str  # how rows reach executors: "file" (a spool file) or "inline" (pickled)


EXCHANGES = ("auto", "file", "inline")


def parse_read_options(options: Mapping[str, str], default_exchange: str = "inline") -> ReadOptions:
    _refuse_unknown(options, READ_OPTIONS)
    ack = (_get(options, "ack") or "ackjob").strip().lower()
    if ack not in ACK_MODES:
        raise OptionError(f"option ack must be ackjob or fastack, got {ack!r}")
    raw_lease = (_get(options, "lease") or "").strip().lower()
    if raw_lease in ("", "false", "off", "0"):
        lease_s = 0.0
    elif raw_lease in ("true", "on"):
        lease_s = 10.0
    else:
        lease_s = _float(options, "lease", 0.0)
    state = (_get(options, "state") or "queued").strip().lower()
    if state not in ("queued", "active", "wait-repl", "acked", "any"):
        raise OptionError(
            f"option state must be one of queued, active, wait-repl, acked, any; got {state!r}"
        )
    exchange = (_get(options, "exchange") or "auto").strip().lower()
    if exchange not in EXCHANGES:
        raise OptionError(f"option exchange must be auto, file or inline, got {exchange!r}")
    return ReadOptions(
        connection=parse_connection(options),
        queues=parse_queues(_get(options, "queues")),
        max_jobs_per_trigger=_int(options, "maxJobsPerTrigger", None, minimum=1),
        ack=ack,
        lease_s=lease_s,
        journal=_get(options, "journal") or None,
        num_partitions=_int(options, "numPartitions", 2, minimum=1) or 2,
        prefetch=_bool(options, "prefetch", True),
        state=state,
        exchange=default_exchange if exchange == "auto" else exchange,
    )


@dataclass(frozen=True)
class WriteOptions:
    connection: Connection
    queue: str | None  # used for rows without a queue column
    replicate: int | None
    retry: int | None
    ttl: int | None
    delay: int | None
    maxlen: int | None
    asynchronous: bool
    timeout_ms: int
    batch_size: int


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    _refuse_unknown(options, WRITE_OPTIONS)
    queue = (_get(options, "queue") or "").strip() or None
    return WriteOptions(
        connection=parse_connection(options),
        queue=queue,
        replicate=_int(options, "replicate", None, minimum=1),
        retry=_int(options, "retry", None),
        ttl=_int(options, "ttl", None, minimum=1),
        delay=_int(options, "delay", None),
        maxlen=_int(options, "maxlen", None, minimum=1),
        asynchronous=_bool(options, "async", False),
        timeout_ms=_int(options, "timeout", 0) or 0,
        batch_size=_int(options, "batchSize", 1000, minimum=1) or 1000,
    )

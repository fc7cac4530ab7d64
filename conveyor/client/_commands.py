"""Each client method as data: the arguments to send and how to parse the reply.

`Client` and `AsyncClient` differ only in how they do I/O, so every method builds a `Call`
here and the two clients run it, blocking or awaiting.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from conveyor.client import _parse
from conveyor.client.job import Hello, Job

T = TypeVar("T")

JobRef = str | bytes | Job
"""A job ID, or a `Job` (its `id` is used)."""

Body = bytes | bytearray | memoryview | str
BODY_TYPES = (bytes, bytearray, memoryview, str)

PAUSE_OPTIONS = frozenset({"none", "in", "out", "all", "state", "bcast"})
JOB_STATES = frozenset({"wait-repl", "active", "queued", "acked"})


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request. `wait_s` is how long the node may legitimately take to answer
    beyond the socket timeout: None for ordinary commands, `math.inf` for a GETJOB
    that may block forever."""

    args: tuple[Any, ...]
    parse: Callable[[Any], T]
    wait_s: float | None = None


def _identity(reply: Any) -> Any:
    return reply


def _int(reply: Any) -> int:
    return int(reply)


def job_id_of(ref: JobRef) -> str:
    """A job's ID; anything but an ID or a `Job` is refused before anything is sent
    (str() of it would go out: `ack(jobs)` sent "['D-...', ...]" and got BADID)."""
    if isinstance(ref, Job):
        return ref.id
    if isinstance(ref, str | bytes | bytearray | memoryview):
        return _parse.text(ref)
    hint = " (several jobs go as separate arguments: ack(*jobs))" if _is_many(ref) else ""
    raise TypeError(
        f"a job must be a job ID (str or bytes) or a Job, not {type(ref).__name__}{hint}"
    )


def _is_many(value: object) -> bool:
    return isinstance(value, list | tuple | set | frozenset)


def _ids(refs: Iterable[JobRef]) -> list[str]:
    return [job_id_of(ref) for ref in refs]


def _queue(queue: object) -> bytes:
    """A queue name as bytes, refused before anything is sent unless str or bytes
    (None would reach redis-py's encoder, whose message differs between the twins).
    Encoded here, UTF-8 with `surrogateescape`: redis-py's hiredis packer ignores the
    connection's `encoding_errors`, so a name scan_queues() gave for bytes that are not
    UTF-8 (`'bad\\udcffq'`) would fail to encode there instead of going back as it came."""
    if not isinstance(queue, str | bytes):
        raise TypeError(f"a queue name must be str or bytes, not {type(queue).__name__}")
    return _parse.to_bytes(queue)


def _work_queue(queue: object) -> bytes:
    """A queue to add jobs to or take them from: not empty. The node takes "", so
    add_job("", ...) made a job no worker asks for and get_jobs("") waited forever (an
    unset setting, most likely). The other methods take it: a queue "" made elsewhere
    can still be looked at (the console lists every queue QSCAN gives)."""
    name = _queue(queue)
    if not name:
        raise ValueError("a queue name must not be empty")
    return name


def _queues(queues: str | bytes | Sequence[str | bytes]) -> list[bytes]:
    if isinstance(queues, str | bytes):
        return [_work_queue(queues)]
    names = [_work_queue(name) for name in queues]
    if not names:
        raise ValueError("at least one queue is needed")
    return names


def body_bytes(body: Body) -> bytes:
    """A job body as bytes; str is UTF-8. Anything else is refused: bytes() would turn
    an int into that many NUL bytes and a list of ints into their bytes, silently."""
    if not isinstance(body, BODY_TYPES):
        raise TypeError(
            f"a job body must be bytes, bytearray, memoryview or str, not {type(body).__name__}"
        )
    return _parse.to_bytes(body)


def whole(name: str, value: object, minimum: int | None = None) -> int:
    """An integer argument, checked before anything is sent. int() would cut a float:
    `retry=0.5` would go as RETRY 0 (an at-most-once job), `timeout_ms=0.5` as TIMEOUT
    0 (block forever); a bool or a str is a mistake of the caller's."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not bool")
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}") from None
    if minimum is not None and number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, not {number}")
    return number


RAW_ARG_TYPES = (str, bytes, bytearray, memoryview, int, float)


def raw(*args: Any) -> Call[Any]:
    """execute_command's call. Arguments are checked here: redis-py refused the others
    with a different message in each twin (and IndexError for no argument at all)."""
    if not args:
        raise ValueError("execute_command needs a command name")
    for arg in args:
        if isinstance(arg, bool) or not isinstance(arg, RAW_ARG_TYPES):
            raise TypeError(
                f"a command argument must be str, bytes, int or float, not {type(arg).__name__}"
            )
    # str as the other commands send it (see _queue).
    return Call(tuple(_parse.to_bytes(arg) if type(arg) is str else arg for arg in args), _identity)


def add_job(
    queue: str | bytes,
    body: Body,
    *,
    replicate: int | None = None,
    delay: int | None = None,
    retry: int | None = None,
    ttl: int | None = None,
    maxlen: int | None = None,
    asynchronous: bool = False,
    timeout_ms: int = 0,
) -> Call[str]:
    args: list[Any] = [
        "ADDJOB",
        _work_queue(queue),
        body_bytes(body),
        whole("timeout_ms", timeout_ms, 0),
    ]
    # Their ranges are the node's to check: it names the option in its error.
    for name, value in (
        ("replicate", replicate),
        ("delay", delay),
        ("retry", retry),
        ("ttl", ttl),
        ("maxlen", maxlen),
    ):
        if value is not None:
            args += [name.upper(), whole(name, value)]
    if asynchronous:
        args.append("ASYNC")
    # A synchronous ADDJOB may wait up to timeout_ms for replication; 0 means "forever"
    # to the node, but the client keeps its socket timeout then, so a hung node is noticed.
    wait = timeout_ms / 1000 if timeout_ms and not asynchronous else None
    return Call(tuple(args), _parse.text, wait)


def get_jobs(
    queues: str | bytes | Sequence[str | bytes],
    count: int = 1,
    timeout_ms: int | None = None,
    nohang: bool = False,
    with_counters: bool = False,
) -> Call[list[Job]]:
    args: list[Any] = ["GETJOB"]
    if nohang:
        args.append("NOHANG")
    if timeout_ms is not None:
        args += ["TIMEOUT", whole("timeout_ms", timeout_ms, 0)]
    if whole("count", count) != 1:
        args += ["COUNT", count]
    if with_counters:
        args.append("WITHCOUNTERS")
    args.append("FROM")
    args += _queues(queues)
    if nohang:
        wait: float | None = None
    elif timeout_ms:
        wait = timeout_ms / 1000
    else:
        wait = math.inf

    def parse(reply: Any) -> list[Job]:
        return _parse.jobs(reply, with_counters)

    return Call(tuple(args), parse, wait)


def ids_command(name: str, refs: Iterable[JobRef]) -> Call[int]:
    """ACKJOB, FASTACK, ENQUEUE, DEQUEUE, DELJOB: IDs in, a count out."""
    return Call((name, *_ids(refs)), _int)


def nack(refs: Iterable[JobRef], delay: int | None = None) -> Call[int]:
    args: list[Any] = ["NACK", *_ids(refs)]
    if delay is not None:
        args += ["DELAY", whole("delay", delay)]
    return Call(tuple(args), _int)


def working(ref: JobRef) -> Call[int]:
    return Call(("WORKING", job_id_of(ref)), _int)


def show(ref: JobRef) -> Call[dict[str, Any] | None]:
    return Call(("SHOW", job_id_of(ref)), _parse.show)


def qlen(queue: str | bytes) -> Call[int]:
    return Call(("QLEN", _queue(queue)), _int)


def qstat(queue: str | bytes) -> Call[dict[str, Any] | None]:
    return Call(("QSTAT", _queue(queue)), _parse.pairs)


def qpeek(queue: str | bytes, count: int) -> Call[list[Job]]:
    return Call(("QPEEK", _queue(queue), whole("count", count)), _parse.jobs)


def pause(queue: str | bytes, options: Sequence[str]) -> Call[str]:
    if not options:
        options = ("state",)
    for option in options:
        if not isinstance(option, str) or option.lower() not in PAUSE_OPTIONS:
            raise ValueError(f"unknown PAUSE option {option!r}; use {sorted(PAUSE_OPTIONS)}")
    return Call(("PAUSE", _queue(queue), *options), _parse.text)


def info(section: str | None = None) -> Call[dict[str, Any]]:
    if section is not None and not isinstance(section, str):
        # Else redis-py's encoder refused it, with a message of its own in each twin.
        raise TypeError(f"an INFO section must be a str, not {type(section).__name__}")
    args = ("INFO",) if section is None else ("INFO", section)
    return Call(args, _parse.info)


def hello(connected_host: str) -> Call[Hello]:
    def parse(reply: Any) -> Hello:
        return _parse.hello(reply, connected_host)

    return Call(("HELLO",), parse)


def ping() -> Call[bool]:
    def parse(reply: Any) -> bool:
        return _parse.text(reply) == "PONG"

    return Call(("PING",), parse)


def qscan(
    cursor: str,
    count: int | None,
    minlen: int | None,
    maxlen: int | None,
    importrate: int | None,
    busyloop: bool,
) -> Call[tuple[str, list[str]]]:
    args: list[Any] = ["QSCAN", cursor]
    for name, value in (
        ("count", count),
        ("minlen", minlen),
        ("maxlen", maxlen),
        ("importrate", importrate),
    ):
        if value is not None:
            args += [name.upper(), whole(name, value)]
    if busyloop:
        args.append("BUSYLOOP")
    return Call(tuple(args), _parse.scan)


def jscan(
    cursor: str,
    count: int | None,
    queue: str | bytes | None,
    states: Iterable[str | bytes],
    busyloop: bool,
) -> Call[tuple[str, list[str]]]:
    args: list[Any] = ["JSCAN", cursor]
    if count is not None:
        args += ["COUNT", whole("count", count)]
    if queue is not None:
        args += ["QUEUE", _queue(queue)]
    for state in states:
        args += ["STATE", state]
    if busyloop:
        args.append("BUSYLOOP")
    return Call(tuple(args), _parse.scan)


def normalize_states(states: str | Iterable[str | bytes]) -> tuple[str | bytes, ...]:
    """JSCAN's STATE filter: a state name or several (ORed). Names are the node's to
    check; a non-str is refused here, or it reached redis-py's encoder (a message of its
    own in each twin)."""
    if isinstance(states, str):
        return (states,)
    if not isinstance(states, Iterable):
        raise TypeError(f"states must be a state name or several, not {type(states).__name__}")
    wanted = tuple(states)
    for state in wanted:
        if not isinstance(state, str | bytes):
            raise TypeError(f"a job state must be str or bytes, not {type(state).__name__}")
    return wanted

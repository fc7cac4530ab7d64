"""The building blocks of protocol steps: what a step yields, deadlines, shared waits.

A step is a generator that yields either a `Batch` of Redis commands or an `Eval` (one Lua
script) and receives the list of replies; `queue.run_sync` and `aio.run_async` do the I/O.
Keeping the steps free of I/O means the sync and asyncio clients cannot drift apart.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass, field
from hashlib import sha1
from typing import Any, Literal, NamedTuple, TypeVar

from redis.exceptions import ResponseError

from conveyor.pressure.errors import PressureProtocolError, QueueClosed, QueueDoesNotExist
from conveyor.pressure.keys import QueueKeys, key_bytes

T = TypeVar("T")
Arg = str | bytes | int | float
Command = tuple[Arg, ...]

# Blocking waits are cut into calls no longer than this, so that a deleted queue, a caller's
# deadline and the client's socket timeout are all noticed between calls.
WAIT_CHUNK = 1.0
# Redis truncates BRPOP timeouts to whole milliseconds and 0 means "forever".
MIN_WAIT = 0.01
# A script's answer when it stopped holding the role for the client to wait (see `scripts`).
WAIT = b"WAIT"
# What a BRPOP takes: role or room tokens, or values (elements, close markers). Either way
# it is given back if its caller is cancelled once Redis has served it (see `scripts.give_back`).
PopKind = Literal["token", "value"]


@dataclass(frozen=True, slots=True)
class Batch:
    """Commands sent together: in MULTI/EXEC when `transaction`, else as a plain pipeline."""

    commands: tuple[Command, ...]
    transaction: bool
    popped: PopKind | None = None  # set on a lone BRPOP (see `blocking_pop`)


@dataclass(frozen=True, slots=True)
class LuaScript:
    """A Lua script's source and the SHA1 that EVALSHA names it by."""

    name: str
    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", sha1(self.source.encode()).hexdigest())


class Eval(NamedTuple):
    """One script run in one round trip: EVALSHA, or EVAL when the server lacks the script.

    The reply list the step receives has one element, the script's reply. (A NamedTuple,
    not a frozen dataclass: one is built per put or get, and it is the cheaper to build.)
    """

    script: LuaScript
    keys: tuple[str | bytes, ...]
    args: tuple[Arg, ...]


Step = Generator[Batch | Eval, list[Any], T]


def wire(command: Command) -> Command:
    """The command with its str arguments (key names) as the bytes Redis gets (see
    `keys.key_bytes`); the name stays str, which redis-py looks its reply parser up by."""
    name, *args = command
    return (name, *(key_bytes(arg) if isinstance(arg, str) else arg for arg in args))


def one(*command: Arg) -> Batch:
    return Batch((wire(command),), transaction=False)


def multi(*commands: Command) -> Batch:
    return Batch(tuple(wire(command) for command in commands), transaction=True)


def blocking_pop(lists: tuple[str, ...], wait: float, kind: PopKind) -> Batch:
    return Batch((wire(("BRPOP", *lists, wait)),), transaction=False, popped=kind)


class Deadline:
    """When a blocking operation gives up; `timeout=None` never does."""

    def __init__(self, timeout: float | None) -> None:
        try:
            valid = timeout is None or timeout >= 0  # false for NaN, which would never expire
        except TypeError:
            valid = False
        if not valid:
            raise ValueError(f"timeout must be a number of seconds >= 0 or None, not {timeout!r}")
        self._at = None if timeout is None else time.monotonic() + timeout

    def next_wait(self) -> float | None:
        """Seconds for the next blocking call, or None once the deadline has passed."""
        if self._at is None:
            return WAIT_CHUNK
        left = self._at - time.monotonic()
        if left <= 0:
            return None
        return round(max(MIN_WAIT, min(WAIT_CHUNK, left)), 3)


def missing(keys: QueueKeys) -> QueueDoesNotExist:
    return QueueDoesNotExist(f"queue {keys.name!r} does not exist (no key {keys.bound!r})")


def closed_error(keys: QueueKeys) -> QueueClosed:
    return QueueClosed(f"queue {keys.name!r} is closed")


def to_int(raw: Any, key: str) -> int:
    if raw is None:
        return 0
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise PressureProtocolError(f"key {key!r} holds {raw!r}, not an integer") from None


def to_text(raw: Any) -> str | None:
    if raw is None:
        return None
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def has_room(bound: int, length: int) -> bool:
    return bound == 0 or length < bound


def push_token(key: str | bytes) -> tuple[Command, Command]:
    # LTRIM keeps the list at one element even if a token was pushed twice (e.g. by unlock
    # racing a holder), so exclusivity heals instead of doubling.
    return ("LPUSH", key, 0), ("LTRIM", key, 0, 0)


class Role:
    """Whether this operation holds its role token, so its `finally` must push it back."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held = False


def run_script(call: Eval, role: Role) -> Step[list[Any]]:
    """Run a script that takes over the tokens we hold; its reply (a list) is returned.

    Our scripts give back the role (and any room token) themselves unless they answer
    WAIT, in which case the role is ours and the caller's `finally` owes it back.
    """
    try:
        (reply,) = yield call
    except BaseException as exc:
        # The scripts trap their own errors and always answer a list, so an error reply means
        # Redis refused to run the script at all (OOM, READONLY, NOPERM, BUSY...): whatever
        # we held, we still hold. A lost reply (connection, cancellation) leaves unknown
        # whether the script ran and gave the token back; pushing it again could let two
        # clients hold the role, while a lost token is what `unlock` recovers, so we assume
        # it ran.
        if not isinstance(exc, ResponseError):
            role.held = False
        raise
    role.held = reply[0] == WAIT
    return list(reply)


def wait_role(keys: QueueKeys, free_key: str, deadline: Deadline) -> Step[bool]:
    """BRPOP a role token in chunks; raise QueueDoesNotExist if the queue goes away meanwhile."""
    while (wait := deadline.next_wait()) is not None:
        (token,) = yield blocking_pop((free_key,), wait, "token")
        if token is not None:
            return True
        # A delete takes the token itself and removes the list, so without this check a
        # waiter would block forever on a list that can no longer be pushed to.
        (exists,) = yield one("EXISTS", keys.bound)
        if not exists:
            raise missing(keys)
    return False


def wait_pop(
    lists: tuple[str, ...], kind: PopKind, deadline: Deadline, bound_key: str | None
) -> Step[tuple[bytes, bytes] | None]:
    """BRPOP from `lists` (all holding `kind`) in chunks; (key, value), or None at the
    deadline."""
    while (wait := deadline.next_wait()) is not None:
        (reply,) = yield blocking_pop(lists, wait, kind)
        if reply is not None:
            return bytes(reply[0]), bytes(reply[1])
        if bound_key is not None:
            (exists,) = yield one("EXISTS", bound_key)
            if not exists:
                raise QueueDoesNotExist(f"queue deleted while waiting (no key {bound_key!r})")
    return None

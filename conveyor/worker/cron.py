"""Cron schedules: messages queued up to a minute ahead, at most once per tick.

Every worker process that carries a schedule runs the same loop. For each tick T within the
look-ahead window it makes a claim (conveyor.worker.claims) on the key (schedule, T) at the
node; only the winner adds the message, with DELAY T - now. A claim is first-marker-wins on
one node, so across any number of processes and hosts talking to that node a tick is
enqueued at most once. The winner writes nothing before its claim and adds the message
after it: if it dies in between, that tick is skipped (at most once, never twice).
A paused queue (any PAUSE state but none) gets no scheduled messages.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from conveyor.client import Client, ConveyorError
from conveyor.worker import claims

log = logging.getLogger("conveyor.worker.cron")
LOOKAHEAD_S = 60


def _croniter() -> type:
    try:
        from croniter import croniter
    except ImportError:  # an optional dependency: say how to get it
        raise ValueError("schedules need croniter: pip install 'conveyor[cron]'") from None
    return croniter  # type: ignore[no-any-return]


def validate_cron(expression: str) -> None:
    croniter = _croniter()
    if not croniter.is_valid(expression):
        raise ValueError(f"bad cron expression {expression!r}")
    # is_valid checks the syntax only: "0 0 30 2 *" (Feb 30) passes it, then every later
    # next-date asks raise. Asking for one here refuses it with the other bad crons.
    try:
        croniter(expression, datetime.now(UTC)).get_next(float)
    except ValueError:  # CroniterBadDateError
        raise ValueError(f"bad cron expression {expression!r}: no date ever matches it") from None


@dataclass
class ScheduleSpec:
    key: str  # stable across processes and hosts: queue + cron + params
    cron: str
    queue: str  # checked for PAUSE before scheduling
    enqueue: Callable[[int, int], str]  # (tick epoch s, delay s) -> job ID


def ticks_between(cron: str, start: float, end: float) -> list[int]:
    """The cron ticks T (epoch seconds, UTC) with start < T <= end."""
    it = _croniter()(cron, datetime.fromtimestamp(start, UTC))
    ticks: list[int] = []
    for _ in range(10_000):  # bounded: a minute's window holds at most 60 ticks
        tick = int(it.get_next(float))
        if tick > end:
            break
        if tick > start:
            ticks.append(tick)
    return ticks


class Scheduler:
    def __init__(
        self, client: Client, specs: list[ScheduleSpec], owner: str,
        clock: Callable[[], float] = time.time, lookahead: float = LOOKAHEAD_S,
    ) -> None:  # fmt: skip
        self.client = client
        self.specs = specs
        self.owner = owner
        self.clock = clock
        self.lookahead = lookahead
        self._seen: dict[tuple[str, int], bool] = {}  # ticks this process already claimed

    def remembered(self) -> int:
        """Ticks kept in the memo (those of the last hour): the record shows it stays small."""
        return len(self._seen)

    def run_once(self) -> list[str]:
        """Claim and enqueue the ticks now due within the look-ahead; the new job IDs."""
        added: list[str] = []
        now = self.clock()
        for spec in self.specs:
            try:
                added += self._schedule(spec, now)
            except ConveyorError as exc:
                log.warning("schedule %s: %s", spec.key, exc)
            except ValueError as exc:  # croniter finds no next date: skip it, keep the rest
                log.warning("schedule %s: cron %r: %s", spec.key, spec.cron, exc)
        # Forget ticks long past, so the memo stays small.
        self._seen = {k: v for k, v in self._seen.items() if k[1] > now - 3600}
        return added

    def _schedule(self, spec: ScheduleSpec, now: float) -> list[str]:
        ticks = [t for t in ticks_between(spec.cron, now, now + self.lookahead)]
        ticks = [t for t in ticks if (spec.key, t) not in self._seen]
        if not ticks or self.client.pause(spec.queue, "state") != "none":
            return []
        added = []
        for tick in ticks:
            self._seen[(spec.key, tick)] = True
            queue = claims.claim_queue("cron", spec.key, str(tick))
            ttl = int(self.lookahead) + 3600  # outlives every process that could ask
            if claims.try_claim(self.client, queue, self.owner, ttl) is None:
                continue
            job_id = spec.enqueue(tick, max(0, math.ceil(tick - now)))
            log.info("schedule %s: tick %s -> %s", spec.key, tick, job_id)
            added.append(job_id)
        return added

"""Several jobs or job IDs per frame between Conveyor nodes: runs of sends merged (sans-IO).

A client pipelining synchronous ADDJOBs leaves a run of REPLJOB sends of one job each, a
node answering them a run of GOTJOBs, an ACKJOB of many IDs a run of SETACKs (then
GOTACKs, then DELJOBs). To a node whose headers carry CONVEYOR_MARK such a run goes as
one REPLJOB of several jobs, or one frame of several job-ID messages (JobIdBatch): one
header, one frame and one dispatch per node instead of one per job. C Disque takes
exactly one job per REPLJOB and one ID per job-ID message, so a C node gets them one by
one as before. YOURJOBS (federation) carries several jobs in Disque too: a run of those
is merged for every node.

Only a run of consecutive sends of the same type is merged, and each node's messages
keep their order, so nothing a node receives changes but the framing.

The copies of new jobs are gathered before that, as they are made (`CopyOutbox`): a
node adding thousands of jobs a second would otherwise make a message and a send per job
and target only for `coalesce` to take them apart again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from conveyor.cluster.actions import Action, Send
from conveyor.cluster.messages import (
    JOB_ID_CLASSES,
    TYPE_OF_CLASS,
    Header,
    JobIdBatch,
    Message,
    ReplJob,
    YourJobs,
)
from conveyor.core.codec import JobRecord

_MERGED = frozenset((ReplJob, YourJobs, *JOB_ID_CLASSES))


def coalesce(actions: list[Action], takes_batches: Callable[[bytes], bool]) -> list[Action]:
    """The actions with each run of mergeable sends merged per node that takes them."""
    merged: list[Action] = []
    index, count = 0, len(actions)
    while index < count:
        action = actions[index]
        kind = type(action.message) if type(action) is Send else None
        if kind not in _MERGED:
            merged.append(action)
            index += 1
            continue
        end = index + 1
        while (
            end < count and type(actions[end]) is Send and type(actions[end].message) is kind  # type: ignore[union-attr]
        ):
            end += 1
        if end - index == 1:
            merged.append(action)
        else:
            merged.extend(_merge(actions[index:end], kind, takes_batches))  # type: ignore[arg-type]
        index = end
    return merged


def _merge(
    sends: list[Send], kind: type[Message], takes_batches: Callable[[bytes], bool]
) -> list[Action]:
    out: list[Action] = []
    carries_jobs = kind is ReplJob or kind is YourJobs
    # (node, mflags) -> the first header and the jobs or (id, aux) entries for it, in order
    groups: dict[tuple[bytes, int], tuple[Header, list[object]]] = {}
    for send in sends:
        if kind is not YourJobs and not takes_batches(send.name):
            out.append(send)  # a C Disque node, or one not heard from yet
            continue
        message = send.message
        header = message.header
        group = groups.get((send.name, header.mflags))
        if group is None:
            group = groups[send.name, header.mflags] = (header, [])
        if carries_jobs:
            group[1].extend(message.jobs)  # type: ignore[union-attr]
        else:
            group[1].append((message.id, message.aux))  # type: ignore[union-attr]
    # The copies of one run of ADDJOBs go to every target alike: one message object for
    # them all, so the transport sees a broadcast and serializes the jobs once.
    shared: dict[tuple[int, ...], Message] = {}
    for (name, _), (header, items) in groups.items():
        if carries_jobs:
            key = (id(header), *map(id, items))
            message = shared.get(key)
            if message is None:
                message = shared[key] = kind(header, tuple(items))  # type: ignore[call-arg]
            out.append(Send(name, message))
        else:
            out.append(Send(name, job_id_message(kind, header, items)))  # type: ignore[arg-type]
    return out


def job_id_message(
    kind: type[Message], header: Header, entries: Sequence[tuple[bytes, int]]
) -> Message:
    """A run of job-ID messages of one kind to a Conveyor node: the message itself when
    alone, else one JobIdBatch of its (id, aux) entries."""
    if len(entries) == 1:
        job_id, aux = entries[0]
        return kind(header, job_id, aux)  # type: ignore[call-arg]
    return JobIdBatch(header, TYPE_OF_CLASS[kind], tuple(entries))


@dataclass(slots=True)
class _CopyBatch:
    start: int  # where its sends stand in the actions list, one per target
    targets: tuple[bytes, ...]
    header: Header
    jobs: list[JobRecord]


class CopyOutbox:
    """The copies of new jobs (REPLJOB) to the same Conveyor nodes, gathered in place.

    The first copy is put in the actions list as one send per target; the next ones to
    the same targets join it as long as nothing was put after it, so each node's
    messages keep their order (a SETACK or DELJOB for a job never overtakes its copy).
    `seal`, when the actions are taken (Membership.before_take), puts the whole batch in
    the place of those sends. Only for targets that all take several jobs per REPLJOB: a
    C Disque node gets one message per job, as coalesce leaves it.
    """

    __slots__ = ("_actions", "_batches", "extra_sends")

    def __init__(self) -> None:
        self._actions: list[Action] | None = None  # the list the batches stand in
        self._batches: list[_CopyBatch] = []
        # The sends one per job and target would have been beyond those in the list:
        # how far a pipeline's copies have grown (SendPolicy.send_if_many, node/send_policy.py).
        self.extra_sends = 0

    def add(
        self,
        actions: list[Action],
        targets: tuple[bytes, ...],
        header: Header,
        record: JobRecord,
        takes_batches: Callable[[bytes], bool],
    ) -> None:
        """Queue `record`'s copy to each of `targets` (known and past their handshake)."""
        if self._actions is not actions:
            self._actions, self._batches, self.extra_sends = actions, [], 0
        batches = self._batches
        if batches:
            last = batches[-1]
            if (
                last.start + len(last.targets) == len(actions)
                and last.header is header
                and last.targets == targets
            ):
                last.jobs.append(record)
                self.extra_sends += len(targets)
                return
        message = ReplJob(header, (record,))
        if targets and all(map(takes_batches, targets)):
            batches.append(_CopyBatch(len(actions), targets, header, [record]))
        actions.extend([Send(name, message) for name in targets])

    def add_run(
        self,
        actions: list[Action],
        targets: tuple[bytes, ...],
        header: Header,
        records: list[JobRecord],
        takes_batches: Callable[[bytes], bool],
    ) -> None:
        """`add` for each of `records`, in their order."""
        if not records:
            return
        self.add(actions, targets, header, records[0], takes_batches)
        last = self._batches[-1] if self._batches else None
        if last is None or last.jobs[-1] is not records[0]:
            for record in records[1:]:  # not batched (a C Disque target): one by one
                self.add(actions, targets, header, record, takes_batches)
            return
        last.jobs.extend(records[1:])
        self.extra_sends += len(targets) * (len(records) - 1)

    def seal(self, actions: list[Action]) -> None:
        """The batches in `actions` as REPLJOBs of all their jobs; the outbox empty."""
        if self._actions is actions:
            for batch in self._batches:
                if len(batch.jobs) > 1:
                    message = ReplJob(batch.header, tuple(batch.jobs))
                    end = batch.start + len(batch.targets)
                    actions[batch.start : end] = [Send(name, message) for name in batch.targets]
        self._actions, self._batches, self.extra_sends = None, [], 0

"""Several jobs per frame between Conveyor nodes: REPLJOBs and GOTJOBs merged (sans-IO).

A client pipelining synchronous ADDJOBs leaves a run of REPLJOB sends of one job each,
and a node answering them a run of GOTJOBs. To a node whose headers carry CONVEYOR_MARK
such a run goes as one REPLJOB of several jobs, or one GOTJOB frame of several IDs
(GotJobs): one header, one frame and one dispatch per node instead of one per job. C
Disque takes exactly one job per REPLJOB and one ID per GOTJOB, so a C node gets them
one by one as before.

YOURJOBS (federation) carries several jobs in Disque too: a run of those is merged for
every node.

Only a run of consecutive sends of the same type is merged, and each node's messages
keep their order, so nothing a node receives changes but the framing.
"""

from __future__ import annotations

from collections.abc import Callable

from conveyor.cluster.actions import Action, Send
from conveyor.cluster.messages import GotJob, GotJobs, Header, ReplJob, YourJobs
from conveyor.core.codec import JobRecord

MergedKind = type[ReplJob] | type[GotJob] | type[YourJobs]


def coalesce(actions: list[Action], takes_batches: Callable[[bytes], bool]) -> list[Action]:
    """The actions with each run of REPLJOB (or GOTJOB) sends merged per batching node."""
    merged: list[Action] = []
    index, count = 0, len(actions)
    while index < count:
        action = actions[index]
        kind = type(action.message) if type(action) is Send else None
        if kind is not ReplJob and kind is not GotJob and kind is not YourJobs:
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
    sends: list[Send], kind: MergedKind, takes_batches: Callable[[bytes], bool]
) -> list[Action]:
    out: list[Action] = []
    # (node, mflags) -> the first header and the jobs (or IDs) for it, in order
    groups: dict[tuple[bytes, int], tuple[Header, list[JobRecord] | list[bytes]]] = {}
    for send in sends:
        if kind is not YourJobs and not takes_batches(send.name):
            out.append(send)  # a C Disque node, or one not heard from yet
            continue
        message = send.message
        header = message.header
        group = groups.get((send.name, header.mflags))
        if group is None:
            group = groups[send.name, header.mflags] = (header, [])
        if kind is not GotJob:
            group[1].extend(message.jobs)  # type: ignore[union-attr,arg-type]
        else:
            group[1].append(message.id)  # type: ignore[union-attr,arg-type]
    for (name, _), (header, items) in groups.items():
        if kind is not GotJob:
            out.append(Send(name, kind(header, tuple(items))))  # type: ignore[arg-type,call-arg]
        elif len(items) == 1:
            out.append(Send(name, GotJob(header, items[0])))  # type: ignore[arg-type]
        else:
            out.append(Send(name, GotJobs(header, tuple(items))))  # type: ignore[arg-type]
    return out

"""Disque 1.0-rc1 cluster bus messages as typed values (cluster.h `clusterMsg` and friends).

One class per message type. Every class is a NamedTuple whose first field is the common
`Header`; the rest is that type's payload, named as in cluster.h. What the wire carries but
a value does not need twice is derived when encoding: `sig`, `totlen`, `type`, `count`
(gossip entries), `numjobs`/`datasize` (serialized jobs) and `qnamelen`.

Fields the C node zeroes and never reads (`notused0`, `myip`, `notused1`, `mflags[1..2]`,
the gossip `notused1`/`notused2`) are kept anyway, so that every frame `decode` accepts
encodes back to the same bytes. Fixed-width text fields (`myip`, a gossip `ip`) are held
without their trailing NUL padding: re-padding to the width restores them exactly.

Node names and job IDs are raw 40-byte `bytes`, as in the job codec (`JobRecord`).
Layout, byte order and what each field means: ../shared/reference/disque-wire/bus/NOTES.md,
summarised in codec.py.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

from conveyor.core.codec import JobRecord

__all__ = [
    "CLUSTER_FAIL",
    "CLUSTER_OK",
    "CONVEYOR_MARK",
    "GOSSIP_TYPES",
    "JOBS_TYPES",
    "JOB_ID_TYPES",
    "MFLAG_INCR_DELIV",
    "MFLAG_INCR_NACKS",
    "MFLAG_NOREPLY",
    "NODE_DELETED",
    "NODE_FAIL",
    "NODE_HANDSHAKE",
    "NODE_LEAVING",
    "NODE_MEET",
    "NODE_MYSELF",
    "NODE_NOADDR",
    "NODE_PFAIL",
    "PAUSE_IN",
    "PAUSE_OUT",
    "PROTO_VER",
    "QUEUE_OP_TYPES",
    "DelJob",
    "Enqueue",
    "Fail",
    "GossipEntry",
    "GotAck",
    "GotJob",
    "Header",
    "JobIdBatch",
    "Meet",
    "Message",
    "MessageType",
    "NeedJobs",
    "Pause",
    "Ping",
    "Pong",
    "Queued",
    "ReplJob",
    "SetAck",
    "WillQueue",
    "Working",
    "YourJobs",
    "message_type",
]

PROTO_VER = 1  # CLUSTER_PROTO_VER; the C node ignores messages carrying another version

# Sender's cluster state (header `state`).
CLUSTER_OK = 0
CLUSTER_FAIL = 1

# Node flags (header `flags`: the sender's own word, so MYSELF is always set there;
# gossip `flags`: the sender's view of a third node, never MYSELF).
NODE_PFAIL = 1
NODE_FAIL = 2
NODE_MYSELF = 4
NODE_HANDSHAKE = 8
NODE_NOADDR = 16
NODE_MEET = 32
NODE_DELETED = 64
NODE_LEAVING = 128

# Message flags, header mflags[0] (CLUSTERMSG_FLAG0_*).
MFLAG_NOREPLY = 1  # REPLJOB: do not answer GOTJOB
MFLAG_INCR_NACKS = 2  # QUEUED: the requeue was a NACK, bump the nacks counter
MFLAG_INCR_DELIV = 4  # QUEUED: bump the additional-deliveries counter

# Queue pause flags (PAUSE `aux`).
PAUSE_IN = 1
PAUSE_OUT = 2


# In `notused0` of every header a Conveyor node sends, where Disque puts 0 and never reads
# it. A node sending it takes REPLJOBs of several jobs and frames of several job-ID
# messages (JobIdBatch), so Conveyor nodes batch those between themselves and stay byte
# for byte Disque's with a C node.
CONVEYOR_MARK = 0x4356


class MessageType(IntEnum):
    """CLUSTERMSG_TYPE_*: the header's `type`."""

    PING = 0
    PONG = 1
    MEET = 2
    FAIL = 3
    REPLJOB = 4
    GOTJOB = 5
    ENQUEUE = 6
    QUEUED = 7
    SETACK = 8
    WILLQUEUE = 9
    GOTACK = 10
    DELJOB = 11
    NEEDJOBS = 12
    YOURJOBS = 13
    WORKING = 14
    PAUSE = 15


GOSSIP_TYPES = frozenset({MessageType.PING, MessageType.PONG, MessageType.MEET})
JOBS_TYPES = frozenset({MessageType.REPLJOB, MessageType.YOURJOBS})
QUEUE_OP_TYPES = frozenset({MessageType.NEEDJOBS, MessageType.PAUSE})
JOB_ID_TYPES = frozenset(
    {
        MessageType.GOTJOB,
        MessageType.ENQUEUE,
        MessageType.QUEUED,
        MessageType.SETACK,
        MessageType.WILLQUEUE,
        MessageType.GOTACK,
        MessageType.DELJOB,
        MessageType.WORKING,
    }
)


class Header(NamedTuple):
    """The 144-byte header minus what encoding derives (sig, totlen, type, count)."""

    sender: bytes  # 40-char node ID of the sender
    port: int  # the sender's client port; its bus port is port + 10000
    flags: int  # the sender's own node flags (NODE_*), MYSELF included
    state: int = CLUSTER_OK  # the sender's view of the cluster state
    mflags: int = 0  # mflags[0]: MFLAG_*
    ver: int = PROTO_VER
    myip: bytes = b""  # never filled in by Disque 1.0-rc1: all zero (b"")
    notused0: int = 0
    notused1: bytes = b""  # 34 reserved bytes, trailing NULs stripped
    mflags1: int = 0  # mflags[1], unused
    mflags2: int = 0  # mflags[2], unused


class GossipEntry(NamedTuple):
    """clusterMsgDataGossip: what the sender knows about one other node (104 bytes)."""

    nodename: bytes  # 40-char node ID
    ping_sent: int  # low 32 bits of the sender's unix-ms ping time, 0 = none pending
    pong_received: int  # low 32 bits of the unix ms of the last PONG from that node
    ip: bytes  # address text without its NUL padding (46 bytes on the wire)
    port: int  # that node's client port
    flags: int  # the sender's view of that node: NODE_* without MYSELF
    notused1: int = 0
    notused2: int = 0

    @property
    def address(self) -> str:
        """The IP as text: what precedes the first NUL, as C string functions read it."""
        return self.ip.split(b"\0", 1)[0].decode("latin-1")


class Ping(NamedTuple):
    header: Header
    gossip: tuple[GossipEntry, ...] = ()


class Pong(NamedTuple):
    """The reply to PING or MEET, same layout; sent back on the link the request came on."""

    header: Header
    gossip: tuple[GossipEntry, ...] = ()


class Meet(NamedTuple):
    """A PING that makes the receiver add the sender as a node."""

    header: Header
    gossip: tuple[GossipEntry, ...] = ()


class Fail(NamedTuple):
    """Mark `nodename` as failing (sent by the node that turned PFAIL into FAIL)."""

    header: Header
    nodename: bytes


class ReplJob(NamedTuple):
    """Add a copy of the job(s) to the receiver; it answers GOTJOB unless MFLAG_NOREPLY.

    Jobs are SER_MESSAGE records: `etime` is seconds of TTL left + 1, DELIVERED cleared.
    Disque sends exactly one job and ignores a REPLJOB with another count; Conveyor nodes
    send each other several (CONVEYOR_MARK).
    """

    header: Header
    jobs: tuple[JobRecord, ...]


class YourJobs(NamedTuple):
    """NEEDJOBS reply: jobs moved to the receiver, same layout as REPLJOB."""

    header: Header
    jobs: tuple[JobRecord, ...]


class GotJob(NamedTuple):
    """REPLJOB received. aux unused (0)."""

    header: Header
    id: bytes
    aux: int = 0


class Enqueue(NamedTuple):
    """Queue the job, after `delay` seconds (aux) counted from reception; 0 = now."""

    header: Header
    id: bytes
    aux: int = 0

    @property
    def delay(self) -> int:
        return self.aux


class Queued(NamedTuple):
    """The sender queued the job: update your requeue time (and dequeue by node-ID tie-break).

    Counters to bump travel in header.mflags (MFLAG_INCR_NACKS / MFLAG_INCR_DELIV).
    """

    header: Header
    id: bytes
    aux: int = 0


class SetAck(NamedTuple):
    """Mark the job acknowledged; aux = how many nodes the sender believes may have it."""

    header: Header
    id: bytes
    aux: int = 0

    @property
    def may_have(self) -> int:
        return self.aux


class WillQueue(NamedTuple):
    """The sender will requeue the job in ~500 ms unless told it is queued elsewhere."""

    header: Header
    id: bytes
    aux: int = 0


class GotAck(NamedTuple):
    """SETACK answer; aux = 1 if the answering node knew the job, else 0."""

    header: Header
    id: bytes
    aux: int = 0

    @property
    def known(self) -> bool:
        return self.aux != 0


class DelJob(NamedTuple):
    """Delete the job (acked job GC, FASTACK). aux unused (0)."""

    header: Header
    id: bytes
    aux: int = 0


class Working(NamedTuple):
    """A client works on the job: postpone requeueing and dequeue it. aux unused (0)."""

    header: Header
    id: bytes
    aux: int = 0


class NeedJobs(NamedTuple):
    """The sender wants up to aux jobs of queue `qname`."""

    header: Header
    qname: bytes
    aux: int

    @property
    def wanted(self) -> int:
        return self.aux


class Pause(NamedTuple):
    """Set queue `qname`'s pause flags to aux (PAUSE_IN | PAUSE_OUT, 0 = none)."""

    header: Header
    qname: bytes
    aux: int

    @property
    def pause_flags(self) -> int:
        return self.aux


class JobIdBatch(NamedTuple):
    """Several messages of one job-ID type in one frame (Conveyor to Conveyor only, see
    CONVEYOR_MARK): the header's `count` is the number of (id, aux) entries, 2 or more.
    `messages()` gives them back one by one, as a C node would have sent them."""

    header: Header
    kind: MessageType  # one of JOB_ID_TYPES
    entries: tuple[tuple[bytes, int], ...]  # (job ID, aux)

    def messages(self) -> list[JobIdMessage]:
        cls = CLASS_OF_TYPE[self.kind]
        header = self.header
        return [cls(header, job_id, aux) for job_id, aux in self.entries]  # type: ignore[call-arg,misc]


GossipMessage = Ping | Pong | Meet
JobsMessage = ReplJob | YourJobs
JobIdMessage = GotJob | Enqueue | Queued | SetAck | WillQueue | GotAck | DelJob | Working
QueueOpMessage = NeedJobs | Pause
Message = GossipMessage | Fail | JobsMessage | JobIdMessage | QueueOpMessage | JobIdBatch

# For isinstance() dispatch on a family of same-layout messages.
GOSSIP_CLASSES = (Ping, Pong, Meet)
JOBS_CLASSES = (ReplJob, YourJobs)
JOB_ID_CLASSES = (GotJob, Enqueue, Queued, SetAck, WillQueue, GotAck, DelJob, Working)
QUEUE_OP_CLASSES = (NeedJobs, Pause)

# Class <-> wire type, both ways; the codec dispatches on these.
CLASS_OF_TYPE: dict[MessageType, type[Message]] = {
    MessageType.PING: Ping,
    MessageType.PONG: Pong,
    MessageType.MEET: Meet,
    MessageType.FAIL: Fail,
    MessageType.REPLJOB: ReplJob,
    MessageType.GOTJOB: GotJob,
    MessageType.ENQUEUE: Enqueue,
    MessageType.QUEUED: Queued,
    MessageType.SETACK: SetAck,
    MessageType.WILLQUEUE: WillQueue,
    MessageType.GOTACK: GotAck,
    MessageType.DELJOB: DelJob,
    MessageType.NEEDJOBS: NeedJobs,
    MessageType.YOURJOBS: YourJobs,
    MessageType.WORKING: Working,
    MessageType.PAUSE: Pause,
}
TYPE_OF_CLASS: dict[type[Message], MessageType] = {cls: kind for kind, cls in CLASS_OF_TYPE.items()}


def message_type(message: Message) -> MessageType:
    """The wire type of a message value."""
    return TYPE_OF_CLASS[type(message)]

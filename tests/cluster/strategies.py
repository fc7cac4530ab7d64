"""Hypothesis strategies for bus message values of every type, covering each field's range."""

from __future__ import annotations

from hypothesis import strategies as st

from conveyor.cluster.messages import (
    CLASS_OF_TYPE,
    GOSSIP_TYPES,
    JOB_ID_TYPES,
    JOBS_TYPES,
    GossipEntry,
    Header,
    JobIdBatch,
    Message,
    MessageType,
)
from conveyor.core.codec import JobRecord


def uint(bits: int) -> st.SearchStrategy[int]:
    # The edges matter most for a packer: bias toward 0 and the maximum.
    top = (1 << bits) - 1
    return st.one_of(st.sampled_from([0, 1, top]), st.integers(0, top))


NAMES = st.binary(min_size=40, max_size=40)
HEX_NAMES = st.text("0123456789abcdef", min_size=40, max_size=40).map(str.encode)


def padded_text(width: int) -> st.SearchStrategy[bytes]:
    """Fixed-width text fields as decoded: anything not ending in NUL (that is padding)."""
    return st.binary(max_size=width).map(lambda raw: raw.rstrip(b"\0"))


HEADERS = st.builds(
    Header,
    sender=st.one_of(HEX_NAMES, NAMES),
    port=uint(16),
    flags=uint(16),
    state=uint(8),
    mflags=uint(8),
    ver=uint(16),
    myip=padded_text(46),
    notused0=uint(16),
    notused1=padded_text(34),
    mflags1=uint(8),
    mflags2=uint(8),
)
GOSSIP_ENTRIES = st.builds(
    GossipEntry,
    nodename=st.one_of(HEX_NAMES, NAMES),
    ping_sent=uint(32),
    pong_received=uint(32),
    ip=st.one_of(st.sampled_from([b"127.0.0.1", b"::1", b""]), padded_text(46)),
    port=uint(16),
    flags=uint(16),
    notused1=uint(16),
    notused2=uint(32),
)
JOB_IDS = st.builds(
    lambda node, rand, ttl: b"D-" + node + b"-" + rand + b"-" + ttl,
    st.binary(min_size=8, max_size=8),
    st.binary(min_size=24, max_size=24),
    st.binary(min_size=4, max_size=4),
)
JOB_RECORDS = st.builds(
    JobRecord,
    id=JOB_IDS,
    state=st.integers(0, 15),
    gc_retry=st.integers(0, 15),
    flags=uint(8),
    repl=uint(16),
    etime=uint(32),
    ctime=uint(64),
    delay=uint(32),
    retry=uint(32),
    nacks=uint(16),
    additional_deliveries=uint(16),
    queue=st.binary(max_size=20),
    body=st.binary(max_size=60),
    nodes=st.lists(NAMES, max_size=4).map(tuple),
)


def _payload(kind: MessageType) -> st.SearchStrategy[tuple[object, ...]]:
    if kind in GOSSIP_TYPES:
        return st.tuples(st.lists(GOSSIP_ENTRIES, max_size=4).map(tuple))
    if kind == MessageType.FAIL:
        return st.tuples(NAMES)
    if kind in JOBS_TYPES:
        return st.tuples(st.lists(JOB_RECORDS, max_size=3).map(tuple))
    if kind in JOB_ID_TYPES:
        # Bus job-ID fields are 40 raw bytes: dummy or foreign IDs must pass through.
        return st.tuples(st.one_of(JOB_IDS, NAMES), uint(32))
    return st.tuples(st.binary(max_size=40), uint(32))


def messages_of(kind: MessageType) -> st.SearchStrategy[Message]:
    cls = CLASS_OF_TYPE[kind]
    return st.builds(lambda header, payload: cls(header, *payload), HEADERS, _payload(kind))


# Conveyor's frames of several job-ID messages, beside the one-entry frames above.
JOB_ID_BATCHES = st.builds(
    JobIdBatch,
    HEADERS,
    st.sampled_from(sorted(JOB_ID_TYPES)),
    st.lists(st.tuples(st.one_of(JOB_IDS, NAMES), uint(32)), min_size=2, max_size=5).map(tuple),
)
MESSAGES: st.SearchStrategy[Message] = st.one_of(
    [*(messages_of(kind) for kind in MessageType), JOB_ID_BATCHES]
)

"""Each refusal with its precise reason: bad frames from a peer (BusProtocolError) and
values that do not fit the layout (BusEncodeError)."""

from __future__ import annotations

import struct

import pytest

from conveyor.cluster.codec import (
    DEFAULT_MAX_FRAME,
    BusEncodeError,
    BusProtocolError,
    FrameReader,
    decode,
    encode,
)
from conveyor.cluster.messages import (
    MFLAG_NOREPLY,
    NODE_MYSELF,
    Fail,
    GossipEntry,
    GotJob,
    Header,
    JobIdBatch,
    MessageType,
    NeedJobs,
    Ping,
    ReplJob,
)
from conveyor.core.codec import JobRecord

from .recording import recorded_messages

A = b"468231699856d39b1ca3830928ea0be589493482"
JOB_ID = b"D-46823169-q7+ExLFVVSR7e6Avb/dysiXW-05a1"
HEADER = Header(sender=A, port=42001, flags=NODE_MYSELF)
JOB = JobRecord(JOB_ID, 0, 0, 0, 3, 86401, 1795344799062000000, 0, 300, 0, 0, b"q1", b"hi", (A,))


def frame(kind: int, payload: bytes = b"", count: int = 0, totlen: int | None = None) -> bytes:
    size = 144 + len(payload) if totlen is None else totlen
    head = b"DbuZ" + struct.pack(">IHHHH", size, 1, 0, kind, count) + A + bytes(80)
    return head + struct.pack(">HHBBBB", 42001, 4, 0, 0, 0, 0) + payload


def test_helper_builds_what_the_codec_builds() -> None:
    assert frame(5, JOB_ID + bytes(4)) == encode(GotJob(HEADER, JOB_ID))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"DbuX" + bytes(140), r"bad signature: byte b'X' at offset 3, expected b'DbuZ'"),
        (b"x", r"bad signature: byte b'x' at offset 0"),
        (b"DbuZ" + struct.pack(">I", 143) + bytes(136), "totlen 143 at offset 4 is below the 144"),
        (b"DbuZ" + struct.pack(">I", 144), "shorter than the 144-byte header"),
        (frame(16), "unknown message type 16 at offset 12"),
        (frame(0xFFFF), "unknown message type 65535"),
        (frame(0, bytes(104), count=2), "PING with count 2 at offset 14 must be 352 bytes"),
        (frame(3, bytes(39)), "FAIL must be 184 bytes, totlen is 183"),
        (frame(5, bytes(45)), "GOTJOB must be 188 bytes, totlen is 189"),
        (frame(11, bytes(44), count=1), "count 1 at offset 14 on DELJOB, must be 0"),
        # Conveyor's frames of several job-ID entries: count 2 or more, 44 bytes each.
        (frame(5, bytes(44), count=1), "count 1 at offset 14 on GOTJOB, must be 0"),
        (frame(5, bytes(88 + 1), count=2), "GOTJOB with count 2 at offset 14 must be 232 bytes"),
        (frame(8, bytes(88), count=3), "SETACK with count 3 at offset 14 must be 276 bytes"),
        (frame(4, bytes(4)), "REPLJOB totlen 148 is below its 152-byte minimum"),
        (
            frame(13, struct.pack(">II", 1, 10) + bytes(9)),
            "YOURJOBS datasize 10 at offset 148 needs totlen 162, totlen is 161",
        ),
        (
            frame(4, struct.pack(">II", 2, 100) + bytes(100)),
            "REPLJOB numjobs 2 at offset 144 cannot fit in datasize 100",
        ),
        (
            frame(12, struct.pack(">II", 1, 3) + b"q1"),
            "NEEDJOBS qnamelen 3 at offset 148 needs totlen 155, totlen is 154",
        ),
        (frame(5, JOB_ID + bytes(4)) + b"x", "totlen 188 at offset 4 but the frame has 189"),
    ],
)
def test_decode_refuses_with_a_precise_reason(data: bytes, reason: str) -> None:
    with pytest.raises(BusProtocolError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        decode(data)


def test_a_job_area_that_does_not_hold_numjobs_jobs() -> None:
    one = encode(ReplJob(HEADER, (JOB._replace(body=bytes(200)),)))
    two_claimed = one[:144] + struct.pack(">I", 2) + one[148:]
    with pytest.raises(BusProtocolError, match=r"job area at offset 152 \(numjobs 2\)"):
        decode(two_claimed)
    garbage = bytearray(one)
    garbage[152] ^= 0xFF  # the job's own LE length prefix
    with pytest.raises(BusProtocolError, match="job area at offset 152"):
        decode(bytes(garbage))


def test_frame_reader_reasons_carry_the_stream_offset_and_earlier_frames() -> None:
    good = [m.raw for m in recorded_messages()[:3]]
    reader = FrameReader()
    with pytest.raises(BusProtocolError) as caught:
        reader.feed(b"".join(good) + b"DbuQ")
    error = caught.value
    assert error.frames == good
    assert error.offset == sum(map(len, good))
    assert error.reason == "bad signature: byte b'Q' at offset 3, expected b'DbuZ'"
    assert str(error) == f"{error.reason} (frame at stream offset {error.offset})"
    # No boundary is trustworthy after that: the reader stays failed, holding nothing.
    assert reader.buffered == 0 and reader.failed is not None
    with pytest.raises(BusProtocolError, match="bad signature"):
        reader.feed(good[0])


def test_frame_reader_refuses_a_bad_signature_at_its_first_byte() -> None:
    with pytest.raises(BusProtocolError, match=r"bad signature: byte b'E' at offset 0"):
        FrameReader().feed(b"E")


def test_frame_reader_maximum() -> None:
    assert FrameReader().max_frame == DEFAULT_MAX_FRAME == 64 * 1024 * 1024
    big = encode(NeedJobs(HEADER, b"q" * 1000, 1))
    assert FrameReader(max_frame=len(big)).feed(big) == [big]
    with pytest.raises(
        BusProtocolError, match=f"totlen {len(big)} at offset 4 is above the maximum {len(big) - 1}"
    ):
        FrameReader(max_frame=len(big) - 1).feed(big[:8])
    with pytest.raises(ValueError, match="below the 144-byte header"):
        FrameReader(max_frame=100)


def test_a_huge_but_consistent_length_buffers_only_what_arrives() -> None:
    # 65535 gossip entries: a legal 6.8 MB PING. The reader keeps what it was fed, no more.
    totlen = 144 + 104 * 0xFFFF
    head = frame(0, count=0xFFFF, totlen=totlen)
    reader = FrameReader()
    assert reader.feed(head + bytes(5000)) == []
    assert reader.buffered == 144 + 5000
    jobs_head = frame(4, struct.pack(">II", 1, 50_000_000), totlen=152 + 50_000_000)
    reader = FrameReader()
    assert reader.feed(jobs_head) == [] and reader.buffered == 152


def test_decode_accepts_another_version_and_leaves_ignoring_it_to_the_receiver() -> None:
    # Disque ignores a message whose ver is not 1 without dropping the link.
    data = bytearray(encode(Fail(HEADER, A)))
    data[9] = 2
    message = decode(bytes(data))
    assert message.header.ver == 2 and encode(message) == bytes(data)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (GotJob(HEADER._replace(sender=A[:39]), JOB_ID), "sender must be 40 bytes"),
        (GotJob(HEADER, JOB_ID + b"x"), "id must be 40 bytes"),
        (GotJob(HEADER, JOB_ID.decode()), "id must be 40 bytes"),  # type: ignore[arg-type]
        (GotJob(HEADER, JOB_ID, 1 << 32), "aux"),
        # A batch's entries, checked as one message's (a Conveyor node's GOTJOBs).
        (JobIdBatch(HEADER, MessageType.GOTJOB, ((JOB_ID, 0), (JOB_ID[1:], 0))), "id must be"),
        (JobIdBatch(HEADER, MessageType.GOTJOB, ((JOB_ID, 0), (JOB_ID, 1 << 32))), "aux"),
        (JobIdBatch(HEADER, MessageType.GOTJOB, ((JOB_ID, 0), (JOB_ID, -1))), "aux"),
        (JobIdBatch(HEADER, MessageType.GOTJOB, ((JOB_ID, "0"), (JOB_ID, 0))), "aux"),  # type: ignore[arg-type]
        (Fail(HEADER, b"short"), "nodename must be 40 bytes"),
        (Fail(HEADER._replace(port=65536), A), "port 65536 does not fit u16"),
        (Fail(HEADER._replace(state=-1), A), "state -1 does not fit u8"),
        (Fail(HEADER._replace(mflags=MFLAG_NOREPLY | 256), A), "mflags 257 does not fit u8"),
        (Fail(HEADER._replace(myip=b"1" * 47), A), "myip must be bytes of at most 46"),
        (Fail(HEADER._replace(myip=b"1.2.3.4\0"), A), "must not end with NUL"),
        (Ping(HEADER, (GossipEntry(A, 0, 0, b"127.0.0.1", 70000, 0),)), r"gossip\[0\].port 70000"),
        (Ping(HEADER, (GossipEntry(A, -1, 0, b"", 1, 0),)), r"gossip\[0\].ping_sent -1"),
        (Ping(HEADER, (GossipEntry(A[:5], 0, 0, b"", 1, 0),)), r"gossip\[0\].nodename"),
        (ReplJob(HEADER, (JOB._replace(id=b"x" * 40),)), "REPLJOB job: id at job offset 4"),
        (NeedJobs(HEADER, "q1", 1), "qname must be bytes"),  # type: ignore[arg-type]
        (NeedJobs(HEADER, b"q1", -5), "aux/qnamelen"),
        ((HEADER, JOB_ID), "tuple is not a bus message class"),
        (GotJob(tuple(HEADER), JOB_ID), "header must be a Header, not tuple"),  # type: ignore[arg-type]
        (ReplJob(HEADER, (tuple(JOB),)), "REPLJOB jobs must be JobRecords"),  # type: ignore[arg-type]
    ],
)
def test_encode_refuses_values_that_do_not_fit(message: object, reason: str) -> None:
    with pytest.raises(BusEncodeError, match=reason):
        encode(message)  # type: ignore[arg-type]

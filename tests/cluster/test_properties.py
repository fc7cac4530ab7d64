"""Properties: round trips for generated messages of every type; the FrameReader agrees
with itself whatever the chunking; hostile bytes only ever give BusProtocolError."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor.cluster.codec import BusProtocolError, FrameReader, decode, encode
from conveyor.cluster.messages import Message, MessageType, message_type

from .recording import recorded_messages
from .strategies import MESSAGES, messages_of

PROPERTY = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
RECORDED = [m.raw for m in recorded_messages()]


@pytest.mark.parametrize("kind", list(MessageType), ids=lambda kind: kind.name)
@PROPERTY
@given(data=st.data())
def test_round_trip_of_every_type(kind: MessageType, data: st.DataObject) -> None:
    message = data.draw(messages_of(kind))
    frame = encode(message)
    assert struct.unpack_from(">I", frame, 4)[0] == len(frame)
    assert struct.unpack_from(">H", frame, 12)[0] == kind
    decoded = decode(frame)
    assert decoded == message and type(decoded) is type(message)
    assert message_type(decoded) == kind
    assert encode(decoded) == frame


def _split(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(stream), *(cut % (len(stream) + 1) for cut in cuts)})
    return [stream[a:b] for a, b in itertools.pairwise(points)]


@PROPERTY
@given(
    st.lists(st.one_of(MESSAGES.map(encode), st.sampled_from(RECORDED)), max_size=12),
    st.lists(st.integers(0, 1 << 16), max_size=30),
)
def test_frame_reader_returns_the_same_frames_for_any_chunking(
    frames: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(frames)
    reader = FrameReader()
    got: list[bytes] = []
    for chunk in _split(stream, cuts):
        got += reader.feed(chunk)
        assert reader.buffered < (max(map(len, frames)) if frames else 1)
    assert got == frames and reader.buffered == 0


def _decode_cleanly(data: bytes) -> Message | None:
    """decode() either refuses with BusProtocolError or accepts something that re-encodes
    to exactly the input."""
    try:
        message = decode(data)
    except BusProtocolError:
        return None
    assert encode(message) == data
    return message


def _read_cleanly(
    data: bytes, cuts: list[int], max_frame: int = 1 << 20
) -> tuple[list[bytes], str | None, int | None]:
    """A FrameReader only ever returns frames or raises BusProtocolError, never buffers
    more than it was fed; returns the frames and the error's reason and stream offset."""
    reader = FrameReader(max_frame)
    got: list[bytes] = []
    fed = 0
    try:
        for chunk in _split(data, cuts):
            fed += len(chunk)
            got += reader.feed(chunk)
            assert reader.buffered <= fed
    except BusProtocolError as exc:
        got += exc.frames
        with pytest.raises(BusProtocolError):
            reader.feed(b"")
        return got, exc.reason, exc.offset
    finally:
        assert b"".join(got) == data[: sum(map(len, got))]
        for frame in got:
            _decode_cleanly(frame)
    return got, None, None


@PROPERTY
@given(st.binary(max_size=600), st.lists(st.integers(0, 600), max_size=8))
def test_arbitrary_bytes(data: bytes, cuts: list[int]) -> None:
    _decode_cleanly(data)
    # However the stream is cut: the same frames, the same error at the same offset.
    assert _read_cleanly(data, cuts) == _read_cleanly(data, [])


@PROPERTY
@given(st.sampled_from(list(MessageType)), st.binary(max_size=400))
def test_arbitrary_payload_behind_a_valid_header_start(kind: MessageType, rest: bytes) -> None:
    # Random bytes rarely pass the signature; this gets them to the payload checks.
    frame = b"DbuZ" + struct.pack(">IHHHH", 144 + len(rest), 1, 0, kind, len(rest) // 104)
    frame += bytes(128) + rest
    _decode_cleanly(frame)
    _read_cleanly(frame, [])


@PROPERTY
@given(st.one_of(MESSAGES.map(encode), st.sampled_from(RECORDED)), st.data())
def test_truncations_and_bit_flips(frame: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(BusProtocolError):
        decode(frame[:cut])
    # A prefix of a valid frame is not an error for the reader, just incomplete.
    reader = FrameReader()
    assert reader.feed(frame[:cut]) == [] and reader.buffered == cut
    bit = data.draw(st.integers(0, len(frame) * 8 - 1))
    flipped = bytearray(frame)
    flipped[bit // 8] ^= 1 << (bit % 8)
    _decode_cleanly(bytes(flipped))
    cut_at = data.draw(st.integers(0, len(frame)))
    assert _read_cleanly(bytes(flipped), [cut_at]) == _read_cleanly(bytes(flipped), [])


@PROPERTY
@given(st.integers(1 << 20, (1 << 32) - 1), st.sampled_from(list(MessageType)))
def test_a_lying_length_is_refused_before_anything_is_buffered_for_it(
    totlen: int, kind: MessageType
) -> None:
    head = b"DbuZ" + struct.pack(">I", totlen)
    reader = FrameReader(max_frame=(1 << 20) - 1)
    with pytest.raises(BusProtocolError, match="above the maximum"):
        reader.feed(head)
    # With a maximum that allows it, only what arrives is held, whatever totlen says.
    reader = FrameReader(max_frame=1 << 32)
    header = (
        head + struct.pack(">HHHH", 1, 0, kind, min((totlen - 144) // 104, 0xFFFF)) + bytes(128)
    )
    try:
        assert reader.feed(header + bytes(1000)) == []
    except BusProtocolError:
        return  # the type's layout already contradicts totlen
    assert reader.buffered == len(header) + 1000

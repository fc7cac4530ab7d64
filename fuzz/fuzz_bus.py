"""Fuzz target: the cluster bus codec (`conveyor.cluster.codec`) on arbitrary bytes.

Run: `.venv/bin/python -m fuzz.fuzz_bus [libFuzzer flags] [corpus dirs]`.
Seeds: `.venv/bin/python -m fuzz.fuzz_bus --write-seeds` (recorded Disque messages, each
type and size once, plus two streams, into fuzz/corpus/bus/).

Input layout: byte 0, low 3 bits = number of cut points n; then n big-endian u16 cut
positions; the rest is the stream. `encode_input` builds inputs in that layout.

Allowed outcomes: frames, messages and BusProtocolError. A crash is any other exception,
and:
- `decode(stream)` accepting something that does not encode back to the stream;
- a FrameReader (maximum MAX_FRAME) fed the stream whole and fed it in pieces disagreeing
  on the frames or on the error (reason and stream offset);
- a reader holding more than it was fed, or more than MAX_FRAME;
- a frame the reader returned that decode refuses for anything but the job area (the
  reader checks the layout, decode also checks the serialized jobs), or that re-encodes
  differently.
"""

from __future__ import annotations

import itertools
import struct
import sys
from pathlib import Path
from typing import Any

import atheris  # type: ignore[import-untyped]

from fuzz.harness import Guard, Violation, main_args, no_known_issues

MAX_FRAME = 1 << 16
ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "fuzz" / "corpus" / "bus"
MESSAGES_TXT = ROOT / "tests" / "fixtures" / "disque_wire" / "bus" / "messages.txt"

codec: Any = None  # conveyor.cluster.codec, imported by load()


def load(instrument: bool = False) -> None:
    global codec
    if codec is not None:
        return
    if instrument:
        with atheris.instrument_imports(include=["conveyor"]):
            import conveyor.cluster.codec as module
    else:
        import conveyor.cluster.codec as module
    codec = module


def encode_input(stream: bytes, cuts: list[int]) -> bytes:
    cuts = cuts[:7]
    return bytes([len(cuts)]) + b"".join(struct.pack(">H", cut) for cut in cuts) + stream


def decode_input(data: bytes) -> tuple[bytes, list[int]]:
    if not data:
        return b"", []
    count = min(data[0] & 7, (len(data) - 1) // 2)
    cuts = [struct.unpack_from(">H", data, 1 + 2 * i)[0] for i in range(count)]
    return data[1 + 2 * count :], cuts


def _feed(stream: bytes, cuts: list[int]) -> tuple[list[bytes], tuple[str, int | None] | None]:
    reader = codec.FrameReader(MAX_FRAME)
    points = sorted({0, len(stream), *(cut % (len(stream) + 1) for cut in cuts)})
    frames: list[bytes] = []
    fed = 0
    for start, end in itertools.pairwise(points):
        fed += end - start
        try:
            frames += reader.feed(stream[start:end])
        except codec.BusProtocolError as exc:
            return frames + exc.frames, (exc.reason, exc.offset)
        if reader.buffered > min(fed, MAX_FRAME):
            raise Violation(f"reader holds {reader.buffered} bytes after {fed} fed")
    return frames, None


def check_input(data: bytes) -> None:
    load()
    stream, cuts = decode_input(data)
    try:
        message = codec.decode(stream)
    except codec.BusProtocolError:
        pass
    else:
        if codec.encode(message) != stream:
            raise Violation(f"decode accepted {stream!r} but it does not re-encode")
    whole = _feed(stream, [])
    split = _feed(stream, cuts)
    if whole != split:
        raise Violation(f"whole feed {whole} != split feed {split} at cuts {cuts}")
    for frame in whole[0]:
        try:
            message = codec.decode(frame)
        except codec.BusProtocolError as exc:
            if "job area" not in exc.reason:
                raise Violation(f"reader passed a frame decode refuses: {exc}") from exc
            continue
        if codec.encode(message) != frame:
            raise Violation(f"frame {frame!r} does not re-encode")


def seeds() -> dict[str, bytes]:
    """Recorded Disque frames (each type and size once) and two multi-frame streams."""
    frames: list[bytes] = []
    in_hex = False
    for line in MESSAGES_TXT.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("hex ("):
            in_hex = True
            frames.append(b"")
        elif in_hex and stripped:
            frames[-1] += bytes.fromhex(stripped.split(": ", 1)[1])
        else:
            in_hex = False
    # One frame per distinct (type, length): every type and every gossip count.
    found: dict[str, bytes] = {}
    for frame in frames:
        found.setdefault(f"type{frame[13]:02d}-len{len(frame)}", encode_input(frame, []))
    found["stream-first-20"] = encode_input(b"".join(frames[:20]), [1, 150, 151, 700])
    jobs = b"".join(frame for frame in frames if frame[13] in (4, 5, 13))
    found["stream-jobs"] = encode_input(jobs, [153, 400])
    return found


def write_seeds() -> None:
    SEEDS.mkdir(parents=True, exist_ok=True)
    for name, data in seeds().items():
        (SEEDS / name).write_bytes(data)


GUARD = Guard(no_known_issues)


def one_input(data: bytes) -> None:
    GUARD.run(check_input, data)


def main() -> None:
    if sys.argv[1:] == ["--write-seeds"]:
        write_seeds()
        return
    load(instrument=True)
    atheris.Setup(main_args(), one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()

"""The bus fuzz target: its seeds pass, are what `--write-seeds` writes, and its oracle
catches the defects it is there for."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("atheris")

from fuzz import fuzz_bus
from fuzz.harness import Violation

SEEDS = sorted(fuzz_bus.SEEDS.iterdir())


@pytest.mark.parametrize("seed", SEEDS, ids=lambda path: path.name)
def test_seed_passes(seed: Path) -> None:
    fuzz_bus.check_input(seed.read_bytes())


def test_the_seed_corpus_is_what_write_seeds_writes() -> None:
    on_disk = {path.name: path.read_bytes() for path in SEEDS}
    assert on_disk == fuzz_bus.seeds(), "run: .venv/bin/python -m fuzz.fuzz_bus --write-seeds"


def test_input_layout_round_trips() -> None:
    data = fuzz_bus.encode_input(b"DbuZ\x00", [3, 70000 % 65536])
    assert fuzz_bus.decode_input(data) == (b"DbuZ\x00", [3, 70000 % 65536])
    assert fuzz_bus.decode_input(b"") == (b"", [])


@pytest.mark.parametrize(
    "data",
    [
        # Found by the fuzzer: the signature reason once depended on how many bytes had
        # arrived, so whole and split feeds disagreed.
        fuzz_bus.encode_input(b"\x00\x0f\x00\x00" + bytes(150), [0, 0, 0, 154, 1, 0]),
        fuzz_bus.encode_input(b"Dbu", [1, 2]),
    ],
)
def test_regressions(data: bytes) -> None:
    fuzz_bus.check_input(data)


def test_the_oracle_catches_a_reader_that_depends_on_chunking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fuzz_bus.load()
    real = fuzz_bus.codec.FrameReader

    class Forgetful(real):  # type: ignore[misc, valid-type]
        """Loses a partial frame's bytes between feeds: chunked reads diverge."""

        def feed(self, data: bytes) -> list[bytes]:
            frames: list[bytes] = super().feed(data)
            self._buf.clear()
            return frames

    monkeypatch.setattr(fuzz_bus.codec, "FrameReader", Forgetful)
    stream, _ = fuzz_bus.decode_input(SEEDS[0].read_bytes())
    with pytest.raises(Violation, match="whole feed"):
        fuzz_bus.check_input(fuzz_bus.encode_input(stream, [10]))

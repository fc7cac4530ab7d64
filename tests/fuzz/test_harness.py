"""The fuzz targets themselves: every seed passes, inputs round-trip, and each oracle
catches the defect it is there for (a check that cannot fail proves nothing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris")

from fuzz import fuzz_commands, fuzz_resp, run
from fuzz.harness import Violation
from fuzz.resp_check import Malformed, check_reply

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "fuzz" / "corpus"


def seeds(target: str) -> list[Path]:
    return sorted((CORPUS / target).iterdir())


@pytest.fixture(scope="module", autouse=True)
def _loaded() -> None:
    fuzz_resp.load()
    fuzz_commands.load()


@pytest.mark.parametrize("seed", seeds("resp"), ids=lambda path: path.name)
def test_resp_seed_passes(seed: Path) -> None:
    fuzz_resp.check_input(seed.read_bytes())


@pytest.mark.parametrize("seed", seeds("commands"), ids=lambda path: path.name)
def test_commands_seed_passes(seed: Path) -> None:
    fuzz_commands.run_program(seed.read_bytes())


def test_the_seed_corpus_is_what_make_seeds_writes() -> None:
    from fuzz import make_seeds

    for target, expected in (
        ("resp", make_seeds.resp_seeds()),
        ("commands", make_seeds.command_seeds()),
    ):
        on_disk = {path.name: path.read_bytes() for path in seeds(target)}
        assert on_disk == expected, f"run: .venv/bin/python -m fuzz.make_seeds ({target})"


@pytest.mark.parametrize(
    ("stream", "cuts", "fill", "authenticated"),
    [
        (b"*1\r\n$4\r\nPING\r\n", [3, 9], None, True),
        (b"PING\r\n", [], (2, 0, 6, 0), False),
        (b"*2\r\n" + b"$3\r\nabc\r\n", [70000, 80000], (12, 4, 9, 0), True),
    ],
)
def test_resp_inputs_round_trip(
    stream: bytes, cuts: list[int], fill: tuple[int, int, int, int] | None, authenticated: bool
) -> None:
    data = fuzz_resp.encode_input(stream, cuts, fill, authenticated)
    decoded, positions, auth = fuzz_resp.decode_input(data)
    assert auth is authenticated
    if fill is None:
        assert decoded == stream and positions == cuts
    else:
        assert decoded.startswith(stream[: fill[1]]) and len(decoded) >= fill[0] * 8192
        assert all(abs(got - want) <= 2 for got, want in zip(positions, cuts, strict=True))


class _Buffering:
    """A parser that never refuses a bulk length: keeps buffering whatever is announced."""

    def __init__(self, real: object) -> None:
        self.real = real

    def feed(self, data: bytes):  # type: ignore[no-untyped-def]
        self.real.max_bulk_bytes = 1 << 40  # type: ignore[attr-defined]
        return self.real.feed(data)  # type: ignore[attr-defined]


def test_resp_oracle_catches_a_parser_that_buffers_an_oversize_bulk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = fuzz_resp.make_parser
    monkeypatch.setattr(fuzz_resp, "make_parser", lambda: _Buffering(real()))
    with pytest.raises(Violation, match="over the limit accepted"):
        fuzz_resp.check_stream(b"*2\r\n$3\r\nabc\r\n$5242880\r\n", [])


def test_resp_oracle_catches_a_parser_that_splits_differently(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class DropsSecond:
        def __init__(self) -> None:
            self.real = real()

        def feed(self, data: bytes):  # type: ignore[no-untyped-def]
            for index, request in enumerate(self.real.feed(data)):
                if index != 1:
                    yield request

    real = fuzz_resp.make_parser
    monkeypatch.setattr(fuzz_resp, "make_parser", DropsSecond)
    with pytest.raises(Violation):
        fuzz_resp.check_stream(b"PING\r\nPING\r\nPING\r\n", [6])


def test_resp_oracle_catches_a_feed_one_that_drops_the_rest_of_a_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class TakesTheFirst:
        def __init__(self) -> None:
            self.real = real()

        def feed(self, data: bytes):  # type: ignore[no-untyped-def]
            return self.real.feed(data)

        def feed_one(self, data: bytes) -> list[bytes] | None:
            requests = list(self.real.feed(data))
            return requests[0] if requests else None

    real = fuzz_resp.make_parser
    monkeypatch.setattr(fuzz_resp, "make_parser", TakesTheFirst)
    with pytest.raises(Violation, match="whole vs pieces differ"):
        fuzz_resp.check_stream(b"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n", [])


def test_reply_validator() -> None:
    assert check_reply(b"+OK\r\n:1\r\n$3\r\nabc\r\n*2\r\n$-1\r\n*-1\r\n-ERR x\r\n") == 5
    assert check_reply(b"%1\r\n$1\r\na\r\n_\r\n=7\r\ntxt:abc\r\n", resp3=True) == 2
    for bad, resp3 in [
        (b"-ERR internal error running 'debug': boom\r\n", False),
        (b"$4\r\nabc\r\n", False),
        (b"+a\nb\r\n", False),
        (b"%0\r\n", False),  # RESP3 to a RESP2 client
        (b"$-1\r\n", True),  # RESP2 null to a RESP3 client
        (b"*2\r\n:1\r\n", False),
        (b":01\r\n", False),
    ]:
        with pytest.raises(Malformed):
            check_reply(bad, resp3)


def test_commands_oracle_catches_an_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from conveyor.node import cmd_queues

    def broken_qlen(server: object, conn: object, args: list[bytes]) -> bytes:
        raise IndexError("planted")

    monkeypatch.setattr(cmd_queues, "qlen", broken_qlen)
    # The table captured the handler when it was built: patch the spec it copies from.
    from conveyor.node import commands

    spec = next(c for c in commands.COMMANDS if c.name == b"qlen")
    monkeypatch.setattr(spec, "handler", broken_qlen)
    program = fuzz_commands.encode_program([(0, [b"qlen", ("queue", b"q")])])
    with pytest.raises(Violation, match="internal error"):
        fuzz_commands.run_program(program)


def test_commands_oracle_catches_a_broken_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    program = fuzz_commands.encode_program([(0, [b"addjob", ("queue", b"q"), b"x", ("num", b"0")])])
    original = fuzz_commands.Session.settle

    def settle_and_break(self: fuzz_commands.Session) -> None:
        original(self)
        self.server.core.jobs_bytes += 1

    monkeypatch.setattr(fuzz_commands.Session, "settle", settle_and_break)
    with pytest.raises(Violation, match="jobs_bytes"):
        fuzz_commands.run_program(program)


def test_debug_sleep_is_neutered() -> None:
    import time

    program = fuzz_commands.encode_program(
        [(0, [b"debug", ("kw", b"SLEEP"), ("num", b"40000")])] * 3
    )
    started = time.monotonic()
    fuzz_commands.run_program(program)
    assert time.monotonic() - started < 5


def test_the_node_clock_stays_within_a_century() -> None:
    """Found by the first long run: ticking to the deadline of a job with TTL 2^63-1 s put
    the node clock ~2.9e11 years ahead, where INFO's event-log file name (time.gmtime)
    overflows. A wall clock never gets there, so the harness does not either."""
    queue = ("queue", b"q")
    program = fuzz_commands.encode_program(
        [
            (0, [b"config", ("kw", b"SET"), ("directive", b"event-log"), b"ev"]),
            (0, [b"addjob", queue, b"x", ("num", b"0"), ("kw", b"TTL"),
                 ("num", b"9223372036854775807")]),
            ("deadline",),
            ("deadline",),
            ("deadline",),
            (0, [b"info"]),
        ]
    )  # fmt: skip
    fuzz_commands.run_program(program)


def test_the_reference_takes_a_header_of_any_length() -> None:
    """Found by the first long run: a `*` header of 32 KB of digits without its CRLF made
    the reference's int() raise (Python's 4300-digit limit); the parser was fine."""
    fuzz_resp.check_stream(b"*1" + b"4" * 32769, [10])


# -- the commands target's scratch directory ----------------------------------------------
_PRINT_SCRATCH = (
    "from fuzz import fuzz_commands; fuzz_commands.load(); print(fuzz_commands._workdir)"
)


def _scratch_of_a_run(env: dict[str, str]) -> Path:
    """The directory a fresh interpreter loading the commands target wrote into."""
    done = subprocess.run(
        [sys.executable, "-c", _PRINT_SCRATCH],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return Path(done.stdout.strip().splitlines()[-1])


def test_the_commands_targets_own_temp_directory_goes_when_it_exits() -> None:
    env = {k: v for k, v in os.environ.items() if k != fuzz_commands.SCRATCH_ENV}
    scratch = _scratch_of_a_run(env)
    assert scratch.name.startswith("conveyor-fuzz-commands-")
    assert not scratch.exists()


def test_the_runner_gives_the_commands_target_a_directory_in_its_own(tmp_path: Path) -> None:
    # libFuzzer ends with C's exit(), past Python's exit handlers: the runner's work
    # directory, which it removes, is where the files must go.
    env = run._env(None, True, tmp_path / "commands" / "scratch")
    assert _scratch_of_a_run(env) == tmp_path / "commands" / "scratch"
    assert (tmp_path / "commands" / "scratch").is_dir()

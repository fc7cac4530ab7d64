"""`conveyor pressure ...` through click's CliRunner, plus one real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result
from pressure_helpers import RedisServer, free_port

from conveyor.cli import main

Invoke = Callable[..., Result]


@pytest.fixture
def cli(redis_server: RedisServer, raw: redis.Redis, prefix: str) -> Invoke:
    runner = CliRunner()

    def invoke(*args: str, stdin: bytes | None = None) -> Result:
        return runner.invoke(
            main,
            ["pressure", "--redis", redis_server.url, "--prefix", prefix, *args],
            input=stdin,
        )

    return invoke


def test_round_trip(cli: Invoke, raw: redis.Redis, prefix: str) -> None:
    assert cli("create", "jobs", "--bound", "2").exit_code == 0
    assert raw.get(f"{prefix}:jobs:bound") == b"2"
    assert cli("put", "jobs", "hello").exit_code == 0
    assert cli("put", "jobs", "-", stdin=b"from stdin").exit_code == 0
    full = cli("put", "jobs", "x", "--nowait")
    assert full.exit_code == 4
    assert "full" in full.stderr
    assert cli("ls").stdout.splitlines() == ["jobs"]
    assert "bound=2\tlength=2\topen" in cli("ls", "--long").stdout
    stat = json.loads(cli("stat", "jobs", "--json").stdout)
    assert stat["length"] == 2 and stat["produced_messages"] == 2
    assert "produced_bytes     15" in cli("stat", "jobs").stdout
    first = cli("get", "jobs")
    assert first.exit_code == 0 and first.stdout == "hello\n"
    assert cli("close", "jobs").exit_code == 0
    closed_put = cli("put", "jobs", "late")
    assert closed_put.exit_code == 3 and "closed" in closed_put.stderr
    assert cli("get", "jobs").stdout == "from stdin\n"
    drained = cli("get", "jobs")
    assert drained.exit_code == 3 and drained.stderr == "error: queue 'jobs' is closed\n"
    assert cli("delete", "jobs").exit_code == 0
    assert raw.keys("*") == []
    assert cli("ls").stdout == ""


def test_missing_queue_is_one_clear_line(cli: Invoke) -> None:
    for args in (
        ("get", "nope"),
        ("put", "nope", "x"),
        ("stat", "nope"),
        ("close", "nope"),
        ("delete", "nope"),
        ("unlock", "nope"),
    ):
        result = cli(*args)
        assert result.exit_code == 1, args
        assert result.stderr.startswith("error: queue 'nope' does not exist"), args
        assert result.stderr.count("\n") == 1
        assert "Traceback" not in result.output


def test_bad_input(cli: Invoke) -> None:
    assert cli("create", "q", "--bound", "-1").exit_code == 2
    assert cli("create", "q", "--bound", "many").exit_code == 2
    assert cli("get").exit_code == 2
    assert cli("create", "q").exit_code == 0
    again = cli("create", "q")
    assert again.exit_code == 1 and "already exists" in again.stderr
    empty = cli("get", "q", "--nowait")
    assert empty.exit_code == 4 and "empty" in empty.stderr
    timed = cli("get", "q", "--timeout", "0.2")
    assert timed.exit_code == 4
    assert cli("get", "q", "--timeout", "-1").exit_code == 2
    blank = cli("create", "")
    assert blank.exit_code == 1 and "non-empty" in blank.stderr


def test_data_that_is_not_utf8_is_put_as_its_bytes(
    cli: Invoke, raw: redis.Redis, prefix: str
) -> None:
    assert cli("create", "q").exit_code == 0
    # What Python makes of the argv bytes b"caf\xe9" (Latin-1) on a UTF-8 system.
    put = cli("put", "q", "caf\udce9")
    assert put.exit_code == 0, put.stderr
    assert raw.lrange(f"{prefix}:q", 0, -1) == [b"caf\xe9"]


def test_unlock(cli: Invoke, raw: redis.Redis, prefix: str) -> None:
    assert cli("create", "q").exit_code == 0
    free = cli("unlock", "q")
    assert free.exit_code == 0 and "nothing to unlock" in free.stdout
    raw.rpop(f"{prefix}:q:producer_free")
    raw.set(f"{prefix}:q:producer", "elsewhere:1:1")
    result = cli("unlock", "q", "--consumer")
    assert "nothing to unlock" in result.stdout
    assert raw.llen(f"{prefix}:q:producer_free") == 0
    result = cli("unlock", "q", "--producer")
    assert result.exit_code == 0
    assert "released the producer role (last holder: elsewhere:1:1)" in result.stdout
    assert raw.llen(f"{prefix}:q:producer_free") == 1


def test_unreachable_redis(prefix: str) -> None:
    port = free_port()
    result = CliRunner().invoke(main, ["pressure", "--redis", f"redis://127.0.0.1:{port}/0", "ls"])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: cannot reach Redis at 127.0.0.1:{port}/0")
    assert "Traceback" not in result.output


def test_real_subprocess(redis_server: RedisServer, raw: redis.Redis, prefix: str) -> None:
    root = Path(__file__).resolve().parents[2]
    base = [
        sys.executable,
        "-m",
        "conveyor.cli",
        "pressure",
        "--redis",
        redis_server.url,
        "--prefix",
        prefix,
    ]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *args], cwd=root, capture_output=True, text=True, timeout=30, check=False
        )

    assert run("create", "sub").returncode == 0
    assert run("put", "sub", "payload").returncode == 0
    got = run("get", "sub")
    assert (got.returncode, got.stdout) == (0, "payload\n")
    missing = run("get", "other")
    assert missing.returncode == 1
    assert (
        missing.stderr == f"error: queue 'other' does not exist (no key '{prefix}:other:bound')\n"
    )


def test_ls_long_reports_a_queue_it_cannot_read_instead_of_hiding_it(
    cli: Invoke, raw: redis.Redis, prefix: str
) -> None:
    for name in ("a", "b", "c"):
        assert cli("create", name).exit_code == 0
    raw.set(f"{prefix}:b", "not a list")
    listing = cli("ls", "-l")
    assert listing.exit_code == 1
    assert listing.stdout.splitlines() == [
        "a\tbound=0\tlength=0\topen",
        "c\tbound=0\tlength=0\topen",
    ]
    assert f"LLEN {prefix}:b: WRONGTYPE" in listing.stderr

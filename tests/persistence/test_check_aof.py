"""`conveyor check-aof`, run as a real subprocess on copies of a real Disque AOF."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conveyor.persistence.check import analyze, good_records_after
from conveyor.persistence.reader import read_records

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "disque_wire"
APPENDONLY = (FIXTURES / "appendonly.aof").read_bytes()
REWRITTEN = (FIXTURES / "rewritten.aof").read_bytes()
REPO = Path(__file__).resolve().parents[2]
RECORD_ENDS = [record.end for record in read_records(APPENDONLY)]

# Record starts in appendonly.aof (DECODED.md): J05 is the fifth record, the last DELJOB
# the 27th.
J05 = 10901
LAST_DELJOB = 14508


def check_aof(*args: str | Path, answer: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conveyor.cli", "check-aof", *map(str, args)],
        input=answer,
        stdin=None if answer is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


def place(tmp_path: Path, data: bytes, name: str = "disque.aof") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def assert_no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("data", "records"),
    [
        (APPENDONLY, "27 good records (25 LOADJOB, 2 DELJOB)"),
        (REWRITTEN, "23 good records (23 LOADJOB, 0 DELJOB)"),
    ],
)
def test_good_files(tmp_path: Path, data: bytes, records: str) -> None:
    path = place(tmp_path, data)
    result = check_aof(path)
    assert result.returncode == 0, result.stdout + result.stderr
    size = len(data)
    assert result.stdout.splitlines() == [
        f"AOF analyzed: size={size}, ok_up_to={size}, diff=0",
        records,
        f"AOF is valid: {path}",
    ]
    # --fix on a good file changes nothing and asks nothing.
    result = check_aof("--fix", path)
    assert result.returncode == 0
    assert path.read_bytes() == data
    assert not (tmp_path / "disque.aof.bak").exists()


def test_empty_file_is_valid(tmp_path: Path) -> None:
    path = place(tmp_path, b"")
    result = check_aof(path)
    assert result.returncode == 0
    assert "0 good records" in result.stdout
    assert "AOF is valid (empty file)" in result.stdout


def test_truncated_file_is_reported_and_fixed(tmp_path: Path) -> None:
    cut = APPENDONLY[: LAST_DELJOB + 32]
    path = place(tmp_path, cut)
    result = check_aof(path)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"Unfinished last record at offset {LAST_DELJOB}: "
        f"unexpected end of file in the argument, at offset {len(cut)}",
        f"AOF analyzed: size={len(cut)}, ok_up_to={LAST_DELJOB}, diff=32",
        "26 good records (25 LOADJOB, 1 DELJOB)",
        f"AOF is not valid: {path}",
    ]
    assert path.read_bytes() == cut

    result = check_aof("--fix", "--yes", path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"This will shrink the AOF from {len(cut)} bytes, with 32 bytes" in result.stdout
    assert f"Backup of the original file: {path}.bak" in result.stdout
    assert path.read_bytes() == APPENDONLY[:LAST_DELJOB]
    assert (tmp_path / "disque.aof.bak").read_bytes() == cut
    assert check_aof(path).returncode == 0


def test_every_cut_of_the_file_is_an_unfinished_record() -> None:
    # Whatever byte a crash cuts the file at, the tail is an unfinished record (which
    # aof-load-truncated may cut away), never taken for damage.
    for size in range(len(APPENDONLY)):
        error = analyze(APPENDONLY[:size]).error
        assert (error is None) == (size in {0, *RECORD_ENDS}), size
        assert error is None or error.truncated, (size, error.reason)


@pytest.mark.parametrize("record", [0, 4, 26])
def test_a_length_damaged_past_the_end_is_not_an_unfinished_record(
    tmp_path: Path, record: int
) -> None:
    # Two more digits in a record's argument length: it now runs past the end of the
    # file, as a cut-off last record does, but the records after it are all there.
    start = ([0, *RECORD_ENDS])[record]
    head = APPENDONLY.index(b"\r\n$", start + 10) + 3  # the argument's length digits
    damaged = APPENDONLY[:head] + b"99" + APPENDONLY[head:]
    path = place(tmp_path, damaged)
    result = check_aof(path)
    assert result.returncode == 1
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"Bad record at offset {start}: "), first
    assert "a damaged length, not a cut-off record" in first or "not a job ID's 40" in first
    assert_no_traceback(result)


def test_corrupt_record_in_the_middle(tmp_path: Path) -> None:
    damaged = bytearray(APPENDONLY)
    damaged[J05] = ord("#")  # J05's '*'
    path = place(tmp_path, bytes(damaged))
    result = check_aof(path)
    assert result.returncode == 1
    assert result.stdout.splitlines()[:4] == [
        f"Bad record at offset {J05}: expected '*', got '#'",
        "22 good records follow it (20 LOADJOB, 2 DELJOB): --fix drops them too (the backup"
        " keeps them)",
        f"AOF analyzed: size={len(APPENDONLY)}, ok_up_to={J05}, diff={len(APPENDONLY) - J05}",
        "4 good records (4 LOADJOB, 0 DELJOB)",
    ]

    result = check_aof("--fix", "--yes", path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert path.read_bytes() == APPENDONLY[:J05]
    assert (tmp_path / "disque.aof.bak").read_bytes() == bytes(damaged)
    result = check_aof(path)
    assert result.returncode == 0
    assert "4 good records (4 LOADJOB, 0 DELJOB)" in result.stdout


def test_good_records_after_several_bad_stretches_are_counted() -> None:
    """Past the first damage, each bad stretch is skipped to the next record's header:
    J05 and the last DELJOB damaged leave 4 good records before, 21 between and after."""
    damaged = bytearray(APPENDONLY)
    damaged[J05] = ord("#")
    damaged[LAST_DELJOB + 5] = ord("?")  # inside its "$6" header
    after = good_records_after(bytes(damaged), J05)
    assert (after.loadjobs, after.deljobs) == (20, 1)
    assert analyze(bytes(damaged)).records == 4
    assert good_records_after(APPENDONLY[:J05] + b"#" * 100, J05).records == 0


def test_a_job_the_codec_refuses_is_reported_at_its_record(tmp_path: Path) -> None:
    # RESP framing intact, but J05's serialized length prefix (4 bytes after "$<n>\r\n")
    # claims more than the bulk holds: only decoding the job can tell.
    body_start = APPENDONLY.index(b"\r\n", J05 + 17) + 2
    (prefix,) = struct.unpack_from("<I", APPENDONLY, body_start)
    damaged = bytearray(APPENDONLY)
    struct.pack_into("<I", damaged, body_start, prefix + 1000)
    path = place(tmp_path, bytes(damaged))
    result = check_aof(path)
    assert result.returncode == 1
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"Bad record at offset {J05}: bad serialized job in LOADJOB: ")
    assert "runs past the end of input" in first
    assert f"ok_up_to={J05}" in result.stdout


def test_a_job_shorter_than_its_bulk_is_reported(tmp_path: Path) -> None:
    # The first record's bulk says 150 where the job is 142 bytes: the wrong length lands
    # on record 2's "$7\r\n" CRLF, so framing passes and only the codec sees it.
    path = place(tmp_path, APPENDONLY.replace(b"$142\r\n", b"$150\r\n", 1))
    result = check_aof(path)
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == (
        "Bad record at offset 0: bad serialized job in LOADJOB: 8 bytes after the job"
    )


def test_deljob_with_a_bad_job_id(tmp_path: Path) -> None:
    data = APPENDONLY[:LAST_DELJOB] + b"*2\r\n$6\r\nDELJOB\r\n$5\r\nhello\r\n"
    path = place(tmp_path, data)
    result = check_aof(path)
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == (
        f"Bad record at offset {LAST_DELJOB}: invalid job ID b'hello' in DELJOB"
    )


def test_prompt_answered_no_changes_nothing(tmp_path: Path) -> None:
    cut = APPENDONLY[: J05 + 100]
    path = place(tmp_path, cut)
    result = check_aof("--fix", path, answer="n\n")
    assert result.returncode == 1
    assert "Continue? [y/N]: " in result.stdout
    assert "Aborting... (the file was not changed)" in result.stdout
    assert path.read_bytes() == cut
    assert sorted(p.name for p in tmp_path.iterdir()) == ["disque.aof"]
    # No answer at all (end of input) is a no as well.
    result = check_aof("--fix", path)
    assert result.returncode == 1
    assert path.read_bytes() == cut
    assert_no_traceback(result)


def test_prompt_answered_yes_and_backups_are_numbered(tmp_path: Path) -> None:
    cut = APPENDONLY[: J05 + 100]
    path = place(tmp_path, cut)
    (tmp_path / "disque.aof.bak").write_bytes(b"an older backup")
    result = check_aof("--fix", path, answer="y\n")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Backup of the original file: {path}.bak.1" in result.stdout
    assert (tmp_path / "disque.aof.bak").read_bytes() == b"an older backup"
    assert (tmp_path / "disque.aof.bak.1").read_bytes() == cut
    assert path.read_bytes() == APPENDONLY[:J05]


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.aof"
    for args in ((missing,), ("--fix", "--yes", missing)):
        result = check_aof(*args)
        assert result.returncode == 1
        assert "Cannot open file for reading" in result.stderr
        assert f"{missing}: No such file or directory" in result.stderr
        assert_no_traceback(result)
    assert not missing.exists()


def test_unreadable_paths(tmp_path: Path) -> None:
    result = check_aof(tmp_path)
    assert result.returncode == 1
    assert f"Cannot open file for reading: {tmp_path}: Is a directory" in result.stderr
    assert_no_traceback(result)
    if os.geteuid() != 0:  # root reads through permissions
        path = place(tmp_path, APPENDONLY)
        path.chmod(0)
        result = check_aof(path)
        assert result.returncode == 1
        assert "Permission denied" in result.stderr
        assert_no_traceback(result)

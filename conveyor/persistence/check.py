"""`conveyor check-aof [--fix] [--yes] FILE`: find the first bad record of an AOF, and cut there.

Like disque-check-aof (redis-check-aof): the good part of an AOF is everything before the
first record that is damaged or unfinished, so the only repair is to truncate the file
at that record's start. Beyond Disque's tool, which checks RESP framing only, every
LOADJOB is decoded with the job codec and every DELJOB's argument must be a job ID,
because the node refuses those records too (Disque exits on them while loading).

Exit status: 0 when the file is valid (or was repaired), 1 when it is not (or cannot be
read, or the repair was declined).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from conveyor.core.codec import CodecError, decode_job
from conveyor.core.jobid import is_valid_id
from conveyor.persistence.loader import misread_truncation
from conveyor.persistence.reader import AofFormatError, read_records

__all__ = ["Analysis", "analyze", "check_aof", "good_records_after"]

# FILE.bak, FILE.bak.1, ...: how many names to try before giving up.
_MAX_BACKUPS = 1000
# Every record is a two-word command: LOADJOB <job> or DELJOB <ID>.
_RECORD_HEAD = b"*2\r\n$"


@dataclass
class Analysis:
    size: int
    ok_up_to: int  # end of the last good record: what --fix keeps
    loadjobs: int = 0
    deljobs: int = 0
    error: AofFormatError | None = None

    @property
    def records(self) -> int:
        return self.loadjobs + self.deljobs


def analyze(data: bytes) -> Analysis:
    """Walk every record of `data`; stop at the first bad one (framing, codec or job ID)."""
    result = Analysis(size=len(data), ok_up_to=0)
    try:
        _walk(data, result)
    except AofFormatError as exc:
        result.error = misread_truncation(data, exc) or exc
    return result


def _walk(data: bytes, counts: Analysis) -> None:
    """Count the good records from `counts.ok_up_to` on, moving it past each; raises
    AofFormatError at the first bad one."""
    for record in read_records(data, counts.ok_up_to):
        if record.command.upper() == b"LOADJOB":
            _check_job(record.argument, counts.ok_up_to)
            counts.loadjobs += 1
        else:
            if not is_valid_id(record.argument):
                raise AofFormatError(
                    counts.ok_up_to, f"invalid job ID {record.argument[:60]!r} in DELJOB", False
                )
            counts.deljobs += 1
        counts.ok_up_to = record.end


def good_records_after(data: bytes, damage: int) -> Analysis:
    """The good records that follow damage at offset `damage`: what --fix drops besides
    the bad bytes. Found by looking for the next record's header after each bad stretch,
    so a body holding a whole record's bytes would count too: a figure to weigh the
    repair by, not an exact one."""
    found = Analysis(size=len(data), ok_up_to=damage)
    start = damage + 1
    while (start := data.find(_RECORD_HEAD, start)) >= 0:
        found.ok_up_to = start
        try:
            _walk(data, found)
            break
        except AofFormatError as exc:
            start = max(exc.offset, start) + 1
    return found


def _check_job(argument: bytes, offset: int) -> None:
    """The serialized job must decode, and fill its bulk exactly, as the loader requires."""
    try:
        _, used = decode_job(argument)
    except CodecError as exc:
        raise AofFormatError(offset, f"bad serialized job in LOADJOB: {exc}", False) from None
    if used != len(argument):
        reason = f"bad serialized job in LOADJOB: {len(argument) - used} bytes after the job"
        raise AofFormatError(offset, reason, False)


def _report(path: Path, data: bytes, result: Analysis) -> None:
    error = result.error
    if error is not None and error.truncated:
        click.echo(f"Unfinished last record at offset {error.offset}: {error.reason}")
    elif error is not None:
        click.echo(f"Bad record at offset {error.offset}: {error.reason}")
        after = good_records_after(data, error.offset)
        if after.records:
            click.echo(
                f"{after.records} good records follow it ({after.loadjobs} LOADJOB, "
                f"{after.deljobs} DELJOB): --fix drops them too (the backup keeps them)"
            )
    diff = result.size - result.ok_up_to
    click.echo(f"AOF analyzed: size={result.size}, ok_up_to={result.ok_up_to}, diff={diff}")
    click.echo(
        f"{result.records} good records ({result.loadjobs} LOADJOB, {result.deljobs} DELJOB)"
    )
    if error is None:
        click.echo(f"AOF is valid{' (empty file)' if result.size == 0 else ''}: {path}")
    else:
        click.echo(f"AOF is not valid: {path}")


def _backup_path(path: Path) -> Path:
    for n in range(_MAX_BACKUPS):
        candidate = path.with_name(path.name + (".bak" if n == 0 else f".bak.{n}"))
        if not candidate.exists():
            return candidate
    raise click.ClickException(f"no free backup name: {path}.bak ... .bak.{_MAX_BACKUPS - 1}")


def _fsync_dir(directory: Path) -> None:
    # The backup's name and the new size must survive a crash, not just the data.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _repair(path: Path, data: bytes, result: Analysis) -> Path:
    """Back the original up, then truncate it to result.ok_up_to; returns the backup's path."""
    backup = _backup_path(path)
    # "x": never overwrite a backup that appeared meanwhile. Written from the very bytes
    # that were analyzed, then checked against the file before it is cut.
    with open(backup, "xb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.chmod(backup, os.stat(path).st_mode & 0o777)
    with open(path, "r+b") as handle:
        if os.fstat(handle.fileno()).st_size != result.size:
            raise click.ClickException(
                f"{path} changed while it was checked (is a node writing to it?); "
                f"not truncated. The backup {backup} holds the bytes that were checked."
            )
        handle.truncate(result.ok_up_to)
        handle.flush()
        os.fsync(handle.fileno())
    _fsync_dir(path.parent)
    return backup


def _read(path: Path, fix: bool) -> bytes:
    try:
        # --fix needs to write too: find out now, before asking anything.
        with open(path, "r+b" if fix else "rb") as handle:
            return handle.read()
    except OSError as exc:
        mode = "for reading and writing" if fix else "for reading"
        raise click.ClickException(
            f"Cannot open file {mode}: {path}: {exc.strerror or exc}"
        ) from None


@click.command("check-aof")
@click.option("--fix", is_flag=True, help="Truncate the file after its last good record.")
@click.option("--yes", "-y", is_flag=True, help="With --fix: do not ask for confirmation.")
@click.argument("file", type=click.Path(dir_okay=True, path_type=Path))
def check_aof(fix: bool, yes: bool, file: Path) -> None:
    """Check an append-only file (Disque's or Conveyor's) and optionally repair it.

    Reports the number of good records and, if any, the offset of the first bad record and
    what is wrong with it. --fix truncates the file there, after a confirmation prompt,
    first copying the original to FILE.bak (FILE.bak.1, ... if taken). Stop the node that
    writes the file first.
    """
    data = _read(file, fix)
    result = analyze(data)
    _report(file, data, result)
    if result.error is None:
        return
    if not fix:
        raise SystemExit(1)
    kept, cut = result.ok_up_to, result.size - result.ok_up_to
    click.echo(
        f"This will shrink the AOF from {result.size} bytes, with {cut} bytes, to {kept} bytes"
    )
    if not yes:
        try:
            confirmed = click.confirm("Continue?", default=False)
        except click.Abort:  # end of input (no terminal): the safe answer is no
            confirmed = False
        if not sys.stdin.isatty():
            click.echo()  # a piped answer is not echoed: end the prompt's line ourselves
        if not confirmed:
            click.echo("Aborting... (the file was not changed)")
            raise SystemExit(1)
    try:
        backup = _repair(file, data, result)
    except OSError as exc:
        raise click.ClickException(f"Failed to repair {file}: {exc}") from None
    click.echo(f"Backup of the original file: {backup}")
    click.echo(
        f"Successfully truncated AOF to {kept} bytes, keeping {result.records} records: {file}"
    )

"""Loading the AOF when the node starts, serving -LOADING meanwhile, as Disque does.

The node listens before it loads: between chunks of records (persistence/loader.py)
the event loop runs, and every command but those flagged `l` (AUTH, HELLO, QUIT, INFO,
SHUTDOWN, COMMAND) answers `-LOADING`. The file is read when `appendonly`
is on, or when `aof-enqueue-jobs-once` asks for a planned restart's queues back
(after `SHUTDOWN REWRITE-AOF`); that option then switches itself off, in the config
file too, so a later crash restart does not enqueue jobs that were being worked on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from conveyor.node.directives import ConfigError
from conveyor.persistence.loader import LoadStats, load, open_file, truncate_file
from conveyor.persistence.reader import AofFormatError

if TYPE_CHECKING:
    from conveyor.node.aof import AofDriver
    from conveyor.node.server import Server

log = logging.getLogger("conveyor.node")


class StartupError(Exception):
    """The node must not start (a damaged AOF); str() is the message for the operator."""


async def load_at_start(driver: AofDriver) -> None:
    server = driver.server
    config = server.config
    _remove_stale_rewrites(server.data_dir)
    enqueue = bool(config["aof-enqueue-jobs-once"])
    if not (config["appendonly"] or enqueue):
        return
    path = driver.path
    handle = open_file(path)
    if handle is not None:
        with handle:
            await _load_file(driver, handle, enqueue)
    elif enqueue:
        log.warning("aof-enqueue-jobs-once: no append only file at %s, nothing to load", path)
    if enqueue:
        _switch_off_enqueue_once(server)
    if config["appendonly"]:
        driver.open_live()


async def _load_file(driver: AofDriver, handle: BinaryIO, enqueue: bool) -> None:
    server = driver.server
    if not os.fstat(handle.fileno()).st_size:
        return
    started = time.monotonic()
    driver.loading = True
    driver.loading_start_s = int(time.time())
    driver.load_stats = stats = LoadStats()
    server.refresh_command_table()
    try:
        await _load_chunks(driver, handle, enqueue, stats)
    finally:
        driver.loading = False
        server.refresh_command_table()
    log.info(
        "DB loaded from append only file: %.3f seconds (%d jobs, %d records)",
        time.monotonic() - started,
        len(server.core.jobs),
        stats.records,
    )


async def _load_chunks(
    driver: AofDriver, handle: BinaryIO, enqueue: bool, stats: LoadStats
) -> None:
    server = driver.server
    now = server.core_clock
    try:
        for _offset in load(handle, server.core, now, enqueue=enqueue, stats=stats):
            server.drain_job_events()  # "imported" events, for the job-event log
            await asyncio.sleep(0)
    except AofFormatError as exc:
        if exc.truncated and server.config["aof-load-truncated"]:
            log.warning("!!! Warning: short read while loading the AOF file !!!")
            log.warning("!!! Truncating the AOF at offset %d !!!", exc.offset)
            try:
                truncate_file(driver.path, exc.offset)
            except OSError as trunc_exc:
                raise StartupError(f"Error truncating the AOF file: {trunc_exc}") from None
            log.warning("AOF loaded anyway because aof-load-truncated is enabled")
            # Before the live AOF opens: drained later, the records loaded since the last
            # chunk would be appended to the file again as new LOADJOB/DELJOB records.
            server.drain_job_events()
            return
        if exc.truncated:
            raise StartupError(
                f"Unexpected end of file reading the append only file at offset {exc.offset}. "
                "You can: 1) Make a backup of your AOF file, then use "
                f"conveyor check-aof --fix {driver.path}. 2) Alternatively you can set the "
                "'aof-load-truncated' configuration option to yes and restart the server."
            ) from None
        raise StartupError(
            f"{exc}: make a backup of your AOF file, then use "
            f"conveyor check-aof --fix {driver.path}"
        ) from None
    server.drain_job_events()


def _remove_stale_rewrites(data_dir: Path) -> None:
    # Left by a node killed in the middle of a rewrite. Only one node runs on a data
    # directory (nodes.conf is locked), so none of them is in use.
    for stale in data_dir.glob("temp-rewriteaof-*.aof"):
        log.warning("Removing %s, left by an interrupted AOF rewrite", stale)
        try:
            stale.unlink()
        except OSError as exc:
            log.warning("Could not remove %s: %s", stale, exc)


def _switch_off_enqueue_once(server: Server) -> None:
    config = server.config
    config.values["aof-enqueue-jobs-once"] = False
    if config.file is None:
        return
    try:
        config.rewrite()
    except ConfigError as exc:
        log.warning("CONFIG REWRITE failed (executed to turn off aof-enqueue-jobs-once): %s", exc)

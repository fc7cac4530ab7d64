"""`conveyor` command line: server, cli, pressure, ...

Each subcommand lives in the package that owns it; this module only wires them up,
importing lazily so `conveyor server` does not pay for the client or rich.
"""

from __future__ import annotations

import errno
import importlib
import os
import sys
from typing import Any

import click

# name -> "module:attribute" of a click command or group.
_SUBCOMMANDS: dict[str, str] = {
    "server": "conveyor.node.cli:server",
    "cli": "conveyor.client.cli:cli",
    "pressure": "conveyor.pressure.cli:pressure",
    "analyze": "conveyor.spark.analyze_cli:analyze_command",
    "check-aof": "conveyor.persistence.check:check_aof",
    "web": "conveyor.web.cli:web",
    "worker": "conveyor.worker.cli:worker",
    "queue": "conveyor.worker.cli:queue",
    "cluster": "conveyor.client.cluster_cli:cluster",
}


# A write the device refused: `conveyor cli PING >/dev/full`, a full disk or quota. (click
# itself ends a broken pipe, `| head -1`, quietly with status 1.)
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


def _give_up_writing(exc: OSError) -> None:
    """Exit 1 with one line, as coreutils do (`echo x >/dev/full` prints "write error: No
    space left on device"), instead of a traceback."""
    try:
        sys.stdout.flush()
    except OSError:
        # What stays buffered would fail again at exit, with CPython's "Exception
        # ignored" lines: it goes to /dev/null instead.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    # A file of the command's own (not standard output) is named, as a traceback would.
    where = f"{exc.filename}: " if exc.filename else ""
    click.echo(f"conveyor: write error: {where}{exc.strerror}", err=True)
    sys.exit(1)


class _LazyGroup(click.Group):
    def main(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().main(*args, **kwargs)
        except OSError as exc:
            if exc.errno not in _WRITE_ERRNOS:
                raise
            _give_up_writing(exc)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        return getattr(importlib.import_module(module_name), attribute)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="conveyor")
def main() -> None:
    """Conveyor: a distributed job queue speaking Disque's protocol."""


if __name__ == "__main__":
    main()

"""`conveyor` command line: server, cli, pressure, ...

Each subcommand lives in the package that owns it; this module only wires them up,
importing lazily so `conveyor server` does not pay for the client or rich.
"""

from __future__ import annotations

import importlib

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


class _LazyGroup(click.Group):
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

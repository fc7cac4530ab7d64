"""`conveyor server [CONFIG_FILE] [--directive value ...]`, invoked like disque-server."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from conveyor.node.config import Config, ConfigError


def build_config(argv: list[str]) -> Config:
    config = Config()
    words = list(argv)
    if words and not words[0].startswith("--"):
        config.load_file(Path(words.pop(0)))
    config.apply_overrides(words)
    return config


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def server(argv: tuple[str, ...]) -> None:
    """Start a node: conveyor server [CONFIG_FILE] [--port 7711] [--dir ./data] ..."""
    if argv and argv[0] in ("-h", "--help"):
        click.echo(
            "Usage: conveyor server [CONFIG_FILE] [--directive value ...]\n\n"
            "Examples:\n"
            "  conveyor server --port 7711 --dir ./data\n"
            "  conveyor server /etc/conveyor/disque.conf --loglevel verbose\n\n"
            "Every disque.conf directive works as --directive; see docs/configuration.md."
        )
        return
    try:
        config = build_config(list(argv))
    except (ConfigError, OSError) as exc:
        click.echo("*** FATAL CONFIG FILE ERROR ***", err=True)
        click.echo(f">>> {exc}", err=True)
        sys.exit(1)
    run(config)


def run(config: Config) -> None:
    from conveyor.node.server import Server, configure_logging

    configure_logging(config)
    data_dir = Path(config["dir"])
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        node = Server(config)
    except ConfigError as exc:  # a directive that parsed but can't be used (event-log)
        click.echo("*** FATAL CONFIG FILE ERROR ***", err=True)
        click.echo(f">>> {exc}", err=True)
        sys.exit(1)
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        runner = asyncio.run
    try:
        runner(node.serve_until_shutdown())
    except OSError as exc:
        click.echo(f"Could not start the node: {exc}", err=True)
        sys.exit(1)

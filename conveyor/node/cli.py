"""`conveyor server [CONFIG_FILE] [--directive value ...]`, invoked like disque-server."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import sysconfig
from pathlib import Path

import click

from conveyor import __version__
from conveyor.node.config import Config, ConfigError
from conveyor.node.multi import NodeSupervisor, split_nodes_option
from conveyor.node.nodeid import NodeIdLockError


def git_sha1() -> tuple[str, bool]:
    """(first 8 hex digits of the commit, dirty) of the checkout this package runs from;
    ("00000000", False) for an installed package or when git is not available."""
    package_dir = Path(__file__).resolve().parent.parent
    git = ["git", "-C", str(package_dir)]
    try:
        top = subprocess.run(
            [*git, "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=5
        )
        # Only a checkout of Conveyor itself: not some repository the package sits inside.
        if top.returncode or Path(top.stdout.strip()) != package_dir.parent:
            return "00000000", False
        sha = subprocess.run(
            [*git, "rev-parse", "--short=8", "HEAD"], capture_output=True, text=True, timeout=5
        )
        status = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return "00000000", False
    commit = sha.stdout.strip()[:8]
    if sha.returncode or len(commit) != 8:
        return "00000000", False
    return commit, bool(status.returncode == 0 and status.stdout.strip())


def version_line() -> str:
    """`conveyor server --version`, in disque-server's format."""
    sha, dirty = git_sha1()
    malloc = "pymalloc" if sysconfig.get_config_var("WITH_PYMALLOC") else "libc"
    bits = 64 if sys.maxsize > 2**32 else 32
    return f"Conveyor server v={__version__} sha={sha}:{int(dirty)} malloc={malloc} bits={bits}"


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
    if argv and argv[0] in ("-v", "--version"):
        click.echo(version_line())
        return
    if argv and argv[0] in ("-h", "--help"):
        click.echo(
            "Usage: conveyor server [CONFIG_FILE] [--directive value ...]\n"
            "       conveyor server -v or --version\n\n"
            "Examples:\n"
            "  conveyor server --port 7711 --dir ./data\n"
            "  conveyor server /etc/conveyor/disque.conf --loglevel verbose\n"
            "  conveyor server --nodes 4 --port 7711 --dir ./data   (a cluster, a node a core)\n\n"
            "Every disque.conf directive works as --directive; see docs/configuration.md."
        )
        return
    count, words = split_nodes_option(list(argv))
    try:
        config = build_config(words)
    except (ConfigError, OSError) as exc:
        click.echo("*** FATAL CONFIG FILE ERROR ***", err=True)
        click.echo(f">>> {exc}", err=True)
        sys.exit(1)
    if count is not None:
        sys.exit(NodeSupervisor(config, words, count).run())
    run(config)


def run(config: Config) -> None:
    from conveyor.node.aof_load import StartupError
    from conveyor.node.server import Server, configure_logging

    try:
        configure_logging(config)
    except OSError as exc:  # `logfile` in a missing or unwritable directory
        click.echo(f"Can't open the log file: {exc.strerror or exc}", err=True)
        sys.exit(1)
    data_dir = Path(config["dir"])
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file of that name, or no right to create it
        click.echo(f"Can't use the data directory '{data_dir}': {exc.strerror or exc}", err=True)
        sys.exit(1)
    try:
        node = Server.from_config(config)
    except ConfigError as exc:  # a directive that parsed but can't be used (event-log)
        click.echo("*** FATAL CONFIG FILE ERROR ***", err=True)
        click.echo(f">>> {exc}", err=True)
        sys.exit(1)
    except NodeIdLockError as exc:  # another node runs on this cluster config file
        click.echo(str(exc), err=True)
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
    except StartupError as exc:  # a damaged AOF: the log has the details too
        logging.getLogger("conveyor.node").warning("%s", exc)
        click.echo(f"Could not start the node: {exc}", err=True)
        sys.exit(1)

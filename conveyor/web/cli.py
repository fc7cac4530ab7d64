"""`conveyor web`: the console, served by uvicorn. Bad options or config are a one-line
error, never a traceback."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from conveyor.web.config import WebConfigError, load_config


@click.command()
@click.option(
    "--nodes",
    default=None,
    help="Comma-separated host:port of the nodes [default: config 'nodes', else 127.0.0.1:7711].",
)
@click.option(
    "--config",
    "config_path",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A config.json (seed 004's keys: addr, port, host, relative_root, basic_auth, ...).",
)
@click.option(
    "--queues-dir",
    "queues_dirs",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="A queue directory, or a directory of them, whose messages to show (repeatable).",
)
@click.option(
    "--data-dir",
    default=None,
    help="Attachments are stored under DIR/attachments [default: the node's dir, if local].",
)
@click.option("--addr", default=None, help="Address to listen on [default: 127.0.0.1].")
@click.option("--port", default=None, type=int, help="Port to listen on [default: 3333].")
@click.option(
    "--node-password", default=None, envvar="CONVEYOR_NODE_PASSWORD", help="The nodes' requirepass."
)
@click.option("-v", "--verbose", is_flag=True, help="Log every request.")
def web(
    nodes: str | None,
    config_path: Path | None,
    queues_dirs: tuple[Path, ...],
    data_dir: str | None,
    addr: str | None,
    port: int | None,
    node_password: str | None,
    verbose: bool,
) -> None:
    """The web console and REST API (/api/v1, /metrics) for Conveyor nodes."""
    try:
        config = load_config(
            config_path,
            nodes=nodes,
            addr=addr,
            port=port,
            node_password=node_password,
            queues_dirs=[str(d) for d in queues_dirs] or None,
            data_dir=data_dir,
        )
    except WebConfigError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        import uvicorn

        from conveyor.web.app import create_app
    except ImportError as exc:
        raise click.ClickException(
            f"{exc.name} is missing: install the console with pip install 'conveyor[web]'"
        ) from None
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        app = create_app(config)
    except ValueError as exc:  # a node address the client cannot parse
        raise click.ClickException(str(exc)) from None
    root = config.relative_root or ""
    click.echo(
        f"conveyor web on http://{config.addr}:{config.port}{root}/ "
        f"(nodes {', '.join(config.nodes)})"
    )
    try:
        uvicorn.run(
            app,  # type: ignore[arg-type]
            host=config.addr,
            port=config.port,
            log_level="info" if verbose else "warning",
            access_log=verbose,
            # Live streams end by themselves; on shutdown they get this long, then stop.
            timeout_graceful_shutdown=2,
            proxy_headers=False,
        )
    finally:
        app.fastapi.state.console.close()  # type: ignore[attr-defined]


if __name__ == "__main__":
    web()

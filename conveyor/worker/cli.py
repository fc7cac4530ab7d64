"""`conveyor worker` and `conveyor queue`: click commands; bad input is a one-line error."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click

from conveyor.client import Client, ConveyorError
from conveyor.worker.envelope import Attachment, Envelope, EnvelopeError
from conveyor.worker.queuedir import (
    STATES,
    MessageStore,
    QueueConfig,
    QueueConfigError,
    create_queue,
)
from conveyor.worker.webhooks import check_url

_NODES_HELP = "Comma-separated host:port of the nodes."


def _nodes(value: str) -> list[str]:
    nodes = [n.strip() for n in value.split(",") if n.strip()]
    if not nodes:
        raise click.BadParameter("give at least one host:port")
    return nodes


@click.command()
@click.argument("queue_dirs", nargs=-1, type=click.Path(file_okay=False, path_type=Path))
@click.option("--nodes", default="127.0.0.1:7711", show_default=True, help=_NODES_HELP)
@click.option("--app", "app_ref", default=None, help="Python tasks: module:attribute of an App.")
@click.option("--processes", default=1, show_default=True, help="Task worker processes.")
@click.option("--threads", default=1, show_default=True, help="Task threads per process.")
@click.option(
    "--grace", default=30.0, show_default=True, help="Seconds running work gets after TERM."
)
@click.option("--batch", default=32, show_default=True, help="Tasks per GETJOB/ACKJOB.")
@click.option(
    "--webhook-attempts", default=8, show_default=True, type=click.IntRange(1, 100),
    help="Attempts at a message's webhook before giving up.",
)  # fmt: skip
@click.option(
    "--webhook-backoff", default=1.0, show_default=True, type=click.FloatRange(0.01, 3600),
    help="Seconds before the first webhook retry; doubled for each next one (max 300).",
)  # fmt: skip
@click.option("-v", "--verbose", is_flag=True, help="Log every message.")
def worker(
    queue_dirs: tuple[Path, ...], nodes: str, app_ref: str | None, processes: int,
    threads: int, grace: float, batch: int, webhook_attempts: int, webhook_backoff: float,
    verbose: bool,
) -> None:  # fmt: skip
    """Run RQ-style queue directories (QUEUE_DIR...) or Python tasks (--app module:app)."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    if not queue_dirs and not app_ref:
        raise click.UsageError("give QUEUE_DIR... and/or --app module:app")
    if queue_dirs and app_ref:
        raise click.UsageError("run queue directories and --app in separate workers")
    try:
        if app_ref:
            from conveyor.worker.taskworker import serve_app

            code = serve_app(app_ref, _nodes(nodes), processes, threads, grace, batch)
        else:
            from conveyor.worker.service import serve_queues

            code = serve_queues(
                list(queue_dirs), _nodes(nodes), grace, webhook_attempts, webhook_backoff
            )
    except (QueueConfigError, ValueError, ImportError) as exc:
        raise click.ClickException(str(exc)) from None
    except ConveyorError as exc:
        raise click.ClickException(f"node error: {exc}") from None
    sys.exit(code)


@click.group()
def queue() -> None:
    """Create queue directories and add messages to them."""


@queue.command("create")
@click.argument("name")
@click.option("--script", required=True, help="The queue script run for each message.")
@click.option("--dir", "parent", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--num-workers", default=1, show_default=True)
@click.option("--exec-prefix", default=None, help="Prepended to the script (default 'bash -lc').")
@click.option("--timeout", default=None, type=float, help="Seconds before a run is killed.")
def create(
    name: str, script: str, parent: Path, num_workers: int, exec_prefix: str | None,
    timeout: float | None,
) -> None:  # fmt: skip
    """Make queue directory DIR/NAME with its config.json."""
    options = {"num_workers": num_workers, "exec_prefix": exec_prefix, "timeout": timeout}
    try:
        path = create_queue(parent, name, script, **options)
    except (QueueConfigError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(path)


def _load(queue_ref: str, parent: Path) -> QueueConfig:
    candidate = Path(queue_ref)
    directory = candidate if (candidate / "config.json").exists() else parent / queue_ref
    try:
        return QueueConfig.load(directory)
    except QueueConfigError as exc:
        raise click.ClickException(str(exc)) from None


@queue.command("add")
@click.argument("queue_ref", metavar="NAME")
@click.option("--dir", "parent", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--nodes", default="127.0.0.1:7711", show_default=True, help=_NODES_HELP)
@click.option("--param1", default=None)
@click.option("--param2", default=None)
@click.option("--param3", default=None)
@click.option("--param4", default=None)
@click.option("--due", default=0, type=click.IntRange(0), help="Seconds before it may run.")
@click.option(
    "--attach", multiple=True, type=click.Path(dir_okay=False, exists=True, path_type=Path)
)
@click.option("--webhook", default=None, help="http(s) URL the final state is POSTed to.")
def add(
    queue_ref: str, parent: Path, nodes: str, param1: str | None, param2: str | None,
    param3: str | None, param4: str | None, due: int, attach: tuple[Path, ...],
    webhook: str | None,
) -> None:  # fmt: skip
    """Enqueue one message on queue NAME (a directory under --dir, or a path); prints its ID."""
    from conveyor.worker.service import add_message

    config = _load(queue_ref, parent)
    given = {"param1": param1, "param2": param2, "param3": param3, "param4": param4}
    try:
        attachments = [Attachment.from_file(path) for path in attach]
    except (EnvelopeError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    envelope = Envelope({k: v for k, v in given.items() if v is not None}, attachments)
    if webhook is not None:
        try:
            envelope.webhook = check_url(webhook)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--webhook") from None
    try:
        with Client(_nodes(nodes)) as client:
            click.echo(add_message(client, config, envelope, due))
    except ConveyorError as exc:
        raise click.ClickException(f"node error: {exc}") from None


@queue.command("status")
@click.argument("queue_ref", metavar="NAME")
@click.option("--dir", "parent", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.argument("message_id", required=False)
def status(queue_ref: str, parent: Path, message_id: str | None) -> None:
    """Messages on this host by state, or one message's status.json."""
    config = _load(queue_ref, parent)
    if message_id:
        found = MessageStore(config.directory).status_text(message_id)
        if found is None:
            raise click.ClickException(f"no message {message_id} in {config.directory}")
        click.echo(found[1])
        return
    for state in STATES:
        folder = config.directory / state
        names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
        click.echo(f"{state}: {len(names)}")
        for name in names[-10:]:
            try:
                doc = json.loads((folder / name / "status.json").read_text())
            except (OSError, json.JSONDecodeError):
                doc = {}
            click.echo(f"  {name}  {doc.get('status', '')}")


@queue.command("rerun")
@click.argument("queue_ref", metavar="NAME")
@click.argument("message_id")
@click.option("--dir", "parent", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--nodes", default="127.0.0.1:7711", show_default=True, help=_NODES_HELP)
def rerun(queue_ref: str, message_id: str, parent: Path, nodes: str) -> None:
    """Enqueue a message kept in err (or done) again, as a new message; prints its ID."""
    from conveyor.worker.service import add_message

    config = _load(queue_ref, parent)
    store = MessageStore(config.directory)
    found = store.find(message_id)
    if found is None or found[0] not in ("err", "done", "relayed"):
        raise click.ClickException(f"no finished message {message_id} in {config.directory}")
    try:
        meta = json.loads((found[1] / "msg.json").read_text())
        envelope = Envelope.from_json(json.dumps(meta["envelope"]).encode())
    except (OSError, KeyError, ValueError) as exc:
        raise click.ClickException(f"{found[1]}/msg.json: {exc}") from None
    envelope.count = 0
    try:
        with Client(_nodes(nodes)) as client:
            new_id = add_message(client, config, envelope)
    except ConveyorError as exc:
        raise click.ClickException(f"node error: {exc}") from None
    status = json.loads((found[1] / "status.json").read_text())
    store.set_status(found[1], found[0], f"{status.get('status', '')} (re-run as {new_id})")
    click.echo(new_id)

"""`conveyor analyze EVENT_DIR --out DIR [--master URL]`: the command line of the analytics job.

Owns the options, the Spark session's lifetime for one run, the rich progress display (on
stderr, so stdout carries only the summary) and turning expected failures into one-line
errors. pyspark is imported only once the command runs, so `conveyor --help` stays fast and
works without the spark extra installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from conveyor.spark.report import Summary


def _parse_conf(items: tuple[str, ...]) -> dict[str, str]:
    conf = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--conf")
        conf[key.strip()] = value
    return conf


class _Stages:
    """A rich progress line per stage: a spinner while it runs, then its time."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        task = self.progress.add_task(name, total=1)
        yield
        self.progress.update(task, completed=1)


def _print_summary(summary: Summary) -> None:
    from conveyor.spark.report import format_duration, format_time

    s = summary
    click.echo(f"events: {s.events:,} ({s.malformed_lines:,} malformed lines skipped)")
    click.echo(
        f"jobs: {s.jobs:,} ids; added {s.added:,}, delivered {s.delivered:,}, "
        f"acked {s.acked:,}, nacked {s.nacked:,}, requeued {s.requeued:,} "
        f"({s.requeued_without_nack:,} without a NACK), "
        f"expired {s.expired:,}, dead-lettered {s.dead_lettered:,}"
    )
    click.echo(
        f"queues: {s.queues:,}, nodes: {s.nodes:,}, "
        f"from {format_time(s.first_event_ms)} to {format_time(s.last_event_ms)} "
        f"({format_duration(s.span_ms)})"
    )
    click.echo(
        f"dead-letter candidates: {s.dead_letter_candidates:,} "
        f"(redeliveries >= {s.redelivery_threshold}, or dead-lettered)"
    )
    for name, path in s.tables.items():
        click.echo(f"table {name}: {path}")
    click.echo(f"report: {s.report_path}")


@click.command("analyze")
@click.argument("event_dir")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory for the Parquet tables and report.html (created if missing).",
)
@click.option(
    "--master",
    default="local[*]",
    show_default=True,
    help="Spark master URL, e.g. spark://host:7077 or local[2].",
)
@click.option(
    "--redelivery-threshold",
    default=2,
    show_default=True,
    type=click.IntRange(min=1),
    help="A job is a dead-letter candidate at this many nacks + additional deliveries.",
)
@click.option(
    "--conf",
    "conf_items",
    multiple=True,
    metavar="KEY=VALUE",
    help="Extra Spark configuration; repeatable.",
)
def analyze_command(
    event_dir: str,
    out_dir: str,
    master: str,
    redelivery_threshold: int,
    conf_items: tuple[str, ...],
) -> None:
    """Analyze a node's job-event log (events-*.jsonl under EVENT_DIR) with Spark.

    Writes the queue_minute, job_latency and dead_letter_candidates Parquet tables and a
    self-contained report.html under --out.
    """
    # INT96, Spark's default, is deprecated Parquet; micros is what pandas/pyarrow/DuckDB expect.
    conf = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS", **_parse_conf(conf_items)}
    try:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException

        from conveyor.spark.analyze import (
            AnalyzeError,
            analyze,
            check_event_dir,
            prepare_out_dir,
        )
        from conveyor.spark.session import local_session
    except ImportError as exc:
        raise click.ClickException(
            f"conveyor analyze needs the spark extra (pip install 'conveyor[spark]'): {exc}"
        ) from exc

    try:
        # Fail on a bad directory before paying for a JVM.
        check_event_dir(event_dir)
        prepare_out_dir(out_dir)
    except AnalyzeError as exc:
        raise click.ClickException(str(exc)) from exc

    console = Console(stderr=True)
    columns = (
        SpinnerColumn(finished_text="[green]done[/]"),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
    )
    spark = None
    try:
        with Progress(*columns, console=console) as progress:
            stages = _Stages(progress)
            with stages(f"starting Spark ({master})"):
                spark = local_session(master, app_name="conveyor-analyze", conf=conf)
            summary = analyze(
                spark, event_dir, out_dir, redelivery_threshold=redelivery_threshold, stage=stages
            )
    except AnalyzeError as exc:
        raise click.ClickException(str(exc)) from exc
    except (PySparkException, Py4JError) as exc:
        # Spark's messages run to pages of JVM stack; the first line names the problem.
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise click.ClickException(f"Spark failed: {first_line}") from exc
    finally:
        if spark is not None:
            spark.stop()
    _print_summary(summary)

"""Run the fuzz targets for a while; print executions, corpus size, coverage, crashes, hangs.

    .venv/bin/python -m fuzz.run --seconds 300            # what `make fuzz` runs
    .venv/bin/python -m fuzz.run --seconds 30 --ci        # the bounded run in `make test`
    .venv/bin/python -m fuzz.run --targets resp --seconds 1800 --keep-going --workdir DIR

Each target runs in its own process (libFuzzer through atheris, `-timeout=5` so a hang is a
crash) over a working corpus in `--workdir` plus the committed seeds (`fuzz/corpus/<t>`),
which it only reads. Afterwards the whole corpus is replayed once (`-runs=0`) for the
coverage figures: libFuzzer's `cov` (edges) and `ft` (features) over the corpus.

Without `--keep-going` a target stops at its first crash (libFuzzer's way; `make test`).
With it, a Python-level crash is saved once per signature to `<workdir>/<t>/artifacts/`
and fuzzing goes on, and after a hang or a hard crash the target is restarted until the
time is up. Exit status 0 only if no target crashed or hung.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from fuzz.harness import KEEP_GOING_ENV, SCRATCH_ENV

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {
    "resp": "fuzz.fuzz_resp",
    "commands": "fuzz.fuzz_commands",
    "bus": "fuzz.fuzz_bus",  # the cluster bus codec (conveyor/cluster/codec.py)
}
_STATS = re.compile(rb"#(\d+)\s+(\w+)\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\d+)(\w*)")
_EXECUTED = re.compile(rb"stat::number_of_executed_units: (\d+)")
_ARTIFACT = re.compile(rb"Test unit written to (\S+)")
_KNOWN = re.compile(rb"\[fuzz\] known issue \(tracked, not a crash\): ([^\n]+)")
MAX_RESTARTS = 50


@dataclass
class Result:
    target: str
    seconds: float = 0.0
    executions: int = 0
    runs: int = 0
    cov: int = 0
    ft: int = 0
    corpus: int = 0
    corpus_bytes: str = ""
    crashes: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    known: set[str] = field(default_factory=set)


def _env(artifacts: Path | None, ci: bool, scratch: Path) -> dict[str, str]:
    env = dict(os.environ)
    # The commands target's files (CONFIG SET dir, AOF, event log): inside the work
    # directory, so they go with it (see fuzz/fuzz_commands.py).
    env[SCRATCH_ENV] = str(scratch)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if artifacts is not None:
        env[KEEP_GOING_ENV] = str(artifacts)
    if ci:
        env.setdefault("CONVEYOR_FUZZ_STALL_SCALE", "3")
    return env


def _command(target: str, flags: list[str], corpus: Path) -> list[str]:
    command = [sys.executable, "-m", TARGETS[target], *flags]
    dictionary = ROOT / "fuzz" / "dicts" / f"{target}.dict"
    if dictionary.exists():
        command.append(f"-dict={dictionary}")
    command.append(str(corpus))
    seeds = ROOT / "fuzz" / "corpus" / target
    if seeds.is_dir():
        command.append(str(seeds))
    return command


def run_target(target: str, seconds: int, workdir: Path, keep_going: bool, ci: bool) -> Result:
    result = Result(target)
    base = workdir / target
    corpus = base / "corpus"
    artifacts = base / "artifacts"
    corpus.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    log_path = base / "fuzz.log"
    started = time.monotonic()
    with log_path.open("ab") as log:  # libFuzzer's output, as it comes
        while True:
            left = int(seconds - (time.monotonic() - started))
            if left < 3 or result.runs > MAX_RESTARTS:
                break
            result.runs += 1
            flags = [
                f"-max_total_time={left}",
                "-timeout=5",
                "-print_final_stats=1",
                f"-artifact_prefix={artifacts}/",
            ]
            if ci:
                flags.append("-seed=1")  # the same inputs in every CI run
            log.flush()
            offset = log_path.stat().st_size
            process = subprocess.run(
                _command(target, flags, corpus),
                cwd=ROOT,
                env=_env(artifacts if keep_going else None, ci, base / "scratch"),
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
            )
            with log_path.open("rb") as written:
                written.seek(offset)
                output = written.read()
            executed = _EXECUTED.findall(output)
            if executed:
                result.executions += int(executed[-1])
            else:
                stats = _STATS.findall(output)
                result.executions += int(stats[-1][0]) if stats else 0
            result.known.update(label.decode() for label in _KNOWN.findall(output))
            if process.returncode != 0:
                written = [path.decode() for path in _ARTIFACT.findall(output)]
                tail = output[-3000:].decode(errors="replace")
                hang = b"libFuzzer: timeout" in output or b"ALARM: working on" in output
                (result.hangs if hang else result.crashes).extend(written or [tail])
                if not keep_going:
                    sys.stdout.write(tail + "\n")
                    break
    result.seconds = time.monotonic() - started
    # Keep-going crashes, one file per signature.
    for report in sorted(artifacts.glob("crash-*.txt")):
        crash = str(report.with_suffix(""))
        if crash not in result.crashes:
            result.crashes.append(crash)
    _measure(result, target, corpus, ci)
    return result


def _measure(result: Result, target: str, corpus: Path, ci: bool) -> None:
    """Coverage of the whole corpus: replay it once, read libFuzzer's INITED line."""
    process = subprocess.run(
        _command(target, ["-runs=0", "-timeout=30"], corpus),
        cwd=ROOT,
        env=_env(None, ci, corpus.parent / "scratch")
        | {KEEP_GOING_ENV: str(corpus.parent / "replay")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        check=False,
    )
    stats = _STATS.findall(process.stdout)
    if stats:
        _, _, cov, ft, corp, size, unit = stats[-1]
        result.cov, result.ft, result.corpus = int(cov), int(ft), int(corp)
        result.corpus_bytes = f"{int(size)}{unit.decode()}"


def summary(result: Result) -> str:
    rate = result.executions / result.seconds if result.seconds else 0.0
    line = (
        f"fuzz {result.target}: {result.executions} executions in {result.seconds:.0f} s "
        f"({rate:.0f}/s, {result.runs} run(s)); corpus {result.corpus} inputs "
        f"({result.corpus_bytes}); coverage cov: {result.cov} ft: {result.ft}; "
        f"crashes {len(result.crashes)}, hangs {len(result.hangs)}"
    )
    for crash in result.crashes:
        line += f"\n  crash: {crash}"
    for hang in result.hangs:
        line += f"\n  hang: {hang}"
    for label in sorted(result.known):
        line += f"\n  known issue hit (tracked by an xfail test): {label}"
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=int, default=300, help="per target")
    parser.add_argument("--targets", default=",".join(TARGETS), help="resp,commands")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temp dir")
    parser.add_argument("--keep-going", action="store_true", help="go on after crashes")
    parser.add_argument("--ci", action="store_true", help="fixed seed, relaxed stall limit")
    args = parser.parse_args(argv)
    targets = [name.strip() for name in args.targets.split(",") if name.strip()]
    unknown = [name for name in targets if name not in TARGETS]
    if unknown:
        parser.error(f"unknown target(s) {unknown}; choose from {sorted(TARGETS)}")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="conveyor-fuzz-"))
    results = []
    try:
        for target in targets:
            result = run_target(target, args.seconds, workdir, args.keep_going, args.ci)
            print(summary(result), flush=True)
            results.append(result)
    finally:
        if args.workdir is None and not any(r.crashes or r.hangs for r in results):
            shutil.rmtree(workdir, ignore_errors=True)
    failed = [r.target for r in results if r.crashes or r.hangs]
    if failed:
        print(f"FUZZ FAILED: crashes or hangs in {', '.join(failed)} (work dir {workdir})")
        return 1
    print(f"FUZZ OK: {len(results)} target(s), no crash, no hang")
    return 0


if __name__ == "__main__":
    sys.exit(main())

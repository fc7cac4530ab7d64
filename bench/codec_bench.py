"""The compiled modules against their pure-Python source: ns per call of the codecs.

Each figure runs in a fresh interpreter, compiled (the .so `make compile` built) and
pure (CONVEYOR_PURE_PYTHON=1), interleaved, median of the rounds:
- job encode / decode: one 100-byte job with three holders (core/codec.py);
- REPLJOB x16 encode / decode: a bus frame of 16 such jobs (cluster/codec.py);
- GOTJOB encode / decode: a job-ID message (cluster/codec.py);
- AOF parse: ns per LOADJOB record of a 10,000-record AOF (persistence/reader.py).

Run: `python -m bench.codec_bench [--rounds N]` (part of `make bench`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from conveyor.compiled import COMPILED_MODULES

MEASURE = r"""
import json, time
from conveyor import compiled
from conveyor.core.codec import JobRecord, decode_job, encode_job
from conveyor.cluster.codec import decode, encode
from conveyor.cluster.messages import GotJob, Header, ReplJob
from conveyor.persistence.reader import read_records

def per_call(fn, count):
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter_ns()
        for _ in range(count):
            fn()
        best = min(best, (time.perf_counter_ns() - started) / count)
    return best

name = b"0123456789abcdef0123456789abcdef01234567"
record = JobRecord(b"D-01234567-" + b"a" * 24 + b"-05a1", 1, 0, 0, 3, 100, 1_700_000_000 * 10**9,
                   0, 300, 0, 0, b"queue", b"x" * 100, (name, name[::-1], name.upper()))
data = encode_job(record)
header = Header(sender=name, port=7711, flags=0)
repljob = ReplJob(header, (record,) * 16)
frame = encode(repljob)
gotjob = GotJob(header, record.id)
gotframe = encode(gotjob)
loadjob = b"*2\r\n$7\r\nLOADJOB\r\n$%d\r\n%s\r\n" % (len(data), data)
aof = loadjob * 10_000
figures = {
    "job encode": per_call(lambda: encode_job(record), 50_000),
    "job decode": per_call(lambda: decode_job(data), 50_000),
    "REPLJOB x16 encode": per_call(lambda: encode(repljob), 5_000),
    "REPLJOB x16 decode": per_call(lambda: decode(frame), 5_000),
    "GOTJOB encode": per_call(lambda: encode(gotjob), 50_000),
    "GOTJOB decode": per_call(lambda: decode(gotframe), 50_000),
    "AOF parse, per record": per_call(lambda: sum(1 for _ in read_records(aof)), 5) / 10_000,
}
print(json.dumps({"summary": compiled.summary(), "figures": figures}))
"""


def measure(pure: bool) -> dict[str, object]:
    env = dict(os.environ, CONVEYOR_PURE_PYTHON="1" if pure else "0")
    out = subprocess.run(
        [sys.executable, "-c", MEASURE], env=env, capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"compiled": [], "pure": []}
    for _ in range(options.rounds):
        for kind in runs:
            result = measure(pure=kind == "pure")
            everything = f"{len(COMPILED_MODULES)}/{len(COMPILED_MODULES)}"
            if kind == "compiled" and result["summary"] != everything:
                print(f"compiled modules not all built ({result['summary']}): run `make compile`")
            runs[kind].append(result["figures"])  # type: ignore[arg-type]
    print(f"\n{'ns per call':28}{'compiled':>12}{'pure':>12}{'speed-up':>10}")
    for figure in runs["compiled"][0]:
        fast = statistics.median(r[figure] for r in runs["compiled"])
        slow = statistics.median(r[figure] for r in runs["pure"])
        print(f"{figure:28}{fast:>12,.0f}{slow:>12,.0f}{slow / fast:>9.2f}x")


if __name__ == "__main__":
    main()

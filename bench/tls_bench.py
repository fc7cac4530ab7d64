"""ADDJOB throughput over TLS beside plain TCP, on one node (redis-benchmark, 50 clients,
-P 16 and -P 1, 100-byte bodies), with throwaway certificates from `openssl`.

Figures are printed, never asserted; only 127.0.0.1. Usage: python -m bench.tls_bench
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from bench.node_bench import _RPS, BENCH_CLIENTS
from bench.node_common import free_port_pair
from tests.pki import make_pki, tls_args
from tests.servers import NodeProcess

BODY = b"x" * 100


def benchmark(port: int, requests: int, pipeline: int, tls: list[str]) -> float:
    output = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-c", str(BENCH_CLIENTS), "-n", str(requests),
         "-P", str(pipeline), "-q", *tls, "ADDJOB", "q", BODY, "0"],
        capture_output=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    matches = _RPS.findall(output)
    if not matches:
        raise RuntimeError(f"redis-benchmark printed no figure: {output[-300:]!r}")
    return float(matches[-1])


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="conveyor-tls-bench-") as scratch:
        base = Path(scratch)
        pki = make_pki(base)
        tls_port = free_port_pair()
        node = NodeProcess(base / "node", "--tls-port", str(tls_port), *tls_args(pki))
        try:
            tls = ["--tls", "--cacert", str(pki["ca"][0])]
            print(f"{'ADDJOB jobs/s, 1 node':28}{'-P 1':>12}{'-P 16':>12}")
            for name, port, flags in (("plain TCP", node.port, []), ("TLS", tls_port, tls)):
                p1 = benchmark(port, 50_000, 1, flags)
                p16 = benchmark(port, 300_000, 16, flags)
                print(f"{name:28}{p1:>12,.0f}{p16:>12,.0f}", flush=True)
        finally:
            node.stop()


if __name__ == "__main__":
    main()

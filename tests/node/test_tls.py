"""TLS on real processes (conveyor/node/tls.py): clients on `tls-port` with redis-py
`ssl=True`, client certificates, TLS bus links between nodes holding certificates of one
CA, and start-up refusing unusable TLS files. Certificates come from the `openssl`
command (Debian's, installed by `make sysdeps`)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.cluster.test_cluster_nodes import all_healthy, start, view, wait_for
from tests.cluster.test_replication import holders
from tests.conftest import free_cluster_port
from tests.pki import Pki, make_pki, tls_args
from tests.servers import NodeProcess

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="openssl is missing: make sysdeps installs it"
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_client(port: int, pki: Pki, cert: str | None = None) -> redis.Redis:
    extra: dict[str, str] = {}
    if cert is not None:
        extra = {"ssl_certfile": str(pki[cert][0]), "ssl_keyfile": str(pki[cert][1])}
    return redis.Redis(port=port, ssl=True, ssl_ca_certs=str(pki["ca"][0]),
                       ssl_check_hostname=False, socket_timeout=5, **extra)  # type: ignore[arg-type]  # fmt: skip


def test_clients_on_the_tls_port(tmp_path: Path, pki: Pki) -> None:
    tls_port = free_cluster_port()
    node = NodeProcess(tmp_path / "n", "--tls-port", str(tls_port), *tls_args(pki))
    try:
        secure = tls_client(tls_port, pki)
        job_id = secure.execute_command("ADDJOB", "q", "over tls", "0")
        assert node.client().execute_command("QPEEK", "q", "1")[0][1] == job_id  # plain port
        assert secure.execute_command("GETJOB", "FROM", "q")[0][2] == b"over tls"
        # Plain text on the TLS port is not a client.
        with pytest.raises(redis.ConnectionError):
            redis.Redis(port=tls_port, socket_timeout=2).ping()
        assert secure.ping()
    finally:
        node.stop()


def test_client_certificates_when_asked(tmp_path: Path, pki: Pki) -> None:
    tls_port = free_cluster_port()
    node = NodeProcess(tmp_path / "n", "--tls-port", str(tls_port), "--tls-auth-clients", "yes",
                       *tls_args(pki))  # fmt: skip
    try:
        assert tls_client(tls_port, pki, cert="client").ping()
        with pytest.raises((redis.ConnectionError, ssl.SSLError)):
            tls_client(tls_port, pki).ping()
        with pytest.raises((redis.ConnectionError, ssl.SSLError)):
            tls_client(tls_port, pki, cert="stranger").ping()
    finally:
        node.stop()


def test_tls_bus_between_nodes_of_one_ca(tmp_path: Path, pki: Pki) -> None:
    cluster: list[NodeProcess] = []
    try:
        _tls_bus(tmp_path, cluster, pki)
    finally:
        for node in cluster:
            node.stop()


def _tls_bus(tmp_path: Path, cluster: list[NodeProcess], pki: Pki) -> None:
    for index in range(2):
        cluster.append(start(tmp_path, index, None, "--tls-cluster", "yes", *tls_args(pki)))
    stranger = start(tmp_path, 2, None, "--tls-cluster", "yes", *tls_args(pki, "stranger"))
    cluster.append(stranger)
    first, second = cluster[0], cluster[1]
    second.client().execute_command("CLUSTER", "MEET", "127.0.0.1", first.port)
    wait_for(lambda: all_healthy([first, second]), "two nodes over TLS")
    job_id = first.client().execute_command("ADDJOB", "q", "x", "5000", "REPLICATE", "2")
    assert holders([first, second], job_id) == 2
    # A certificate from another CA: no link, so never past the handshake.
    stranger.client().execute_command("CLUSTER", "MEET", "127.0.0.1", first.port)
    wait_for(lambda: set(view(stranger)) == {stranger.port}, "the stranger's handshake gone",
             deadline_s=10)  # fmt: skip
    assert set(view(first)) == {first.port, second.port}


def test_unusable_tls_files_stop_the_start(tmp_path: Path) -> None:
    started = subprocess.run(
        [sys.executable, "-m", "conveyor.cli", "server", "--port", str(free_cluster_port()),
         "--dir", str(tmp_path), "--tls-port", str(free_cluster_port()),
         "--tls-cert-file", str(tmp_path / "missing.crt"), "--tls-key-file", str(tmp_path / "x")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert started.returncode == 1
    assert "FATAL CONFIG FILE ERROR" in started.stderr
    assert "TLS certificate or key not loaded" in started.stderr

"""Node.js clients with their defaults: ioredis 6 and node-redis 6 (npm `redis`).

Both open every connection with `HELLO 3` (RESP3) and `CLIENT SETINFO`; Disque's commands
go through `call` / `sendCommand`. The packages are installed with npm into
`.cache/npm-clients/` (git-ignored) on first use; the tests skip, saying why, when
`node`/`npm` are missing or the install fails.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import NodeProcess, running_node

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "npm-clients"
PACKAGES = {"ioredis": "^6.0.0", "redis": "^6.0.0"}
INSTALL_TIMEOUT_S = 300
SCRIPT_TIMEOUT_S = 60

# One run per client: connect with the defaults (plus host, port and password), then
# ADDJOB / GETJOB / ACKJOB and a few nulls; prints the replies as JSON.
SCRIPT = r"""
import { createRequire } from 'module';
const require = createRequire(process.env.CLIENTS_PACKAGE_JSON);
const [kind, port, password] = [process.argv[2], Number(process.argv[3]), process.argv[4]];
setTimeout(() => { console.error('timed out'); process.exit(3); }, 30000).unref();

async function session(call) {
  const out = {};
  out.hello = await call(['HELLO', '3']);
  out.clientInfo = String(await call(['CLIENT', 'INFO']));
  const id = await call(['ADDJOB', `q-${kind}`, `hello from ${kind}`, '0']);
  out.id = id;
  out.getjob = await call(['GETJOB', 'FROM', `q-${kind}`]);
  out.show = await call(['SHOW', id]);
  out.ackjob = await call(['ACKJOB', id]);
  out.showAfterAck = await call(['SHOW', id]);
  out.nohang = await call(['GETJOB', 'NOHANG', 'FROM', `q-${kind}`]);
  out.timeout = await call(['GETJOB', 'TIMEOUT', '50', 'FROM', `q-${kind}`]);
  out.qstatMissing = await call(['QSTAT', 'no-such-queue']);
  out.qlen = await call(['QLEN', `q-${kind}`]);
  out.disqueHello = await call(['HELLO']);
  return out;
}

let out;
if (kind === 'ioredis') {
  const Redis = require('ioredis');
  const options = { host: '127.0.0.1', port, retryStrategy: () => null };
  if (password) options.password = password;
  const client = new Redis(options);
  client.on('error', (err) => { console.error(`ioredis: ${err.message}`); process.exit(2); });
  out = await session((args) => client.call(...args));
  out.clientInfo = String(await client.call('CLIENT', 'INFO'));
  await client.quit();
} else {
  const { createClient } = require('redis');
  const options = { socket: { host: '127.0.0.1', port, reconnectStrategy: false } };
  if (password) options.password = password;
  const client = createClient(options);
  client.on('error', (err) => { console.error(`node-redis: ${err.message}`); process.exit(2); });
  await client.connect();
  out = await session((args) => client.sendCommand(args));
  out.clientInfo = String(await client.sendCommand(['CLIENT', 'INFO']));
  client.destroy();
}
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def clients_dir() -> Path:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for the ioredis/node-redis tests")
    CACHE.mkdir(parents=True, exist_ok=True)
    package_json = CACHE / "package.json"
    with open(CACHE / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install at a time (parallel test runs)
        wanted = {"private": True, "dependencies": PACKAGES}
        installed = all(
            (CACHE / "node_modules" / name / "package.json").exists() for name in PACKAGES
        )
        current = json.loads(package_json.read_text()) if package_json.exists() else None
        if not installed or current != wanted:
            package_json.write_text(json.dumps(wanted, indent=2) + "\n")
            try:
                done = subprocess.run(
                    [
                        npm,
                        "install",
                        "--no-audit",
                        "--no-fund",
                        "--no-progress",
                        "--prefix",
                        str(CACHE),
                    ],
                    cwd=CACHE,
                    capture_output=True,
                    text=True,
                    timeout=INSTALL_TIMEOUT_S,
                )
            except subprocess.TimeoutExpired:
                pytest.skip(f"npm install of {sorted(PACKAGES)} took over {INSTALL_TIMEOUT_S} s")
            if done.returncode != 0:
                pytest.skip(f"npm install of {sorted(PACKAGES)} failed: {done.stderr[-500:]}")
    return CACHE


def run_client(
    clients_dir: Path, tmp_path: Path, kind: str, port: int, password: str = ""
) -> dict[str, Any]:
    script = tmp_path / "client.mjs"
    script.write_text(SCRIPT)
    node = shutil.which("node")
    assert node is not None
    done = subprocess.run(
        [node, str(script), kind, str(port), password],
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_S,
        env={**os.environ, "CLIENTS_PACKAGE_JSON": str(clients_dir / "package.json")},
    )
    assert done.returncode == 0, f"{kind} failed ({done.returncode}):\n{done.stderr}\n{done.stdout}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def _client_info(line: str) -> dict[str, str]:
    return dict(field.split("=", 1) for field in line.split())


def check_session(out: dict[str, Any], kind: str, lib_name: str, node_id: bytes, port: int) -> None:
    job_id = out["id"]
    assert isinstance(job_id, str) and job_id.startswith("D-") and len(job_id) == 40
    assert out["getjob"] == [[f"q-{kind}", job_id, f"hello from {kind}"]]
    show = dict(zip(out["show"][::2], out["show"][1::2], strict=True))
    assert (
        show["id"] == job_id and show["state"] == "active" and show["body"] == f"hello from {kind}"
    )
    assert out["ackjob"] == 1
    # RESP3 nulls decode to null
    assert out["showAfterAck"] is None
    assert out["nohang"] is None
    assert out["timeout"] is None
    assert out["qstatMissing"] is None
    assert out["qlen"] == 0
    # the handshake map
    hello = out["hello"]
    if isinstance(hello, list):  # ioredis turns maps into flat arrays
        hello = dict(zip(hello[::2], hello[1::2], strict=True))
    assert hello["server"] == "conveyor" and hello["proto"] == 3 and hello["mode"] == "standalone"
    # Disque's HELLO still answers the node list
    assert out["disqueHello"] == [1, node_id.decode(), [node_id.decode(), "", str(port), "1"]]
    info = _client_info(out["clientInfo"])
    assert info["resp"] == "3", info  # the library's default: RESP3
    assert info["lib-name"] == lib_name, info  # from its CLIENT SETINFO
    assert info["lib-ver"].startswith("6."), info


@pytest.fixture(scope="module")
def auth_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with running_node(tmp_path_factory.mktemp("auth-js"), "--requirepass", "js-secret") as process:
        yield process


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 2 * SCRIPT_TIMEOUT_S)
@pytest.mark.parametrize(
    ("kind", "lib_name"), [("ioredis", "ioredis"), ("node-redis", "node-redis")]
)
def test_js_client_with_defaults(
    clients_dir: Path, tmp_path: Path, node: NodeProcess, kind: str, lib_name: str
) -> None:
    client = node.client()
    try:
        node_id = client.execute_command("CLUSTER", "MYID")
    finally:
        client.close()
    out = run_client(clients_dir, tmp_path, kind, node.port)
    check_session(out, kind, lib_name, node_id, node.port)


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 2 * SCRIPT_TIMEOUT_S)
@pytest.mark.parametrize(
    ("kind", "lib_name"), [("ioredis", "ioredis"), ("node-redis", "node-redis")]
)
def test_js_client_with_password(
    clients_dir: Path, tmp_path: Path, auth_node: NodeProcess, kind: str, lib_name: str
) -> None:
    # `HELLO 3 AUTH default <password>` on connect
    client = auth_node.client(password="js-secret")
    try:
        node_id = client.execute_command("CLUSTER", "MYID")
    finally:
        client.close()
    out = run_client(clients_dir, tmp_path, kind, auth_node.port, "js-secret")
    check_session(out, kind, lib_name, node_id, auth_node.port)

"""The operator API beyond queues: errors in bulk, schedules with "run now", the workers with
quiet/stop, the cluster, webhooks asked for through the API, and /metrics checked by
promtool. Against a real node, real workers and the console under uvicorn."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="pip install -e '.[web]'")
import httpx

from tests.servers import NodeProcess
from tests.web.conftest import Background, WebProcess, make_queue, wait_for
from tests.worker.test_webhooks import Recorder

PROMTOOL = shutil.which("promtool")


@pytest.fixture(scope="module")
def ops_queue(queues_dir: Path) -> Path:
    """A queue with a yearly schedule (it never fires during the tests) beside `jobs`."""
    schedule = [{"cron": "0 0 1 1 *", "param1": "yearly"}]
    return make_queue(queues_dir, "ops", queues_dir / "script.sh", schedule=schedule, retry=5)


def _worker(node: NodeProcess, queue: Path, log: Path) -> Background:
    command = [sys.executable, "-m", "conveyor.cli", "worker", "-v", "--grace", "2"]
    command += ["--nodes", f"127.0.0.1:{node.port}", str(queue)]
    return Background(command, log)


@pytest.fixture
def ops_worker(node: NodeProcess, ops_queue: Path, tmp_path: Path) -> Iterator[Background]:
    started = _worker(node, ops_queue, tmp_path / "ops-worker.log")
    yield started
    started.stop()


def _error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


def _wait_err(api: httpx.Client, marker: str) -> str:
    added = api.post("/queues/jobs/messages", json={"params": {"param1": "err", "param2": marker}})
    msg_id = added.json()["id"]

    def in_err() -> bool:
        return api.get(f"/queues/jobs/messages/{msg_id}").json().get("state") == "err"

    wait_for(in_err, f"{msg_id} in err")
    return str(msg_id)


RERUN = ("bulk-a", "bulk-c")


def _rerun_count(api: httpx.Client, msg_id: str) -> int:
    response = api.post("/errors/rerun", json={"queue": "jobs", "ids": [msg_id]})
    return int(response.json()["count"])


def test_errors_search_rerun_and_delete(api: httpx.Client, worker: Background) -> None:
    first, second = _wait_err(api, "bulk-a"), _wait_err(api, "bulk-b")
    found = api.get("/errors", params={"search": "bulk-a"}).json()
    assert [m["id"] for m in found["items"]] == [first] and found["items"][0]["queue"] == "jobs"
    rerun = api.post("/errors/rerun", json={"queue": "jobs", "ids": [first]})
    assert rerun.json() == {"count": 1}
    moved = api.get(f"/queues/jobs/messages/{first}").json()
    assert moved["state"] == "done" and "re-run as D-" in moved["status"]
    assert api.post("/errors/rerun", json={"queue": "jobs", "ids": [first]}).json() == {"count": 0}
    # Bulk re-runs at once (a double click, two operators) run a message once.
    raced = _wait_err(api, "bulk-c")
    with ThreadPoolExecutor(4) as pool:
        counts = list(pool.map(lambda _: _rerun_count(api, raced), range(4)))
    assert sum(counts) == 1, counts

    # Both re-runs fail again by design (bulk-c's may end after bulk-a's: wait for both, or
    # it lands in err after the delete below); then "delete all" of the queue takes them.
    def rerun_in_err() -> bool:
        totals = [api.get("/errors", params={"search": m}).json()["total"] for m in RERUN]
        return totals == [1, 1]

    wait_for(rerun_in_err, "the re-runs of bulk-a and bulk-c in err")
    deleted = api.post("/errors/delete", json={"queue": "jobs", "ids": None}).json()["count"]
    assert deleted >= 2
    assert api.get("/errors", params={"queue": "jobs"}).json()["total"] == 0
    _error(api.get(f"/queues/jobs/messages/{second}"), 404, "no_message")
    _error(api.post("/errors/delete", json={"queue": "nodir"}), 404, "no_queue_dir")
    bad = api.post("/errors/rerun", json={"ids": ["not-an-id"]})
    assert bad.status_code == 422


def test_schedules_next_run_and_run_now(api: httpx.Client, ops_queue: Path) -> None:
    listed = wait_for(lambda: api.get("/queues/ops/schedules").json().get("schedules"), "ops")
    [entry] = listed
    assert entry["cron"] == "0 0 1 1 *" and entry["params"] == {"param1": "yearly"}
    assert time.strftime("%m-%d %H:%M:%S", time.gmtime(entry["next_run"])) == "01-01 00:00:00"
    assert entry["next_run"] > time.time()
    added = api.post("/queues/ops/schedules/0/run")
    assert added.status_code == 201
    job = api.get(f"/jobs/{added.json()['id']}").json()
    assert '"param1":"yearly"' in job["body"] and "run now" in job["body"]
    _error(api.post("/queues/ops/schedules/5/run"), 404, "no_schedule")
    _error(api.get("/queues/nodir/schedules"), 404, "no_queue_dir")
    api.post("/queues/ops/pause", json={"state": "in"})
    try:
        _error(api.post("/queues/ops/schedules/0/run"), 409, "paused")
    finally:
        api.post("/queues/ops/pause", json={"state": "none"})
    api.post("/queues/ops/purge")  # the worker of the next test must not run these


def _worker_entry(api: httpx.Client, pid: int) -> dict[str, Any] | None:
    for entry in api.get("/workers").json()["workers"]:
        if entry["pid"] == pid:
            return dict(entry)
    return None


def test_workers_quiet_then_stop(
    api: httpx.Client, node: NodeProcess, ops_worker: Background
) -> None:
    pid = ops_worker.process.pid
    entry = wait_for(lambda: _worker_entry(api, pid), "the worker's record")
    assert entry["state"] == "running"
    assert [(q["name"], q["slots"]) for q in entry["queues"]] == [("ops", 1)]
    quiet = api.post(f"/workers/{entry['id']}/quiet")
    assert quiet.json() == {"id": entry["id"], "requested": "quiet"}
    wait_for(lambda: (_worker_entry(api, pid) or {}).get("state") == "quiet", "quiet")
    # A quiet worker takes nothing: the message is still queued after the worker exits.
    api.post("/queues/ops/messages", json={"params": {"param1": "while quiet"}})
    assert api.post(f"/workers/{entry['id']}/stop").status_code == 200
    assert ops_worker.process.wait(20) == 0
    assert api.get("/queues/ops").json()["len"] == 1
    assert _worker_entry(api, pid) is None  # it removed its record on the way out
    _error(api.post(f"/workers/{entry['id']}/stop"), 404, "no_worker")
    _error(api.post("/workers/bad id!/stop"), 422, "invalid")
    assert api.post(f"/workers/{entry['id']}/reboot").status_code == 422
    api.post("/queues/ops/purge")


def test_cluster_of_one_node(api: httpx.Client, node: NodeProcess) -> None:
    cluster = api.get("/cluster").json()
    [only] = cluster["nodes"]
    assert only["address"] == f"127.0.0.1:{node.port}" and only["up"] and only["flags"]
    assert cluster["links"] == [] and cluster["size"] == 1
    assert only["info"]["registered_queues"] >= 0


def test_webhook_asked_through_the_api_is_delivered(api: httpx.Client, worker: Background) -> None:
    hook = Recorder([200])
    try:
        added = api.post(
            "/queues/jobs/messages",
            json={"params": {"param1": "hooked"}, "webhook": f"{hook.url}/done"},
        )
        msg_id = added.json()["id"]

        def delivered() -> dict[str, Any] | None:
            doc = api.get(f"/queues/jobs/messages/{msg_id}").json()
            return doc if (doc.get("webhook") or {}).get("delivered") else None

        doc = wait_for(delivered, "the webhook delivered")
        assert doc["state"] == "done" and doc["webhook"]["attempts"] == 1
        [posted] = hook.posts
        assert posted["id"] == msg_id and posted["state"] == "done"
        assert posted["params"] == {"param1": "hooked"}
    finally:
        hook.close()


def test_webhook_asked_through_the_api_is_checked(api: httpx.Client, web: WebProcess) -> None:
    for bad in ("ftp://example.org/x", "javascript:alert(1)", "http://"):
        response = api.post("/queues/jobs/messages", json={"webhook": bad})
        assert response.status_code == 422, response.text
    form = {"param1": "x", "webhook": "gopher://x", "x_format": "json"}
    _error(httpx.post(f"{web.url}/q/jobs/new_message", data=form, timeout=15), 400, "bad_webhook")


def _sample(text: str, name: str, labels: str = "") -> float:
    pattern = rf"^{re.escape(name)}(\{{[^}}]*{re.escape(labels)}[^}}]*\}})? (\S+)$"
    return sum(float(m.group(2)) for m in re.finditer(pattern, text, re.M))


def test_metrics_pass_promtool_and_move(
    web: WebProcess, api: httpx.Client, worker: Background
) -> None:
    if PROMTOOL is None:
        pytest.skip("promtool is missing: apt-get install prometheus (make sysdeps does)")

    def scrape() -> str:
        return httpx.get(f"{web.url}/metrics", timeout=15).text

    before = scrape()
    for i in range(3):
        api.post("/queues/jobs/messages", json={"params": {"param1": f"metric-{i}"}})

    # The worker's counters are read live, the node's totals from the sampler's cached
    # snapshot: wait for both, or a scrape between the two sees only the first move.
    node_totals = ("conveyor_node_delivered_jobs_total", "conveyor_node_acked_jobs_total")

    def moved() -> str | None:
        text = scrape()
        done = ("conveyor_worker_messages_total", 'outcome="done"')
        settled = _sample(text, *done) >= _sample(before, *done) + 3 and all(
            _sample(text, total) >= _sample(before, total) + 3 for total in node_totals
        )
        return text if settled else None

    after = wait_for(moved, "three more messages done and acked in /metrics")
    latency = "conveyor_add_to_deliver_latency_seconds_count"
    assert _sample(after, latency) >= _sample(before, latency) + 3
    # (QSTAT's jobs_in counters moving: test_api.py's test_metrics_move_with_jobs.)
    assert _sample(after, "conveyor_worker_slots", 'queue="jobs"') >= 1
    assert 'conveyor_node_flag{flag="ok"' in after or "conveyor_node_flag{node=" in after
    assert "conveyor_cluster_links{" in after
    checked = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=after.encode(), capture_output=True, timeout=30
    )
    print(f"\npromtool check metrics: exit {checked.returncode}, "
          f"output {(checked.stdout + checked.stderr).decode()!r}")  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert not (checked.stdout + checked.stderr).strip()


def test_form_actions_refuse_bad_input(web: WebProcess) -> None:
    def post(path: str, **form: str) -> httpx.Response:
        return httpx.post(f"{web.url}{path}", data=form, timeout=15)

    _error(post("/errors/act", action="rerun", queue="bad\x01queue"), 400, "bad_request")
    _error(post("/errors/act", action="rerun", id="not-an-id"), 400, "bad_request")
    assert post("/errors/act", action="explode").status_code == 422
    _error(post("/dead-letters/act", action="requeue", id="not-an-id"), 400, "bad_request")
    _error(post("/workers/nohost-1/quiet"), 404, "no_worker")
    assert post("/workers/nohost-1/reboot").status_code == 422
    _error(post("/q/jobs/schedules/0/run"), 404, "no_schedule")
    _error(post("/q/nodir/schedules/0/run"), 404, "no_queue_dir")
    assert post("/q/jobs/schedules/x/run").status_code == 422
    long_search = httpx.get(f"{web.url}/events/dead-letters", params={"search": "x" * 201})
    assert long_search.status_code == 422

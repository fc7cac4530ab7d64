"""The REST API against a real node, a real worker and the console under uvicorn."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="pip install -e '.[web]'")
import httpx

from tests.servers import NodeProcess
from tests.web.conftest import Background, WebProcess, wait_for


def _error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["message"] and "Traceback" not in response.text
    if code is not None:
        assert error["code"] == code
    return error


def test_nodes_and_openapi(api: httpx.Client, node: NodeProcess) -> None:
    nodes = api.get("/nodes").json()["nodes"]
    assert nodes[0]["address"] == f"127.0.0.1:{node.port}"
    assert nodes[0]["up"] is True and nodes[0]["flags"] == ["ok"]
    info = api.get(f"/nodes/127.0.0.1:{node.port}/info").json()
    assert info["tcp_port"] == node.port
    _error(api.get("/nodes/10.1.2.3:7711/info"), 404, "unknown_node")  # never dialled
    schema = api.get("/openapi.json").json()
    assert "/api/v1/queues/{queue}/pause" in schema["paths"]


def test_jobs_lifecycle(api: httpx.Client) -> None:
    created = api.post("/queues/life/jobs", json={"body": "hello"})
    _error(created, 404, "no_queue")  # allow_new_queue is off and the node has no such queue
    # PAUSE makes the queue exist on the node; then jobs may be added to it.
    assert api.post("/queues/life/pause", json={"state": "none"}).status_code == 200
    job_id = api.post("/queues/life/jobs", json={"body": "hello", "retry": 1}).json()["id"]
    peek = api.get("/queues/life/jobs", params={"count": 5}).json()["jobs"]
    assert [j["id"] for j in peek] == [job_id] and peek[0]["body"] == "hello"
    show = api.get(f"/jobs/{job_id}").json()
    assert show["state"] == "queued" and show["queue"] == "life" and show["retry"] == 1
    assert api.post(f"/jobs/{job_id}/dequeue").json() == {"count": 1}
    assert api.get("/queues/life").json()["len"] == 0
    assert api.post(f"/jobs/{job_id}/enqueue").json() == {"count": 1}
    assert api.post(f"/jobs/{job_id}/nack", json={"delay": 100}).json()["count"] in (0, 1)
    assert api.post(f"/jobs/{job_id}/ack").json() == {"count": 1}
    assert api.delete(f"/jobs/{job_id}").json()["count"] in (0, 1)
    _error(api.get(f"/jobs/{job_id}"), 404, "no_job")


def test_bad_input_is_a_json_4xx(api: httpx.Client) -> None:
    _error(api.get("/jobs/not-an-id"), 404)  # not a job ID's shape: no such route
    _error(api.get("/queues/bad%01name"), 422)
    _error(api.post("/queues/life/jobs", json={"body": 3}), 422, "invalid")
    _error(
        api.post(
            "/queues/life/jobs", content=b"{nope", headers={"content-type": "application/json"}
        ),
        422,
    )
    _error(api.post("/queues/life/pause", json={"state": "sideways"}), 422)
    _error(api.post("/queues/life/jobs", json={"body": "x", "ttl": 5, "delay": 10}), 400)
    _error(api.post("/queues/life/jobs", json={"body": "!!", "body_encoding": "base64"}), 400)
    _error(api.get("/queues/life/jobs", params={"count": 0}), 422)
    _error(api.post(f"/jobs/D-0123abcd-{'A' * 24}-0001/fly"), 422)
    _error(api.post("/dead-letters/delete", json={"ids": ["nope"]}), 422)
    _error(api.put("/queues"), 405)
    _error(api.get("/no/such/route"), 404)


def test_a_param_with_a_nul_byte_is_refused(web: WebProcess, api: httpx.Client) -> None:
    # A script gets its params as environment variables, which cannot hold a NUL: such a
    # message could never run, so it is refused before anything is stored or queued.
    answer = api.post("/queues/jobs/messages", json={"params": {"param1": "a\x00b"}})
    error = _error(answer, 422, "invalid")
    assert error["message"].startswith("params.param1: ") and "NUL byte" in error["message"]
    form = {"mesg_param2": "a\x00b", "x_format": "json"}
    files = {"attachment": ("notes.txt", b"never stored", "text/plain")}
    answer = httpx.post(f"{web.url}/q/jobs/new_message", data=form, files=files, timeout=15)
    assert _error(answer, 400, "bad_request")["message"] == "param2 cannot hold a NUL byte"
    answer = httpx.post(
        f"{web.url}/q/jobs/new_message",
        data={"mesg": '{"param4": "\\u0000"}'},
        headers={"accept": "application/json"},
        timeout=15,
    )
    assert _error(answer, 400, "bad_request")["message"] == "param4 cannot hold a NUL byte"


def test_a_mesg_nested_too_deeply_is_a_400(web: WebProcess) -> None:
    answer = httpx.post(f"{web.url}/q/jobs/new_message", data={"mesg": "[" * 100_000}, timeout=15)
    assert _error(answer, 400, "bad_request")["message"] == "'mesg' is not a JSON object"


def test_a_body_over_the_limit_is_a_413_not_read_into_memory(
    web: WebProcess, api: httpx.Client
) -> None:
    # Routes read a JSON or form body whole before checking it: a body of some GB used to
    # take that much of the console's memory, to end in a 422. Sent chunked, so no
    # Content-Length tells the size ahead. (Uploads, which stream to disk, keep their own
    # limit: test_attachments sends 200 MB.)
    from conveyor.web.security import MAX_BODY_BYTES

    piece = b"a" * (1 << 20)

    def body() -> Iterator[bytes]:
        yield b'{"body": "'
        yield from (piece for _ in range(MAX_BODY_BYTES // len(piece)))
        yield b'"}'

    json_type = {"content-type": "application/json"}
    _error(api.post("/queues/life/jobs", content=body(), headers=json_type), 413, "too_large")
    form_type = {"content-type": "multipart/form-data; boundary=x", "accept": "application/json"}
    answer = httpx.post(f"{web.url}/q/life/add_job", content=body(), headers=form_type, timeout=15)
    _error(answer, 413, "too_large")


def test_a_queue_name_that_is_not_utf8_is_shown_escaped(
    web: WebProcess, api: httpx.Client, node: NodeProcess
) -> None:
    # Any bytes make a queue name on the node. One that is not UTF-8 used to turn the
    # overview, /api/v1/queues, /metrics, the cluster page and its jobs' SHOW into 500s.
    redis = node.client()
    job_id = redis.execute_command("ADDJOB", b"odd\xffq", b"x", 0).decode()
    try:

        def listed() -> list[dict[str, Any]] | None:
            answer = api.get("/queues")
            assert answer.status_code == 200, answer.text
            return [q for q in answer.json()["queues"] if q["name"] == "odd\\xffq"] or None

        found = wait_for(listed, "the queue in the list")
        assert found[0]["len"] == 1 and found[0]["exists"]
        metrics = httpx.get(f"{web.url}/metrics", timeout=15)
        assert (
            metrics.status_code == 200 and 'queue_length{queue="odd\\\\xffq"} 1.0' in metrics.text
        )
        assert api.get(f"/jobs/{job_id}").json()["queue"] == "odd\\xffq"
        assert httpx.get(f"{web.url}/cluster", timeout=15).status_code == 200
        for page in ("/", f"/jobs/{job_id}"):
            answer = httpx.get(f"{web.url}{page}", timeout=15)
            assert answer.status_code == 200 and "odd\\xffq" in answer.text, page
    finally:
        redis.execute_command("DELJOB", job_id)
        redis.close()


def test_a_message_with_a_lone_surrogate_param_is_listed(
    web: WebProcess, api: httpx.Client, node: NodeProcess, worker: Background
) -> None:
    # JSON may spell a lone surrogate, and a job body added by hand is any JSON: the
    # message ends in err (no script gets it as an environment variable), and the err
    # listing, the queue page, the errors page and the message used to answer 500.
    redis = node.client()
    try:
        body = b'{"params": {"param1": "\\ud800 odd"}}'
        msg_id = redis.execute_command("ADDJOB", "jobs", body, 0).decode()
    finally:
        redis.close()

    def in_err() -> list[dict[str, Any]]:
        answer = api.get("/queues/jobs/messages", params={"state": "err", "search": "odd"})
        assert answer.status_code == 200, answer.text
        return [m for m in answer.json()["items"] if m["id"] == msg_id]

    found = wait_for(in_err, "the message in err")
    assert found[0]["params"] == {"param1": "\\ud800 odd"}
    assert api.get(f"/queues/jobs/messages/{msg_id}").status_code == 200
    assert msg_id in api.get("/errors").text
    for page in ("/q/jobs?search=odd", "/dead-letters?search=odd", f"/q/jobs/{msg_id}"):
        answer = httpx.get(f"{web.url}{page}", timeout=15)
        assert answer.status_code == 200 and msg_id in answer.text, page


def test_pause_and_purge(api: httpx.Client) -> None:
    api.post("/queues/pp/pause", json={"state": "none"})
    ids = [api.post("/queues/pp/jobs", json={"body": f"j{i}"}).json()["id"] for i in range(5)]
    assert len(ids) == 5
    assert api.post("/queues/pp/pause", json={"state": "in"}).json()["pause"] == "in"
    _error(api.post("/queues/pp/jobs", json={"body": "refused"}), 409, "paused")
    assert api.get("/queues/pp").json()["pause"] == "in"
    assert api.post("/queues/pp/pause", json={"state": "none"}).json()["pause"] == "none"
    assert api.post("/queues/pp/purge", json={}).json() == {"count": 5}
    assert api.get("/queues/pp").json()["len"] == 0

    def listed() -> bool:  # the queue list is a snapshot at most a second old
        queues = api.get("/queues", params={"prefix": "pp"}).json()["queues"]
        return [q["name"] for q in queues] == ["pp"]

    wait_for(listed, "pp in the queue list")


def test_dead_letters(api: httpx.Client, node: NodeProcess) -> None:
    assert api.get("/dead-letters").json()["queue"] is None
    redis = node.client()
    redis.execute_command("CONFIG", "SET", "deadletter-queue", "dlq")
    redis.execute_command("CONFIG", "SET", "max-deliveries", "1")
    try:
        api.post("/queues/flaky/pause", json={"state": "none"})
        job_id = api.post("/queues/flaky/jobs", json={"body": "boom"}).json()["id"]
        redis.execute_command("GETJOB", "FROM", "flaky")
        redis.execute_command("NACK", job_id)
        dead = api.get("/dead-letters").json()
        assert dead["queue"] == "dlq" and [j["id"] for j in dead["jobs"]] == [job_id]
        # Without allow_new_queue, not into a queue nobody has: the letter stays.
        typo = api.post("/dead-letters/requeue", json={"ids": [job_id], "queue": "flakey"})
        assert _error(typo, 404, "no_queue") and api.get("/dead-letters").json()["length"] == 1
        assert api.get("/queues/flakey").status_code == 404
        moved = api.post("/dead-letters/requeue", json={"ids": [job_id], "queue": "flaky"})
        assert moved.json() == {"count": 1}
        assert api.get("/dead-letters").json()["length"] == 0
        assert [j["body"] for j in api.get("/queues/flaky/jobs").json()["jobs"]] == ["boom"]
    finally:
        redis.execute_command("CONFIG", "SET", "max-deliveries", "0")
        redis.execute_command("CONFIG", "SET", "deadletter-queue", "")
        redis.close()


def _message(api: httpx.Client, url: str, state: str) -> dict[str, Any]:
    msg_id = url.rsplit("/", 1)[1]

    def arrived() -> dict[str, Any] | None:
        response = api.get(f"/queues/jobs/messages/{msg_id}")
        doc = response.json() if response.status_code == 200 else None
        return doc if doc and doc["state"] == state else None

    return wait_for(arrived, f"message {msg_id} in {state}")


def test_rq_routes_and_messages(
    web: WebProcess, api: httpx.Client, worker: Background, queues_dir: Path
) -> None:
    form = {"mesg_param1": "err", "x_format": "json"}
    files = {"attachment": ("notes.txt", b"attached bytes", "text/plain")}
    answer = httpx.post(f"{web.url}/q/jobs/new_message", data=form, files=files, timeout=15)
    status, url = answer.json()
    assert status == "ok" and re.fullmatch(rf"{web.url}/q/jobs/D-[^/]+", url), url
    failed = _message(api, url, "err")
    assert failed["status"] == "by design" and failed["params"] == {"param1": "err"}
    [attached] = failed["attachments"]
    assert attached["name"] == "notes.txt" and attached["size"] == len(b"attached bytes")
    assert attached["md5"] == hashlib.md5(b"attached bytes").hexdigest()
    # Stored by the console, not in the job: the job holds the URL the worker fetched from.
    assert attached["url"].startswith(f"{web.url}/attachments/")
    fetched = queues_dir / "jobs" / "err" / failed["dir"] / "attach" / "notes.txt"
    assert fetched.read_bytes() == b"attached bytes"
    as_json = httpx.get(f"{url}.json", timeout=15).json()
    assert as_json["state"] == "err" and as_json["url"] == url
    log = httpx.get(f"{url}/log", timeout=15).text
    assert "failing by design" in log and "\x1b[31m" in log
    listed = api.get("/queues/jobs/messages", params={"state": "err", "search": "design"})
    assert [m["id"] for m in listed.json()["items"]] == [failed["id"]]
    assert (
        api.get("/queues/jobs/messages", params={"state": "err", "search": "zzz"}).json()["total"]
        == 0
    )
    rerun = api.post(f"/queues/jobs/messages/{failed['id']}/rerun")
    assert rerun.status_code == 201
    _message(api, rerun.json()["url"], "err")
    moved = api.post(f"/queues/jobs/messages/{failed['id']}/move", json={"to": "done"})
    assert moved.json()["state"] == "done"
    assert "moved to done" in api.get(f"/queues/jobs/messages/{failed['id']}").json()["status"]
    again = api.post(f"/queues/jobs/messages/{failed['id']}/move", json={"to": "done"})
    assert again.status_code == 200 and again.json()["state"] == "done"  # and still there:
    assert "moved to done" in api.get(f"/queues/jobs/messages/{failed['id']}").json()["status"]
    _error(api.post(f"/queues/jobs/messages/{failed['id']}/move", json={"to": "que"}), 422)
    assert api.delete(f"/queues/jobs/messages/{failed['id']}").json() == {"count": 1}
    _error(api.get(f"/queues/jobs/messages/{failed['id']}"), 404, "no_message")
    _error(api.get("/queues/nodir/messages"), 404, "no_queue_dir")


def test_attachment_names_fit_the_workers_file_names(
    web: WebProcess, api: httpx.Client, worker: Background, queues_dir: Path
) -> None:
    # The worker fetches into "<name>.part": a name over 250 bytes cannot be written there
    # (255 bytes at most), and such a message used to go round until its resends ran out.
    data = base64.b64encode(b"hi").decode()
    for name in ("é" * 128, "a" * 251):
        message = {"attachments": [{"name": name, "data": data}]}
        answer = api.post("/queues/jobs/messages", json=message)
        assert "at most 250" in _error(answer, 422, "invalid")["message"]
    raw = {"content-type": "application/octet-stream"}
    answer = api.post("/attachments", params={"name": "é" * 128}, content=b"hi", headers=raw)
    assert "at most 250 bytes in UTF-8, not 256" in _error(answer, 422, "invalid")["message"]
    files = {"attachment": ("é" * 128, b"hi", "text/plain")}
    answer = httpx.post(f"{web.url}/q/jobs/new_message", data={"x_format": "json"}, files=files)
    assert "at most 250 bytes" in _error(answer, 400, "bad_attachment")["message"]
    name = "é" * 125  # 250 bytes: taken, fetched and given to the script
    message = {"params": {"param1": "x"}, "attachments": [{"name": name, "data": data}]}
    answer = api.post("/queues/jobs/messages", json=message)
    assert answer.status_code == 201, answer.text
    done = _message(api, answer.json()["url"], "done")
    assert (queues_dir / "jobs" / "done" / done["dir"] / "attach" / name).read_bytes() == b"hi"


def test_json_message_api_and_paging(api: httpx.Client, worker: Background) -> None:
    data = base64.b64encode(b"\x00\x01binary").decode()
    urls = []
    for i in range(3):
        added = api.post(
            "/queues/jobs/messages",
            json={
                "params": {"param1": f"ok-{i}"},
                "attachments": [{"name": "b.bin", "data": data}],
            },
        )
        assert added.status_code == 201, added.text
        urls.append(added.json()["url"])
    for url in urls:
        _message(api, url, "done")
    page = api.get("/queues/jobs/messages", params={"state": "done", "limit": 2}).json()
    assert page["total"] >= 3 and len(page["items"]) == 2
    rest = api.get(
        "/queues/jobs/messages", params={"state": "done", "limit": 2, "offset": 2}
    ).json()
    assert not {m["id"] for m in rest["items"]} & {m["id"] for m in page["items"]}
    _error(
        api.post("/queues/jobs/messages", json={"attachments": [{"name": "../x", "data": data}]}),
        422,
    )
    # Inline base64 is for small files (the JSON body's limit); larger ones are uploaded
    # raw to /attachments and referenced (tests/web/test_attachments.py).
    big = "A" * (12 * 1024 * 1024 + 4)
    _error(
        api.post("/queues/jobs/messages", json={"attachments": [{"name": "big", "data": big}]}),
        422,
        "invalid",
    )
    _error(api.post("/queues/jobs/messages", json={"params": {"param9": "x"}}), 422)


def test_metrics_move_with_jobs(web: WebProcess, api: httpx.Client) -> None:
    def jobs_in() -> float:
        text = httpx.get(f"{web.url}/metrics", timeout=15).text
        match = re.search(r'^conveyor_queue_jobs_in_total\{queue="mq"\} (\S+)$', text, re.M)
        return float(match.group(1)) if match else 0.0

    api.post("/queues/mq/pause", json={"state": "none"})
    before = jobs_in()
    for i in range(3):
        api.post("/queues/mq/jobs", json={"body": str(i)})
    wait_for(lambda: jobs_in() >= before + 3, "jobs_in counter to grow")
    text = httpx.get(f"{web.url}/metrics", timeout=15).text
    assert "conveyor_node_up{" in text and 'conveyor_queue_length{queue="mq"}' in text
    assert 'conveyor_messages{queue="jobs",state="done"}' in text
    assert 'conveyor_jobs{state="queued"}' in text


def test_message_routes_take_an_id_with_a_slash(web: WebProcess, queues_dir: Path) -> None:
    # A job ID's 24 base64 characters hold a '/' about one time in three. On disk the
    # message's directory has '_' for it, and the console's own links use that form; a
    # URL built from the ID itself (RQ_MSG_ID, `conveyor queue add`'s output) must find
    # the message too, as /api/v1 does, instead of a 404 on every page and seed route.
    msg_id = "D-0123abcd-AbCdEfGhIjK/MnOpQrStUvWx-05a1"
    directory = queues_dir / "jobs" / "done" / msg_id.replace("/", "_")
    (directory / "job").mkdir(parents=True)
    envelope = {"params": {"param1": "slash"}, "count": 0}
    doc = {"id": msg_id, "queue": "jobs", "envelope": envelope}
    (directory / "msg.json").write_text(json.dumps(doc))
    (directory / "status.json").write_text(json.dumps({"state": "done", "status": "fine"}))
    (directory / "stdio.log").write_text("the slash message's log\n")
    for written in (msg_id, msg_id.replace("/", "%2F"), msg_id.replace("/", "_")):
        base = f"{web.url}/q/jobs/{written}"
        page = httpx.get(base, timeout=15)
        assert page.status_code == 200 and "slash" in page.text, (written, page.status_code)
        status = httpx.get(f"{base}.json", timeout=15)
        assert status.status_code == 200, (written, status.text)
        assert status.json()["id"] == msg_id and status.json()["status"] == "fine"
        log = httpx.get(f"{base}/log", timeout=15)
        assert log.text == "the slash message's log\n", (written, log.status_code)

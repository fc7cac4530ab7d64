"""`conveyor queue ...` and `conveyor worker ...`: bad input is one clear line, no traceback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest

from conveyor.worker.queuedir import MessageStore, QueueConfig, QueueConfigError
from tests.servers import NodeProcess


def conveyor(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "conveyor.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, cwd=cwd)


def test_create_add_and_status(node: NodeProcess, tmp_path: Path) -> None:
    made = conveyor("queue", "create", "mail", "--script", "/bin/true", "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    config = json.loads((tmp_path / "mail" / "config.json").read_text())
    assert config == {"name": "mail", "script": "/bin/true", "num_workers": 1}
    nodes = f"127.0.0.1:{node.port}"
    added = conveyor(
        "queue", "add", "mail", "--dir", str(tmp_path), "--nodes", nodes, "--param1", "a b",
        "--due", "5",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    job_id = added.stdout.strip()
    shown = node.client().execute_command("SHOW", job_id)
    body = json.loads(dict(zip(shown[::2], shown[1::2], strict=True))[b"body"])
    assert body["params"] == {"param1": "a b"}
    status = conveyor("queue", "status", str(tmp_path / "mail"))
    assert status.returncode == 0 and "err: 0" in status.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["worker"], "give QUEUE_DIR... and/or --app"),
        (["worker", "/nonexistent/q"], "no such file (is /nonexistent/q a queue?)"),
        (["worker", "--app", "nosuchmodule:app"], "cannot load nosuchmodule:app"),
        (["worker", "--app", "json"], "--app wants module:attribute"),
        (["worker", "--app", "json:dumps"], "is a function, not a conveyor App"),
        (["queue", "add", "nosuch"], "no such file"),
        (["queue", "create", "a/b", "--script", "x"], "'name' must be a string"),
        (["worker", "BAD", "--nodes", "127.0.0.1:1"], "BAD/config.json"),
    ],
)
def test_bad_input_is_a_clear_error(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "BAD").mkdir()
    (tmp_path / "BAD" / "config.json").write_text('{"name": "x", "script": "y", "num_workers": 0}')
    result = conveyor(*args, cwd=tmp_path)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_worker_without_a_node_says_so(tmp_path: Path) -> None:
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "config.json").write_text('{"name": "q", "script": "/bin/true"}')
    result = conveyor("worker", str(tmp_path / "q"), "--nodes", "127.0.0.1:1")
    assert result.returncode != 0 and "node error" in result.stderr
    assert "Traceback" not in result.stderr


def test_config_validation_and_cleaner(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"name": "q", "script": "s", "coalesce_params": [5]}')
    with pytest.raises(QueueConfigError, match="coalesce_params"):
        QueueConfig.load(tmp_path)
    (tmp_path / "config.json").write_text(
        '{"name": "q", "script": "s", "schedule": [{"cron": "x"}]}'
    )
    with pytest.raises(QueueConfigError, match="bad cron expression"):
        QueueConfig.load(tmp_path)
    store = MessageStore(tmp_path)
    for job_id in ("D-1", "D-2"):
        path = store.enter_run(job_id, {"id": job_id})
        store.move(path, "done", "ok")
    store.move(store.enter_run("D-3", {}), "err", "kept")
    assert store.clean(keep_s=3600) == 0
    assert store.clean(keep_s=3600, now=time.time() + 7200) == 2
    assert store.status("D-3") is not None and store.status("D-1") is None


@pytest.mark.parametrize(
    ("field", "value"),
    [("timeout", "NaN"), ("timeout", "Infinity"), ("timeout", "1e300"), ("keep_done", "NaN")],
)
def test_a_duration_no_run_could_use_is_refused(tmp_path: Path, field: str, value: str) -> None:
    # Accepted, a NaN timeout failed every run (and the message came back after RETRY,
    # for ever), a huge one every blocking-params lock; a NaN keep_done never cleaned.
    doc = f'{{"name": "q", "script": "/bin/true", "{field}": {value}}}'
    (tmp_path / "config.json").write_text(doc)
    with pytest.raises(QueueConfigError, match=f"'{field}' must be a finite number of seconds"):
        QueueConfig.load(tmp_path)


@pytest.mark.parametrize("field", ["num_workers", "retry"])
def test_an_infinite_count_is_a_config_error(tmp_path: Path, field: str) -> None:
    # int() of Infinity raised OverflowError, which `conveyor worker` showed as a traceback.
    (tmp_path / "config.json").write_text(f'{{"name": "q", "script": "s", "{field}": 1e999}}')
    with pytest.raises(QueueConfigError, match=f"'{field}' must be a whole number, got inf"):
        QueueConfig.load(tmp_path)


def test_create_refuses_a_timeout_of_nan(tmp_path: Path) -> None:
    result = conveyor("queue", "create", "q", "--script", "/bin/true", "--timeout", "nan",
                      "--dir", str(tmp_path))  # fmt: skip
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "'timeout' must be a finite number of seconds up to 315360000" in result.stderr
    assert not (tmp_path / "q" / "config.json").exists()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "q\0"}, "'name' must not contain a NUL character"),
        ({"script": "/bin/\0true"}, "'script' must not contain a NUL character"),
        ({"exec_prefix": "bash\0 -lc"}, "'exec_prefix' must not contain a NUL character"),
        ({"exec_prefix": 'bash -lc "'}, "'exec_prefix' is not shell words (No closing quotation)"),
        ({"env_vars": {"A\0B": "1"}}, "'env_vars' names must not contain a NUL character"),
        ({"env_vars": {"A": "1\0"}}, "'env_vars' value of 'A' must not contain a NUL"),
        ({"env_vars": {"A=B": "1"}}, "'env_vars' names must not contain '='"),
        ({"env": "prod\0"}, "'env' must not contain a NUL character"),
        ({"schedule": [{"cron": "@hourly\0"}]}, "'schedule' cron must not contain a NUL"),
        (
            {"schedule": [{"cron": "@hourly", "param1": "a\0"}]},
            "'schedule' param1 must not contain a NUL character",
        ),
        (
            {"schedule": [{"cron": "@hourly", "param1\0": "a"}]},
            "'schedule' param names must not contain a NUL character",
        ),
    ],
)
def test_a_config_string_no_run_could_use_is_refused_naming_the_field(
    tmp_path: Path, fields: dict[str, Any], message: str
) -> None:
    # Accepted, each would fail at every run instead: a script path os.path.realpath
    # refuses or a prefix shlex cannot split (a slot retrying forever), an environment
    # the exec refuses (every message to err).
    doc = {"name": "q", "script": "/bin/true", **fields}
    (tmp_path / "config.json").write_text(json.dumps(doc))
    with pytest.raises(QueueConfigError, match=re.escape(message)):
        QueueConfig.load(tmp_path)


def test_a_move_to_where_the_message_is_keeps_it(tmp_path: Path) -> None:
    store = MessageStore(tmp_path)
    path = store.move(store.enter_run("D-here", {"id": "D-here"}), "done", "ok")
    # Once taken for an older copy in the way: removed, then nothing left to move.
    assert store.move(path, "done", "moved to done again") == path
    assert json.loads((path / "msg.json").read_text()) == {"id": "D-here"}
    assert store.status("D-here") is not None
    assert json.loads((path / "status.json").read_text())["status"] == "moved to done again"


def test_rerun_an_err_message(node: NodeProcess, tmp_path: Path) -> None:
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "config.json").write_text('{"name": "rq_rerun", "script": "/bin/true"}')
    store = MessageStore(tmp_path / "q")
    envelope = {"params": {"param1": "again"}, "count": 3}
    path = store.enter_run("D-old", {"id": "D-old", "envelope": envelope})
    store.move(path, "err", "by design")
    nodes = f"127.0.0.1:{node.port}"
    result = conveyor("queue", "rerun", str(tmp_path / "q"), "D-old", "--nodes", nodes)
    assert result.returncode == 0, result.stderr
    new_id = result.stdout.strip()
    shown = node.client().execute_command("SHOW", new_id)
    body = json.loads(dict(zip(shown[::2], shown[1::2], strict=True))[b"body"])
    due_at = body.pop("due_at")  # when it may run: the workers' add-to-deliver latency
    assert body == {"params": {"param1": "again"}, "count": 0}
    assert abs(due_at - time.time()) < 600
    assert store.status("D-old")["status"] == f"by design (re-run as {new_id})"  # type: ignore[index]
    missing = conveyor("queue", "rerun", str(tmp_path / "q"), "D-nope", "--nodes", nodes)
    assert missing.returncode != 0 and "no finished message D-nope" in missing.stderr


def test_status_of_one_message(tmp_path: Path) -> None:
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "config.json").write_text('{"name": "q", "script": "/bin/true"}')
    store = MessageStore(tmp_path / "q")
    store.move(store.enter_run("D-a/b", {"id": "D-a/b"}), "done", "all good")
    found = store.status_text("D-a/b")
    assert found is not None and found[0] == "done"
    assert json.loads(found[1])["status"] == "all good"
    assert store.status_text("D-nope") is None
    shown = conveyor("queue", "status", str(tmp_path / "q"), "D-a/b")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["status"] == "all good"
    missing = conveyor("queue", "status", str(tmp_path / "q"), "D-nope")
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert f"no message D-nope in {tmp_path / 'q'}" in missing.stderr


def test_a_message_in_its_new_folder_never_shows_the_old_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CI saw done/<id>/status.json still saying "run": the status was written after the
    # directory moved. Look at the status at the instant of each directory move.
    store = MessageStore(tmp_path / "q")
    seen_at_move: list[tuple[str, str]] = []
    real_replace = os.replace

    def replace_and_look(source: Any, target: Any) -> None:
        if Path(source).is_dir():
            state = json.loads((Path(source) / "status.json").read_text())["state"]
            seen_at_move.append((Path(target).parent.name, state))
        real_replace(source, target)

    monkeypatch.setattr("conveyor.worker.queuedir.os.replace", replace_and_look)
    path = store.enter_run("D-moving", {"id": "D-moving"})
    store.set_status(path, "run", "running", pid=12345)
    store.move(path, "done", "ok")
    store.move(store.enter_run("D-failing", {}), "err", "exit 1")
    assert seen_at_move == [("done", "done"), ("err", "err")]
    assert store.status("D-moving") == {"state": "done", "status": "ok", "updated": ANY}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"dup_reply_id": "false"}, "'dup_reply_id' must be true or false, got 'false'"),
        ({"exec_prefix": None}, "'exec_prefix' must be a string (\"\" for none), got None"),
        (
            {"schedule": [{"cron": "@hourly", "param5": "x"}]},
            "'schedule' params are param1..param4, got 'param5'",
        ),
        (
            {"schedule": [{"cron": "@hourly", "param1": None}]},
            "'schedule' param1 must be a string or a number (params are the script's "
            "RQ_PARAMn environment variables), got null",
        ),
        (
            {"schedule": [{"cron": "@hourly", "param2": True}]},
            "'schedule' param2 must be a string or a number (params are the script's "
            "RQ_PARAMn environment variables), got true",
        ),
        # str() made these RQ_ENV=1, an environment variable A=None or A=True; `or {}` and
        # `or []` read false, 0, "" and [] as none.
        ({"env": 1}, "'env' must be a string, got 1"),
        ({"env": ["production"]}, "'env' must be a string, got ['production']"),
        ({"env_vars": {"A": None}}, "'env_vars' values must be strings, got 'A': None"),
        ({"env_vars": {"A": 1}}, "'env_vars' values must be strings, got 'A': 1"),
        ({"env_vars": {"A": True}}, "'env_vars' values must be strings, got 'A': True"),
        ({"env_vars": False}, "'env_vars' must be an object, got False"),
        ({"env_vars": []}, "'env_vars' must be an object, got []"),
        ({"schedule": False}, '\'schedule\' must be a list of {"cron": ..., "paramN": ...}'),
        ({"coalesce_params": 0}, "'coalesce_params' must be a list of param numbers 1..4, got 0"),
    ],
)
def test_a_config_value_read_as_something_else_stops_the_worker_at_start(
    tmp_path: Path, fields: dict[str, Any], message: str
) -> None:
    # Accepted, "false" meant true, null made every run exec a program named "None", and
    # param5 made each tick a message every worker refuses (all to err).
    queue_dir = tmp_path / "q"
    queue_dir.mkdir()
    doc = {"name": "q", "script": "/bin/true", **fields}
    (queue_dir / "config.json").write_text(json.dumps(doc))
    result = conveyor("worker", str(queue_dir), "--nodes", "127.0.0.1:1")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith(message), result.stderr


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_workers", "2.7", "'num_workers' must be a whole number, got 2.7"),
        ("num_workers", "2.0", "'num_workers' must be a whole number, got 2.0"),
        ("num_workers", "true", "'num_workers' must be a whole number, got True"),
        ("num_workers", '"3"', "'num_workers' must be a whole number, got '3'"),
        ("num_workers", "null", "'num_workers' must be a whole number, got None"),
        ("retry", "30.5", "'retry' must be a whole number, got 30.5"),
        ("retry", "true", "'retry' must be a whole number, got True"),
        ("retry", '"60"', "'retry' must be a whole number, got '60'"),
        ("retry", "0", "'retry' must be >= 1, got 0"),
        ("timeout", "true", "'timeout' must be a number of seconds, got True"),
        ("timeout", '"60"', "'timeout' must be a number of seconds, got '60'"),
        ("keep_done", "false", "'keep_done' must be a number of seconds, got False"),
        ("keep_done", '"86400"', "'keep_done' must be a number of seconds, got '86400'"),
        ("coalesce_params", "[1.5]", "'coalesce_params' must be a list of param numbers 1..4"),
        ("coalesce_params", "[true]", "'coalesce_params' must be a list of param numbers 1..4"),
        ("blocking_params", '["2"]', "'blocking_params' must be a list of param numbers 1..4"),
        ("blocking_params", "[2.0]", "'blocking_params' must be a list of param numbers 1..4"),
    ],
)
def test_a_number_of_config_json_that_is_not_one_stops_the_worker_at_start(
    tmp_path: Path, field: str, value: str, message: str
) -> None:
    # int() and float() cut or converted them: 2.7 workers were 2, `true` was 1 worker (or
    # a RETRY of 1 s, a timeout of 1 s), "3" was 3, and [1.5] a lock on param1.
    queue_dir = tmp_path / "q"
    queue_dir.mkdir()
    doc = f'{{"name": "q", "script": "/bin/true", "{field}": {value}}}'
    (queue_dir / "config.json").write_text(doc)
    result = conveyor("worker", str(queue_dir), "--nodes", "127.0.0.1:1")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith(f"Error: {queue_dir / 'config.json'}: "), result.stderr
    assert message in last_line, result.stderr


def test_whole_and_fractional_numbers_where_they_belong_are_kept(tmp_path: Path) -> None:
    doc = {"name": "q", "script": "s", "num_workers": 3, "retry": 45, "timeout": 2.5,
           "keep_done": 60, "coalesce_params": [2, 1, 2], "blocking_params": [4]}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(doc))
    config = QueueConfig.load(tmp_path)
    assert (config.num_workers, config.retry, config.timeout, config.keep_done) == (3, 45, 2.5, 60)
    assert (config.coalesce_params, config.blocking_params) == ([1, 2], [4])


def test_a_null_config_value_is_its_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # str() made `"env": null` RQ_ENV=None.
    monkeypatch.delenv("CONVEYOR_ENV", raising=False)
    doc = {"name": "q", "script": "s", "env": None, "env_vars": None, "schedule": None,
           "coalesce_params": None, "blocking_params": None}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(doc))
    config = QueueConfig.load(tmp_path)
    assert (config.env, config.env_vars, config.schedule) == ("development", {}, [])
    assert (config.coalesce_params, config.blocking_params) == ([], [])
    monkeypatch.setenv("CONVEYOR_ENV", "test")
    assert QueueConfig.load(tmp_path).env == "test"

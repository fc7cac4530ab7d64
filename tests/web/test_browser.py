"""The console in a real browser: Playwright driving Debian's chromium (never a downloaded
browser). Each test saves a screenshot under the test's tmp directory.

The operator pages (dead letters and errors, workers, cluster, schedules) come last."""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import NodeProcess
from tests.web.conftest import Background, WebProcess, make_queue, wait_for

CHROMIUM = Path(os.environ.get("CONVEYOR_CHROMIUM", "/usr/bin/chromium"))
if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium", allow_module_level=True)
pytest.importorskip("fastapi", reason="pip install -e '.[web]'")
sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[web]'")
import httpx  # noqa: E402 - after the skips above, like the browser driver

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SHOTS = os.environ.get("CONVEYOR_SCREENSHOTS")  # a directory to keep the screenshots in
TIMEOUT_MS = 20_000
ADMIN = ("admin", "adm1n pass")
VIEWER = ("viewer", "view only")
AUTH_CONFIG = {
    "basic_auth": {
        "realm": "Conveyor",
        "users": {ADMIN[0]: ADMIN[1], VIEWER[0]: {"password": VIEWER[1], "role": "read"}},
    }
}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=ARGS, headless=True
        )
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory, node: NodeProcess, queues_dir: Path
) -> Iterator[WebProcess]:
    started = WebProcess(tmp_path_factory.mktemp("bsecured"), node, AUTH_CONFIG, queues_dir)
    yield started
    started.stop()


def _page(browser: Any, auth: tuple[str, str] | None = None, width: int = 1280) -> Any:
    credentials = {"username": auth[0], "password": auth[1]} if auth else None
    context = browser.new_context(
        http_credentials=credentials, viewport={"width": width, "height": 900}
    )
    context.set_default_timeout(TIMEOUT_MS)
    return context.new_page()


def _shot(page: Any, tmp_path: Path, name: str) -> None:
    target = Path(SHOTS) if SHOTS else tmp_path
    target.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(target / f"{name}.png"), full_page=True)


def test_enqueue_form_then_live_message(
    browser: Any, web: WebProcess, worker: Background, tmp_path: Path
) -> None:
    page = _page(browser)
    page.goto(f"{web.url}/q/jobs?state=done")
    page.wait_for_selector("#live-toggle[data-state='live']")
    page.evaluate("window.__notReloaded = true")
    page.fill("input[name=param1]", "browser-hello")
    attachment = tmp_path / "report.csv"
    attachment.write_bytes(b"id,total\n1,42\n" * 1000)
    page.set_input_files("input[name=attachment]", str(attachment))
    page.click("button[data-action=enqueue]")
    page.wait_for_selector("#flash.ok")
    row = page.locator("#messages tr.state-done:has-text('browser-hello')")
    row.wait_for()
    assert page.evaluate("window.__notReloaded") is True  # the list came live, no reload
    _shot(page, tmp_path, "queue")
    row.locator("a").first.click()
    page.wait_for_selector("#log .a-fg2.a-b")  # "green start" in bold green, from ANSI
    assert page.inner_text("#msg-state") == "done"
    # The attachment went with it, stored by the console and fetched by the worker.
    listed = page.inner_text("ul.attachments")
    assert "report.csv" in listed and hashlib.md5(attachment.read_bytes()).hexdigest() in listed
    _shot(page, tmp_path, "message")
    page.context.close()


def test_log_live_while_running(
    browser: Any, web: WebProcess, worker: Background, tmp_path: Path
) -> None:
    flag = tmp_path / "finish"
    page = _page(browser)
    page.goto(f"{web.url}/q/jobs?state=run")
    page.fill("input[name=param1]", "slow")
    page.fill("input[name=param2]", str(flag))
    page.click("button[data-action=enqueue]")
    page.locator("#messages tr.state-run a").first.click()
    page.wait_for_selector("#log .a-fg3")  # yellow "tick" lines while it runs
    assert page.inner_text("#msg-state") == "run"
    flag.touch()
    page.wait_for_selector("#msg-state.state-done")
    page.context.close()


def test_pause_and_resume(browser: Any, web: WebProcess, tmp_path: Path) -> None:
    page = _page(browser, width=390)  # a phone's width
    page.goto(f"{web.url}/q/jobs")
    page.click("button[data-action=pause-all]")
    page.wait_for_selector("#q-pause.pause-all")
    _shot(page, tmp_path, "paused-phone")
    page.click("button[data-action=pause-none]")
    page.wait_for_selector("#q-pause.pause-none")
    page.context.close()


def test_live_toggle_pauses_updates(browser: Any, web: WebProcess, tmp_path: Path) -> None:
    page = _page(browser)
    page.goto(f"{web.url}/")
    page.wait_for_selector("#live-toggle[data-state='live']")
    page.wait_for_selector("#queues a:has-text('jobs')")
    _shot(page, tmp_path, "overview")
    page.click("#live-toggle")
    page.wait_for_selector("#live-toggle[data-state='paused']")
    page.reload()  # the choice is remembered
    page.wait_for_selector("#live-toggle[data-state='paused']")
    page.click("#live-toggle")
    page.wait_for_selector("#live-toggle[data-state='live']")
    page.context.close()


def test_basic_auth_refuses_wrong_password(browser: Any, secured: WebProcess) -> None:
    page = _page(browser, ("admin", "not the password"))
    response = page.goto(f"{secured.url}/")
    assert response is not None and response.status == 401
    page.context.close()
    page = _page(browser, ADMIN)
    assert page.goto(f"{secured.url}/").status == 200
    page.context.close()


def test_read_only_sees_no_actions(browser: Any, secured: WebProcess, tmp_path: Path) -> None:
    page = _page(browser, VIEWER)
    page.goto(f"{secured.url}/q/jobs?state=done")
    page.wait_for_selector("#qstat")
    assert page.locator("form[method=post]").count() == 0
    assert page.locator("button.action").count() == 0
    page.goto(f"{secured.url}/q/jobs")
    assert page.locator("button.action").count() == 0
    _shot(page, tmp_path, "read-only")
    page.context.close()
    admin = _page(browser, ADMIN)
    admin.goto(f"{secured.url}/q/jobs")
    assert admin.locator("button.action").count() >= 5
    admin.context.close()


def test_err_message_rerun_from_its_page(
    browser: Any, web: WebProcess, worker: Background, tmp_path: Path
) -> None:
    answer = httpx.post(
        f"{web.url}/q/jobs/new_message", timeout=15, data={"param1": "err", "x_format": "json"}
    )
    url = answer.json()[1]

    def in_err() -> bool:
        response = httpx.get(f"{url}.json", timeout=15)
        return response.status_code == 200 and response.json()["state"] == "err"

    wait_for(in_err, "the message to end in err")
    page = _page(browser)
    page.goto(url)
    assert page.inner_text("#msg-state") == "err"
    page.wait_for_selector("#log .a-fg1")  # "failing by design" in red
    page.click("button[data-action=rerun]")
    page.wait_for_selector("#flash.ok")
    page.wait_for_selector("#msg-text:has-text('re-run as D-')")  # live, no reload
    page.context.close()


# -- the operator pages ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def sched_queue(queues_dir: Path) -> Path:
    schedule = [{"cron": "0 0 1 1 *", "param1": "from the schedule"}]
    return make_queue(queues_dir, "sched", queues_dir / "script.sh", schedule=schedule)


def _accept_dialogs(page: Any) -> None:
    page.on("dialog", lambda dialog: dialog.accept())


def test_errors_rerun_and_delete_all(
    browser: Any, web: WebProcess, worker: Background, tmp_path: Path
) -> None:
    answer = httpx.post(
        f"{web.url}/api/v1/queues/jobs/messages",
        json={"params": {"param1": "err", "param2": "from the browser"}},
        timeout=15,
    )
    msg_id = answer.json()["id"]
    page = _page(browser)
    _accept_dialogs(page)
    page.goto(f"{web.url}/dead-letters")
    row = page.locator(f"#errors tr:has-text('{msg_id}')")
    row.wait_for()  # arrives live once the script has failed
    _shot(page, tmp_path, "dead-letters")
    row.locator("button[data-action=error-rerun]").click()
    page.wait_for_selector("#flash.ok:has-text('rerun: 1 message')")
    page.locator(f"#errors tr:has-text('{msg_id}')").wait_for(state="detached")
    page.click("button[data-action=errors-delete-all]")
    page.wait_for_selector("#flash.ok:has-text('delete:')")
    page.wait_for_selector("#errors p.note:has-text('None')")
    page.goto(f"{web.url}/dead-letters?search=nothing-matches-this")
    assert "None matching" in page.inner_text("#errors")
    page.context.close()


def test_workers_page_quiet_and_stop(
    browser: Any, web: WebProcess, node: NodeProcess, queues_dir: Path, tmp_path: Path
) -> None:
    queue = make_queue(queues_dir, "wq", queues_dir / "script.sh")
    command = [sys.executable, "-m", "conveyor.cli", "worker", "--grace", "2"]
    command += ["--nodes", f"127.0.0.1:{node.port}", str(queue)]
    process = Background(command, tmp_path / "worker.log")
    try:
        page = _page(browser)
        _accept_dialogs(page)
        page.goto(f"{web.url}/workers")
        row = page.locator(f"tr[data-worker$='-{process.process.pid}']")
        row.wait_for()
        assert row.locator(".worker-state").inner_text() == "running"
        assert "0 / 1" in row.inner_text()
        _shot(page, tmp_path, "workers")
        row.locator("button[data-action=worker-quiet]").click()
        page.wait_for_selector(f"tr[data-worker$='-{process.process.pid}'] .flag:text('quiet')")
        stop = f"tr[data-worker$='-{process.process.pid}'] button[data-action=worker-stop]"
        page.locator(stop).click()
        assert process.process.wait(20) == 0
        row.wait_for(state="detached")  # the record went with the process, live
        page.context.close()
    finally:
        process.stop()


def test_cluster_page(browser: Any, web: WebProcess, node: NodeProcess, tmp_path: Path) -> None:
    page = _page(browser)
    page.goto(f"{web.url}/cluster")
    page.wait_for_selector(f"#cluster td:text('127.0.0.1:{node.port}')")
    assert page.locator("#cluster .flag-ok").count() >= 1
    assert "1 node(s) known" in page.inner_text("#cluster")
    _shot(page, tmp_path, "cluster")
    page.context.close()


def test_schedule_run_now(browser: Any, web: WebProcess, sched_queue: Path, tmp_path: Path) -> None:
    schedules = f"{web.url}/api/v1/queues/sched/schedules"
    wait_for(lambda: httpx.get(schedules, timeout=15).status_code == 200, "the queue dir seen")
    page = _page(browser)
    page.goto(f"{web.url}/q/sched")
    page.wait_for_selector("#schedules td:text('0 0 1 1 *')")
    assert "-01-01 00:00:00" in page.inner_text("#schedules")
    page.click("button[data-action=run-now]")
    flash = page.wait_for_selector("#flash.ok:has-text('enqueued D-')")
    msg_id = flash.inner_text().split()[1]
    job = httpx.get(f"{web.url}/api/v1/jobs/{msg_id}", timeout=15).json()
    assert "from the schedule" in job["body"]
    _shot(page, tmp_path, "schedules")
    page.context.close()


def test_read_only_sees_no_operator_buttons(
    browser: Any, secured: WebProcess, sched_queue: Path, tmp_path: Path
) -> None:
    schedules = f"{secured.url}/api/v1/queues/sched/schedules"
    wait_for(
        lambda: httpx.get(schedules, auth=VIEWER, timeout=15).status_code == 200, "queue dir seen"
    )
    page = _page(browser, VIEWER)
    for path in ("/dead-letters", "/workers", "/cluster", "/q/sched"):
        page.goto(f"{secured.url}{path}")
        page.wait_for_selector("main h1")
        assert page.locator("form[method=post]").count() == 0, path
        assert page.locator("button.action").count() == 0, path
    assert "0 0 1 1 *" in page.inner_text("#schedules")  # sees the schedule, not "run now"
    _shot(page, tmp_path, "read-only-schedules")
    refused = page.request.post(f"{secured.url}/api/v1/queues/sched/schedules/0/run")
    assert refused.status == 403
    page.context.close()
    admin = _page(browser, ADMIN)
    admin.goto(f"{secured.url}/q/sched")
    assert admin.locator("button[data-action=run-now]").count() == 1
    admin.context.close()

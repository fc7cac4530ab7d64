"""The console in a real browser: Playwright driving Debian's chromium (never a downloaded
browser). Each test saves a screenshot under the test's tmp directory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import NodeProcess
from tests.web.conftest import Background, WebProcess, wait_for

CHROMIUM = Path(os.environ.get("CONVEYOR_CHROMIUM", "/usr/bin/chromium"))
if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium", allow_module_level=True)
pytest.importorskip("fastapi", reason="pip install -e '.[web]'")
sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[web]'")

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
    page.click("button[data-action=enqueue]")
    page.wait_for_selector("#flash.ok")
    row = page.locator("#messages tr.state-done:has-text('browser-hello')")
    row.wait_for()
    assert page.evaluate("window.__notReloaded") is True  # the list came live, no reload
    _shot(page, tmp_path, "queue")
    row.locator("a").first.click()
    page.wait_for_selector("#log .a-fg2.a-b")  # "green start" in bold green, from ANSI
    assert page.inner_text("#msg-state") == "done"
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
    import httpx

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

"""Basic auth, API tokens, the read-only role, CSRF and security headers; and that every
refused request left the node as it was."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="pip install -e '.[web]'")
import httpx

from tests.conftest import free_port
from tests.servers import NodeProcess
from tests.web.conftest import Background, WebProcess

ADMIN = ("admin", "s3cret pass")
VIEWER = ("viewer", "look only")
ADMIN_TOKEN = "admin-token-0123456789abcdef"
READ_TOKEN = "read-token-0123456789abcdef"
CONFIG = {
    "relative_root": "/therq",
    "allow_new_queue": True,
    "env": "test",
    "basic_auth": {
        "realm": "Conveyor test",
        "users": {ADMIN[0]: ADMIN[1], VIEWER[0]: {"password": VIEWER[1], "role": "read"}},
    },
    "api_tokens": [
        {"name": "ci", "token": ADMIN_TOKEN},
        {"name": "grafana", "token": READ_TOKEN, "role": "read"},
    ],
}


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory, node: NodeProcess, queues_dir: Path
) -> Iterator[WebProcess]:
    started = WebProcess(tmp_path_factory.mktemp("secured"), node, CONFIG, queues_dir)
    yield started
    started.stop()


def _pause_state(node: NodeProcess, queue: str) -> str:
    redis = node.client()
    try:
        return redis.execute_command("PAUSE", queue, "state").decode()
    finally:
        redis.close()


def test_basic_auth(secured: WebProcess) -> None:
    anonymous = httpx.get(f"{secured.url}/api/v1/queues", timeout=15)
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith('Basic realm="Conveyor test"')
    wrong = httpx.get(f"{secured.url}/", auth=(ADMIN[0], "wrong"), timeout=15)
    assert wrong.status_code == 401 and "Traceback" not in wrong.text
    assert httpx.get(f"{secured.url}/", auth=("nobody", ADMIN[1]), timeout=15).status_code == 401
    page = httpx.get(f"{secured.url}/", auth=ADMIN, timeout=15)
    assert page.status_code == 200 and "/therq/static/console.css" in page.text
    # Static assets need no login (the login prompt's page uses them); data does.
    assert httpx.get(f"{secured.url}/static/console.js", timeout=15).status_code == 200
    assert httpx.get(f"{secured.url}/metrics", timeout=15).status_code == 401
    outside = httpx.get(
        f"http://127.0.0.1:{secured.port}/", auth=ADMIN, timeout=15, follow_redirects=True
    )
    assert outside.status_code == 200 and outside.url.path == "/therq/"


def test_security_headers(secured: WebProcess) -> None:
    for path in ("/", "/api/v1/nodes", "/static/console.css", "/no/such/page"):
        response = httpx.get(f"{secured.url}{path}", auth=ADMIN, timeout=15)
        csp = response.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "same-origin"


def test_read_only_role_is_refused_and_changes_nothing(
    secured: WebProcess, node: NodeProcess
) -> None:
    api = f"{secured.url}/api/v1"
    httpx.post(f"{api}/queues/ro/pause", json={"state": "none"}, auth=ADMIN, timeout=15)
    assert httpx.get(f"{api}/queues/ro", auth=VIEWER, timeout=15).status_code == 200
    for auth, headers in ((VIEWER, {}), (None, {"authorization": f"Bearer {READ_TOKEN}"})):
        refused = httpx.post(
            f"{api}/queues/ro/pause", json={"state": "all"}, auth=auth, headers=headers, timeout=15
        )
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "read_only"
        form = httpx.post(
            f"{secured.url}/q/ro/new_message",
            data={"param1": "x"},
            auth=auth,
            headers=headers,
            timeout=15,
        )
        assert form.status_code == 403
    assert _pause_state(node, "ro") == "none"
    assert httpx.get(f"{api}/queues/ro", auth=ADMIN, timeout=15).json()["len"] == 0
    page = httpx.get(f"{secured.url}/q/ro", auth=VIEWER, timeout=15).text
    assert 'method="post"' not in page and "read-only" in page


def test_tokens(secured: WebProcess, node: NodeProcess) -> None:
    api = f"{secured.url}/api/v1"
    bearer = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    done = httpx.post(f"{api}/queues/tok/pause", json={"state": "out"}, headers=bearer, timeout=15)
    assert done.status_code == 200 and _pause_state(node, "tok") == "out"
    wrong = {"authorization": "Bearer " + "x" * 30}
    assert httpx.get(f"{api}/queues", headers=wrong, timeout=15).status_code == 401


def test_csrf(secured: WebProcess, node: NodeProcess) -> None:
    api = f"{secured.url}/api/v1"
    httpx.post(f"{api}/queues/cs/pause", json={"state": "none"}, auth=ADMIN, timeout=15)
    origin = {"origin": f"http://127.0.0.1:{secured.port}"}
    # A browser-made write without the token: refused, nothing changed.
    refused = httpx.post(
        f"{secured.url}/q/cs/pause", data={"state": "all"}, auth=ADMIN, headers=origin, timeout=15
    )
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "csrf"
    forged = httpx.post(
        f"{secured.url}/q/cs/pause",
        data={"state": "all", "csrf_token": "f"},
        auth=ADMIN,
        headers=origin,
        timeout=15,
    )
    assert forged.status_code == 403
    cross = httpx.post(
        f"{api}/queues/cs/pause",
        json={"state": "all"},
        auth=ADMIN,
        headers={"origin": "http://evil.example"},
        timeout=15,
    )
    assert cross.status_code == 403 and cross.json()["error"]["code"] == "cross_origin"
    assert _pause_state(node, "cs") == "none"
    # The page's own token, in the form or in the header: accepted.
    page = httpx.get(f"{secured.url}/q/cs", auth=ADMIN, timeout=15).text
    token = re.search(r'name="csrf-token" content="([0-9a-f]+)"', page).group(1)
    form = httpx.post(
        f"{secured.url}/q/cs/pause",
        data={"state": "in", "csrf_token": token},
        auth=ADMIN,
        headers=origin,
        timeout=15,
    )
    assert form.status_code == 303 and _pause_state(node, "cs") == "in"
    fetched = httpx.post(
        f"{api}/queues/cs/pause",
        json={"state": "none"},
        auth=ADMIN,
        headers={**origin, "x-csrf-token": token},
        timeout=15,
    )
    assert fetched.status_code == 200 and _pause_state(node, "cs") == "none"
    # The viewer's token is not the admin's.
    viewer_page = httpx.get(f"{secured.url}/q/cs", auth=VIEWER, timeout=15).text
    assert token not in viewer_page


@pytest.mark.parametrize("origin", ["http://[", "http://[::1", "http://a]b"])
def test_an_unparsable_origin_is_a_cross_origin_refusal(
    secured: WebProcess, node: NodeProcess, origin: str
) -> None:
    # urlsplit raises on an unclosed IPv6 bracket; the middleware runs before the app's
    # error handlers, so that was a bare 500 with a traceback in the console's log.
    answer = httpx.post(
        f"{secured.url}/api/v1/queues/bo/pause",
        json={"state": "all"},
        auth=ADMIN,
        headers={"origin": origin},
        timeout=15,
    )
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"]["code"] == "cross_origin"
    assert _pause_state(node, "bo") == "none"
    assert "Traceback" not in secured.output()


@pytest.mark.parametrize("credentials", [b"Basic \xe9", b"Basic YWRtaW46\xff=="])
def test_non_ascii_basic_credentials_are_a_401(secured: WebProcess, credentials: bytes) -> None:
    # base64.b64decode raises ValueError (not binascii.Error) on a non-ASCII str: that was
    # an exception in the middleware, a bare 500.
    answer = httpx.get(
        f"{secured.url}/api/v1/queues", headers={"authorization": credentials}, timeout=15
    )
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"]["code"] == "unauthorized"
    assert "Traceback" not in secured.output()


class BrokenWeb(WebProcess):
    """tests/web/broken_console.py: the console with a failure injected in the middleware."""

    def __init__(self, tmp: Path, node: NodeProcess) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "tests.web.broken_console", str(self.port)]
        Background.__init__(self, [*command, f"127.0.0.1:{node.port}"], tmp / "broken.log")
        self._wait_ready()


def test_a_failure_in_the_middleware_is_the_json_500_and_one_logged_traceback(
    tmp_path: Path, node: NodeProcess
) -> None:
    broken = BrokenWeb(tmp_path, node)
    try:
        answer = httpx.get(f"{broken.url}/boom", timeout=15)
        assert answer.status_code == 500, answer.text
        assert answer.headers["content-type"] == "application/json"
        assert answer.json() == {
            "error": {"code": "internal", "message": "internal error; see the console's log"}
        }
        assert answer.headers["x-frame-options"] == "DENY"  # the security headers, still
        # The console goes on serving.
        assert httpx.get(f"{broken.url}/api/v1/worker-queues", timeout=15).status_code == 200
    finally:
        broken.stop()
    output = broken.output()
    assert output.count("Traceback") == 1, output
    assert output.count("unexpected error on GET /boom") == 1, output
    assert "Exception in ASGI application" not in output  # uvicorn's own, a second one

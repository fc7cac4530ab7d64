"""The console's pure parts: config.json loading, ANSI rendering, the CLI's errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conveyor.web.ansi import AnsiRenderer, render
from conveyor.web.config import WebConfigError, load_config


def _load(tmp_path: Path, doc: object) -> object:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    return load_config(path)


def test_rq_config_loads_unchanged(tmp_path: Path) -> None:
    # Seed 004's sample config.json, as is.
    config = _load(
        tmp_path,
        {
            "env": "development",
            "host": "127.0.0.1",
            "port": "3333",
            "addr": "0.0.0.0",
            "tmpdir": "/tmp",
            "relative_root": "/therq",
            "basic_auth": {"realm": "Your RQ", "users": {"foo user": "bar pass"}},
        },
    )
    assert config.port == 3333 and config.addr == "0.0.0.0" and config.relative_root == "/therq"
    assert config.users == {"foo user": ("bar pass", "admin")} and config.realm == "Your RQ"
    assert config.public_host() == "127.0.0.1"
    defaults = load_config(None)
    assert (defaults.addr, defaults.port, defaults.relative_root) == ("127.0.0.1", 3333, "")
    assert not defaults.auth_enabled and defaults.nodes == ["127.0.0.1:7711"]


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"port": "http"}, "'port' must be a number"),
        ({"port": 70000}, "0..65535"),
        ({"relative_root": "therq"}, "relative_root"),
        ({"relative_root": "/a/../b"}, "not a clean path"),
        ({"basic_auth": {"users": {"a": "b"}}}, "needs 'realm' and 'users'"),
        (
            {"basic_auth": {"realm": "r", "users": {"a": {"password": "p", "role": "god"}}}},
            "role must be one of",
        ),
        ({"api_tokens": [{"token": "short"}]}, "at least 16"),
        ({"allow_new_queue": "yes"}, "true or false"),
        ({"nodes": []}, "at least one"),
        ({"prot": 1}, "unknown key"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_bad_config_is_a_clear_error(tmp_path: Path, doc: object, words: str) -> None:
    with pytest.raises(WebConfigError, match=words):
        _load(tmp_path, doc)


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for args in (
        ["--config", str(bad)],
        ["--config", str(tmp_path / "none.json")],
        ["--port", "nope"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "conveyor.web.cli", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode != 0
        assert "Traceback" not in done.stderr and done.stderr.strip(), done.stderr


def test_ansi_to_html() -> None:
    assert render("plain <b>&") == "plain &lt;b&gt;&amp;"
    assert render("\x1b[1;31mred\x1b[0m ok") == '<span class="a-b a-fg1">red</span> ok'
    assert render("\x1b[92mbright\x1b[39m") == '<span class="a-fg10">bright</span>'
    assert render("\x1b[38;5;4mblue\x1b[38;2;1;2;3m same") == (
        '<span class="a-fg4">blue</span><span class="a-fg4"> same</span>'
    )
    assert render("\x1b]0;title\x07\x1b[2Kgone\x07 bell") == "gone bell"
    # A colour and an escape split across two pieces of a streamed log.
    renderer = AnsiRenderer()
    first = renderer.feed("\x1b[32mgre")
    second = renderer.feed("en\x1b[")
    third = renderer.feed("0m after")
    assert first + second + third == (
        '<span class="a-fg2">gre</span><span class="a-fg2">en</span> after'
    )

"""The console's configuration: seed 004's top-level config.json plus Conveyor's keys.

RQ's keys (`env`, `host`, `port`, `addr`, `tmpdir`, `relative_root`, `basic_auth`,
`allow_new_queue`) keep their meaning, so an RQ config.json loads unchanged. Conveyor adds
`nodes`, `node_password`, `queues_dirs`, `api_tokens`, `read_only`, `secret_key`,
`data_dir` (attachments are stored under it), `max_attachment_mb`,
`max_attachments_total_mb` and `max_streams`.
Command-line options override the file.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROLES = ("admin", "read")
_KNOWN_KEYS = frozenset(
    {
        "env",
        "host",
        "port",
        "addr",
        "tmpdir",
        "relative_root",
        "basic_auth",
        "allow_new_queue",
        "nodes",
        "node_password",
        "queues_dirs",
        "api_tokens",
        "read_only",
        "secret_key",
        "data_dir",
        "max_attachment_mb",
        "max_attachments_total_mb",
        "max_streams",
    }
)
_MIN_TOKEN_CHARS = 16


class WebConfigError(ValueError):
    """config.json or an option is invalid; the message names the key and why."""


@dataclass(frozen=True)
class Principal:
    """Who a request comes from: a basic-auth user, a token's name, or `anonymous`."""

    name: str
    role: str

    @property
    def can_write(self) -> bool:
        return self.role == "admin"


@dataclass
class WebConfig:
    addr: str = "127.0.0.1"
    host: str | None = None  # canonical host name in message URLs (RQ's `host`)
    port: int = 3333
    relative_root: str = ""  # "" or "/prefix", no trailing slash
    env: str = "development"
    tmpdir: str = "/tmp"
    allow_new_queue: bool = False
    realm: str = "Conveyor"
    users: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (password, role)
    tokens: dict[str, Principal] = field(default_factory=dict)  # token -> principal
    read_only: bool = False  # the role of anonymous users when no auth is configured
    nodes: list[str] = field(default_factory=lambda: ["127.0.0.1:7711"])
    node_password: str | None = None
    queues_dirs: list[Path] = field(default_factory=list)
    # Signs CSRF tokens. Random per process unless set, so tokens die with a restart.
    secret_key: str = field(default_factory=lambda: secrets.token_hex(32))
    # Attachments go to <data_dir>/attachments; None: the node's own `dir` when the node
    # runs on this host (see Console.attachment_store).
    data_dir: Path | None = None
    max_attachment_bytes: int = 4096 * 1024 * 1024
    # All attachments stored together (their age bounds them too: 30 days); an upload
    # that would pass it is a 507. Room for two of the largest single attachments.
    max_attachments_total_bytes: int = 10240 * 1024 * 1024
    # Live streams (each a task rendering every second) open at once; more are a 503.
    max_streams: int = 100

    @property
    def auth_enabled(self) -> bool:
        return bool(self.users or self.tokens)

    def public_host(self) -> str | None:
        """The host for full message URLs; None: use the host the request came to."""
        if self.host:
            return self.host
        return None if self.addr in ("0.0.0.0", "::", "") else self.addr


def load_config(path: Path | None, **overrides: Any) -> WebConfig:
    """The config from `path` (may be None) with the non-None `overrides` applied."""
    doc: dict[str, Any] = {}
    if path is not None:
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            raise WebConfigError(f"{path}: no such file") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise WebConfigError(f"{path}: {exc}") from None
        if not isinstance(doc, dict):
            raise WebConfigError(f"{path}: must be a JSON object")
    doc.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return _from_doc(doc)
    except (TypeError, ValueError) as exc:
        where = f"{path}: " if path is not None else ""
        raise WebConfigError(f"{where}{exc}") from None


def _from_doc(doc: dict[str, Any]) -> WebConfig:
    unknown = sorted(set(doc) - _KNOWN_KEYS)
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(map(repr, unknown))}")
    config = WebConfig()
    config.addr = _text(doc, "addr", config.addr)
    config.host = _text(doc, "host", "") or None
    config.port = _port(doc.get("port", 3333))
    config.relative_root = _root(doc.get("relative_root", "/"))
    config.env = _text(doc, "env", config.env)
    config.tmpdir = _text(doc, "tmpdir", config.tmpdir)
    config.allow_new_queue = _flag(doc, "allow_new_queue")
    config.read_only = _flag(doc, "read_only")
    if "basic_auth" in doc:
        config.realm, config.users = _basic_auth(doc["basic_auth"])
    config.tokens = _tokens(doc.get("api_tokens", []))
    config.nodes = _nodes(doc.get("nodes", config.nodes))
    password = doc.get("node_password")
    config.node_password = None if password in (None, "") else _text(doc, "node_password", "")
    dirs = doc.get("queues_dirs", [])
    if not isinstance(dirs, list | tuple) or not all(isinstance(d, str | Path) for d in dirs):
        raise ValueError("'queues_dirs' must be a list of directory paths")
    config.queues_dirs = [Path(d) for d in dirs]
    if doc.get("secret_key"):
        config.secret_key = _text(doc, "secret_key", "")
    if doc.get("data_dir") not in (None, ""):
        config.data_dir = Path(_text(doc, "data_dir", "")).expanduser()
    size = doc.get("max_attachment_mb", 4096)
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 1024 * 1024:
        raise ValueError("'max_attachment_mb' must be a whole number of megabytes, 1..1048576")
    config.max_attachment_bytes = size * 1024 * 1024
    total = _whole(doc, "max_attachments_total_mb", 10240, 1, 1024**3)
    config.max_attachments_total_bytes = total * 1024 * 1024
    config.max_streams = _whole(doc, "max_streams", config.max_streams, 1, 100_000)
    return config


def _whole(doc: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"'{key}' must be a whole number in {low}..{high}, not {value!r}")
    return value


def _text(doc: dict[str, Any], key: str, default: str) -> str:
    value = doc.get(key, default)
    if not isinstance(value, str):
        raise ValueError(f"'{key}' must be a string")
    return value


def _flag(doc: dict[str, Any], key: str) -> bool:
    value = doc.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"'{key}' must be true or false")
    return value


def _port(value: Any) -> int:
    # RQ's sample config writes the port as a string ("3333").
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"'port' must be a number, not {value!r}") from None
    if isinstance(value, bool) or not 0 <= port <= 65535:
        raise ValueError(f"'port' must be in 0..65535, not {value!r}")
    return port


def _root(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise ValueError("'relative_root' must be a path starting with '/'")
    root = value.rstrip("/")
    if any(part in ("", ".", "..") for part in root.split("/")[1:]) or "?" in root:
        raise ValueError(f"'relative_root' {value!r} is not a clean path")
    return root


def _basic_auth(value: Any) -> tuple[str, dict[str, tuple[str, str]]]:
    if not isinstance(value, dict) or "realm" not in value or "users" not in value:
        raise ValueError("'basic_auth' needs 'realm' and 'users'")
    realm, users = value["realm"], value["users"]
    if not isinstance(realm, str) or not realm or '"' in realm:
        raise ValueError("'basic_auth.realm' must be a non-empty string without '\"'")
    if not isinstance(users, dict) or not users:
        raise ValueError("'basic_auth.users' must map user names to passwords")
    result: dict[str, tuple[str, str]] = {}
    for name, entry in users.items():
        # RQ's form is "user": "password"; Conveyor's adds a role:
        # "user": {"password": "...", "role": "read"}.
        password, role = (entry, "admin") if isinstance(entry, str) else _user_entry(name, entry)
        if not name or ":" in name or not password:
            raise ValueError(f"basic_auth user {name!r}: needs a name without ':' and a password")
        result[name] = (password, role)
    return realm, result


def _user_entry(name: str, entry: Any) -> tuple[str, str]:
    if not isinstance(entry, dict) or not isinstance(entry.get("password"), str):
        raise ValueError(f"basic_auth user {name!r}: give a password or {{password, role}}")
    return entry["password"], _role(entry.get("role", "admin"), f"user {name!r}")


def _role(value: Any, who: str) -> str:
    if value not in ROLES:
        raise ValueError(f"{who}: role must be one of {', '.join(ROLES)}, not {value!r}")
    return str(value)


def _tokens(value: Any) -> dict[str, Principal]:
    if not isinstance(value, list):
        raise ValueError("'api_tokens' must be a list of {name, token, role}")
    tokens: dict[str, Principal] = {}
    for entry in value:
        if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
            raise ValueError("each api_tokens entry needs a 'token' string")
        token, name = entry["token"], str(entry.get("name", "token"))
        if len(token) < _MIN_TOKEN_CHARS or any(c.isspace() for c in token):
            raise ValueError(f"api token {name!r}: at least {_MIN_TOKEN_CHARS} characters")
        tokens[token] = Principal(name, _role(entry.get("role", "admin"), f"token {name!r}"))
    return tokens


def _nodes(value: Any) -> list[str]:
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list | tuple):
        raise ValueError("'nodes' must be a list of host:port or a comma-separated string")
    nodes = [str(n).strip() for n in value if str(n).strip()]
    if not nodes:
        raise ValueError("'nodes' must name at least one host:port")
    return nodes

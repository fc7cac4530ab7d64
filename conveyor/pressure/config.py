"""Connection settings, client identities and Redis client construction.

Precedence for the server: an explicit URL, then the specification's environment
variables (REDIS_SERVER, REDIS_PORT, REDIS_DB), then redis://127.0.0.1:6379/0.
The key prefix: explicit, then PRESSURE_PREFIX, then `__pressure__`.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Mapping
from typing import Any

from redis.backoff import NoBackoff
from redis.connection import parse_url

from conveyor.pressure.keys import DEFAULT_PREFIX, check_key_text

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6379
DEFAULT_DB = 0

# Longer than any single blocking call we issue (see steps.WAIT_CHUNK), so a client-side
# timeout never abandons a BRPOP whose reply (a popped role token) is still on its way.
SOCKET_TIMEOUT = 30.0
CONNECT_TIMEOUT = 5.0


def resolve_url(redis_url: str | None, env: Mapping[str, str] | None = None) -> str:
    """The Redis URL to use: `redis_url`, else one built from the environment, else the default."""
    if redis_url:
        return redis_url
    env = os.environ if env is None else env
    host = env.get("REDIS_SERVER") or DEFAULT_HOST
    port = _int_setting(env, "REDIS_PORT", DEFAULT_PORT)
    db = _int_setting(env, "REDIS_DB", DEFAULT_DB)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"redis://{host}:{port}/{db}"


def resolve_prefix(prefix: str | None, env: Mapping[str, str] | None = None) -> str:
    """The key prefix: `prefix`, else PRESSURE_PREFIX, else `__pressure__`."""
    if prefix is not None and not isinstance(prefix, str):
        # Formatted into key names, bytes would silently become keys like "b'pp':q:bound".
        raise ValueError(f"key prefix must be a string, not {type(prefix).__name__}")
    if not prefix:
        env = os.environ if env is None else env
        prefix = env.get("PRESSURE_PREFIX") or DEFAULT_PREFIX
    check_key_text(prefix, "key prefix")
    return prefix


def _int_setting(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {raw!r}")
    return value


def describe_url(url: str) -> str:
    """`host:port/db` (or the socket path) of a Redis URL, without credentials, for messages."""
    try:
        options = parse_url(url)
    except ValueError:
        return url
    db = options.get("db", DEFAULT_DB)
    if "path" in options:
        return f"unix:{options['path']}/{db}"
    return f"{options.get('host', 'localhost')}:{options.get('port', DEFAULT_PORT)}/{db}"


def describe_client(client: Any) -> str:
    """`host:port/db` (or the socket path) a redis-py client (sync or asyncio) connects to."""
    options = client.connection_pool.connection_kwargs
    db = options.get("db", DEFAULT_DB)
    if "path" in options:
        return f"unix:{options['path']}/{db}"
    return f"{options.get('host', 'localhost')}:{options.get('port', DEFAULT_PORT)}/{db}"


def client_options(retry: Any) -> dict[str, Any]:
    """Keyword arguments for `Redis.from_url`; options given in the URL's query still win."""
    # No retries: a retried MULTI/EXEC whose reply was lost would push or pop twice, and a
    # dead server must fail promptly ("must fail and report their failure").
    return {
        "socket_timeout": SOCKET_TIMEOUT,
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "retry": retry,
    }


def no_backoff() -> NoBackoff:
    return NoBackoff()


_identity = threading.local()


def default_uid() -> str:
    """The specification's suggested identity: host name, process id, OS thread id.

    Kept per thread: with a put or get down to one round trip, asking the kernel for the
    host name on every call showed in profiles. The pid is compared so a forked child
    names itself.
    """
    pid = os.getpid()
    cached: tuple[int, str] | None = getattr(_identity, "uid", None)
    if cached is None or cached[0] != pid:
        cached = (pid, f"{socket.gethostname()}:{pid}:{threading.get_native_id()}")
        _identity.uid = cached
    return cached[1]


def holder_alive(uid: str | None) -> bool | None:
    """Whether the client named `uid` still runs: None when that cannot be known from here.

    Only identities in our own `host:pid:thread` form, on this host, can be checked.
    """
    if not uid:
        return None
    parts = uid.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname():
        return None
    try:
        pid = int(parts[1])
    except ValueError:
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

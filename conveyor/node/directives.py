"""The directives a node knows: each one's name, kind, default, whether CONFIG SET may
change it, and how its value is parsed and shown (Redis' syntax: `1gb`, `yes|no`, …).
`Config` (config.py) holds the values and does files, CONFIG and REWRITE.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("conveyor.node")


class ConfigError(Exception):
    pass


_MEMORY_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1024,
    "m": 1000**2,
    "mb": 1024**2,
    "g": 1000**3,
    "gb": 1024**3,
}
_MEMORY_RE = re.compile(r"^([0-9]+)([a-z]*)$")
_DIGITS_RE = re.compile(r"^[0-9]+$")
_INT_RE = re.compile(r"-?[0-9]+")  # fullmatch: no sign "+", spaces, "_" or "\n"
# Linux refuses a TCP_KEEPIDLE above this (EINVAL), so a larger tcp-keepalive would break
# every new connection.
TCP_KEEPALIVE_MAX = 32767


def parse_memory(text: str) -> int:
    match = _MEMORY_RE.match(text.strip().lower())
    if not match or match.group(2) not in _MEMORY_UNITS:
        raise ValueError(text)
    return int(match.group(1)) * _MEMORY_UNITS[match.group(2)]


# Client classes of client-output-buffer-limit: Disque's only one, then those Redis' and
# Disque's stock config files name (accepted and kept; Conveyor has no such clients).
LIMIT_CLASSES = {"normal": "normal", "slave": "slave", "replica": "slave", "pubsub": "pubsub"}


def parse_buffer_limits(words: list[str]) -> list[list[str]]:
    """`<class> <hard> <soft> <soft-seconds>` groups, as given; ValueError when bad."""
    if not words or len(words) % 4:
        raise ValueError(" ".join(words))
    groups = [words[start : start + 4] for start in range(0, len(words), 4)]
    for client_class, hard, soft, seconds in groups:
        if client_class.lower() not in LIMIT_CLASSES or not _DIGITS_RE.match(seconds):
            raise ValueError(client_class)
        parse_memory(hard)
        parse_memory(soft)
    return groups


def parse_save_points(words: list[str]) -> list[tuple[int, int]]:
    """`<seconds> <changes>` pairs; none for `save ""`; ValueError when bad."""
    if words in ([], [""]):
        return []
    if len(words) % 2 or not all(_DIGITS_RE.match(word) for word in words):
        raise ValueError(" ".join(words))
    numbers = [int(word) for word in words]
    return list(zip(numbers[::2], numbers[1::2], strict=True))


class RangeError(ValueError):
    """A number that parsed but is out of the directive's range; str() says the range."""


def parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered == "yes":
        return True
    if lowered == "no":
        return False
    raise ValueError(text)


@dataclass(frozen=True, slots=True)
class Directive:
    name: str
    kind: str  # int | memory | bool | enum | string | buffer-limits | save
    default: Any
    settable: bool = False
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    multi: bool = False  # takes several arguments (kept as one string)

    def parse(self, args: list[str]) -> Any:
        if self.kind == "buffer-limits":
            return parse_buffer_limits(args)
        if self.kind == "save":
            return parse_save_points(args)
        if self.multi:
            return " ".join(args)
        if len(args) != 1:
            raise ValueError("wrong number of arguments")
        text = args[0]
        if self.kind == "int":
            if not _INT_RE.fullmatch(text):
                raise ValueError(text)
            value = int(text)
        elif self.kind == "memory":
            value = parse_memory(text)
        elif self.kind == "bool":
            return parse_bool(text)
        elif self.kind == "enum":
            lowered = text.lower()
            if lowered not in self.choices:
                raise ValueError(text)
            return lowered
        else:
            return text
        too_small = self.minimum is not None and value < self.minimum
        too_big = self.maximum is not None and value > self.maximum
        if too_small or too_big:
            if self.maximum is None:
                raise RangeError(f"argument must be at least {self.minimum}")
            if self.minimum is None:
                raise RangeError(f"argument must be at most {self.maximum}")
            raise RangeError(
                f"argument must be between {self.minimum} and {self.maximum} inclusive"
            )
        return value

    def format(self, value: Any) -> str:
        if self.kind == "bool":
            return "yes" if value else "no"
        return str(value)


def _d(name: str, kind: str, default: Any, settable: bool = False, **extra: Any) -> Directive:
    return Directive(name, kind, default, settable, **extra)


_LOGLEVELS = ("debug", "verbose", "notice", "warning")
PROTECTED_ACTION_CHOICES = ("no", "local", "yes")
DIRECTIVES: dict[str, Directive] = {
    d.name: d
    for d in (
        _d("port", "int", 7711, minimum=0, maximum=65535),
        _d("bind", "string", "127.0.0.1", multi=True),
        _d("dir", "string", ".", True),
        _d("timeout", "int", 0, True, minimum=0),
        _d("tcp-keepalive", "int", 0, True, minimum=0, maximum=TCP_KEEPALIVE_MAX),
        _d("tcp-backlog", "int", 511, minimum=0),
        _d("unixsocket", "string", ""),
        _d("unixsocketperm", "int", 0),
        _d("loglevel", "enum", "notice", True, choices=_LOGLEVELS),
        _d("logfile", "string", ""),
        _d("syslog-enabled", "bool", False),
        _d("syslog-ident", "string", "disque"),
        _d("syslog-facility", "string", "local0"),
        _d("databases", "int", 16),
        _d("maxclients", "int", 10000, True, minimum=1),
        _d("maxmemory", "memory", 1024**3, True),
        _d("maxmemory-policy", "enum", "acks", True, choices=("acks", "noeviction")),
        _d("maxmemory-samples", "int", 5, True, minimum=1),
        _d("activerehashing", "bool", True, True),
        _d("daemonize", "bool", False),
        _d("hz", "int", 10, True, minimum=1, maximum=500),
        _d("appendonly", "bool", False, True),
        _d("appendfilename", "string", "disque.aof"),
        _d("no-appendfsync-on-rewrite", "bool", False),
        _d("appendfsync", "enum", "everysec", True, choices=("always", "everysec", "no")),
        _d("auto-aof-rewrite-percentage", "int", 100, True, minimum=0),
        _d("auto-aof-rewrite-min-size", "memory", 64 * 1024**2, True),
        _d("aof-rewrite-incremental-fsync", "bool", True, True),
        _d("aof-load-truncated", "bool", True, True),
        _d("aof-enqueue-jobs-once", "bool", False, True),
        _d("requirepass", "string", "", True),
        # TLS (tls.py), Redis' names; read at start only.
        _d("tls-port", "int", 0, minimum=0, maximum=65535),
        _d("tls-cert-file", "string", ""),
        _d("tls-key-file", "string", ""),
        _d("tls-ca-cert-file", "string", ""),
        _d("tls-auth-clients", "enum", "no", choices=("no", "optional", "yes")),
        _d("tls-cluster", "bool", False),
        # Redis' guard: with no password and a bind beyond loopback, only clients from
        # 127.0.0.1 / ::1 / the Unix socket are served (server.py, docs/security.md).
        _d("protected-mode", "bool", True, True),
        _d("pidfile", "string", ""),
        _d("rename-command", "string", "", multi=True),
        _d("cluster-config-file", "string", "nodes.conf"),
        _d("cluster-node-timeout", "int", 15000, True, minimum=1),
        # Beyond Disque: every bus frame carries an HMAC under this password; nodes
        # without it cannot join. "" = off (mixed clusters with C Disque need it off).
        _d("cluster-password", "string", ""),
        _d("slowlog-log-slower-than", "int", 10000, True),
        _d("slowlog-max-len", "int", 128, True, minimum=0),
        _d("latency-monitor-threshold", "int", 0, True, minimum=0),
        # Enforced for normal clients (server.py); Conveyor's default is not Redis' 0 0 0
        # (docs/configuration.md says why).
        _d(
            "client-output-buffer-limit",
            "buffer-limits",
            "normal 268435456 67108864 60",
            True,
            multi=True,
        ),
        # Largest unfinished request one client may hold, as Redis (minimum 1mb).
        _d("client-query-buffer-limit", "memory", 1024**3, True, minimum=1024**2),
        # RDB snapshots: Disque has none, nor has Conveyor. Accepted so Redis tools that
        # read it (redis-benchmark asks CONFIG GET save) get Redis' "saving is off" answer.
        _d("save", "save", "", True, multi=True),
        _d("watchdog-period", "int", 0, True, minimum=0),
        # Conveyor's own.
        _d("max-deliveries", "int", 0, True, minimum=0),
        _d("deadletter-queue", "string", "", True),
        _d("proto-max-bulk-len", "memory", 512 * 1024**2, True, minimum=1024),
        # Directory of the job-event log, relative to `dir`; "" = off (event_log.py).
        _d("event-log", "string", "", True),
        # Redis 7's guards (docs/security.md): who may run DEBUG, and CONFIG SET the
        # protected (path) directives. Only from the file or the command line.
        _d("enable-debug-command", "enum", "local", choices=PROTECTED_ACTION_CHOICES),
        _d("enable-protected-configs", "enum", "local", choices=PROTECTED_ACTION_CHOICES),
    )
}

# Directives naming files or directories: Redis 7's PROTECTED_CONFIG ones. CONFIG SET of
# those that are settable needs `enable-protected-configs` (cmd_admin.py); a NUL byte,
# which no path may hold, is refused for all of them.
PATH_DIRECTIVES = frozenset(
    (
        "dir",
        "event-log",
        "logfile",
        "pidfile",
        "unixsocket",
        "cluster-config-file",
        "appendfilename",
        "tls-cert-file",
        "tls-key-file",
        "tls-ca-cert-file",
    )
)

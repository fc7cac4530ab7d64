"""Node configuration: disque.conf directives, `--directive value` overrides, CONFIG.

The file format is Redis': one `directive arg...` per line, `#` comments, arguments
split like redis-cli input (double and single quotes). Directives Disque accepts but
that mean nothing to Conveyor yet are accepted and kept, so existing config files load.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conveyor.protocol.resp import split_args


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
_MEMORY_RE = re.compile(r"^(\d+)([a-z]*)$")


def parse_memory(text: str) -> int:
    match = _MEMORY_RE.match(text.strip().lower())
    if not match or match.group(2) not in _MEMORY_UNITS:
        raise ValueError(text)
    return int(match.group(1)) * _MEMORY_UNITS[match.group(2)]


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
    kind: str  # int | memory | bool | enum | string
    default: Any
    settable: bool = False
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    multi: bool = False  # takes several arguments (kept as one string)

    def parse(self, args: list[str]) -> Any:
        if self.multi:
            return " ".join(args)
        if len(args) != 1:
            raise ValueError("wrong number of arguments")
        text = args[0]
        if self.kind == "int":
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
        if self.minimum is not None and value < self.minimum:
            raise ValueError(text)
        if self.maximum is not None and value > self.maximum:
            raise ValueError(text)
        return value

    def format(self, value: Any) -> str:
        if self.kind == "bool":
            return "yes" if value else "no"
        return str(value)


def _d(name: str, kind: str, default: Any, settable: bool = False, **extra: Any) -> Directive:
    return Directive(name, kind, default, settable, **extra)


_LOGLEVELS = ("debug", "verbose", "notice", "warning")
DIRECTIVES: dict[str, Directive] = {
    d.name: d
    for d in (
        _d("port", "int", 7711, minimum=0, maximum=65535),
        _d("bind", "string", "127.0.0.1", multi=True),
        _d("dir", "string", ".", True),
        _d("timeout", "int", 0, True, minimum=0),
        _d("tcp-keepalive", "int", 0, True, minimum=0),
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
        _d("pidfile", "string", ""),
        _d("rename-command", "string", "", multi=True),
        _d("cluster-config-file", "string", "nodes.conf"),
        _d("cluster-node-timeout", "int", 15000, True, minimum=1),
        _d("slowlog-log-slower-than", "int", 10000, True),
        _d("slowlog-max-len", "int", 128, True, minimum=0),
        _d("latency-monitor-threshold", "int", 0, True, minimum=0),
        _d("client-output-buffer-limit", "string", "normal 0 0 0", True, multi=True),
        _d("watchdog-period", "int", 0, True, minimum=0),
        # Conveyor's own.
        _d("max-deliveries", "int", 0, True, minimum=0),
        _d("deadletter-queue", "string", "", True),
        _d("proto-max-bulk-len", "memory", 512 * 1024**2, True, minimum=1024),
        # Directory of the job-event log, relative to `dir`; "" = off (event_log.py).
        _d("event-log", "string", "", True),
    )
}

_SETTABLE_ERROR = "Unsupported CONFIG parameter: {name}"


@dataclass
class Config:
    values: dict[str, Any] = field(
        default_factory=lambda: {name: d.default for name, d in DIRECTIVES.items()}
    )
    file: Path | None = None
    # Directives set from the file or the command line, in the order first seen.
    explicit: list[str] = field(default_factory=list)
    # rename-command lines: lower-case name -> new name ("" disables the command).
    renamed_commands: dict[str, str] = field(default_factory=dict)
    # Called with the directive name after a successful CONFIG SET; raising ConfigError
    # undoes the change and becomes CONFIG SET's error.
    on_change: Callable[[str], None] | None = None

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def apply(self, name: str, args: list[str]) -> None:
        """Set a directive from file or command-line words; ConfigError when bad."""
        name = name.lower()
        if name == "include":
            if len(args) != 1:
                raise ConfigError("wrong number of arguments")
            self.load_file(Path(args[0]), include=True)
            return
        if name == "rename-command":
            # Repeatable, unlike other directives: each line renames one command.
            if len(args) != 2:
                raise ConfigError("wrong number of arguments")
            self.renamed_commands[args[0].lower()] = args[1]
            return
        directive = DIRECTIVES.get(name)
        if directive is None:
            raise ConfigError("Bad directive or wrong number of arguments")
        if not directive.multi and len(args) != 1:
            raise ConfigError(f"'{name}' takes one argument, got {len(args)}")
        try:
            self.values[name] = directive.parse(args)
        except ValueError:
            raise ConfigError(f"Invalid argument for '{name}': {' '.join(args)}") from None
        if name not in self.explicit:
            self.explicit.append(name)

    def load_file(self, path: Path, include: bool = False) -> None:
        if not include:
            self.file = path
        text = path.read_text()
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            words = split_args(line.encode())
            if words is None:
                raise ConfigError(f"{path}:{number}: unbalanced quotes in '{line}'")
            try:
                self.apply(words[0].decode(), [w.decode() for w in words[1:]])
            except ConfigError as exc:
                raise ConfigError(f"{path}:{number}: '{line}': {exc}") from None

    def apply_overrides(self, words: list[str]) -> None:
        """`--port 7712 --bind 127.0.0.1 ...`: each --name takes the words up to the next."""
        current: str | None = None
        args: list[str] = []
        for word in [*words, "--"]:
            if word.startswith("--"):
                if current is not None:
                    try:
                        self.apply(current, args)
                    except ConfigError as exc:
                        raise ConfigError(f"--{current}: {exc}") from None
                elif args:
                    raise ConfigError(f"unexpected argument '{args[0]}'")
                current, args = word[2:] or None, []
            else:
                args.append(word)

    # -- CONFIG command ------------------------------------------------------------------
    def get(self, pattern: str) -> list[tuple[str, str]]:
        pattern = pattern.lower()
        return [
            (name, directive.format(self.values[name]))
            for name, directive in DIRECTIVES.items()
            if fnmatch.fnmatchcase(name, pattern)
        ]

    def set(self, name: str, value: str) -> None:
        name = name.lower()
        directive = DIRECTIVES.get(name)
        if directive is None or not directive.settable:
            raise ConfigError(_SETTABLE_ERROR.format(name=name))
        try:
            parsed = directive.parse(value.split() if directive.multi else [value])
        except ValueError:
            raise ConfigError(f"Invalid argument '{value}' for CONFIG SET '{name}'") from None
        if name == "dir" and not os.path.isdir(parsed):
            raise ConfigError(f"Invalid argument '{value}' for CONFIG SET '{name}'")
        previous = self.values[name]
        self.values[name] = parsed
        if self.on_change is not None:
            try:
                self.on_change(name)
            except ConfigError as exc:
                # The node could not apply it (e.g. an event-log directory it can't use).
                self.values[name] = previous
                raise ConfigError(
                    f"Invalid argument '{value}' for CONFIG SET '{name}': {exc}"
                ) from None
        if name not in self.explicit:
            self.explicit.append(name)

    def rewrite(self) -> None:
        """Write current values into the config file, keeping its other lines in place."""
        if self.file is None:
            raise ConfigError("The server is running without a config file")
        try:
            lines = self.file.read_text().splitlines() if self.file.exists() else []
        except OSError as exc:
            raise ConfigError(f"Rewriting config file: {exc.strerror}") from None
        wanted = {
            name: f"{name} {self._quote(DIRECTIVES[name].format(self.values[name]))}"
            for name in self.explicit
            if name in DIRECTIVES and not DIRECTIVES[name].multi
        }
        wanted.update(
            {
                name: f"{name} {self.values[name]}"
                for name in self.explicit
                if name in DIRECTIVES and DIRECTIVES[name].multi
            }
        )
        output: list[str] = []
        written: set[str] = set()
        for line in lines:
            words = split_args(line.strip().encode()) if not line.lstrip().startswith("#") else []
            name = words[0].decode().lower() if words else ""
            if name in wanted:
                if name not in written:
                    output.append(wanted[name])
                    written.add(name)
                continue  # later duplicates of a rewritten directive are dropped
            output.append(line)
        missing = [name for name in wanted if name not in written]
        if missing:
            output.append("# Generated by CONFIG REWRITE")
            output.extend(wanted[name] for name in missing)
        tmp = self.file.with_name(self.file.name + ".tmp")
        try:
            tmp.write_text("\n".join(output) + "\n")
            os.replace(tmp, self.file)
        except OSError as exc:
            raise ConfigError(f"Rewriting config file: {exc.strerror}") from None

    @staticmethod
    def _quote(value: str) -> str:
        if value == "" or any(ch in value for ch in " \t\"'\\"):
            return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return value

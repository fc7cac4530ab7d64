"""Node configuration: disque.conf directives, `--directive value` overrides, CONFIG.

The file format is Redis': one `directive arg...` per line, `#` comments, arguments
split like redis-cli input (double and single quotes). Directives Disque accepts but
that mean nothing to Conveyor yet are accepted and kept, so existing config files load.

Most directives keep the last value given. Three may appear on several lines, as in
Redis: `client-output-buffer-limit` (one line per client class), `save` (each line adds
save points) and `rename-command` (one rename per line); CONFIG REWRITE writes them back
one line each, in place.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conveyor.node.directives import (
    DIRECTIVES,
    LIMIT_CLASSES,
    PATH_DIRECTIVES,
    ConfigError,
    RangeError,
    parse_memory,
)
from conveyor.protocol.inline import sds_repr, split_args

log = logging.getLogger("conveyor.node")


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
    # client-output-buffer-limit per class ("replica" is "slave"), each as its words were
    # given (`pubsub 32mb 8mb 60`), so a rewrite leaves an unchanged line as it was.
    buffer_limits: dict[str, list[str]] = field(
        default_factory=lambda: {"normal": ["normal", "256mb", "64mb", "60"]}
    )
    # Called with the directive name after a successful CONFIG SET; raising ConfigError
    # undoes the change and becomes CONFIG SET's error.
    on_change: Callable[[str], None] | None = None

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def apply(self, name: str, args: list[str]) -> None:
        """Set a directive from file or command-line words; ConfigError when bad. Words
        that were not UTF-8 arrive decoded with surrogateescape (as sys.argv is), and are
        refused: kept, they would either fail later or stand for other bytes."""
        name = name.lower()
        for word in args:
            if not word.isascii() and not _is_utf8(word):
                raise ConfigError(f"Invalid argument for '{name}': {shown(word)} (not UTF-8 text)")
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
        if directive.kind == "buffer-limits" and len(args) != 4:
            raise ConfigError(
                f"'{name}' takes 4 arguments (<class> <hard> <soft> <soft-seconds>), "
                f"got {len(args)}"
            )
        try:
            parsed = directive.parse(args)
        except RangeError as exc:
            raise ConfigError(
                f"Invalid argument for '{name}': {shown(' '.join(args))} ({exc})"
            ) from None
        except ValueError:
            raise ConfigError(f"Invalid argument for '{name}': {shown(' '.join(args))}") from None
        if name in PATH_DIRECTIVES and "\x00" in parsed:
            raise ConfigError(f"Invalid argument for '{name}': a path cannot contain a NUL byte")
        problem = _unusable(name, parsed)
        if problem is not None:
            raise ConfigError(f"Invalid argument for '{name}': {shown(' '.join(args))} ({problem})")
        if directive.kind == "buffer-limits":
            self._set_buffer_limits(parsed)
        elif directive.kind == "save":
            # Each line adds save points; `save ""` drops those given before it.
            pairs = " ".join(f"{seconds} {changes}" for seconds, changes in parsed)
            self.values[name] = " ".join(filter(None, (self.values[name], pairs))) if pairs else ""
        else:
            self.values[name] = parsed
        if name not in self.explicit:
            self.explicit.append(name)

    def load_file(self, path: Path, include: bool = False) -> None:
        if not include:
            self.file = path
        # Lines end at "\n" only, as in Redis: a vertical tab or form feed inside a line
        # (str.splitlines() would split there) can't start a directive of its own.
        for number, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
            line = raw.strip(b" \t\r\n")
            if not line or line.startswith(b"#"):
                continue
            text = line.decode(errors="replace")
            words = split_args(line)
            if words is None:
                raise ConfigError(f"{path}:{number}: unbalanced quotes in '{shown(text)}'")
            try:
                self.apply(
                    words[0].decode(errors="replace"),
                    [w.decode(errors="surrogateescape") for w in words[1:]],
                )
            except ConfigError as exc:
                raise ConfigError(f"{path}:{number}: '{shown(text)}': {exc}") from None

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
        """CONFIG SET: parse, store, let the node apply it (`on_change`). Any failure
        leaves every value as it was and raises ConfigError with a message fit for a
        client: no Python exception text. `value` is the client's bytes decoded with
        surrogateescape: one that is not UTF-8 is refused, never stored altered."""
        name = name.lower()
        directive = DIRECTIVES.get(name)
        if directive is None or not directive.settable:
            raise ConfigError(_SETTABLE_ERROR.format(name=shown(name)))
        invalid = f"Invalid argument '{shown(value)}' for CONFIG SET '{name}'"
        if not value.isascii() and not _is_utf8(value):
            raise ConfigError(f"{invalid}: not UTF-8 text")
        try:
            parsed = directive.parse(value.split() if directive.multi else [value])
        except RangeError as exc:
            raise ConfigError(f"{invalid}: {exc}") from None
        except ValueError:
            raise ConfigError(invalid) from None
        if name in PATH_DIRECTIVES and "\x00" in value:
            raise ConfigError(f"{invalid}: a path cannot contain a NUL byte")
        if name == "dir" and not os.path.isdir(parsed):
            raise ConfigError(invalid)
        previous = self.values[name]
        previous_limits = dict(self.buffer_limits)
        if directive.kind == "buffer-limits":
            self._set_buffer_limits(parsed)  # the classes named; the others are kept
        elif directive.kind == "save":
            self.values[name] = " ".join(f"{seconds} {changes}" for seconds, changes in parsed)
        else:
            self.values[name] = parsed
        if self.on_change is not None:
            try:
                self.on_change(name)
            except Exception as exc:
                # The node could not apply it (e.g. an event-log directory it can't use):
                # undo, so CONFIG GET keeps telling the running state.
                self.values[name] = previous
                self.buffer_limits = previous_limits
                if isinstance(exc, ConfigError):
                    raise ConfigError(f"{invalid}: {exc}") from None
                # A bug, not the value: the client gets Redis' wording, the log the rest.
                log.exception("CONFIG SET %s failed", name)
                raise ConfigError(
                    f"CONFIG SET failed (possibly related to argument '{name}') - "
                    "the node could not apply it (see the node's log)"
                ) from None
        if name not in self.explicit:
            self.explicit.append(name)

    def output_buffer_limit(self, client_class: str) -> tuple[int, int, int]:
        """client-output-buffer-limit of a class: (hard bytes, soft bytes, soft seconds)."""
        words = self.buffer_limits.get(LIMIT_CLASSES[client_class], [client_class, "0", "0", "0"])
        return parse_memory(words[1]), parse_memory(words[2]), int(words[3])

    def _set_buffer_limits(self, groups: list[list[str]]) -> None:
        for group in groups:
            self.buffer_limits[LIMIT_CLASSES[group[0].lower()]] = group
        self.values["client-output-buffer-limit"] = " ".join(
            f"{client_class.lower()} {parse_memory(hard)} {parse_memory(soft)} {int(seconds)}"
            for client_class, hard, soft, seconds in self.buffer_limits.values()
        )

    def _lines_for(self, name: str) -> list[tuple[str | None, str]]:
        """The config-file lines for a directive's current value: (class key, line)."""
        directive = DIRECTIVES[name]
        value = self.values[name]
        if directive.kind == "buffer-limits":
            return [
                (key, f"{name} {' '.join(quote(word) for word in words)}")
                for key, words in self.buffer_limits.items()
            ]
        if directive.kind == "save":
            words = value.split()
            pairs = [f"{name} {a} {b}" for a, b in zip(words[::2], words[1::2], strict=True)]
            return [(None, line) for line in pairs] or [(None, f'{name} ""')]
        if directive.multi:  # the words given, joined by single spaces
            return [(None, f"{name} {' '.join(quote(word) for word in value.split(' '))}")]
        return [(None, f"{name} {quote(directive.format(value))}")]

    def rewrite(self) -> None:
        """Write current values into the config file, keeping its other lines in place.

        A directive's lines replace its lines in the file in order; a class of
        client-output-buffer-limit replaces the line of the same class. Lines left over
        are dropped; lines the file lacks are appended."""
        if self.file is None:
            raise ConfigError("The server is running without a config file")
        try:
            # Split as load_file does; other lines are written back byte for byte.
            text = (
                self.file.read_bytes().decode(errors="surrogateescape")
                if self.file.exists()
                else ""
            )
        except OSError as exc:
            raise ConfigError(f"Rewriting config file: {exc.strerror}") from None
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the file's last newline
        wanted = {name: self._lines_for(name) for name in self.explicit if name in DIRECTIVES}
        written: set[tuple[str, int]] = set()
        output: list[str] = []
        for line in lines:
            stripped = line.strip(" \t\r\n")
            words: list[bytes] = []
            if not stripped.startswith("#"):
                words = split_args(stripped.encode(errors="surrogateescape")) or []
            name = words[0].decode(errors="replace").lower() if words else ""
            entries = wanted.get(name)
            if entries is None:
                output.append(line)
                continue
            key = None
            if DIRECTIVES[name].kind == "buffer-limits" and len(words) > 1:
                key = LIMIT_CLASSES.get(words[1].decode(errors="replace").lower())
            for index, (entry_key, new_line) in enumerate(entries):
                if (name, index) not in written and entry_key == key:
                    output.append(new_line)
                    written.add((name, index))
                    break
            # else: a line left over (a duplicate, or a save point that is gone): dropped
        missing = [
            new_line
            for name, entries in wanted.items()
            for index, (_, new_line) in enumerate(entries)
            if (name, index) not in written
        ]
        if missing:
            output.append("# Generated by CONFIG REWRITE")
            output.extend(missing)
        tmp = self.file.with_name(self.file.name + ".tmp")
        try:
            tmp.write_bytes(("\n".join(output) + "\n").encode(errors="surrogateescape"))
            os.replace(tmp, self.file)
        except OSError as exc:
            raise ConfigError(f"Rewriting config file: {exc.strerror}") from None


def _is_utf8(text: str) -> bool:
    """False for text holding bytes that were not UTF-8 (decoded with surrogateescape)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


# The largest listen() backlog the socket calls take (a C int), as Redis' INT_MAX bound.
_BACKLOG_MAX = 2**31 - 1


def _unusable(name: str, parsed: Any) -> str | None:
    """Why a value that parsed can still not be used once the node starts, or None: those
    used to pass here and end the node with a traceback after it had bound its ports."""
    if name == "unixsocketperm":  # read as octal digits (`700`), as Redis, up to 0777
        digits = str(parsed)
        if not digits.isdigit() or not set(digits) <= set("01234567"):
            return "not octal"
        if int(digits, 8) > 0o777:
            return "argument must be at most 777"
    if name == "tcp-backlog" and parsed > _BACKLOG_MAX:
        return f"argument must be between 0 and {_BACKLOG_MAX} inclusive"
    return None


# A word written as is: printable ASCII without quotes, backslash or space.
_PLAIN_RE = re.compile(r"[!#-&(-\[\]-~]+")


def escape(value: str) -> str:
    """Redis' sdscatrepr without the quotes, of the UTF-8 form of `value`."""
    return sds_repr(value.encode(errors="surrogateescape"))


def quote(value: str) -> str:
    """A config-file word that `split_args` (load_file) reads back as exactly `value`:
    as is when plain, else double-quoted and escaped, so no newline, vertical tab or
    other separator of lines or words is ever written raw."""
    return value if _PLAIN_RE.fullmatch(value) else f'"{escape(value)}"'


def shown(value: str, limit: int = 128) -> str:
    """A value for an error message or the log: escaped as in `quote`, cut at `limit`."""
    text = escape(value)
    return text if len(text) <= limit else text[:limit] + "..."

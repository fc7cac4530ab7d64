"""Server commands: AUTH, PING, ECHO, QUIT, TIME, INFO, CONFIG, CLUSTER, DEBUG,
SHUTDOWN, COMMAND, BGREWRITEAOF."""

from __future__ import annotations

import hmac
import math
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from conveyor.node import info as info_module
from conveyor.node.auth import auth_failed, protected_action_allowed
from conveyor.node.directives import DIRECTIVES, PATH_DIRECTIVES, ConfigError
from conveyor.node.parsing import SYNTAX, parse_int
from conveyor.protocol.resp import (
    OK,
    PONG,
    Map,
    Status,
    bulk,
    encode,
    error,
    integer,
    verbatim,
)

if TYPE_CHECKING:
    from conveyor.node.commands import Command
    from conveyor.node.context import ClientContext as Connection
    from conveyor.node.context import NodeContext as Server


def auth(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    password = server.config["requirepass"]
    if not password:
        return error("ERR Client sent AUTH, but no password is set")
    if hmac.compare_digest(args[1], password.encode()):
        conn.set_authenticated(True)
        return OK
    conn.set_authenticated(False)
    return auth_failed(server, conn, "ERR invalid password")


def ping(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    if len(args) > 2:
        return error("ERR wrong number of arguments for 'ping' command")
    return bulk(args[1]) if len(args) == 2 else PONG


def echo(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    return bulk(args[1])


def quit(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    # +OK goes out behind the replies of the requests before it in the same read (as
    # Redis does); written and closed at once, it used to leave without them.
    conn.close_after_replies()
    return OK


def time_(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    now_us = time.time_ns() // 1000
    seconds, micros = divmod(now_us, 1_000_000)
    return encode([str(seconds).encode(), str(micros).encode()])


def info(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    if len(args) > 2:
        return error(SYNTAX)
    section = args[1].decode(errors="replace").lower() if len(args) == 2 else "default"
    # A verbatim string in RESP3, as Redis 7 sends INFO; clients strip its `txt:` prefix.
    return verbatim(info_module.render(server, section).encode(), conn.protocol == 3)


# -- CONFIG ---------------------------------------------------------------------------------
def config(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    sub = args[1].lower()
    cfg = server.config
    if sub == b"get":
        if len(args) != 3:
            return error("ERR Wrong number of arguments for CONFIG GET")
        # A map in RESP3 (as Redis 7 sends it, and redis-py 8's config_get expects), the
        # same pairs as a flat array in RESP2.
        pairs = Map(
            (name.encode(), value.encode())
            for name, value in cfg.get(args[2].decode(errors="replace"))
        )
        return encode(pairs, conn.protocol == 3)
    if sub == b"set":
        if len(args) != 4:
            return error("ERR Wrong number of arguments for CONFIG SET")
        name = args[2].decode(errors="replace").lower()
        # Not "replace": a value that is not UTF-8 must be refused (Config.set), not
        # stored with U+FFFD in place of its bytes.
        value = args[3].decode(errors="surrogateescape")
        refused = _protected_config_refusal(server, conn, name, value)
        if refused is not None:
            return error(
                f"ERR CONFIG SET failed (possibly related to argument '{name}') - {refused}"
            )
        try:
            cfg.set(name, value)
        except ConfigError as exc:
            return error(f"ERR {exc}")
        if args[2].lower() == b"requirepass":
            # Like Redis: the connection that set the password stays authenticated.
            conn.set_authenticated(True)
        return OK
    if sub == b"resetstat":
        if len(args) != 2:
            return error("ERR Wrong number of arguments for CONFIG RESETSTAT")
        server.stats.reset()
        for command in server.commands.values():
            command.calls = 0
            command.nanoseconds = 0
        return OK
    if sub == b"rewrite":
        if len(args) != 2:
            return error("ERR Wrong number of arguments for CONFIG REWRITE")
        try:
            cfg.rewrite()
        except ConfigError as exc:
            return error(f"ERR {exc}")
        return OK
    return error("ERR CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE")


def _protected_config_refusal(
    server: Server, conn: Connection, name: str, value: str
) -> str | None:
    """Why CONFIG SET of a path directive is refused for this client, or None.

    Redis 7's protected configs: refused unless `enable-protected-configs` allows the
    client (`local`: loopback and unix socket). Unless it is `yes`, a relative path
    (`event-log`) must also stay inside the data directory: no absolute path, no `..`
    or symbolic link out of it."""
    directive = DIRECTIVES.get(name)
    if directive is None or not directive.settable or name not in PATH_DIRECTIVES:
        return None  # not a protected config: Config.set answers (unsupported, bad value)
    setting = server.config["enable-protected-configs"]
    if not protected_action_allowed(setting, server, conn):
        return "can't set protected config"
    if name == "event-log" and setting != "yes" and not _inside_data_dir(server, value):
        return (
            "the path must stay inside the data directory (a relative path without '..'); "
            "set enable-protected-configs yes in the config file to allow any path"
        )
    return None


def _inside_data_dir(server: Server, value: str) -> bool:
    if value == "" or "\x00" in value:
        return True  # "" turns the log off; a NUL byte is refused by Config.set
    if os.path.isabs(value):
        return False
    data_dir = Path(getattr(server, "data_dir", None) or server.config["dir"]).resolve()
    try:
        target = (data_dir / value).resolve()
    except (OSError, RuntimeError, ValueError):  # e.g. a symbolic link loop
        return False
    return target.is_relative_to(data_dir)


# -- CLUSTER --------------------------------------------------------------------------------
def cluster(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    sub = args[1].lower()
    argc = len(args)
    core = server.core
    driver = server.cluster
    if sub == b"myid" and argc == 2:
        return bulk(driver.membership.name)
    if sub == b"nodes" and argc == 2:
        return bulk(driver.membership.describe().encode())
    if sub == b"info" and argc == 2:
        return bulk(driver.info_text().encode())
    if sub == b"leaving" and argc in (2, 3):
        if argc == 2:
            return b"+yes\r\n" if core.leaving else b"+no\r\n"
        value = args[2].lower()
        if value not in (b"yes", b"no"):
            return error("ERR Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'")
        core.set_leaving(value == b"yes")
        driver.set_leaving(value == b"yes")
        return OK
    if sub == b"saveconfig" and argc == 2:
        driver.save_config()
        return OK
    if sub == b"meet" and argc == 4:
        return _cluster_meet(server, args[2], args[3])
    if sub == b"forget" and argc == 3:
        return _cluster_forget(server, args[2])
    if sub == b"reset" and argc in (2, 3):
        mode = args[2].lower() if argc == 3 else b"soft"
        if mode not in (b"soft", b"hard"):
            return error(SYNTAX)
        server.core.flush_all(server.now)  # blocked clients get a null reply via the wakeups
        if mode == b"hard":
            server.reset_node_id()  # forgets the other nodes too
        else:
            driver.reset(None)
        return OK
    return error("ERR Wrong CLUSTER subcommand or number of arguments")


def _cluster_meet(server: Server, ip: bytes, port_text: bytes) -> bytes:
    port = parse_int(port_text)
    if port is None:
        return error(f"ERR Invalid TCP port specified: {port_text.decode(errors='replace')}")
    problem = server.cluster.meet(ip.decode(errors="replace"), port)
    return OK if problem is None else error(f"ERR {problem}")


def _cluster_forget(server: Server, name: bytes) -> bytes:
    membership = server.cluster.membership
    if len(name) != 40:
        return error("ERR Invalid node identifier")
    if name == membership.name:
        return error("ERR I tried hard but I can't forget myself...")
    if name not in membership.nodes:
        return error(f"ERR Unknown node {name.decode(errors='replace')}")
    server.cluster.forget(name)
    return OK


# -- DEBUG ----------------------------------------------------------------------------------
DEBUG_NOT_ALLOWED = (
    'ERR DEBUG command not allowed. If the enable-debug-command option is set to "local", '
    "you can run it from a local connection, otherwise you need to set this option in the "
    "configuration file, and then restart the server."
)
# The longest DEBUG SLEEP: it blocks the whole node on purpose, but not for ever.
DEBUG_SLEEP_MAX_S = 60
_DECIMAL_RE = re.compile(rb"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


def debug(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    if not protected_action_allowed(server.config["enable-debug-command"], server, conn):
        return error(DEBUG_NOT_ALLOWED)
    sub = args[1].lower()
    argc = len(args)
    if sub == b"flushall" and argc == 2:
        server.core.flush_all(server.now)  # blocked clients get a null reply via the wakeups
        return OK
    if sub == b"sleep" and argc == 3:
        # A plain decimal only: no nan, inf, hex or underscores; 1e400 overflows to inf.
        seconds = float(args[2]) if _DECIMAL_RE.fullmatch(args[2]) else math.nan
        if not math.isfinite(seconds):
            return error("ERR value is not a valid float")
        if not 0 <= seconds <= DEBUG_SLEEP_MAX_S:
            return error(f"ERR DEBUG SLEEP seconds must be between 0 and {DEBUG_SLEEP_MAX_S}")
        # Blocks the whole node on purpose: that is what tests use it for.
        time.sleep(seconds)
        return OK
    if sub == b"error" and argc == 3:
        return error(args[2].decode(errors="replace"))
    if sub == b"structsize" and argc == 2:
        from conveyor.core.state import JOB_OVERHEAD_BYTES, QUEUE_OVERHEAD_BYTES

        return bulk(f"job:{JOB_OVERHEAD_BYTES} queue:{QUEUE_OVERHEAD_BYTES}\r\n".encode())
    if sub == b"jobs" and argc == 2:
        # [registered jobs, registered queues]: lets tests check nothing leaked.
        return encode([len(server.core.jobs), len(server.core.queues)])
    if sub == b"resources" and argc == 2:
        # What leak tests count: [entries in every queue's waiter list, blocked clients,
        # timer call entries (cancelled ones included), queues, jobs, job entries in the
        # timer buckets (stale ones included), scan snapshots kept].
        core = server.core
        return encode(
            [
                sum(len(queue.waiters) for queue in core.queues.values()),
                core.blocked_clients,
                core.timers.call_entries(),
                len(core.queues),
                len(core.jobs),
                core.timers.job_entries(),
                core.scan_snapshots(),
            ]
        )
    return error(
        "ERR Unknown DEBUG subcommand or wrong number of arguments for "
        f"'{args[1].decode(errors='replace')}'"
    )


# -- SHUTDOWN, COMMAND ----------------------------------------------------------------
def shutdown(server: Server, conn: Connection, args: list[bytes]) -> bytes | None:
    if len(args) > 2:
        return error(SYNTAX)
    if len(args) == 2:
        if args[1].lower() != b"rewrite-aof":
            return error(SYNTAX)
        # Not while loading: it would write a file from half the jobs (Disque too).
        if not server.aof.loading and server.aof.rewrite_for_shutdown() is not None:
            return error("ERR Errors trying to SHUTDOWN. Check logs.")
    server.request_shutdown()
    return None


def command(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    # Each command once, under the name it answers to (rename-command's new name; the
    # table holds each under a lower- and an upper-case spelling).
    commands = {name: cmd for name, cmd in server.commands.items() if name == name.lower()}
    resp3 = conn.protocol == 3
    if len(args) == 1:
        return encode([_command_info(name, cmd) for name, cmd in commands.items()])
    sub = args[1].lower()
    if sub == b"count" and len(args) == 2:
        return integer(len(commands))
    if sub == b"info":
        return encode(
            [
                _command_info(name.lower(), commands[name.lower()])
                if name.lower() in commands
                else None
                for name in args[2:]
            ],
            resp3,  # unknown names: `_` in RESP3
        )
    if sub == b"docs":
        return b"%0\r\n" if resp3 else b"*0\r\n"  # a map in Redis 7
    if sub == b"list" and len(args) == 2:
        return encode(list(commands))
    return error("ERR Unknown subcommand or wrong number of arguments for 'COMMAND'")


_FLAG_NAMES = {
    "w": b"write",
    "r": b"readonly",
    "m": b"denyoom",
    "a": b"admin",
    "l": b"loading",
    "F": b"fast",
}


def _command_info(name: bytes, cmd: Command) -> list[object]:
    flags = [_FLAG_NAMES[flag] for flag in cmd.flags if flag in _FLAG_NAMES]
    # The 7th element (ACL categories, none here) is Redis 6's; redis-py 8's RESP3 parser
    # of COMMAND reads it.
    return [name, cmd.arity, [Status(flag) for flag in flags], 0, 0, 0, []]


def bgrewriteaof(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    return server.aof.bgrewrite()

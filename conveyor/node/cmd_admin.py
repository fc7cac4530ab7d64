"""Server commands: AUTH, PING, ECHO, QUIT, TIME, INFO, CONFIG, CLUSTER, DEBUG,
SHUTDOWN, COMMAND, BGREWRITEAOF."""

from __future__ import annotations

import hmac
import time
from typing import TYPE_CHECKING

from conveyor.node import info as info_module
from conveyor.node.config import ConfigError
from conveyor.node.parsing import SYNTAX
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
    from conveyor.node.context import ClientContext as Connection
    from conveyor.node.context import NodeContext as Server


def auth(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    password = server.config["requirepass"]
    if not password:
        return error("ERR Client sent AUTH, but no password is set")
    if hmac.compare_digest(args[1], password.encode()):
        conn.authenticated = True
        return OK
    conn.authenticated = False
    return error("ERR invalid password")


def ping(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    if len(args) > 2:
        return error("ERR wrong number of arguments for 'ping' command")
    return bulk(args[1]) if len(args) == 2 else PONG


def echo(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    return bulk(args[1])


def quit(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    conn.write(OK)
    conn.close()
    return b""


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
        try:
            cfg.set(args[2].decode(errors="replace"), args[3].decode(errors="replace"))
        except ConfigError as exc:
            return error(f"ERR {exc}")
        if args[2].lower() == b"requirepass":
            # Like Redis: the connection that set the password stays authenticated.
            conn.authenticated = True
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


# -- CLUSTER --------------------------------------------------------------------------------
def cluster(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    sub = args[1].lower()
    argc = len(args)
    core = server.core
    node_id = server.node_id.encode()
    if sub == b"myid" and argc == 2:
        return bulk(node_id)
    if sub == b"nodes" and argc == 2:
        flags = "myself,leaving" if core.leaving else "myself"
        line = f"{server.node_id} :{server.config['port']} {flags} 0 0 connected\n"
        return bulk(line.encode())
    if sub == b"info" and argc == 2:
        text = (
            "cluster_state:ok\r\n"
            "cluster_known_nodes:1\r\n"
            "cluster_reachable_nodes:0\r\n"
            "cluster_size:1\r\n"
            "cluster_stats_messages_sent:0\r\n"
            "cluster_stats_messages_received:0\r\n"
        )
        return bulk(text.encode())
    if sub == b"leaving" and argc in (2, 3):
        if argc == 2:
            return b"+yes\r\n" if core.leaving else b"+no\r\n"
        value = args[2].lower()
        if value not in (b"yes", b"no"):
            return error("ERR Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'")
        core.set_leaving(value == b"yes")
        return OK
    if sub == b"saveconfig" and argc == 2:
        return OK
    if sub == b"meet" and argc == 4:
        return error("ERR CLUSTER MEET is not available yet: this node runs as a cluster of one")
    if sub == b"forget" and argc == 3:
        if args[2] == node_id:
            return error("ERR I tried hard but I can't forget myself...")
        return error(f"ERR Unknown node {args[2].decode(errors='replace')}")
    if sub == b"reset" and argc in (2, 3):
        mode = args[2].lower() if argc == 3 else b"soft"
        if mode not in (b"soft", b"hard"):
            return error(SYNTAX)
        server.core.flush_all(server.now)  # blocked clients get a null reply via the wakeups
        if mode == b"hard":
            server.reset_node_id()
        return OK
    return error("ERR Wrong CLUSTER subcommand or number of arguments")


# -- DEBUG ----------------------------------------------------------------------------------
def debug(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    sub = args[1].lower()
    argc = len(args)
    if sub == b"flushall" and argc == 2:
        server.core.flush_all(server.now)  # blocked clients get a null reply via the wakeups
        return OK
    if sub == b"sleep" and argc == 3:
        try:
            seconds = float(args[2])
        except ValueError:
            return error("ERR value is not a valid float")
        # Blocks the whole node on purpose: that is what tests use it for.
        time.sleep(max(seconds, 0.0))
        return OK
    if sub == b"error" and argc == 3:
        return error(args[2].decode(errors="replace"))
    if sub == b"structsize" and argc == 2:
        from conveyor.core.state import JOB_OVERHEAD_BYTES, QUEUE_OVERHEAD_BYTES

        return bulk(f"job:{JOB_OVERHEAD_BYTES} queue:{QUEUE_OVERHEAD_BYTES}\r\n".encode())
    if sub == b"jobs" and argc == 2:
        # [registered jobs, registered queues]: lets tests check nothing leaked.
        return encode([len(server.core.jobs), len(server.core.queues)])
    return error(
        "ERR Unknown DEBUG subcommand or wrong number of arguments for "
        f"'{args[1].decode(errors='replace')}'"
    )


# -- SHUTDOWN, COMMAND ----------------------------------------------------------------
def shutdown(server: Server, conn: Connection, args: list[bytes]) -> bytes | None:
    if len(args) > 2:
        return error(SYNTAX)
    if len(args) == 2:
        if args[1].lower() == b"rewrite-aof":
            return error("ERR SHUTDOWN REWRITE-AOF needs AOF persistence, not available yet")
        return error(SYNTAX)
    server.request_shutdown()
    return None


def command(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    # Unique commands (the table holds each under two spellings).
    commands = {cmd.name: cmd for cmd in server.commands.values()}
    resp3 = conn.protocol == 3
    if len(args) == 1:
        return encode([_command_info(cmd) for cmd in commands.values()])
    sub = args[1].lower()
    if sub == b"count" and len(args) == 2:
        return integer(len(commands))
    if sub == b"info":
        return encode(
            [
                _command_info(commands[name.lower()]) if name.lower() in commands else None
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


def _command_info(cmd: object) -> list[object]:
    flags = [_FLAG_NAMES[flag] for flag in cmd.flags if flag in _FLAG_NAMES]  # type: ignore[attr-defined]
    # The 7th element (ACL categories, none here) is Redis 6's; redis-py 8's RESP3 parser
    # of COMMAND reads it.
    return [cmd.name, cmd.arity, [Status(flag) for flag in flags], 0, 0, 0, []]  # type: ignore[attr-defined]


def bgrewriteaof(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    return error("ERR AOF persistence is not available yet")

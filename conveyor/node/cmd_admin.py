"""Server commands: AUTH, PING, ECHO, QUIT, TIME, INFO, HELLO, CONFIG, CLUSTER, DEBUG,
SHUTDOWN, COMMAND, CLIENT, BGREWRITEAOF."""

from __future__ import annotations

import hmac
import time
from typing import TYPE_CHECKING

from conveyor.node import info as info_module
from conveyor.node.config import ConfigError
from conveyor.node.parsing import SYNTAX
from conveyor.protocol.resp import (
    NULL_BULK_BYTES,
    OK,
    PONG,
    Status,
    bulk,
    encode,
    error,
    integer,
)

if TYPE_CHECKING:
    from conveyor.node.server import Connection, Server


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
    return bulk(info_module.render(server, section).encode())


def hello(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    # [version, my id, [id, ip, port, priority] per known node]; port and priority are
    # bulk strings in Disque, and clients parse them as such.
    port = str(server.config["port"]).encode()
    return encode([1, server.node_id.encode(), [server.node_id.encode(), b"", port, b"1"]])


# -- CONFIG ---------------------------------------------------------------------------------
def config(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    sub = args[1].lower()
    cfg = server.config
    if sub == b"get":
        if len(args) != 3:
            return error("ERR Wrong number of arguments for CONFIG GET")
        pairs: list[object] = []
        for name, value in cfg.get(args[2].decode(errors="replace")):
            pairs.extend((name.encode(), value.encode()))
        return encode(pairs)
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
    engine = server.engine
    node_id = server.node_id.encode()
    if sub == b"myid" and argc == 2:
        return bulk(node_id)
    if sub == b"nodes" and argc == 2:
        flags = "myself,leaving" if engine.leaving else "myself"
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
            return b"+yes\r\n" if engine.leaving else b"+no\r\n"
        value = args[2].lower()
        if value not in (b"yes", b"no"):
            return error("ERR Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'")
        engine.leaving = value == b"yes"
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
        server.engine.flush_all(server.now)  # blocked clients get a null reply via the wakeups
        if mode == b"hard":
            server.reset_node_id()
        return OK
    return error("ERR Wrong CLUSTER subcommand or number of arguments")


# -- DEBUG ----------------------------------------------------------------------------------
def debug(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    sub = args[1].lower()
    argc = len(args)
    if sub == b"flushall" and argc == 2:
        server.engine.flush_all(server.now)  # blocked clients get a null reply via the wakeups
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
        from conveyor.core.engine import JOB_OVERHEAD_BYTES, QUEUE_OVERHEAD_BYTES

        return bulk(
            f"job:{JOB_OVERHEAD_BYTES} queue:{QUEUE_OVERHEAD_BYTES}\r\n".encode()
        )
    if sub == b"jobs" and argc == 2:
        # [registered jobs, registered queues]: lets tests check nothing leaked.
        return encode([len(server.engine.jobs), len(server.engine.queues)])
    return error(
        "ERR Unknown DEBUG subcommand or wrong number of arguments for "
        f"'{args[1].decode(errors='replace')}'"
    )


# -- SHUTDOWN, COMMAND, CLIENT ----------------------------------------------------------------
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
            ]
        )
    if sub == b"docs":
        return b"*0\r\n"
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
    return [cmd.name, cmd.arity, [Status(flag) for flag in flags], 0, 0, 0]  # type: ignore[attr-defined]


def client(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    sub = args[1].lower()
    if sub == b"setname" and len(args) == 3:
        if any(ch <= 32 or ch >= 127 for ch in args[2]):
            return error("ERR Client names cannot contain spaces, newlines or special characters.")
        conn.name = args[2]
        return OK
    if sub == b"getname" and len(args) == 2:
        return bulk(conn.name) if conn.name else NULL_BULK_BYTES
    if sub == b"id" and len(args) == 2:
        return integer(conn.id)
    if sub == b"list" and len(args) == 2:
        now = server.now
        lines = [
            f"id={other.id} addr={other.addr} name={other.name.decode(errors='replace')} "
            f"age={(now - other.created_ms) // 1000} "
            f"flags={'b' if other.waiter is not None else 'N'}\n"
            for other in server.clients.values()
        ]
        return bulk("".join(lines).encode())
    if sub == b"kill" and len(args) == 3:
        target = args[2].decode(errors="replace")
        for other in list(server.clients.values()):
            if other.addr == target:
                other.close()
                return OK
        return error("ERR No such client")
    if sub == b"setinfo":
        # redis-py sends CLIENT SETINFO on connect; accepting it keeps its logs quiet.
        return OK
    return error(
        "ERR Unknown subcommand or wrong number of arguments for "
        f"'{args[1].decode(errors='replace')}'"
    )


def bgrewriteaof(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    return error("ERR AOF persistence is not available yet")


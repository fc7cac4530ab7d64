"""Client-connection commands: HELLO (Disque's node list, or Redis 6's handshake) and
CLIENT.

`HELLO` with no argument is Disque's: the node list, which Disque clients use to discover
the cluster. `HELLO protover [AUTH user pass] [SETNAME name]` is Redis 6/7's handshake,
which redis-py 8, ioredis 6 and node-redis 6 send on every new connection; it may switch
the connection to RESP3. CLIENT follows Redis 7.2+: same replies, same error texts.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from conveyor import __version__
from conveyor.node.auth import DEFAULT_USER, auth_failed, password_ok
from conveyor.node.parsing import SYNTAX, parse_int
from conveyor.protocol.resp import (
    OK,
    Map,
    Status,
    bulk,
    encode,
    error,
    integer,
    null_bulk,
    verbatim,
)

if TYPE_CHECKING:
    from conveyor.node.context import ClientContext as Connection
    from conveyor.node.context import NodeContext as Server

NOAUTH = "NOAUTH Authentication required."
HELLO_NOAUTH = (
    "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
    "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
    "select the RESP protocol version at the same time"
)
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."
NOPROTO = "NOPROTO unsupported protocol version"
BAD_NAME = "ERR Client names cannot contain spaces, newlines or special characters."


def _printable(value: bytes) -> bool:
    """Redis' validateClientAttr: '!'..'~' only, so CLIENT LIST splits on spaces."""
    return all(33 <= ch <= 126 for ch in value)


# -- HELLO ----------------------------------------------------------------------------------
def hello(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    if len(args) == 1:
        return _disque_hello(server, conn)
    protover = parse_int(args[1])
    if protover is None:
        return error("ERR Protocol version is not an integer or out of range")
    if protover not in (2, 3):
        return error(NOPROTO)
    credentials: tuple[bytes, bytes] | None = None
    name: bytes | None = None
    index = 2
    while index < len(args):
        option = args[index].lower()
        more = len(args) - 1 - index
        if option == b"auth" and more >= 2:
            credentials = (args[index + 1], args[index + 2])
            index += 3
        elif option == b"setname" and more >= 1:
            name = args[index + 1]
            if not _printable(name):
                return error(BAD_NAME)
            index += 2
        else:
            option_text = args[index].decode(errors="replace")
            return error(f"ERR Syntax error in HELLO option '{option_text}'")
    if credentials is not None:
        if not password_ok(server, *credentials):
            # A failed AUTH leaves the connection as it was; it counts as a failure.
            return auth_failed(server, conn, WRONGPASS)
        conn.set_authenticated(True)
    if not conn.authenticated and server.config["requirepass"]:
        return error(HELLO_NOAUTH)
    if name is not None:
        conn.name = name  # empty: no name, as in Redis
    conn.protocol = protover
    reply = Map(
        {
            b"server": b"conveyor",
            b"version": __version__.encode(),
            b"proto": protover,
            b"id": conn.id,
            b"mode": b"standalone",
            b"role": b"master",
            b"modules": [],
        }
    )
    return encode(reply, protover == 3)


def _disque_hello(server: Server, conn: Connection) -> bytes:
    # Before AUTH, Disque's HELLO gets the NOAUTH every command gets (only the Redis form
    # may authenticate): the node list is not given away.
    if not conn.authenticated and server.config["requirepass"]:
        return error(NOAUTH)
    # [version, my id, [id, ip, port, priority] per known node]; port and priority are
    # bulk strings in Disque, and clients parse them as such.
    membership = server.cluster.membership
    entries: list[object] = [1, membership.name]
    for node in membership.nodes.values():
        priority = str(node.hello_priority()).encode()
        entries.append([node.name, node.ip.encode(), str(node.port).encode(), priority])
    return encode(entries)


# -- CLIENT ---------------------------------------------------------------------------------
# Redis 7 checks each subcommand's arity separately ('client|setname').
_ARITY = {
    b"help": 2,
    b"id": 2,
    b"info": 2,
    b"list": -2,
    b"kill": -3,
    b"setname": 3,
    b"getname": 2,
    b"setinfo": 4,
}

_HELP = [
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are:",
    "    * ADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made from the specified address",
    "    * LADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made to specified local address",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Kill connections by type.",
    "    * USER <username>",
    "      Kill connections authenticated by <username>.",
    "    * SKIPME (YES|NO)",
    "      Skip killing current connection (default: yes).",
    "    * ID <client-id>",
    "      Kill connections by client id.",
    "    * MAXAGE <maxage>",
    "      Kill connections older than the specified age.",
    "LIST [options ...]",
    "    Return information about client connections. Options:",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Return clients of specified type.",
    "    * ID <client-id> [<client-id> ...]",
    "      Return clients with the given IDs.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "SETINFO <option> <value>",
    "    Set client meta attr. Options are:",
    "    * LIB-NAME: the client lib name.",
    "    * LIB-VER: the client lib version.",
    "HELP",
    "    Print this help.",
]

# Redis' client types; every Conveyor client is a normal one.
_TYPES = {b"normal": True, b"master": False, b"slave": False, b"replica": False, b"pubsub": False}


def client(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    sub = args[1].lower()
    arity = _ARITY.get(sub)
    if arity is None:
        shown = args[1][:128].decode(errors="replace")
        return error(f"ERR unknown subcommand '{shown}'. Try CLIENT HELP.")
    if (arity > 0 and len(args) != arity) or len(args) < -arity:
        return error(f"ERR wrong number of arguments for 'client|{sub.decode()}' command")
    if sub == b"setname":
        if not _printable(args[2]):
            return error(BAD_NAME)
        conn.name = args[2]  # empty: no name
        return OK
    if sub == b"getname":
        return bulk(conn.name) if conn.name else null_bulk(conn.protocol == 3)
    if sub == b"id":
        return integer(conn.id)
    if sub == b"info":
        return verbatim((client_line(server, conn) + "\n").encode(), conn.protocol == 3)
    if sub == b"list":
        return _list(server, conn, args)
    if sub == b"kill":
        return _kill(server, conn, args)
    if sub == b"setinfo":
        return _setinfo(conn, args)
    return encode([Status(line.encode()) for line in _HELP])  # HELP


def _setinfo(conn: Connection, args: list[bytes]) -> bytes:
    attribute = args[2].lower()
    if attribute not in (b"lib-name", b"lib-ver"):
        return error(f"ERR Unrecognized option '{args[2].decode(errors='replace')}'")
    value = args[3]
    if not _printable(value):
        shown = args[2].decode(errors="replace")
        return error(f"ERR {shown} cannot contain spaces, newlines or special characters.")
    if attribute == b"lib-name":
        conn.lib_name = value
    else:
        conn.lib_ver = value
    return OK


def _list(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    argc = len(args)
    if argc == 2:
        clients = list(server.clients.values())
    elif argc == 4 and args[2].lower() == b"type":
        kind = args[3].lower()
        if kind not in _TYPES:
            return error(f"ERR Unknown client type '{args[3].decode(errors='replace')}'")
        clients = list(server.clients.values()) if _TYPES[kind] else []
    elif argc > 3 and args[2].lower() == b"id":
        clients = []
        for raw in args[3:]:
            client_id = parse_int(raw)
            if client_id is None:
                return error("ERR Invalid client ID")
            found = server.clients.get(client_id)
            if found is not None:
                clients.append(found)
    else:
        return error(SYNTAX)
    text = "".join(client_line(server, other) + "\n" for other in clients)
    return verbatim(text.encode(), conn.protocol == 3)


def _kill(server: Server, conn: Connection, args: list[bytes]) -> bytes:
    argc = len(args)
    if argc == 3:
        # The old form, CLIENT KILL ip:port: +OK or an error, and it may kill the caller.
        addr: str | None = args[2].decode(errors="replace")
        laddr = None
        client_id = max_age = 0
        type_ok = True
        skip_me = False
    else:
        addr = laddr = None
        client_id = max_age = 0
        type_ok = True  # TYPE normal (or none): every Conveyor client
        skip_me = True
        index = 2
        while index < argc:
            if index + 1 >= argc:
                return error(SYNTAX)
            option = args[index].lower()
            value = args[index + 1]
            if option == b"id":
                parsed = parse_int(value)
                if parsed is None or parsed < 1:
                    return error("ERR client-id should be greater than 0")
                client_id = parsed
            elif option == b"maxage":
                parsed = parse_int(value)
                if parsed is None:
                    return error("ERR maxage is not an integer or out of range")
                if parsed <= 0:
                    return error("ERR maxage should be greater than 0")
                max_age = parsed
            elif option == b"type":
                kind = value.lower()
                if kind not in _TYPES:
                    return error(f"ERR Unknown client type '{value.decode(errors='replace')}'")
                type_ok = _TYPES[kind]
            elif option == b"addr":
                addr = value.decode(errors="replace")
            elif option == b"laddr":
                laddr = value.decode(errors="replace")
            elif option == b"user":  # every client is the default user's
                if value != DEFAULT_USER:
                    return error(f"ERR No such user '{value.decode(errors='replace')}'")
            elif option == b"skipme":
                answer = value.lower()
                if answer not in (b"yes", b"no"):
                    return error(SYNTAX)
                skip_me = answer == b"yes"
            else:
                return error(SYNTAX)
            index += 2
    now = server.now
    killed = 0
    kill_me = False
    for other in list(server.clients.values()) if type_ok else []:
        if addr is not None and other.addr != addr:
            continue
        if laddr is not None and other.laddr != laddr:
            continue
        if client_id and other.id != client_id:
            continue
        if other is conn and skip_me:
            continue
        if max_age and (now - other.created_ms) // 1000 < max_age:
            continue
        if other is conn:
            kill_me = True
        else:
            other.close()
        killed += 1
    if kill_me:
        # Closed once this reply is written, as Redis' CLIENT_CLOSE_AFTER_REPLY.
        try:
            asyncio.get_running_loop().call_soon(conn.close)
        except RuntimeError:  # no event loop (a handler driven directly)
            conn.close()
    if argc == 3:
        return OK if killed else error("ERR No such client")
    return integer(killed)


def client_line(server: Server, other: Connection) -> str:
    """One CLIENT LIST / CLIENT INFO line, in Redis 7's field order.

    Fields Conveyor has no counterpart for (buffer sizes, memory, last command) are left
    out; those it has (no pub/sub, no MULTI, the default user) are as Redis prints them.
    """
    now = server.now
    flags = ""
    if other.waiter is not None:
        flags += "b"
    unixsocket = server.config["unixsocket"]
    if unixsocket and other.addr == f"{unixsocket}:0":
        flags += "U"
    return (
        f"id={other.id} addr={other.addr} laddr={other.laddr} fd={_fd(other)} "
        f"name={other.name.decode(errors='replace')} "
        f"age={(now - other.created_ms) // 1000} idle={max(now - other.last_io_ms, 0) // 1000} "
        f"flags={flags or 'N'} db=0 sub=0 psub=0 ssub=0 multi=-1 watch=0 "
        f"user=default redir=-1 resp={other.protocol} "
        f"lib-name={other.lib_name.decode(errors='replace')} "
        f"lib-ver={other.lib_ver.decode(errors='replace')}"
    )


def _fd(other: Connection) -> int:
    """The connection's file descriptor, -1 when there is no socket behind it.

    Not part of ClientContext: asked of the transport when there is one.
    """
    transport = getattr(other, "transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    try:
        return sock.fileno() if sock is not None else -1
    except OSError:
        return -1

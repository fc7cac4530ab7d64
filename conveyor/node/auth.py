"""Authentication and the guards of protected actions: the one user (`default`, whose
password is `requirepass`), the failed attempts a connection may make, and which clients
may run DEBUG or change protected settings (docs/security.md).

Shared by AUTH (cmd_admin), HELLO (cmd_client) and the commands these guards protect.
Who may connect at all (protected mode) is node/access.py's.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
from typing import TYPE_CHECKING

from conveyor.protocol.resp import error

if TYPE_CHECKING:
    from conveyor.node.context import ClientContext as Connection
    from conveyor.node.context import NodeContext as Server

# The only user there is: Redis' `default`, whose password is `requirepass` (no password
# at all when it is empty: Redis' `nopass` default user then accepts any).
DEFAULT_USER = b"default"


# -- guards (docs/security.md) ---------------------------------------------------------------
def is_local_client(server: Server, conn: Connection) -> bool:
    """A client on a loopback address (127.0.0.0/8, ::1, ::ffff:127.x) or on the unix
    socket: what `enable-debug-command local` and `enable-protected-configs local` allow.

    `conn.addr` is `host:port`, or the unix socket's path and `:0` (as CLIENT LIST shows
    it). Anything else, an empty address included, is not local."""
    addr = getattr(conn, "addr", "")
    unixsocket = server.config["unixsocket"]
    if unixsocket and addr == f"{unixsocket}:0":
        return True
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        return False
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def protected_action_allowed(setting: str, server: Server, conn: Connection) -> bool:
    """Redis 7's allowProtectedAction: `yes` always, `local` for local clients, `no` never."""
    return setting == "yes" or (setting == "local" and is_local_client(server, conn))


# Failed AUTH (and HELLO ... AUTH) attempts one connection may make: the one that reaches
# it is answered with TOO_MANY_AUTH_FAILURES and the connection is closed, along with
# anything pipelined behind it. A guesser pays a new TCP connection per 10 guesses and
# the event loop never waits; INFO `acl_access_denied_auth` counts every failure.
AUTH_MAX_FAILURES = 10
TOO_MANY_AUTH_FAILURES = (
    "ERR too many failed authentication attempts on this connection, closing it"
)


def auth_failed(server: Server, conn: Connection, message: str) -> bytes:
    """Count one failed authentication of `conn`; the reply to send (`message`, or the
    cut-off once the connection reaches AUTH_MAX_FAILURES)."""
    server.stats.acl_access_denied_auth += 1
    conn.auth_failures += 1
    if conn.auth_failures >= AUTH_MAX_FAILURES:
        _close_after_reply(conn)
        return error(TOO_MANY_AUTH_FAILURES)
    return error(message)


def _close_after_reply(conn: Connection) -> None:
    """Close once the replies of this read are written; run nothing pipelined behind.

    `closed` stops the connection's request loop at once (it breaks when the flag is
    set) while its transport stays open for the replies; the close itself follows on the
    next turn of the event loop, as Redis' CLIENT_CLOSE_AFTER_REPLY."""
    conn.closed = True
    try:
        asyncio.get_running_loop().call_soon(conn.close)
    except RuntimeError:  # no event loop (a handler driven directly)
        conn.close()


def password_ok(server: Server, user: bytes, password: bytes) -> bool:
    if user != DEFAULT_USER:
        return False
    required = server.config["requirepass"]
    if not required:
        return True  # the default user has no password: any is accepted, as in Redis
    return hmac.compare_digest(password, required.encode())

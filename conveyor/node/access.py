"""Who may connect to the client port: protected mode, as Redis.

With `protected-mode yes` (the default), no `requirepass` and a `bind` address that is
not a loopback address, only clients from exactly 127.0.0.1 or ::1 (Redis' rule) or the
Unix socket are served; others get PROTECTED_MODE_DENIED and are disconnected
(server.client_connected, beside `maxclients`).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Mapping
from typing import Any

PROTECTED_MODE_DENIED = (
    "DENIED Conveyor is running in protected mode because protected mode is enabled, no "
    "password is set and it listens beyond the loopback interface. In this mode "
    "connections are only accepted from the loopback interface. To accept others, set "
    "a password (CONFIG SET requirepass ...), bind to loopback addresses only, or turn "
    "protected mode off (CONFIG SET protected-mode no) from the loopback interface."
)


def protected(config: Mapping[str, Any]) -> bool:
    """Protected mode bites: on, no password, and listening beyond loopback."""
    return bool(
        config["protected-mode"]
        and not config["requirepass"]
        and any(not _is_loopback_bind(address) for address in config["bind"].split())
    )


def _is_loopback_bind(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.lstrip("-")).is_loopback
    except ValueError:
        return address == "localhost"


def is_local_client(transport: asyncio.BaseTransport | None) -> bool:
    """From exactly 127.0.0.1 or ::1, or through the Unix socket."""
    peer = transport.get_extra_info("peername") if transport is not None else None
    return not isinstance(peer, tuple) or peer[0] in ("127.0.0.1", "::1")

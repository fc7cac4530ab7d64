"""Node addresses (`host:port`, `[::1]:7711`, `(host, port)`) and `disque://` URLs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs, unquote

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7711
URL_SCHEMES = ("disque", "conveyor", "redis")

Address = tuple[str, int]
NodeSpec = str | tuple[str, int]


def parse_address(spec: NodeSpec) -> Address:
    """`host:port`, `host` (port 7711), `[v6]:port`, `:port` or a `(host, port)` tuple."""
    if isinstance(spec, tuple):
        host, port = spec
        return (host or DEFAULT_HOST, _port(port, spec))
    text = spec.strip()
    if not text:
        raise ValueError("empty node address")
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket:
            raise ValueError(f"bad node address {spec!r}")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    elif ":" in text:  # a bare IPv6 address
        host, port = text, ""
    else:
        host, port = text, ""
    return (host or DEFAULT_HOST, _port(port, spec) if port else DEFAULT_PORT)


def _port(value: Any, spec: object) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"bad port in node address {spec!r}") from None
    if not 0 < port < 65536:
        raise ValueError(f"port out of range in node address {spec!r}")
    return port


def format_address(address: Address) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_nodes(nodes: Sequence[NodeSpec] | str | None) -> list[Address]:
    """The constructor's node list; a str may hold several addresses, comma separated."""
    if nodes is None:
        return [(DEFAULT_HOST, DEFAULT_PORT)]
    if isinstance(nodes, str):
        nodes = [part for part in nodes.split(",") if part.strip()]
    addresses: list[Address] = []
    for spec in nodes:
        address = parse_address(spec)
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise ValueError("no node address given")
    return addresses


def parse_url(url: str) -> tuple[list[Address], dict[str, Any]]:
    """`disque://[:password@]host[:port][,host:port...][?socket_timeout=5]`.

    Returns the addresses and the keyword arguments (password, timeouts) for the client.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in URL_SCHEMES:
        raise ValueError(f"not a disque:// URL: {url!r}")
    rest, _, query = rest.partition("?")
    netloc = rest.split("/", 1)[0]
    options: dict[str, Any] = {}
    if "@" in netloc:
        userinfo, _, netloc = netloc.rpartition("@")
        _user, colon, password = userinfo.partition(":")
        if colon and password:
            options["password"] = unquote(password)
        elif not colon and _user:
            # disque://secret@host: a lone userinfo is taken as the password
            options["password"] = unquote(_user)
    for name, values in parse_qs(query).items():
        if name in ("socket_timeout", "socket_connect_timeout"):
            options[name] = float(values[-1])
        elif name == "password":
            options["password"] = values[-1]
        else:
            raise ValueError(f"unknown URL option {name!r}")
    return parse_nodes(netloc or f"{DEFAULT_HOST}:{DEFAULT_PORT}"), options

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
        if len(spec) != 2 or not isinstance(spec[0], str):
            raise TypeError(f"a node address tuple must be (host: str, port: int), not {spec!r}")
        host, port = spec
        return (host or DEFAULT_HOST, _port(port, spec))
    if not isinstance(spec, str):
        raise TypeError(
            f"a node address must be 'host:port' or a (host, port) tuple, not {type(spec).__name__}"
        )
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
    """A port: an int, or decimal digits in a string. int() alone took 7711.9 as 7711,
    True as 1, and " 12", "+12" or "1_2" as 12."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        port = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        port = value
    else:
        raise ValueError(f"bad port in node address {spec!r}")
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
    elif _is_one_address(nodes):
        raise TypeError(f"nodes must be a list of addresses: [{nodes!r}], not {nodes!r}")
    elif isinstance(nodes, bytes | bytearray) or not isinstance(nodes, Sequence):
        raise TypeError(f"nodes must be a list of addresses or a str, not {type(nodes).__name__}")
    addresses: list[Address] = []
    for spec in nodes:
        address = parse_address(spec)
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise ValueError("no node address given")
    return addresses


def _is_one_address(nodes: object) -> bool:
    """`("10.0.0.1", 7711)` where `[("10.0.0.1", 7711)]` was meant."""
    return (
        isinstance(nodes, tuple)
        and len(nodes) == 2
        and isinstance(nodes[0], str)
        and isinstance(nodes[1], int)
    )


def parse_url(url: str) -> tuple[list[Address], dict[str, Any]]:
    """`disque://[:password@]host[:port][,host:port...][?socket_timeout=5]`.

    Returns the addresses and the keyword arguments (password, timeouts) for the client.
    """
    if not isinstance(url, str):
        raise TypeError(f"a disque:// URL must be a str, not {type(url).__name__}")
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
            options[name] = _seconds(name, values[-1])
        elif name == "password":
            options["password"] = values[-1]
        else:
            raise ValueError(f"unknown URL option {name!r}")
    return parse_nodes(netloc or f"{DEFAULT_HOST}:{DEFAULT_PORT}"), options


def _seconds(name: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{name} in the URL must be a number of seconds, not {value!r}") from None

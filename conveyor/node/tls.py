"""TLS for clients (`tls-port`) and for the cluster bus (`tls-cluster`), on the standard
`ssl` module, with Redis' directive names.

- `tls-port N` opens a second client port where every connection is TLS (the plain
  `port` stays open; `port 0` closes it). The node presents `tls-cert-file` /
  `tls-key-file`; `tls-auth-clients` says whether clients must present a certificate
  signed by `tls-ca-cert-file` (`yes`), may (`optional`), or need not (`no`, the
  default here; Redis' is `yes`).
- `tls-cluster yes` makes every bus link TLS, both ways: each node presents its
  certificate and requires the other's, signed by `tls-ca-cert-file`. Host names are not
  checked (nodes are known by address): the CA is what says who may join.
"""

from __future__ import annotations

import ssl
from typing import Any

from conveyor.node.directives import ConfigError

_CLIENT_AUTH = {"no": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "yes": ssl.CERT_REQUIRED}


class TlsConfigError(ConfigError):
    """TLS directives that parse but cannot be used: the node does not start."""


def _load(context: ssl.SSLContext, config: dict[str, Any]) -> ssl.SSLContext:
    try:
        context.load_cert_chain(config["tls-cert-file"], config["tls-key-file"])
        if config["tls-ca-cert-file"]:
            context.load_verify_locations(config["tls-ca-cert-file"])
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"TLS certificate or key not loaded: {exc}") from None
    return context


def _require_files(config: dict[str, Any], what: str) -> None:
    if not config["tls-cert-file"] or not config["tls-key-file"]:
        raise TlsConfigError(f"{what} needs tls-cert-file and tls-key-file")


def client_server_context(config: dict[str, Any]) -> ssl.SSLContext | None:
    """For the `tls-port` listener; None when it is off."""
    if not config["tls-port"]:
        return None
    _require_files(config, "tls-port")
    context = _load(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), config)
    context.verify_mode = _CLIENT_AUTH[config["tls-auth-clients"]]
    if context.verify_mode != ssl.CERT_NONE and not config["tls-ca-cert-file"]:
        raise TlsConfigError("tls-auth-clients needs tls-ca-cert-file")
    return context


def bus_contexts(config: dict[str, Any]) -> tuple[ssl.SSLContext, ssl.SSLContext] | None:
    """(listening, connecting) contexts for the bus; None unless `tls-cluster yes`."""
    if not config["tls-cluster"]:
        return None
    _require_files(config, "tls-cluster")
    if not config["tls-ca-cert-file"]:
        raise TlsConfigError("tls-cluster needs tls-ca-cert-file (it says who may join)")
    listening = _load(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), config)
    listening.verify_mode = ssl.CERT_REQUIRED
    connecting = _load(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), config)
    connecting.check_hostname = False  # nodes are known by address, not by name
    connecting.verify_mode = ssl.CERT_REQUIRED
    return listening, connecting

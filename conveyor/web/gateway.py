"""The console's only road to the nodes: `conveyor.client` clients, and node errors turned
into HTTP errors (status code + a stable error code + the node's text)."""

from __future__ import annotations

import threading
from typing import Any

from conveyor.client import (
    AuthError,
    BadIdError,
    Client,
    CommandError,
    ConnectionError,
    ConveyorError,
    LeavingError,
    LoadingError,
    MaxLenError,
    MisconfError,
    NoJobError,
    NoReplError,
    OutOfMemoryError,
    PausedError,
    TooLateError,
)


class ApiError(Exception):
    """An error answered as `{"error": {"code", "message"}}` with `status`."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


# Most specific first: the typed client errors derive from each other in places.
_NODE_ERRORS: tuple[tuple[type[ConveyorError], int, str], ...] = (
    (BadIdError, 400, "bad_id"),
    (NoJobError, 404, "no_job"),
    (PausedError, 409, "paused"),
    (MaxLenError, 409, "queue_full"),
    (TooLateError, 409, "too_late"),
    (OutOfMemoryError, 503, "node_out_of_memory"),
    (LoadingError, 503, "node_loading"),
    (MisconfError, 503, "node_misconf"),
    (NoReplError, 503, "no_replication"),
    (LeavingError, 503, "node_leaving"),
    (AuthError, 502, "node_auth"),  # the console's node_password is wrong: not the caller's
    (ConnectionError, 503, "node_unreachable"),
    (CommandError, 400, "node_refused"),
)


def api_error_from(exc: ConveyorError) -> ApiError:
    for cls, status, code in _NODE_ERRORS:
        if isinstance(exc, cls):
            return ApiError(status, code, str(exc))
    return ApiError(502, "node_error", str(exc))


class Gateway:
    """One shared client for queue and job commands (it fails over between the configured
    nodes) and one per node address for per-node figures (INFO, HELLO)."""

    def __init__(self, nodes: list[str], password: str | None, timeout_s: float = 5.0) -> None:
        self._nodes = list(nodes)
        self._password = password
        self._timeout_s = timeout_s
        self.client = self._new_client(self._nodes)
        self._per_node: dict[str, Client] = {}
        self._lock = threading.Lock()
        self._learnt: list[str] = []

    def _new_client(self, nodes: list[str]) -> Client:
        # Short timeouts: a page must not hang on a dead node; the caller shows it as down.
        return Client(nodes, password=self._password, socket_timeout=self._timeout_s)

    def addresses(self) -> list[str]:
        """The configured nodes, then the ones learnt from HELLO, without duplicates."""
        return list(dict.fromkeys([*self._nodes, *self._learnt]))

    def node(self, address: str) -> Client:
        """The client of one node; only nodes configured or learnt from HELLO (a request
        never makes the console connect to an address of its choosing)."""
        if address not in self.addresses():
            raise ApiError(404, "unknown_node", f"no node {address!r} is known to the console")
        with self._lock:
            client = self._per_node.get(address)
            if client is None:
                client = self._per_node[address] = self._new_client([address])
            return client

    def learn(self, addresses: list[str]) -> None:
        """The nodes HELLO shows now. The client of a node no longer among them is closed:
        over months of nodes replaced under new addresses, each would keep its sockets."""
        with self._lock:
            self._learnt = [a for a in addresses if a not in self._nodes][:64]
            known = set(self._nodes) | set(self._learnt)
            gone = [a for a in self._per_node if a not in known]
            stale = [self._per_node.pop(a) for a in gone]
        for client in stale:
            client.close()

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """`client.<method>(...)` with node errors raised as `ApiError`."""
        try:
            return getattr(self.client, method)(*args, **kwargs)
        except ConveyorError as exc:
            raise api_error_from(exc) from None
        except ValueError as exc:  # the client's own argument checks
            raise ApiError(400, "bad_request", str(exc)) from None

    def close(self) -> None:
        self.client.close()
        with self._lock:
            for client in self._per_node.values():
                client.close()
            self._per_node.clear()

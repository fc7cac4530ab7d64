"""`Twin`: `Client` or `AsyncClient` behind one blocking API (the async one on one event
loop of its own), so a scenario is written once and run on both twins."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from conveyor.client import AsyncClient, Client
from tests.servers import NodeProcess


class Twin:
    """One client of either kind, its methods called as blocking ones."""

    def __init__(self, cls: type[Client] | type[AsyncClient], nodes: list[str]) -> None:
        self._runner = asyncio.Runner() if cls is AsyncClient else None
        self.client = cls(nodes, socket_timeout=5)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            if inspect.iscoroutine(result):
                assert self._runner is not None
                return self._runner.run(result)
            return result

        return call

    def close(self) -> None:
        self.__getattr__("close")()
        if self._runner is not None:
            self._runner.close()


def where(node: NodeProcess) -> str:
    return f"127.0.0.1:{node.port}"

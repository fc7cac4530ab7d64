"""A console whose security middleware fails on one path, as a bug in it would: for
`GET /boom` the scope reaches it with no header list (an ASGI scope no server sends), so
reading the headers raises inside the middleware, before any route or error handler.
Test-only: `python -m tests.web.broken_console PORT NODE` (tests/web/test_security.py);
the console's code has no such hook."""

from __future__ import annotations

import logging
import sys

import uvicorn

from conveyor.web.app import create_app
from conveyor.web.config import load_config
from conveyor.web.security import Receive, Scope, Send

BOOM = "/boom"


def main(port: int, node: str) -> None:
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    console = create_app(load_config(None, nodes=node))

    async def sabotaged(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == BOOM:
            scope = {**scope, "headers": None}
        await console(scope, receive, send)

    try:
        uvicorn.run(sabotaged, host="127.0.0.1", port=port, log_level="warning")
    finally:
        console.fastapi.state.console.close()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])

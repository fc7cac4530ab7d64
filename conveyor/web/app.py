"""The ASGI application: routes, error bodies, static files, the relative root, security.

Errors are JSON `{"error": {"code", "message"}}` with a proper status for the API and for
any client asking for JSON; pages get the same text in an HTML page. Nothing answers with
a traceback: an unexpected exception is logged here and answered 500 with a short text.
"""

from __future__ import annotations

import html
import logging
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.routing import Match, Mount, Route

from conveyor import __version__
from conveyor.web import (
    api_attachments,
    api_errors,
    api_jobs,
    api_messages,
    api_ops,
    api_queues,
    events,
    metrics,
    pages,
    pages_ops,
    rq_routes,
)
from conveyor.web.config import WebConfig
from conveyor.web.console import Console
from conveyor.web.gateway import ApiError
from conveyor.web.schemas import ErrorBody
from conveyor.web.security import ASGIApp, SecurityMiddleware
from conveyor.web.views import make_environment

log = logging.getLogger("conveyor.web")
STATIC = Path(__file__).parent / "static"
API_PREFIX = "/api/v1"

# Documented on every API operation, so the schema admits what the API really answers.
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in (
        (400, "bad input"),
        (401, "authentication required"),
        (403, "refused: read-only user, cross-origin or CSRF"),
        (404, "unknown queue, job or message"),
        (409, "refused by the state of things (paused, full, not finished)"),
        (413, "too large"),
        (422, "invalid parameters or body"),
        (500, "internal error"),
        (502, "the node gave an unexpected error"),
        (503, "no node reachable, or the node cannot serve now"),
        (507, "the attachment store is full (max_attachments_total_mb)"),
    )
}


def _wants_html(request: Request) -> bool:
    path = request.url.path[len(request.scope.get("root_path", "")) :]
    if path.startswith((API_PREFIX, "/events", "/metrics")):
        return False
    return "text/html" in request.headers.get("accept", "")


def _error(request: Request, status: int, code: str, message: str) -> Response:
    if _wants_html(request):
        root = html.escape(request.scope.get("root_path", ""))
        body = (
            f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{status}</title>'
            f'<link rel="stylesheet" href="{root}/static/console.css"></head><body><main>'
            f'<h1>{status}</h1><p class="error">{html.escape(message)}</p>'
            f'<p><a href="{root}/">Overview</a></p></main></body></html>'
        )
        return HTMLResponse(body, status_code=status)
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for problem in exc.errors()[:5]:
        where = ".".join(str(p) for p in problem.get("loc", ()) if p != "body")
        parts.append(f"{where}: {problem.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def _allowed_methods(app: FastAPI, request: Request) -> str:
    """Every method the path takes. Starlette names only the first route that matched the
    path, and one path (GET and DELETE /jobs/<id>) is often several routes."""
    methods: set[str] = set()
    for route in app.router.routes:
        match, _ = route.matches(request.scope)
        if match != Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


def _install_handlers(app: FastAPI) -> None:
    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        response = _error(request, exc.status, exc.code, exc.message)
        response.headers.update(exc.headers)
        return response

    async def validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return _error(request, 422, "invalid", _validation_message(exc))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        response = _error(request, exc.status_code, code, str(exc.detail))
        if exc.headers:
            response.headers.update(exc.headers)
        if exc.status_code == 405:
            response.headers["Allow"] = _allowed_methods(app, request)
        return response

    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return _error(request, 500, "internal", "internal error; see the console's log")

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


def create_fastapi(config: WebConfig, the_console: Console | None = None) -> FastAPI:
    app = FastAPI(
        title="Conveyor console API",
        version=__version__,
        description="Queues, jobs and worker messages of Conveyor nodes. Errors are "
        '`{"error": {"code", "message"}}`.',
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=None,  # Swagger UI loads from a CDN: not served
        redoc_url=None,
    )
    app.state.console = the_console or Console.create(config)
    app.state.templates = make_environment()
    _install_handlers(app)
    for module in (api_queues, api_jobs, api_messages, api_attachments, api_errors, api_ops):
        app.include_router(module.router, prefix=API_PREFIX, responses=_ERRORS)
    app.include_router(api_attachments.files)
    # The RQ routes first: `/q/<queue>/<id>.json` must win over the message page.
    for module in (rq_routes, metrics, events, pages_ops, pages):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def create_app(config: WebConfig, the_console: Console | None = None) -> ASGIApp:
    """The whole console: FastAPI under `relative_root`, behind the security middleware."""
    api = create_fastapi(config, the_console)
    inner: ASGIApp = api
    root = config.relative_root
    if root:

        async def to_root(request: Request) -> Response:
            return RedirectResponse(root + "/")

        inner = Starlette(routes=[Route("/", to_root), Mount(root, app=api)])
    app = SecurityMiddleware(inner, config)
    app.fastapi = api  # type: ignore[attr-defined]  # for the CLI's shutdown and tests
    return app

"""The monitor's HTTP side on the ops server: ``/monitor`` (the page), ``/api/v1/`` (JSON).

Security, in the order a request meets it:

* reads: with ``monitor.read_token`` set, a request needs it (or the admin token) as
  ``Authorization: Bearer`` or as an HTTP Basic password (what a browser can send for the
  page itself), else 401;
* writes, answered in the order the issue gives: without ``monitor.admin_token`` there are
  none: 405 (and the page shows no buttons; anything but POST is 405 too); a missing or
  wrong admin token 401; then a cross-site request (``Sec-Fetch-Site`` or ``Origin`` present
  and not this origin) 403, even with the right token. A forged form of another site carries
  no bearer token (the page keeps it in its tab's session storage, no cookie), so it stops at
  401; 403 is what a request gets that holds the token but comes from another site's page.

Tokens are compared in constant time and never echoed. The page's script sends the admin
token as ``Authorization: Bearer`` from the tab's session storage (no cookie).
"""

from __future__ import annotations

import base64
import hmac
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from priority_pubsub.core.errors import DriverError
from priority_pubsub.delivery.cancel import OPERATOR_SETTLES, OperatorSettle
from priority_pubsub.monitor import STATIC
from priority_pubsub.monitor.admin import AdminActions
from priority_pubsub.monitor.dead_letters import ActionUnavailable, DeadLetterFilter
from priority_pubsub.monitor.state import MonitorSources, snapshot
from priority_pubsub.settings.config import MonitorConfig
from priority_pubsub.telemetry.logs import get_logger

log = get_logger("priority_pubsub.monitor")
SNAPSHOT_SHARE = 0.9
"""Pages refreshing within 0.9 of ``monitor.refresh_s`` share one snapshot and one rendered
fragment (five tabs cost one, not five); an action clears it, so its effect shows at once."""
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Monitor:
    def __init__(self, config: MonitorConfig, sources: MonitorSources,
                 actions: AdminActions) -> None:
        self.config = config
        self.sources = sources
        self.actions = actions
        self._read_tokens = ([t.get_secret_value() for t in (config.read_token,
                                                             config.admin_token) if t]
                             if config.read_token else [])
        """Tokens a read may carry; none needed when ``read_token`` is unset."""
        self._admin_token = config.admin_token.get_secret_value() if config.admin_token else None
        self._share_s = config.refresh_s * SNAPSHOT_SHARE
        self._cached: tuple[tuple[DeadLetterFilter, str], float, dict[str, Any]] | None = None
        self._rendered: tuple[dict[str, Any], str] | None = None
        """The live fragment last rendered: (its document, html)."""

    @property
    def writable(self) -> bool:
        return self._admin_token is not None

    def add_routes(self, app: web.Application) -> None:
        read = self._guard_read
        app.router.add_get("/monitor", read(self._page))
        app.router.add_get("/monitor/live", read(self._live))
        app.router.add_get("/monitor/static/monitor.js", read(self._script))
        app.router.add_get("/api/v1/state", read(self._state))
        write = self._guard_write
        app.router.add_route("*", "/api/v1/queues/{queue}/pause", write(self._pause))
        app.router.add_route("*", "/api/v1/queues/{queue}/resume", write(self._resume))
        app.router.add_route("*", "/api/v1/drain", write(self._drain))
        app.router.add_route("*", "/api/v1/drain/end", write(self._end_drain))
        app.router.add_route("*", "/api/v1/dead-letters/requeue", write(self._requeue))
        app.router.add_route("*", "/api/v1/dead-letters/delete", write(self._delete))
        app.router.add_route("*", "/api/v1/in-flight/{id}/cancel", write(self._cancel))
        app.router.add_route("*", "/api/v1/waiting/{id}/promote", write(self._promote))

    # -- security -------------------------------------------------------------------------

    def _guard_read(self, handler: Handler) -> Handler:
        async def guarded(request: web.Request) -> web.StreamResponse:
            if self._read_tokens and not any(_presented(request, t) for t in self._read_tokens):
                return _error(401, "this monitor needs its read token",
                              {"WWW-Authenticate": 'Basic realm="priority-pubsub monitor"'})
            return await handler(request)
        return guarded

    def _guard_write(self, handler: Handler) -> Handler:
        async def guarded(request: web.Request) -> web.StreamResponse:
            if request.method != "POST" or self._admin_token is None:
                why = ("read-only monitor: set monitor.admin_token to enable actions"
                       if self._admin_token is None else "actions take POST")
                return _error(405, why, {"Allow": "POST" if self._admin_token else ""})
            if not _presented(request, self._admin_token, basic=False):
                return _error(401, "missing or wrong admin token",
                              {"WWW-Authenticate": "Bearer"})
            if _cross_site(request):
                return _error(403, "cross-site request refused")
            try:
                return await handler(request)
            except ActionUnavailable as exc:
                return _error(409, str(exc))
            except DriverError as exc:
                return _error(503, f"broker: {exc}")
        return guarded

    # -- reads ----------------------------------------------------------------------------

    async def document(self, request: web.Request) -> dict[str, Any]:
        selected = DeadLetterFilter(reason=request.query.get("reason", ""),
                                    queue=request.query.get("queue", ""),
                                    id=request.query.get("id", ""))
        asked = (selected, request.query.get("waiting", ""))
        cached = self._cached
        if cached is not None and cached[0] == asked and \
                time.monotonic() - cached[1] < self._share_s:
            return cached[2]
        doc = await snapshot(self.sources, *asked)
        self._cached = (asked, time.monotonic(), doc)
        return doc

    async def _state(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(await self.document(request))

    async def _page(self, request: web.Request) -> web.StreamResponse:
        from priority_pubsub.monitor import page  # the page's code loads on first request

        html = page.render_page(await self.document(request), writable=self.writable,
                                refresh_s=self.config.refresh_s)
        return web.Response(text=html, content_type="text/html", headers=_PAGE_HEADERS)

    async def _live(self, request: web.Request) -> web.StreamResponse:
        from priority_pubsub.monitor import page

        doc = await self.document(request)
        rendered = self._rendered
        if rendered is None or rendered[0] is not doc:
            rendered = (doc, page.render_live(doc, writable=self.writable))
            self._rendered = rendered
        html = rendered[1]
        return web.Response(text=html, content_type="text/html", headers=_PAGE_HEADERS)

    async def _script(self, _: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "monitor.js", headers={"Cache-Control": "no-cache"})

    # -- writes ---------------------------------------------------------------------------

    async def _pause(self, request: web.Request) -> web.StreamResponse:
        return self._queue_action(request, self.actions.pause)

    async def _resume(self, request: web.Request) -> web.StreamResponse:
        return self._queue_action(request, self.actions.resume)

    def _queue_action(self, request: web.Request,
                      act: Callable[[str, str], dict[str, Any]]) -> web.StreamResponse:
        queue = request.match_info["queue"]
        if queue not in self.sources.live.index:
            return _error(404, "no such queue")
        return self._done(act(queue, _client(request)))

    async def _drain(self, request: web.Request) -> web.StreamResponse:
        return self._done(self.actions.drain(_client(request)))

    async def _end_drain(self, request: web.Request) -> web.StreamResponse:
        return self._done(self.actions.end_drain(_client(request)))

    async def _requeue(self, request: web.Request) -> web.StreamResponse:
        ids = await self._chosen_ids(request)
        return self._done(await self.actions.requeue(ids, _client(request)))

    async def _delete(self, request: web.Request) -> web.StreamResponse:
        ids = await self._chosen_ids(request)
        return self._done(await self.actions.delete(ids, _client(request)))

    async def _cancel(self, request: web.Request) -> web.StreamResponse:
        """``{"settle": "retry" | "dead_letter" | "drop", "queue": Q}`` (``queue`` needed
        only when the id is at the app from two queues): 404 when it is not at the app."""
        message_id = request.match_info["id"]
        body = await _json_object(request)
        settle = body.get("settle", "retry")
        if settle not in OPERATOR_SETTLES:
            raise web.HTTPBadRequest(text=f"settle: one of {', '.join(OPERATOR_SETTLES)}")
        queues = self.actions.running.queues_of(message_id)
        queue = body.get("queue")
        if queue is None and len(queues) > 1:
            return _error(409, f"at the app from {', '.join(queues)}: name the queue")
        queue = queue if queue is not None else next(iter(queues), None)
        if queue not in queues:
            return _error(404, "not at the app: its delivery ended, or never reached it")
        chosen: OperatorSettle = settle
        record = self.actions.cancel(message_id, str(queue), chosen, _client(request))
        if not record["cancelled"]:
            return _error(404, "not at the app: its delivery ended meanwhile")
        return self._done(record)

    async def _promote(self, request: web.Request) -> web.StreamResponse:
        """``{"queue": Q, "to": T}``: waiting message ``id`` of ``Q`` up to ``T``, a queue
        above it; 409 where the broker cannot address it or a worker took it meanwhile."""
        body = await _json_object(request)
        queue, to_queue = body.get("queue"), body.get("to")
        index = self.sources.live.index
        if not isinstance(queue, str) or not isinstance(to_queue, str) or \
                queue not in index or to_queue not in index:
            return _error(404, "no such queue")
        if index[to_queue] >= index[queue]:
            return _error(400, f"to: a queue above {queue}")
        return self._done(await self.actions.promote(
            queue, request.match_info["id"], to_queue, _client(request)))

    async def _chosen_ids(self, request: web.Request) -> list[str]:
        """``{"ids": [...]}``, or ``{"filter": {reason, queue, id}}`` (``{}``: all)."""
        body = await _json_object(request)
        if "ids" in body:
            ids = body["ids"]
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise web.HTTPBadRequest(text="ids: a list of strings")
            return ids
        wanted = body.get("filter") or {}
        if not isinstance(wanted, dict):
            raise web.HTTPBadRequest(text="filter: an object")
        selected = DeadLetterFilter(**{k: str(wanted.get(k, "")) for k in ("reason", "queue",
                                                                         "id")})
        listing = await self.sources.dead_letters.listing(selected)
        return [letter.id for letter in listing.letters]

    def _done(self, record: dict[str, Any]) -> web.StreamResponse:
        self._cached = self._rendered = None  # the next read shows the action's effect
        return web.json_response(record)


_PAGE_HEADERS = {
    "Cache-Control": "no-store",
    # only our own script; no inline script, no framing by another site
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}


def _presented(request: web.Request, token: str, *, basic: bool = True) -> bool:
    """Whether the request carries ``token`` as a bearer token (or a Basic password)."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return hmac.compare_digest(value.strip().encode(), token.encode())
    if basic and scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            return False
        return hmac.compare_digest(decoded.partition(":")[2].encode(), token.encode())
    return False


async def _json_object(request: web.Request) -> dict[str, Any]:
    """The request's JSON body, an object (none: ``{}``); else 400."""
    try:
        body = await request.json() if request.can_read_body else {}
    except ValueError:
        raise web.HTTPBadRequest(text="body: not JSON") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="body: a JSON object")
    return body


def _cross_site(request: web.Request) -> bool:
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        return True
    origin = request.headers.get("Origin")
    return origin is not None and origin != f"{request.scheme}://{request.host}"


def _client(request: web.Request) -> str:
    return request.remote or "unknown"


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status,
                             headers={k: v for k, v in (headers or {}).items() if v})

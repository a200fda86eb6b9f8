"""The console's ASGI app: server-rendered pages, a JSON API under /api/ and /metrics.

``create_app`` builds it; ``qgen serve`` runs it under uvicorn, and a service can mount it in
its own Starlette or FastAPI app (``app.mount("/queues-console", create_app(...))``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runtime.console.chart import Series, bar_chart, line_chart
from runtime.console.core import (
    COUNT_CAP,
    MAX_PAGE_ROWS,
    MAX_PAGE_SIZE,
    NEWEST_DEAD,
    Console,
    ConsoleError,
    QueueStats,
    has_dead_letter,
    parse_id,
    parse_int,
)
from runtime.console.prometheus import CONTENT_TYPE, exposition
from runtime.console.security import COOKIE, HEADERS, SESSION_S, Guard
from runtime.contract.errors import ConfigurationError
from runtime.operate import STATS_KEYS
from runtime.queue import Queue

log = logging.getLogger("runtime")

_HERE = Path(__file__).parent
#: the largest request body a form or API call may send
MAX_BODY = 16 * 1024
#: the most dead messages one redrive of selected ones may name
MAX_IDS = 500
#: seconds between the overview's reloads
REFRESH_S = 10
_LABELS = {
    "ready": "ready",
    "delayed": "delayed",
    "in_flight": "in flight",
    "dead": "dead",
    "processed": "processed",
}
_COUNT_KEYS = [k for k in STATS_KEYS if k != "oldest_ready_s"]
_DONE = {
    "redriven": "{n} dead message(s) sent back to the queue.",
    "purged": "{n} dead message(s) deleted for good.",
    "cancelled": "Message {n} cancelled.",
    "paused": "Paused: no consumer claims from it until resume.",
    "resumed": "Resumed: consumers claim from it again.",
    "login": "Logged in: the actions are open.",
    "logout": "Logged out.",
}


def create_app(
    queues: Sequence[Queue] | dict[str, Queue],
    db: str,
    *,
    read_db: str | None = None,
    outbox: Any | None = None,
    allow_writes: bool = False,
    token: str | None = None,
    cache_s: float = 5.0,
    count_cap: int = COUNT_CAP,
) -> Starlette:
    """The console as an ASGI app.

    ``queues``: loaded queues (``runtime.load(...)``); ``db``: the database URL the actions
    write through (and the reads, unless ``read_db`` is given, e.g. a replica); ``outbox``: a
    loaded outbox to list; ``allow_writes``: open redrive, purge and cancel to holders of
    ``token`` (required then, at least 16 characters); ``cache_s``: how long one reading of
    the stats serves every request (pages, API, /metrics); ``count_cap``: how many rows of
    each kind (unfinished, dead, processed) a queue's counts read at most, so the overview
    costs the same at any depth (a count that stopped there is shown as "≥ count_cap" and
    listed in its stats' "capped").
    """
    if allow_writes and not token:
        raise ConfigurationError(
            "writes need an operator token: set QGEN_CONSOLE_TOKEN or give --token-file "
            "(or leave writes off)"
        )
    by_name = dict(queues) if isinstance(queues, dict) else {q.name: q for q in queues}
    console = Console(
        queues=by_name,
        db=db,
        read_db=read_db,
        outbox=outbox,
        cache_s=cache_s,
        count_cap=count_cap,
    )
    web = _Web(console, Guard(token), allow_writes)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await console.close()  # the read connections kept between requests

    app = Starlette(
        lifespan=lifespan,
        routes=web.routes(),
        exception_handlers={HTTPException: web.http_error, Exception: web.crash},
    )
    app.state.console = console
    app.add_middleware(_Headers)
    return app


class _Headers:
    """Adds the security headers to every response (pure ASGI: streams pass untouched)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                have = {k.lower() for k, _ in message.get("headers", [])}
                extra = [
                    (k.encode(), v.encode()) for k, v in HEADERS.items() if k.encode() not in have
                ]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)


def _rel(request: Request) -> str:
    """The request's path below the app's mount point."""
    path, root = request.scope.get("path", "/"), request.scope.get("root_path", "")
    return path[len(root) :] or "/" if root and path.startswith(root) else path


def _count(value: Any) -> str:
    return "–" if value is None else str(value)


def _age(value: Any) -> str:
    if value is None:
        return "–"
    s = float(value)
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _compact(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= 200 else text[:200] + "…"


def _clock(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


class _Web:
    def __init__(self, console: Console, guard: Guard, allow_writes: bool) -> None:
        self.console = console
        self.guard = guard
        self.allow_writes = allow_writes
        self.jinja = Environment(
            loader=FileSystemLoader(_HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.jinja.filters.update(count=_count, age=_age, pretty=_pretty, compact=_compact)
        self.css = (_HERE / "static" / "console.css").read_text(encoding="utf-8")

    def routes(self) -> list[Route]:
        api, page, act = self.api, self.page, self.act
        return [
            Route("/", page(self.overview)),
            Route("/queues/{queue}", page(self.queue_page)),
            Route("/queues/{queue}/dead", page(self.dead_list_page)),
            Route("/queues/{queue}/dead/{id}", page(self.dead_message_page)),
            Route("/login", page(self.login_page), methods=["GET"]),
            Route("/login", page(self.login), methods=["POST"]),
            Route("/logout", page(self.logout), methods=["POST"]),
            Route("/queues/{queue}/dead/redrive", act(self.act_redrive_all), methods=["POST"]),
            Route("/queues/{queue}/dead/purge", act(self.act_purge_all), methods=["POST"]),
            Route(
                "/queues/{queue}/dead/redrive-selected",
                act(self.act_redrive_selected),
                methods=["POST"],
            ),
            Route("/queues/{queue}/dead/{id}/redrive", act(self.act_redrive), methods=["POST"]),
            Route("/queues/{queue}/dead/{id}/purge", act(self.act_purge), methods=["POST"]),
            Route("/queues/{queue}/messages/cancel", act(self.act_cancel), methods=["POST"]),
            Route("/queues/{queue}/pause", act(self.act_pause), methods=["POST"]),
            Route("/queues/{queue}/resume", act(self.act_pause), methods=["POST"]),
            Route("/api/queues/{queue}/pause", api(self.api_pause, True), methods=["POST"]),
            Route("/api/queues/{queue}/resume", api(self.api_pause, True), methods=["POST"]),
            Route("/static/console.css", self.stylesheet),
            Route("/metrics", self.metrics),
            Route("/api/queues", api(self.api_queues)),
            Route("/api/history", api(self.api_history)),
            Route("/api/queues/{queue}", api(self.api_queue)),
            Route("/api/queues/{queue}/dead", api(self.api_dead)),
            Route(
                "/api/queues/{queue}/dead/redrive",
                api(self.api_redrive_all, True),
                methods=["POST"],
            ),
            Route(
                "/api/queues/{queue}/dead/purge", api(self.api_purge_all, True), methods=["POST"]
            ),
            Route("/api/queues/{queue}/dead/{id}", api(self.api_dead_message)),
            Route(
                "/api/queues/{queue}/dead/{id}/redrive",
                api(self.api_redrive, True),
                methods=["POST"],
            ),
            Route(
                "/api/queues/{queue}/dead/{id}/purge", api(self.api_purge, True), methods=["POST"]
            ),
            Route(
                "/api/queues/{queue}/messages/{id}/cancel",
                api(self.api_cancel, True),
                methods=["POST"],
            ),
        ]

    # -- wrappers: every failure is one line, JSON under /api/, HTML elsewhere -------------

    def api(
        self, fn: Callable[[Request], Awaitable[Any]], writes: bool = False
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                if writes:
                    self._api_may_write(request)
                return JSONResponse(await fn(request))
            except ConsoleError as exc:
                return JSONResponse({"error": exc.message}, status_code=exc.status)

        return endpoint

    def page(
        self, fn: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await fn(request)
            except ConsoleError as exc:
                return self.error_page(request, exc.status, exc.message)

        return endpoint

    def act(
        self, fn: Callable[[Request, dict[str, str]], Awaitable[str]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """A form's action: writes allowed, same origin, logged in, CSRF token right; then a
        redirect (303) to the page it names."""

        async def endpoint(request: Request) -> Response:
            try:
                form = await self._checked_form(request)
                return RedirectResponse(self._base(request) + await fn(request, form), 303)
            except ConsoleError as exc:
                return self.error_page(request, exc.status, exc.message)

        return endpoint

    def _api_may_write(self, request: Request) -> None:
        if not self.allow_writes:
            raise ConsoleError(
                403, "this console is read-only: start it with --allow-writes and a token"
            )
        if not self.guard.bearer_ok(request.headers.get("authorization")):
            raise ConsoleError(
                401, "this needs the operator token: send Authorization: Bearer <token>"
            )

    async def _checked_form(self, request: Request) -> dict[str, str]:
        if not self.allow_writes:
            raise ConsoleError(
                403, "this console is read-only: start it with --allow-writes and a token"
            )
        self._same_origin(request)
        nonce = self.guard.session_nonce(request.cookies.get(COOKIE))
        if nonce is None:
            raise ConsoleError(401, "log in with the operator token first")
        form = await self._form(request)
        if not self.guard.csrf_ok(nonce, form.get("csrf")):
            raise ConsoleError(
                403, "the form's CSRF token is missing or stale: reload the page and try again"
            )
        return form

    def _same_origin(self, request: Request) -> None:
        # an Origin naming another site is refused; none, or "null" (some privacy settings),
        # leaves the SameSite cookie and the CSRF token to guard
        origin = request.headers.get("origin")
        if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
            raise ConsoleError(403, "a form from another site cannot act here")

    async def _body(self, request: Request) -> bytes:
        size = request.headers.get("content-length")
        if size and (not size.isdigit() or int(size) > MAX_BODY):
            raise ConsoleError(413, f"the request body is larger than {MAX_BODY} bytes")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                raise ConsoleError(413, f"the request body is larger than {MAX_BODY} bytes")
        return body

    async def _form(self, request: Request) -> dict[str, str]:
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            raise ConsoleError(415, "send the form as application/x-www-form-urlencoded")
        try:
            pairs = parse_qsl(
                (await self._body(request)).decode("utf-8"), max_num_fields=MAX_IDS + 20
            )
        except (UnicodeDecodeError, ValueError):
            raise ConsoleError(
                400, f"the form could not be read (UTF-8, at most {MAX_IDS + 20} fields)"
            ) from None
        form = dict(pairs)
        ticked = [v for k, v in pairs if k == "ids"]
        if ticked:  # the dead list's check boxes: one "ids" field each
            form["ids"] = ",".join(ticked)
        return form

    async def _json(self, request: Request) -> dict[str, Any]:
        body = await self._body(request)
        if not body.strip():
            return {}
        try:
            value = json.loads(body)
        except (UnicodeDecodeError, ValueError):
            raise ConsoleError(400, "the request body is not JSON") from None
        if not isinstance(value, dict):
            raise ConsoleError(
                400, 'the request body must be a JSON object, e.g. {"group": "orders"}'
            )
        return value

    @staticmethod
    def _group(value: Any) -> str | None:
        if value is None or value == "":
            return None
        if not isinstance(value, str) or len(value) > 255:
            raise ConsoleError(400, "group must be a string of at most 255 characters")
        return value

    # -- pages ---------------------------------------------------------------------------

    @staticmethod
    def _base(request: Request) -> str:
        root: str = request.scope.get("root_path", "")
        return root.rstrip("/")

    def _context(self, request: Request, title: str, **values: Any) -> dict[str, Any]:
        nonce = self.guard.session_nonce(request.cookies.get(COOKIE)) if self.allow_writes else None
        done, flash = request.query_params.get("done"), None
        if done in _DONE:
            n = request.query_params.get("n", "")
            flash = _DONE[done].format(n=int(n) if n.isdigit() and len(n) < 20 else "some")
        here = _rel(request)
        return {
            "base": self._base(request),
            "title": title,
            "here": here,
            "allow_writes": self.allow_writes,
            "logged_in": nonce is not None,
            "can_act": nonce is not None,
            "csrf": self.guard.csrf_for(nonce) if nonce else "",
            "flash": flash,
            "refresh": None,
            "keys": _COUNT_KEYS,
            "labels": _LABELS,
            "cache_s": f"{self.console.cache_s:g}",
            "count_cap": self.console.count_cap,
            "sample_s": f"{self.console.sample_s:g}",
            **values,
        }

    def render(
        self, request: Request, name: str, title: str, http_status: int = 200, **values: Any
    ) -> HTMLResponse:
        html = self.jinja.get_template(name).render(self._context(request, title, **values))
        return HTMLResponse(html, status_code=http_status)

    def error_page(self, request: Request, status: int, message: str) -> HTMLResponse:
        back = self._base(request) + "/"
        return self.render(
            request, "error.html", f"{status}", status, status=status, message=message, back=back
        )

    async def overview(self, request: Request) -> Response:
        snap = await self.console.snapshot()
        names = [q.name for q in snap.queues if q.kind == "queue"]
        minutes = [(q, _minutes_chart(q)) for q in snap.queues if q.stats is not None]
        return self.render(
            request,
            "overview.html",
            "queues",
            refresh=REFRESH_S,
            queues=snap.queues,
            taken=_clock(snap.taken_at),
            charts=[(q, chart) for q, chart in minutes if chart],
            no_minutes=[q.name for q, chart in minutes if not chart],
            chart_ready=line_chart("ready, by queue", self._series("ready", names)),
            chart_rate=line_chart(
                "finished per minute, by queue (from processed)",
                self._rates(names),
                empty="needs two samples of a queue keeping processed rows",
            ),
            chart_dead=line_chart("dead, by queue", self._series("dead", names)),
        )

    def _series(self, key: str, names: Sequence[str]) -> list[Series]:
        out: list[Series] = []
        for name in names:
            pts = [
                (s.taken_at, float(q.stats[key]))
                for s in self.console.history
                for q in s.queues
                if q.name == name
                and q.kind == "queue"
                and q.stats
                and q.stats.get(key) is not None
                # a count stats stopped at (capped) is no point of the series
                and key not in q.stats.get("capped", ())
            ]
            if pts:
                out.append((name, pts))
        return out

    def _rates(self, names: Sequence[str]) -> list[Series]:
        out: list[Series] = []
        for name, pts in self._series("processed", names):
            rates = [
                (t1, (v1 - v0) / (t1 - t0) * 60)
                for (t0, v0), (t1, v1) in itertools.pairwise(pts)
                if t1 > t0 and v1 >= v0  # a prune in between lowers the count: no rate there
            ]
            if rates:
                out.append((name, rates))
        return out

    def _info(self, q: Queue) -> dict[str, Any]:
        h = q.rendered.header
        dead = (
            f"group {h.dead_group}"
            if h.dead_group is not None
            else f"table {h.dead_table}"
            if h.dead_table is not None
            else None
        )
        return {
            "form": q.form,
            "table": q.table,
            "dead_letter": dead,
            "grouped": "group" in q.columns,
            # a dead-letter table with a group column: one group's dead messages go back
            "redrive_group": q.steps.redrive_group is not None,
        }

    async def queue_page(self, request: Request) -> Response:
        q = self.console.queue(request.path_params["queue"])
        line, taken_at = await self.console.queue_stats(q.name)
        items: list[dict[str, Any]] = []
        if has_dead_letter(q):
            items = (await self.console.dead_page(q.name, 1, NEWEST_DEAD))["items"]
        detail = await self.console.queue_detail(q.name)
        chart = line_chart(
            f"{q.name} since this server started (sampled in memory)",
            [
                s
                for key in ("ready", "delayed", "in_flight", "dead")
                for s in self._named(key, q.name)
            ],
        )
        return self.render(
            request,
            "queue.html",
            f"queue {q.name}",
            q=line,
            info=self._info(q),
            items=items,
            columns=_columns(items),
            chart=chart,
            minutes=_minutes_chart(line),
            detail=detail,
            taken=_clock(taken_at),
            paused=await self.console.paused(q.name),
        )

    def _named(self, key: str, name: str) -> list[Series]:
        return [(_LABELS[key], pts) for _, pts in self._series(key, [name])]

    def _paging(self, request: Request) -> tuple[int, int, int | None]:
        p = request.query_params
        size = parse_int(p.get("size"), "size", 50, 1, MAX_PAGE_SIZE)
        page = parse_int(p.get("page"), "page", 1, 1, MAX_PAGE_ROWS)
        after = parse_id(p["after"], "after id") if p.get("after") not in (None, "") else None
        return page, size, after

    async def dead_list_page(self, request: Request) -> Response:
        q = self.console.dead_queue(request.path_params["queue"])
        page = await self.console.dead_page(q.name, *self._paging(request))
        return self.render(
            request,
            "dead_list.html",
            f"dead messages of {q.name}",
            q={"name": q.name},
            page=page,
            columns=_columns(page["items"]),
        )

    async def dead_message_page(self, request: Request) -> Response:
        q = self.console.dead_queue(request.path_params["queue"])
        m = await self.console.dead_message(q.name, parse_id(request.path_params["id"]))
        return self.render(
            request,
            "dead_message.html",
            f"dead message {m['id']}",
            q={"name": q.name},
            m=m,
            columns=_columns([m]),
        )

    async def login_page(self, request: Request) -> Response:
        nxt = _local(request.query_params.get("next", "/"))
        return self.render(request, "login.html", "log in", next=nxt, wrong=False)

    async def login(self, request: Request) -> Response:
        if not self.allow_writes:
            raise ConsoleError(403, "this console is read-only: there is nothing to log in for")
        self._same_origin(request)
        form = await self._form(request)
        nxt = _local(form.get("next", "/"))
        if not self.guard.token_ok(form.get("token")):
            log.warning(
                "console: a login with a wrong token from %s",
                request.client and request.client.host,
            )
            await asyncio.sleep(0.5)  # slows guessing
            return self.render(request, "login.html", "log in", 401, next=nxt, wrong=True)
        response = RedirectResponse(self._base(request) + _flash(nxt, "login"), 303)
        response.set_cookie(
            COOKIE,
            self.guard.new_session(),
            max_age=SESSION_S,
            path=self._base(request) or "/",
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        return response

    async def logout(self, request: Request) -> Response:
        await self._checked_form(request)
        response = RedirectResponse(self._base(request) + "/?done=logout", 303)
        response.delete_cookie(COOKIE, path=self._base(request) or "/")
        return response

    # -- form actions: each returns where to go next ----------------------------------

    async def act_redrive_all(self, request: Request, form: dict[str, str]) -> str:
        name = request.path_params["queue"]
        of_group = self._group(form.get("of_group"))
        if of_group is not None:  # every dead message of one group, the others stay
            n = await self.console.redrive_group(name, of_group)
            return f"/queues/{name}?done=redriven&n={n}"
        n = await self.console.redrive(name, None, self._group(form.get("group")))
        return f"/queues/{name}?done=redriven&n={n}"

    async def act_redrive_selected(self, request: Request, form: dict[str, str]) -> str:
        name = request.path_params["queue"]
        self.console.dead_queue(name)
        ids = [parse_id(v) for v in form.get("ids", "").split(",") if v.strip()]
        if not ids:
            raise ConsoleError(400, "tick at least one dead message to redrive")
        n = await self.console.redrive(name, ids, self._group(form.get("group")))
        return f"/queues/{name}/dead?done=redriven&n={n}"

    async def act_purge_all(self, request: Request, form: dict[str, str]) -> str:
        name = request.path_params["queue"]
        self.console.dead_queue(name)
        if form.get("confirm", "").strip() != name:
            raise ConsoleError(400, f"type the queue's name ({name}) to purge every dead message")
        n = await self.console.purge(name, None)
        return f"/queues/{name}?done=purged&n={n}"

    async def act_redrive(self, request: Request, form: dict[str, str]) -> str:
        name, id = request.path_params["queue"], parse_id(request.path_params["id"])
        n = await self.console.redrive(name, [id], self._group(form.get("group")))
        return f"/queues/{name}/dead?done=redriven&n={n}"

    async def act_purge(self, request: Request, form: dict[str, str]) -> str:
        name, id = request.path_params["queue"], parse_id(request.path_params["id"])
        n = await self.console.purge(name, [id])
        return f"/queues/{name}/dead?done=purged&n={n}"

    async def act_cancel(self, request: Request, form: dict[str, str]) -> str:
        name, id = request.path_params["queue"], parse_id(form.get("id", ""))
        await self.console.cancel(name, id)
        return f"/queues/{name}?done=cancelled&n={id}"

    async def act_pause(self, request: Request, form: dict[str, str]) -> str:
        name, on = request.path_params["queue"], request.url.path.endswith("/pause")
        await self.console.pause(name, self._group(form.get("group")), on)
        return f"/queues/{name}?done={'paused' if on else 'resumed'}"

    # -- the API -------------------------------------------------------------------------

    async def api_queues(self, request: Request) -> Any:
        snap = await self.console.snapshot()
        return {"taken_at": snap.taken_at, "queues": [q.as_json() for q in snap.queues]}

    async def api_history(self, request: Request) -> Any:
        return {
            "note": "sampled in memory by this server since it started",
            "samples": [
                {
                    "taken_at": s.taken_at,
                    "queues": {q.name: q.stats for q in s.queues if q.kind == "queue"},
                }
                for s in self.console.history
            ],
        }

    async def api_queue(self, request: Request) -> Any:
        q = self.console.queue(request.path_params["queue"])
        line, taken_at = await self.console.queue_stats(q.name)
        out = {
            **line.as_json(),
            **self._info(q),
            "taken_at": taken_at,
        }
        out.update(await self.console.queue_detail(q.name))
        if has_dead_letter(q):
            out["newest_dead"] = (await self.console.dead_page(q.name, 1, NEWEST_DEAD))["items"]
        return out

    async def api_dead(self, request: Request) -> Any:
        return await self.console.dead_page(request.path_params["queue"], *self._paging(request))

    async def api_dead_message(self, request: Request) -> Any:
        return await self.console.dead_message(
            request.path_params["queue"], parse_id(request.path_params["id"])
        )

    async def api_redrive(self, request: Request) -> Any:
        name, id = request.path_params["queue"], parse_id(request.path_params["id"])
        body = await self._json(request)
        return {"redriven": await self.console.redrive(name, [id], self._group(body.get("group")))}

    async def api_redrive_all(self, request: Request) -> Any:
        body = await self._json(request)
        name = request.path_params["queue"]
        ids = body.get("ids")
        if ids is not None:  # the selected ones
            if (
                not isinstance(ids, list)
                or not 1 <= len(ids) <= MAX_IDS
                or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
            ):
                raise ConsoleError(
                    400, f"ids must be a list of 1 to {MAX_IDS} message ids (whole numbers)"
                )
            ids = [parse_id(i) for i in ids]
        of_group = self._group(request.query_params.get("of_group", body.get("of_group")))
        if of_group is not None:  # every dead message of one group (a shared dead table)
            if ids is not None:
                raise ConsoleError(400, "give ids or of_group, not both")
            return {"redriven": await self.console.redrive_group(name, of_group)}
        group = self._group(body.get("group"))
        return {"redriven": await self.console.redrive(name, ids, group)}

    async def api_purge(self, request: Request) -> Any:
        name, id = request.path_params["queue"], parse_id(request.path_params["id"])
        return {"purged": await self.console.purge(name, [id])}

    async def api_purge_all(self, request: Request) -> Any:
        return {"purged": await self.console.purge(request.path_params["queue"], None)}

    async def api_cancel(self, request: Request) -> Any:
        name, id = request.path_params["queue"], parse_id(request.path_params["id"])
        await self.console.cancel(name, id)
        return {"cancelled": id}

    async def api_pause(self, request: Request) -> Any:
        """POST …/pause or …/resume, body ``{"group": "eu"}`` or none: the scopes paused after
        (null: the whole queue)."""
        name, on = request.path_params["queue"], request.url.path.endswith("/pause")
        group = self._group((await self._json(request)).get("group"))
        return {"paused": await self.console.pause(name, group, on)}

    # -- the rest ------------------------------------------------------------------------

    async def stylesheet(self, request: Request) -> Response:
        return Response(self.css, media_type="text/css", headers={"cache-control": "max-age=300"})

    async def metrics(self, request: Request) -> Response:
        try:
            snap = await self.console.snapshot()
        except ConsoleError as exc:
            return Response(exc.message + "\n", status_code=exc.status, media_type="text/plain")
        return Response(exposition(snap), media_type=CONTENT_TYPE)

    async def http_error(self, request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        message = {404: "no such page", 405: "this method is not allowed here"}.get(
            status, str(getattr(exc, "detail", "")) or "bad request"
        )
        if _rel(request).startswith("/api/"):
            return JSONResponse({"error": message}, status_code=status)
        return self.error_page(request, status, message)

    async def crash(self, request: Request, exc: Exception) -> Response:
        log.error("console: %s %s failed", request.method, _rel(request), exc_info=exc)
        message = f"the console failed ({type(exc).__name__}); the server's log has the details"
        if _rel(request).startswith("/api/"):
            return JSONResponse({"error": message}, status_code=500)
        return HTMLResponse(f"<!doctype html><title>500</title><p>{message}</p>", status_code=500)


def _columns(items: Sequence[dict[str, Any]]) -> list[str]:
    """The dead rows' fields shown beside id and payload (attempt, group, times, …)."""
    seen: dict[str, None] = {}
    for m in items:
        for k in m:
            if k not in ("id", "payload"):
                seen[k] = None
    return list(seen)


def _local(path: str) -> str:
    """A redirect target inside the console: a path starting with one '/', else '/'."""
    if not path.startswith("/") or path.startswith("//") or "\\" in path or len(path) > 500:
        return "/"
    return path


def _flash(path: str, done: str) -> str:
    return f"{path}{'&' if '?' in path else '?'}done={done}"


def _minutes_chart(line: QueueStats) -> Markup | None:
    """The per-minute bar chart of a queue's (or the outbox's) line; None when its table
    keeps neither processed_at nor enqueued_at (created_at)."""
    pm = line.per_minute or {}
    series = [
        (k, c)
        for k, c in (("finished", pm.get("finished")), ("enqueued", pm.get("enqueued")))
        if c is not None
    ]
    if not series:
        return None
    what = " and ".join(k for k, _ in series)
    return bar_chart(f"{line.name}: {what} per minute, the last hour", series)

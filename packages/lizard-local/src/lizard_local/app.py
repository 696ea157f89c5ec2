"""The ASGI application: the Lizard API subset under ``/api`` and the control API under ``/_local``.

Request handling order: collapse duplicate slashes, match the route, count it, wait the injected
latency (per request, plus per new connection on its first ``/api`` request), authenticate
(``X-API-Key`` or ``Authorization: Bearer``; 401 otherwise), apply an injected fault, run the
handler, answer. The latency is paid before the handler so that it adds to the handler's work:
paid afterwards it would overlap a streamed exec, whose command runs while the response streams.
Every error is a JSON body the SDK maps to its exceptions (400 ``LizardError``, 401
``AuthenticationError``, 404 ``NotFoundError``, 409 ``ConflictError``, 413, 429
``LimitExceededError``, 501). An exception in a handler is a 500 and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import logging
import re
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from lizard_local import files
from lizard_local.execution import CommandRun, parse_exec_body, sse_event
from lizard_local.http import (
    ApiError,
    Receive,
    Request,
    Response,
    Scope,
    Send,
    StreamResponse,
    json_response,
    string_map,
)
from lizard_local.instrumentation import Fault, Instrumentation, StreamDrop
from lizard_local.isolation import Isolation
from lizard_local.lifecycle_routes import LifecycleRoutes
from lizard_local.sandboxes import MAX_TIMEOUT_MS, SIZES, Registry, Sandbox
from lizard_local.settings import Settings

__all__ = ["SPECIAL_FILE_BLOCK_S", "ConnectionState", "LizardApp", "StreamDropped"]

log = logging.getLogger("lizard_local")

Handler = Callable[[Request], Awaitable[Response | StreamResponse]]
SIGNALS = {
    name: int(getattr(signal, name))
    for name in ("SIGTERM", "SIGKILL", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
}
_SLASHES = re.compile(r"/{2,}")
SPECIAL_FILE_BLOCK_S = 60.0
"""With ``special_file_reads="block"`` (or ``"stream"``), the longest a ``GET files`` of a special
file hangs (or streams)."""


class StreamDropped(Exception):
    """Raised to abort an SSE response on purpose (an injected fault)."""


@dataclass
class ConnectionState:
    """Per-TCP-connection state, put into the ASGI scope by the server's protocol class."""

    counted: bool = False


@dataclass
class Route:
    """One route: method, path template and handler."""

    method: str
    template: str
    pattern: re.Pattern[str]
    handler: Handler

    @property
    def key(self) -> str:
        """The counter key."""
        return f"{self.method} {self.template}"


def _compile(template: str) -> re.Pattern[str]:
    out = ""
    for part in re.split(r"(\{[a-z_]+(?::path)?\})", template):
        if part.startswith("{"):
            name, _, kind = part[1:-1].partition(":")
            out += f"(?P<{name}>.*)" if kind == "path" else f"(?P<{name}>[^/]+)"
        else:
            out += re.escape(part)
    return re.compile(out + "$")


def _int_field(body: dict[str, Any], name: str, *, required: bool = True) -> int | None:
    value = body.get(name)
    if value is None:
        if required:
            raise ApiError(400, f"{name} is required", "INVALID_BODY")
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{name} must be an integer", "INVALID_BODY")
    return value


class LizardApp:
    """The emulator's ASGI application."""

    def __init__(
        self,
        registry: Registry,
        isolation: Isolation,
        *,
        api_key: str,
        project_id: str = "proj_local",
        settings: Settings | None = None,
        instrumentation: Instrumentation | None = None,
        on_shutdown: Callable[[], None] | None = None,
    ) -> None:
        self.registry = registry
        self.isolation = isolation
        self.api_key = api_key
        self.project_id = project_id
        self.settings = settings or Settings()
        self.instr = instrumentation or Instrumentation()
        self.on_shutdown = on_shutdown
        self.routes: list[Route] = []
        self.control: list[Route] = []
        self.lifecycle = LifecycleRoutes(registry)
        self._add_api_routes()
        self._add_control_routes()

    # --- routing ------------------------------------------------------------------------------

    def _route(self, table: list[Route], method: str, template: str, handler: Handler) -> None:
        table.append(Route(method, template, _compile(template), handler))

    def _add_api_routes(self) -> None:
        r = self.routes
        add = self._route
        sb = "/api/sandboxes/{id}"
        add(r, "GET", "/api/projects", self.list_projects)
        add(r, "GET", "/api/auth/me", self.whoami)
        add(r, "POST", "/api/sandboxes", self.create_sandbox)
        add(r, "GET", "/api/sandboxes", self.list_sandboxes)
        add(r, "GET", "/api/projects/{pid}/sandboxes", self.list_project_sandboxes)
        add(r, "GET", sb, self.get_sandbox)
        add(r, "DELETE", sb, self.kill_sandbox)
        add(r, "POST", sb + "/pause", self.pause_sandbox)
        add(r, "POST", sb + "/resume", self.resume_sandbox)
        add(r, "POST", sb + "/timeout", self.set_timeout)
        add(r, "POST", sb + "/expose/{port}", self.expose)
        add(r, "DELETE", sb + "/expose/{port}", self.unexpose)
        add(r, "POST", sb + "/exec", self.exec_command)
        add(r, "GET", sb + "/processes", self.list_processes)
        add(r, "POST", sb + "/processes/signal", self.signal_process)
        for method in ("POST", "GET", "DELETE"):
            add(r, method, sb + "/files/watch", self.not_implemented)
        add(r, "GET", sb + "/files/watch/events", self.not_implemented)
        add(r, "POST", sb + "/files", self.write_file)
        add(r, "GET", sb + "/files", self.read_file)
        add(r, "DELETE", sb + "/files", self.delete_file)
        add(r, "GET", sb + "/files/list", self.list_files)
        add(r, "GET", sb + "/files/stat", self.stat_file)
        add(r, "POST", sb + "/files/move", self.move_file)
        for method in ("GET", "POST", "DELETE"):
            add(r, method, sb + "/desktop", self.desktop)
        add(r, "GET", sb + "/logs", self.not_implemented)
        self.lifecycle.add_routes(lambda method, path, handler: add(r, method, path, handler))
        for method in ("GET", "POST", "PATCH", "DELETE"):
            add(r, method, sb + "/schedules{rest:path}", self.not_implemented)
            add(r, method, "/api/sandbox-schedules{rest:path}", self.not_implemented)

    def _add_control_routes(self) -> None:
        c = self.control
        add = self._route
        add(c, "GET", "/_local/info", self.ctl_info)
        add(c, "GET", "/_local/counters", self.ctl_counters)
        add(c, "POST", "/_local/counters/reset", self.ctl_reset)
        add(c, "POST", "/_local/latency", self.ctl_latency)
        add(c, "POST", "/_local/faults", self.ctl_fault)
        add(c, "POST", "/_local/stream-drop", self.ctl_stream_drop)
        add(c, "POST", "/_local/configure", self.ctl_configure)
        add(c, "GET", "/_local/sandboxes", self.ctl_sandboxes)
        add(c, "POST", "/_local/sandboxes/{id}/expire", self.ctl_expire)
        add(c, "POST", "/_local/shutdown", self.ctl_shutdown)

    def _match(self, table: list[Route], method: str, path: str) -> tuple[Route | None, bool]:
        """(route, path_exists): path_exists is True when only the method is wrong."""
        path_exists = False
        for route in table:
            m = route.pattern.match(path)
            if m is None:
                continue
            if route.method == method:
                return route, True
            path_exists = True
        return None, path_exists

    # --- ASGI ---------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI request (or the lifespan protocol)."""
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        method: str = scope["method"]
        path = _SLASHES.sub("/", scope["path"])
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        control = path.startswith("/_local/")
        timed_route = ""
        started: float | None = None  # set once an /api request's added latency is paid
        try:
            route, exists = self._match(self.control if control else self.routes, method, path)
            if not control:
                # No connection state means the app runs outside our server: treat every
                # request as a new connection.
                conn: ConnectionState | None = scope.get("lizard.connection")
                new_connection = conn is None or not conn.counted
                if conn is not None:
                    conn.counted = True
                timed_route = route.key if route else f"{method} <unmatched>"
                delay = self.instr.arrive(timed_route, new_connection=new_connection)
                # Before the handler: a streamed exec starts its command in the handler, so a
                # delay paid later would overlap the command instead of adding to it.
                if delay > 0:
                    await asyncio.sleep(delay)
                # The server's own time starts once the injected latency is paid.
                started = time.perf_counter()
            self._authenticate(headers)
            if route is None:
                if exists:
                    raise ApiError(
                        405, f"Method {method} not allowed on {path}", "METHOD_NOT_ALLOWED"
                    )
                raise ApiError(404, f"No route for {method} {path}", "NOT_FOUND")
            if not control:
                fault = self.instr.take_fault(route.key)
                if fault is not None:
                    raise fault
            body = await self._read_body(headers, receive)
            m = route.pattern.match(path)
            assert m is not None
            request = Request(
                method,
                path,
                Request.parse_query(scope.get("query_string", b"")),
                headers,
                body,
                {k: v for k, v in m.groupdict().items() if v is not None},
                receive,
            )
            response = await route.handler(request)
        except ApiError as exc:
            response = json_response(exc.body(), exc.status, exc.headers)
        except Exception as exc:
            log.exception("internal error on %s %s", method, path)
            response = json_response({"error": f"Internal error: {exc!r}", "code": "INTERNAL"}, 500)
        try:
            await self._send(response, send)
        finally:
            # After the last byte (a streamed exec's exit event included), or the failed send.
            if started is not None:
                self.instr.served(timed_route, time.perf_counter() - started)

    def _authenticate(self, headers: dict[str, str]) -> None:
        key = headers.get("x-api-key", "")
        if not key:
            auth = headers.get("authorization", "")
            if auth[:7].lower() == "bearer ":
                key = auth[7:].strip()
        if not key:
            raise ApiError(401, "Missing API key", "UNAUTHORIZED")
        if not hmac.compare_digest(key.encode(), self.api_key.encode()):
            raise ApiError(401, "Invalid API key", "UNAUTHORIZED")

    async def _read_body(self, headers: dict[str, str], receive: Receive) -> bytes:
        limit = self.settings.max_body_bytes
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"Request body over {limit} bytes", "PAYLOAD_TOO_LARGE")
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ApiError(400, "Client disconnected", "DISCONNECTED")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"Request body over {limit} bytes", "PAYLOAD_TOO_LARGE")
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        return b"".join(chunks)

    async def _send(self, response: Response | StreamResponse, send: Send) -> None:
        if isinstance(response, Response):
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status,
                    "headers": response.raw_headers(),
                }
            )
            await send({"type": "http.response.body", "body": response.body})
            return
        headers = [
            (b"content-type", response.content_type.encode()),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        await send({"type": "http.response.start", "status": response.status, "headers": headers})

        async def chunk(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        await response.run(chunk)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    # --- projects and sandboxes ---------------------------------------------------------------

    async def list_projects(self, req: Request) -> Response:
        """``GET /api/projects``: the one project this server has."""
        project = {
            "id": self.project_id,
            "slug": "local",
            "name": "local",
            "workspaceId": "ws_local",
        }
        return json_response([project])

    async def whoami(self, req: Request) -> Response:
        """``GET /api/auth/me``."""
        return json_response({"id": "user_local", "email": "local@localhost", "name": "local"})

    async def create_sandbox(self, req: Request) -> Response:
        """``POST /api/sandboxes``: validate everything before starting anything."""
        body = req.json(required=False)
        name = body.get("template") or "base"
        if not isinstance(name, str) or name not in self.isolation.templates:
            known = ", ".join(sorted(self.isolation.templates))
            raise ApiError(400, f'Unknown template "{name}" (known: {known})', "UNKNOWN_TEMPLATE")
        timeout_ms = _int_field(body, "timeoutMs", required=False)
        if timeout_ms is None:
            timeout_ms = 300_000
        if not 0 <= timeout_ms <= MAX_TIMEOUT_MS:
            raise ApiError(400, f"timeoutMs must be 0..{MAX_TIMEOUT_MS}", "INVALID_TIMEOUT")
        project = body.get("projectId") or self.project_id
        if not isinstance(project, str):
            raise ApiError(400, "projectId must be a string", "INVALID_BODY")
        region = body.get("region") or "us-east-1"
        if not isinstance(region, str):
            raise ApiError(400, "region must be a string", "INVALID_BODY")
        size = body.get("size") or "medium"
        if size not in SIZES:
            raise ApiError(400, f"size must be one of {', '.join(SIZES)}", "INVALID_SIZE")
        metadata = string_map(body.get("metadata"), "metadata")
        envs = string_map(body.get("envs"), "envs")
        internet = body.get("internetAccess", True)
        if not isinstance(internet, bool):
            raise ApiError(400, "internetAccess must be a boolean", "INVALID_BODY")
        if body.get("allowedHosts"):
            raise ApiError(
                400, "allowedHosts is not supported by lizard-local", "ALLOWED_HOSTS_UNSUPPORTED"
            )
        if body.get("environment"):
            raise ApiError(
                400, f'Unknown environment "{body["environment"]}"', "UNKNOWN_ENVIRONMENT"
            )
        from_snapshot, snapshot_size, files, volume = self.lifecycle.create_sources(body, project)
        sb = await self.registry.create(
            template=from_snapshot or self.isolation.templates[name],
            project_id=project,
            region=region,
            size=snapshot_size or size,
            files_from=files,
            volume=volume,
            metadata=metadata,
            envs=envs,
            internet_access=internet,
            timeout_ms=timeout_ms,
        )
        return json_response(sb.record(), 201)

    async def list_sandboxes(self, req: Request) -> Response:
        """``GET /api/sandboxes``."""
        return json_response([sb.record() for sb in self.registry.all()])

    async def list_project_sandboxes(self, req: Request) -> Response:
        """``GET /api/projects/{pid}/sandboxes``."""
        pid = req.params["pid"]
        return json_response([sb.record() for sb in self.registry.all() if sb.project_id == pid])

    async def get_sandbox(self, req: Request) -> Response:
        """``GET /api/sandboxes/{id}``."""
        return json_response(self.registry.get(req.params["id"]).record())

    async def kill_sandbox(self, req: Request) -> Response:
        """``DELETE /api/sandboxes/{id}``: 404 when already gone (the SDK then returns False)."""
        if not await self.registry.kill(req.params["id"]):
            raise ApiError(404, "Sandbox not found", "SANDBOX_NOT_FOUND")
        return json_response({"ok": True})

    async def pause_sandbox(self, req: Request) -> Response:
        """``POST /api/sandboxes/{id}/pause`` (accepts 0.1.82's ``{"memory": false}``)."""
        sb = self.registry.get(req.params["id"])
        req.json(required=False)
        await self.registry.pause(sb)
        return json_response(sb.record())

    async def resume_sandbox(self, req: Request) -> Response:
        """``POST /api/sandboxes/{id}/resume``."""
        sb = self.registry.get(req.params["id"])
        await self.registry.resume(sb)
        return json_response(sb.record())

    async def set_timeout(self, req: Request) -> Response:
        """``POST /api/sandboxes/{id}/timeout``: ``timeoutMs`` from now, 1000..2147483647."""
        sb = self.registry.get(req.params["id"])
        value = _int_field(req.json(), "timeoutMs")
        assert value is not None
        if not 1000 <= value <= MAX_TIMEOUT_MS:
            raise ApiError(400, f"timeoutMs must be 1000..{MAX_TIMEOUT_MS}", "INVALID_TIMEOUT")
        self.registry.set_timeout(sb, value)
        return json_response(sb.record())

    def _port(self, req: Request) -> int:
        raw = req.params["port"]
        if not raw.isdigit() or not 1 <= int(raw) <= 65535:
            raise ApiError(400, f"Invalid port {raw!r}", "INVALID_PORT")
        return int(raw)

    async def expose(self, req: Request) -> Response:
        """``POST /api/sandboxes/{id}/expose/{port}``: a loopback listener that checks the token.

        The sandbox shares the host's network unless it has none (see
        :mod:`lizard_local.port_proxy`).
        """
        sb = self.registry.get(req.params["id"])
        port = self._port(req)
        if not sb.internet_access:
            raise ApiError(409, "Sandbox has no internet access; ports cannot be exposed")
        listener, token = await self.registry.expose(sb, port)
        host = f"127.0.0.1:{listener}"
        return json_response(
            {
                "hostname": host,
                "url": f"http://{host}/?lizard_token={token}",
                "port": port,
                "accessToken": token,
            }
        )

    async def unexpose(self, req: Request) -> Response:
        """``DELETE /api/sandboxes/{id}/expose/{port}``."""
        sb = self.registry.get(req.params["id"])
        await self.registry.unexpose(sb, self._port(req))
        return json_response({"ok": True})

    async def not_implemented(self, req: Request) -> Response:
        """A 501, like the platform's, for what the emulator does not do.

        File watches, logs and schedules.
        """
        raise ApiError(501, "Not supported by the local emulator", "NOT_IMPLEMENTED")

    async def desktop(self, req: Request) -> Response:
        """``GET|POST|DELETE /api/sandboxes/{id}/desktop``: a 400, lizard-local has no desktop."""
        raise ApiError(400, "Desktop is not supported by lizard-local", "DESKTOP_NOT_SUPPORTED")

    # --- exec and processes -------------------------------------------------------------------

    def _running(self, req: Request) -> Sandbox:
        sb = self.registry.get(req.params["id"])
        sb.require_running()
        return sb

    async def exec_command(self, req: Request) -> Response | StreamResponse:
        """``POST /api/sandboxes/{id}/exec``: JSON unless the client accepts an event stream."""
        sb = self._running(req)
        spec = parse_exec_body(req.json(), self.settings)
        sse = "text/event-stream" in req.headers.get("accept", "")
        run = CommandRun(sb, self.settings, spec, sse)
        receive = req.receive
        assert receive is not None
        await run.start()
        if not sse:
            watcher = asyncio.get_running_loop().create_task(_watch_disconnect(receive, run))
            try:
                await run.done.wait()
            finally:
                watcher.cancel()
            return json_response(run.json_result())
        drop_after = self.instr.take_stream_drop()
        keepalive = self.settings.keepalive_s

        async def produce(chunk: Callable[[bytes], Awaitable[None]]) -> None:
            if spec["pid_event"] and run.pid is not None:
                run.frames.insert(0, sse_event({"pid": run.pid}))
            watcher = asyncio.get_running_loop().create_task(_watch_disconnect(receive, run))
            sent = 0
            try:
                while True:
                    if run.frames:
                        frames, run.frames = run.frames, []
                        if drop_after is not None and sent + len(frames) >= drop_after:
                            head = frames[: max(drop_after - sent, 0)]
                            if head:
                                await chunk(b"".join(head))
                            run.abort()
                            raise StreamDropped(f"stream dropped after {drop_after} events")
                        await chunk(b"".join(frames))
                        sent += len(frames)
                        continue
                    if run.done.is_set():
                        return
                    run.wake.clear()
                    if run.frames or run.done.is_set():
                        continue
                    try:
                        await asyncio.wait_for(run.wake.wait(), keepalive)
                    except TimeoutError:
                        await chunk(b": keepalive\n\n")
            finally:
                watcher.cancel()

        return StreamResponse(200, "text/event-stream", produce)

    async def list_processes(self, req: Request) -> Response:
        """``GET /api/sandboxes/{id}/processes``: commands started through exec still running."""
        sb = self.registry.get(req.params["id"])
        out = [
            {
                "pid": p.pid,
                "cmd": p.cmd,
                "command": " ".join(p.cmd),
                "startedAt": p.started_at_ms,
                "cwd": p.cwd,
                "tag": None,
            }
            for p in sb.processes.values()
        ]
        return json_response(out)

    async def signal_process(self, req: Request) -> Response:
        """``POST /api/sandboxes/{id}/processes/signal``.

        The signal goes to the process and its descendants in the same session.
        """
        sb = self._running(req)
        body = req.json()
        pid = _int_field(body, "pid")
        assert pid is not None
        name = body.get("signal") or "SIGTERM"
        if not isinstance(name, str) or name.upper() not in SIGNALS:
            raise ApiError(400, f"signal must be one of {', '.join(SIGNALS)}", "INVALID_SIGNAL")
        from lizard_local.agent_link import AgentError

        try:
            await sb.link.signal(pid, SIGNALS[name.upper()])
        except AgentError as exc:
            raise ApiError(404, f"No process {pid} in this sandbox", "PROCESS_NOT_FOUND") from exc
        return json_response({"ok": True})

    # --- files --------------------------------------------------------------------------------

    async def write_file(self, req: Request) -> Response:
        """``POST /api/sandboxes/{id}/files``."""
        sb = self._running(req)
        body = req.json()
        path = files.require_abs(body.get("path"))
        content = body.get("content")
        if not isinstance(content, str):
            raise ApiError(400, "content must be a string", "INVALID_BODY")
        encoding = body.get("encoding")
        if encoding == "base64":
            try:
                data = base64.b64decode(content, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ApiError(400, f"content is not valid base64: {exc}", "INVALID_BODY") from exc
        elif encoding in (None, "", "utf-8", "utf8", "text"):
            data = content.encode("utf-8", "surrogatepass")
        else:
            raise ApiError(400, f"Unknown encoding {encoding!r}", "INVALID_BODY")
        account = sb.user(body.get("user")) if body.get("user") else None
        if len(data) > 1 << 20:
            await asyncio.to_thread(files.write_file, sb, path, data, account)
        else:
            files.write_file(sb, path, data, account)
        return json_response({"path": path, "size": len(data)})

    async def read_file(self, req: Request) -> Response | StreamResponse:
        """``GET /api/sandboxes/{id}/files``: the raw bytes."""
        sb = self._running(req)
        path = files.require_abs(req.query.get("path"))
        if req.query.get("user"):
            sb.user(req.query["user"])
        try:
            data = files.read_file(sb, path)
        except ApiError as exc:
            if exc.code == "NOT_A_FILE" and self.settings.special_file_reads == "stream":
                return StreamResponse(200, "application/octet-stream", _stream_zeros)
            if exc.code == "NOT_A_FILE" and self.settings.special_file_reads == "block":
                await _until_disconnect(req.receive, SPECIAL_FILE_BLOCK_S)
            raise
        return Response(200, data, "text/plain; charset=utf-8")

    async def delete_file(self, req: Request) -> Response:
        """``DELETE /api/sandboxes/{id}/files``."""
        sb = self._running(req)
        body = req.json(required=False)
        path = files.require_abs(body.get("path") or req.query.get("path"))
        await asyncio.to_thread(files.delete_path, sb, path)
        return json_response({"ok": True})

    async def list_files(self, req: Request) -> Response:
        """``GET /api/sandboxes/{id}/files/list``."""
        sb = self._running(req)
        path = files.require_abs(req.query.get("path"))
        return json_response(files.list_dir(sb, path))

    async def stat_file(self, req: Request) -> Response:
        """``GET /api/sandboxes/{id}/files/stat``."""
        sb = self._running(req)
        path = files.require_abs(req.query.get("path"))
        return json_response(files.stat_path(sb, path))

    async def move_file(self, req: Request) -> Response:
        """``POST /api/sandboxes/{id}/files/move``."""
        sb = self._running(req)
        body = req.json()
        src = files.require_abs(body.get("from"), "from")
        dst = files.require_abs(body.get("to"), "to")
        account = sb.user(body.get("user")) if body.get("user") else None
        await asyncio.to_thread(files.move_path, sb, src, dst, account)
        return json_response({"ok": True})

    # --- control API --------------------------------------------------------------------------

    async def ctl_info(self, req: Request) -> Response:
        """Mode, templates and settings."""
        return json_response(
            {
                "isolation": self.isolation.mode,
                "instance": self.registry.instance,
                "projectId": self.project_id,
                "templates": {
                    name: {"jupyter": t.has_jupyter, "prefix": t.prefix}
                    for name, t in self.isolation.templates.items()
                },
                "settings": self.settings.as_dict(),
            }
        )

    async def ctl_counters(self, req: Request) -> Response:
        """The request counters."""
        return json_response(self.instr.snapshot())

    async def ctl_reset(self, req: Request) -> Response:
        """Zero the counters."""
        self.instr.reset()
        return json_response(self.instr.snapshot())

    async def ctl_latency(self, req: Request) -> Response:
        """``{"ms": n, "connectionMs": n}``."""
        body = req.json()
        ms = body.get("ms", 0)
        conn_ms = body.get("connectionMs", 0)
        for value in (ms, conn_ms):
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ApiError(400, "ms and connectionMs must be non-negative numbers")
        self.instr.latency_s = ms / 1000
        self.instr.connection_latency_s = conn_ms / 1000
        return json_response({"ok": True})

    async def ctl_fault(self, req: Request) -> Response:
        """``{"route": "POST /api/sandboxes", "status": 503, "count": 1, "retryAfterS": n}``."""
        body = req.json()
        route = body.get("route")
        keys = {r.key for r in self.routes}
        if route not in keys:
            raise ApiError(400, f"Unknown route {route!r}; known: {sorted(keys)}")
        status = body.get("status", 503)
        count = body.get("count", 1)
        retry = body.get("retryAfterS")
        if not isinstance(status, int) or not 400 <= status <= 599:
            raise ApiError(400, "status must be an HTTP error status")
        if not isinstance(count, int) or count < 1:
            raise ApiError(400, "count must be a positive integer")
        if retry is not None and (isinstance(retry, bool) or not isinstance(retry, int | float)):
            raise ApiError(400, "retryAfterS must be a number")
        self.instr.faults[route] = Fault(status, count, retry)
        return json_response({"ok": True})

    async def ctl_stream_drop(self, req: Request) -> Response:
        """``{"count": 1, "afterEvents": n}``."""
        body = req.json()
        count = body.get("count", 1)
        after = body.get("afterEvents", 1)
        if not isinstance(count, int) or count < 1 or not isinstance(after, int) or after < 0:
            raise ApiError(400, "count must be >= 1 and afterEvents >= 0")
        self.instr.stream_drop = StreamDrop(count, after)
        return json_response({"ok": True})

    async def ctl_configure(self, req: Request) -> Response:
        """Change settings (snake_case names of :class:`Settings`)."""
        try:
            self.settings.update(req.json())
        except ValueError as exc:
            raise ApiError(400, str(exc)) from exc
        return json_response(self.settings.as_dict())

    async def ctl_sandboxes(self, req: Request) -> Response:
        """Ids of live sandboxes."""
        return json_response({"sandboxes": self.registry.ids()})

    async def ctl_expire(self, req: Request) -> Response:
        """Expire a sandbox now."""
        if not await self.registry.expire(req.params["id"]):
            raise ApiError(404, "Sandbox not found", "SANDBOX_NOT_FOUND")
        return json_response({"ok": True})

    async def ctl_shutdown(self, req: Request) -> Response:
        """Stop the server (after answering)."""
        if self.on_shutdown is not None:
            asyncio.get_running_loop().call_soon(self.on_shutdown)
        return json_response({"ok": True})


async def _stream_zeros(send_chunk: Callable[[bytes], Awaitable[None]]) -> None:
    """Zeros without a length, as a server copying ``/dev/zero`` sends them (for a while)."""
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + SPECIAL_FILE_BLOCK_S
    block = bytes(64 * 1024)
    while loop.time() < stop_at:
        await send_chunk(block)
        await asyncio.sleep(0.01)


async def _until_disconnect(receive: Receive | None, seconds: float) -> None:
    """Return when the client has gone away, or after ``seconds`` (the event loop stays free)."""
    if receive is None:
        await asyncio.sleep(seconds)
        return

    async def disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(disconnected(), seconds)


async def _watch_disconnect(receive: Receive, run: CommandRun) -> None:
    """Kill the command when the client goes away."""
    with contextlib.suppress(Exception):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if not run.done.is_set():
                    run.abort()
                return

"""Start and drive a lizard-local server process from Python (tests, benchmarks, demos).

:class:`LocalServer` runs ``python -m lizard_local serve`` (:func:`lizard_local.server.serve`) as
a separate process, so the server behaves like a remote service and cannot be starved by the
caller's threads or blocked by its socket restrictions. The child watches its stdin: when this
process dies, the server cleans up and exits too. Control methods talk to the documented
``/_local`` API.

The API key never appears in the child's argv or environment (both are readable through
``/proc`` by other processes of the same user, such as host-mode sandbox commands run as root):
it travels through a pipe whose read end the child gets as ``--api-key-fd``, and the child's
environment is this process's minus ``LIZARD_API_KEY`` and ``LIZARD_LOCAL_API_KEY``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import selectors
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from types import TracebackType
from typing import IO, Any

from lizard_local import procscan

__all__ = ["LocalServer", "LocalServerError"]


#: Variables that may hold an API key: never passed on to the server process.
_KEY_VARIABLES = frozenset({"LIZARD_API_KEY", "LIZARD_LOCAL_API_KEY"})


class LocalServerError(RuntimeError):
    """The server could not be started, or a control call failed."""


class LocalServer:
    """A lizard-local server in a child process.

    ``LocalServer(port=0, tls=False, latency_ms=0)``; use as a context manager or call
    :meth:`start` and :meth:`stop`. ``isolation`` is ``"auto"``, ``"namespace"`` or ``"host"``.
    """

    def __init__(
        self,
        port: int = 0,
        tls: bool = False,
        latency_ms: float = 0,
        *,
        isolation: str = "auto",
        api_key: str | None = None,
        project_id: str = "proj_local",
        startup_timeout: float = 60.0,
    ) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError("port must be an integer 0..65535")
        if latency_ms < 0:
            raise ValueError("latency_ms must not be negative")
        if isolation not in ("auto", "namespace", "host"):
            raise ValueError("isolation must be 'auto', 'namespace' or 'host'")
        self.port = port
        self.tls = tls
        self.latency_ms = latency_ms
        self.isolation_requested = isolation
        self._api_key = api_key or "lzl_" + secrets.token_hex(16)
        self._project_id = project_id
        self._startup_timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._env: dict[str, str] = {}
        self._ssl: ssl.SSLContext | None = None
        self._info: dict[str, Any] = {}

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> LocalServer:
        """Start the server and wait until it accepts requests."""
        if self._proc is not None:
            return self
        argv = [
            sys.executable,
            "-m",
            "lizard_local",
            "serve",
            "--port",
            str(self.port),
            "--project-id",
            self._project_id,
            "--isolation",
            self.isolation_requested,
            "--exit-on-stdin-eof",
        ]
        if self.tls:
            argv.append("--tls")
        if self.latency_ms:
            argv += ["--latency-ms", str(self.latency_ms)]
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the server
        key_r, key_w = os.pipe()
        try:
            try:
                os.write(key_w, self._api_key.encode() + b"\n")  # far below a pipe's buffer
            finally:
                os.close(key_w)
            argv += ["--api-key-fd", str(key_r)]
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log,
                pass_fds=[key_r],
                env={k: v for k, v in os.environ.items() if k not in _KEY_VARIABLES},
                start_new_session=True,  # Ctrl-C in a terminal reaches the server only through us
            )
        finally:
            os.close(key_r)
        try:
            self._env = self._read_exports()
        except Exception:
            self._kill()
            raise
        if self.tls:
            self._ssl = ssl.create_default_context(cafile=self._env["SSL_CERT_FILE"])
        self._info = self._call("GET", "/_local/info")
        return self

    def _read_exports(self) -> dict[str, str]:
        assert self._proc is not None
        assert self._proc.stdout is not None
        env: dict[str, str] = {}
        buf = b""
        deadline = time.monotonic() + self._startup_timeout
        fd = self._proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise LocalServerError("lizard-local did not start in time" + self._log_tail())
                if not sel.select(remaining):
                    continue
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise LocalServerError("lizard-local exited during start-up" + self._log_tail())
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    text = line.decode()
                    if text.startswith("export "):
                        name, _, value = text[len("export ") :].partition("=")
                        env[name] = value
                    elif text.startswith("# ready"):
                        return env

    def _log_tail(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        tail = self._log.read()[-3000:].decode("utf-8", "replace")
        return f":\n{tail}" if tail else ""

    def stop(self, timeout: float = 30.0) -> list[int]:
        """Stop the server; it kills every sandbox first. Idempotent.

        Returns the pids of processes marked as this server's that were still alive after it
        exited (and were then killed): a non-empty list means something escaped the clean-up.
        """
        proc = self._proc
        if proc is None:
            return []
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill()
        self._close_pipes()
        self._proc = None
        instance = self._info.get("instance")
        if not instance:
            return []
        # Last net: nothing this server started may outlive it.
        marker = f"LIZARD_EMU_INSTANCE={instance}".encode()
        stragglers = procscan.find_marked(marker)
        if stragglers:
            procscan.kill_marked(marker)
        return stragglers

    def _kill(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(OSError):
                self._proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(10)
            self._close_pipes()

    def _close_pipes(self) -> None:
        if self._proc is not None:
            for pipe in (self._proc.stdin, self._proc.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- addresses ----------------------------------------------------------------------------

    def _need(self, name: str) -> str:
        if name not in self._env:
            raise LocalServerError("the server is not started")
        return self._env[name]

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:PORT`` (no trailing slash)."""
        return self._need("LIZARD_API_URL")

    @property
    def api_key(self) -> str:
        """The API key the server accepts."""
        return self._api_key

    @property
    def project_id(self) -> str:
        """The one project's id (``proj_local``)."""
        return self._project_id

    @property
    def ca_file(self) -> str | None:
        """With TLS: the CA certificate file to use as ``SSL_CERT_FILE``."""
        return self._env.get("SSL_CERT_FILE")

    @property
    def env(self) -> dict[str, str]:
        """The ``LIZARD_*`` (and ``SSL_CERT_FILE``) variables that point a client here."""
        return dict(self._env)

    @property
    def isolation(self) -> str:
        """The active isolation mode: ``namespace`` or ``host``."""
        return str(self._info.get("isolation", ""))

    @property
    def instance(self) -> str:
        """The marker value every process of this server carries (``LIZARD_EMU_INSTANCE``)."""
        return str(self._info.get("instance", ""))

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    # --- control API --------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"X-API-Key": self._api_key, "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=30, context=self._ssl) as res:
                return json.loads(res.read() or b"null")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")
            raise LocalServerError(f"{method} {path} -> {exc.code}: {detail}") from exc

    def info(self) -> dict[str, Any]:
        """Mode, templates and settings."""
        return dict(self._call("GET", "/_local/info"))

    def counters(self) -> dict[str, Any]:
        """``{"total", "connections", "routes", "seconds", "server_time"}``: see instrumentation."""
        return dict(self._call("GET", "/_local/counters"))

    def reset_counters(self) -> None:
        """Zero the counters."""
        self._call("POST", "/_local/counters/reset", {})

    def wait_for_request(self, route: str, count: int = 1, timeout: float = 30.0) -> None:
        """Return once ``count`` requests of ``route`` arrived since the counters' reset.

        ``route`` as the counters name it (``"POST /api/sandboxes"``). A request counts when it
        arrives, before any latency set by :meth:`set_latency`: with latency, it is then still
        in flight. ``TimeoutError`` when they have not arrived within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while self.counters()["routes"].get(route, 0) < count:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{count} {route} request(s) did not arrive in {timeout:g} s")
            time.sleep(0.01)

    def set_latency(self, ms: float, connection_ms: float = 0) -> None:
        """Delay every API request by ``ms``, plus ``connection_ms`` once per new connection.

        The delay is paid before the request is handled, so it adds to every response, streamed
        exec included; ``connection_ms`` is paid by the first API request of each connection.
        """
        self._call("POST", "/_local/latency", {"ms": ms, "connectionMs": connection_ms})

    def inject_fault(
        self, route: str, status: int = 503, count: int = 1, retry_after_s: float | None = None
    ) -> None:
        """Answer the next ``count`` requests of ``route`` with ``status``.

        ``route`` is a counter key such as ``"POST /api/sandboxes"``; a 429 carries
        ``retryAfterS`` (``retry_after_s``) and a ``Retry-After`` header.
        """
        body: dict[str, Any] = {"route": route, "status": status, "count": count}
        if retry_after_s is not None:
            body["retryAfterS"] = retry_after_s
        self._call("POST", "/_local/faults", body)

    def inject_stream_drop(self, count: int = 1, after_events: int = 1) -> None:
        """Drop the next ``count`` SSE exec streams after ``after_events`` events."""
        self._call("POST", "/_local/stream-drop", {"count": count, "afterEvents": after_events})

    def configure(self, **settings: Any) -> dict[str, Any]:
        """Change settings and return all of them.

        Names are those of :class:`lizard_local.settings.Settings`, e.g. ``stream_cap_bytes``,
        ``line_split_bytes``, ``keepalive_s``, ``max_body_bytes``.
        """
        return dict(self._call("POST", "/_local/configure", settings))

    def expire(self, sandbox_id: str) -> None:
        """Expire a sandbox now (as its lifetime ending would)."""
        self._call("POST", f"/_local/sandboxes/{sandbox_id}/expire", {})

    def sandboxes(self) -> list[str]:
        """Ids of live sandboxes."""
        return list(self._call("GET", "/_local/sandboxes")["sandboxes"])

    def processes(self) -> list[int]:
        """Host pids of every live process this server started (agents included)."""
        if not self.instance:
            return []
        return procscan.find_marked(f"LIZARD_EMU_INSTANCE={self.instance}".encode())

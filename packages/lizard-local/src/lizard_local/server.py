"""Run the emulator in this process: bind 127.0.0.1, serve with uvicorn, clean up on the way out.

:class:`lizard_local.LocalServer` (:mod:`lizard_local.server_process`) runs this in a child process.

:func:`serve` blocks until SIGINT/SIGTERM/SIGHUP, ``POST /_local/shutdown`` or (with
``exit_on_stdin_eof``) end of file on stdin, which is how a parent process that dies takes the
server with it. Once the address is bound it writes ``export NAME=value`` lines for
``LIZARD_API_URL``, ``LIZARD_API_KEY``, ``LIZARD_PROJECT_ID`` (and ``SSL_CERT_FILE`` with TLS),
then a ``# ready`` line. On exit every sandbox is killed and the state directory removed (by
:func:`lizard_local.host_cleanup.remove_tree`: never across a mount point, never through a link).
The API key is taken as given (the CLI reads it from ``--api-key-fd``, ``--api-key`` or
``LIZARD_LOCAL_API_KEY``) and is never passed on to a sandbox process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from lizard_local import isolation as isolation_mod
from lizard_local.app import ConnectionState, LizardApp, StreamDropped
from lizard_local.host_cleanup import remove_tree
from lizard_local.instrumentation import Instrumentation
from lizard_local.nonblocking import read_ready
from lizard_local.sandboxes import Registry
from lizard_local.settings import Settings

__all__ = ["LOOPBACK", "serve"]

LOOPBACK = "127.0.0.1"
log = logging.getLogger("lizard_local")


def _protocol_class() -> type[asyncio.Protocol]:
    """Uvicorn's HTTP protocol, tagging each connection's requests with one shared state."""
    base: Any = AutoHTTPProtocol

    class CountingProtocol(base):  # type: ignore[misc]
        def connection_made(self, transport: asyncio.Transport) -> None:
            raw = transport.get_extra_info("socket")
            if raw is not None:
                with contextlib.suppress(OSError):
                    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            super().connection_made(transport)
            state = ConnectionState()
            inner: Callable[..., Awaitable[None]] = getattr(self, "app")  # noqa: B009

            async def app(scope: Any, receive: Any, send: Any) -> None:
                scope["lizard.connection"] = state
                await inner(scope, receive, send)

            self.app = app

    return CountingProtocol


class _HideInjectedDrops(logging.Filter):
    """An injected stream drop is on purpose: do not log it as an application error."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, StreamDropped)


def _tls_files(state_dir: Path) -> tuple[str, str, str]:
    """(ca_file, cert_file, key_file) for 127.0.0.1 and localhost, made with trustme."""
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost", "::1")
    ca_file = str(state_dir / "ca.pem")
    cert_file = str(state_dir / "server.pem")
    key_file = str(state_dir / "server.key")
    ca.cert_pem.write_to_path(ca_file)
    cert.private_key_pem.write_to_path(key_file)
    with open(cert_file, "wb") as f:
        for blob in cert.cert_chain_pems:
            f.write(blob.bytes())
    return ca_file, cert_file, key_file


def serve(
    *,
    port: int = 0,
    tls: bool = False,
    latency_ms: float = 0,
    api_key: str | None = None,
    project_id: str = "proj_local",
    isolation: str = "auto",
    exit_on_stdin_eof: bool = False,
    out: IO[str] | None = None,
) -> None:
    """Serve until stopped (see the module docstring)."""
    asyncio.run(
        _serve(
            port=port,
            tls=tls,
            latency_ms=latency_ms,
            api_key=api_key or os.environ.get("LIZARD_LOCAL_API_KEY") or _new_key(),
            project_id=project_id,
            isolation=isolation,
            exit_on_stdin_eof=exit_on_stdin_eof,
            out=out or sys.stdout,
        )
    )


def _new_key() -> str:
    return "lzl_" + secrets.token_hex(16)


async def _serve(
    *,
    port: int,
    tls: bool,
    latency_ms: float,
    api_key: str,
    project_id: str,
    isolation: str,
    exit_on_stdin_eof: bool,
    out: IO[str],
) -> None:
    parent = _state_parent()
    await asyncio.to_thread(_remove_stale_state, Path(parent))
    state_dir = Path(tempfile.mkdtemp(prefix="lizard-local-", dir=parent))
    (state_dir / "server.pid").write_text(str(os.getpid()))
    os.chmod(state_dir, 0o755)  # templates inside must be reachable by the sandbox account
    registry: Registry | None = None
    try:
        iso = await asyncio.to_thread(isolation_mod.prepare, isolation, state_dir)
        registry = Registry(iso, secrets.token_hex(8), project_id)
        instr = Instrumentation(latency_s=latency_ms / 1000)
        server_box: list[uvicorn.Server] = []

        def request_exit() -> None:
            if server_box:
                server_box[0].should_exit = True

        app = LizardApp(
            registry,
            iso,
            api_key=api_key,
            project_id=project_id,
            settings=Settings(),
            instrumentation=instr,
            on_shutdown=request_exit,
        )
        # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when the
        # socket says it is TCP, and without it every response waits ~40 ms for a delayed ACK.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOOPBACK, port))
        sock.listen(4096)  # listening before "# ready" is printed: the first call must connect
        bound_port = sock.getsockname()[1]
        ssl_args: dict[str, Any] = {}
        ca_file = None
        if tls:
            ca_file, cert_file, key_file = _tls_files(state_dir)
            ssl_args = {"ssl_certfile": cert_file, "ssl_keyfile": key_file}
        config = uvicorn.Config(
            app,
            lifespan="off",
            log_level="warning",
            access_log=False,
            http=_protocol_class(),
            backlog=4096,
            timeout_graceful_shutdown=3,
            timeout_keep_alive=5,
            **ssl_args,
        )
        logging.getLogger("uvicorn.error").addFilter(_HideInjectedDrops())
        server = uvicorn.Server(config)
        server_box.append(server)
        # Our own handlers stay installed under uvicorn's, so the signal it re-raises after
        # serving lands here instead of killing the process before the clean-up below.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda *_: request_exit())
        loop = asyncio.get_running_loop()
        if exit_on_stdin_eof:
            _watch_stdin(loop, request_exit)
        scheme = "https" if tls else "http"
        lines = [
            f"export LIZARD_API_URL={scheme}://{LOOPBACK}:{bound_port}",
            f"export LIZARD_API_KEY={api_key}",
            f"export LIZARD_PROJECT_ID={project_id}",
        ]
        if ca_file:
            lines.append(f"export SSL_CERT_FILE={ca_file}")
        jupyter = iso.templates["interpreter"].has_jupyter
        lines.append(
            f"# lizard-local: isolation={iso.mode}, templates=base,interpreter"
            f"{'' if jupyter else ' (no Jupyter found: run_code will not keep state)'}"
            f", instance={registry.instance}"
        )
        lines.append("# ready")
        out.write("\n".join(lines) + "\n")
        out.flush()
        await server.serve(sockets=[sock])
    finally:
        if registry is not None:
            await registry.shutdown()
        remove_tree(state_dir)


def _state_parent() -> str:
    """Where the state directory goes.

    Not under a sandbox-private path such as /tmp when avoidable, so sandboxes never see it.
    """
    override = os.environ.get("LIZARD_LOCAL_STATE_DIR")
    if override:
        os.makedirs(override, exist_ok=True)
        return override
    default = tempfile.gettempdir()
    private = isolation_mod.PRIVATE_DIRS
    if not any(default == d or default.startswith(d + "/") for d in private):
        return default
    for candidate in ("/var/tmp", "/dev/shm"):
        if os.path.isdir(candidate) and os.access(candidate, os.W_OK | os.X_OK):
            return candidate
    return default


def _remove_stale_state(parent: Path) -> None:
    """Remove state directories of servers that were killed before they could clean up."""
    for candidate in parent.glob("lizard-local-*"):
        try:
            pid = int((candidate / "server.pid").read_text())
        except (OSError, ValueError):
            continue  # not ours, or a server still starting
        try:
            os.kill(pid, 0)
            continue  # that server is alive
        except ProcessLookupError:
            pass
        except OSError:
            continue
        remove_tree(candidate)


def _watch_stdin(loop: asyncio.AbstractEventLoop, on_eof: Callable[[], None]) -> None:
    fd = sys.stdin.fileno()

    def readable() -> None:
        data = read_ready(fd, 4096)
        if data is None:
            return
        if not data:
            loop.remove_reader(fd)
            on_eof()

    with contextlib.suppress(OSError, ValueError):
        os.set_blocking(fd, False)
        loop.add_reader(fd, readable)

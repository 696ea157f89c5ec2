"""One pooled HTTP connection per session for the hot paths: the streaming exec and files.

lizard-sdk sends every request through a module-level ``httpx`` call, which opens a new
connection and builds a new SSL context each time (``docs/performance.md`` counts them). A
:class:`Transport` holds one ``httpx.Client`` per :class:`~lizard_core.session.Session`
instead, so consecutive commands and file operations of a session reuse one kept-alive
connection. Contract:

- **The hot paths and the create.** :meth:`Transport.exec_stream` (the streaming exec of the
  guest protocol), :meth:`Transport.read_bytes` (``GET files``), :meth:`Transport.write_bytes`
  (``POST files``, base64), and :meth:`Transport.api_request` for the create
  (:mod:`lizard_core._create`), so a new sandbox's first exec reuses the create's connection
  instead of opening (and handshaking) a second one. The other lifecycle calls (connect, kill,
  set_timeout, get_info, pause) stay on the SDK.
- **The SDK's wire contract, exactly** (``lizard/sandbox/process.py`` and ``fs.py``): the same
  URLs (``{api_url}/api/sandboxes/{id}/exec`` and ``.../files``), headers (``X-API-Key``,
  ``Content-Type: application/json``, and ``Accept: text/event-stream`` for the exec), JSON
  bodies (``cmd``, ``timeoutMs``, ``pidEvent``; ``path``, ``content``, ``encoding``), query
  (``path``) and SSE parsing (``data:`` lines, non-JSON frames skipped, ``line``/``stream``,
  ``pid`` and ``exitCode`` events). Timeouts are the SDK's: ``timeout_ms / 1000`` (default
  60 s) for an exec, 60 s for files, each as httpx's per-operation (connect, read, write,
  pool) limit. The one addition: :meth:`Transport.read_bytes` can bound the wait for the
  response's headers more tightly (``headers_timeout``), which the SDK never does.
- **The SDK's errors.** A non-2xx response is read and handed to lizard-sdk's own
  ``lizard.errors.handle_api_error``, so it raises the same ``lizard`` exception the SDK would
  (and :func:`lizard_core.errors.translate` maps it unchanged); httpx transport errors
  propagate as they are. Headers that miss a ``headers_timeout`` raise
  :class:`ReadAbandonedError`, which is not an httpx error, so it is neither translated nor
  retried.
- **One SSL context per process.** httpx builds a context per client (loading the CA bundle:
  about 20 ms of CPU); every Transport shares one, built as httpx builds it (``SSL_CERT_FILE``,
  else ``SSL_CERT_DIR``, else certifi) and built again when either variable changes or the
  bundle it loaded changes on disk (its size, modification time or inode), so a CA bundle
  updated in place is trusted by the next session, as it was when each client loaded it.
- **Forks.** A child process forked while a transport holds a connection never uses or closes
  the parent's (two processes on one socket would read each other's answers): its first use
  in the child starts a client of its own, and :meth:`close` there drops the parent's unused.
- **Lifecycle.** The client is created on first use, once, however many threads ask; requests
  from several threads share its pool (httpx's ``Client`` is thread-safe). :meth:`close`
  closes it; a transport used after ``close`` raises
  :class:`~lizard_core.errors.SandboxGoneError`, like the session it belongs to. Idle
  connections are dropped after :data:`KEEPALIVE_S`, below common servers' keep-alive
  timeouts (uvicorn: 5 s), so a reused connection is rarely one the server is closing.
- **Credentials.** The API key goes only into the ``X-API-Key`` header; ``repr`` shows the URL
  alone, and no log or error text carries the key.
"""

from __future__ import annotations

import base64
import contextlib
import gc
import io
import json
import os
import socket
import ssl
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

import certifi
import httpx
import lizard.config
from lizard import ProcessResult
from lizard.errors import handle_api_error

from lizard_core._lines import bounded_lines
from lizard_core.errors import ReadAbandonedError, SandboxGoneError

__all__ = [
    "FILES_TIMEOUT_S",
    "KEEPALIVE_S",
    "MAX_EVENT_LINE",
    "ReadAbandonedError",
    "Transport",
    "shared_ssl_context",
]

FILES_TIMEOUT_S: Final = 60.0
"""The SDK's ``HTTP_TIMEOUT_S`` for files requests."""
GC_AFTER_BYTES: Final = 1 << 20
"""Uploads at least this large free their body at once (see :meth:`Transport.write_bytes`)."""
KEEPALIVE_S: Final = 4.0
"""How long an idle pooled connection is kept for reuse."""
MAX_EVENT_LINE: Final = 4 * 1024 * 1024
"""Longest server-sent event line read from an exec stream (the platform splits output lines at
64 KiB, which JSON escaping can grow sixfold)."""
_DEFAULT_EXEC_TIMEOUT_MS: Final = 60_000

# Module locks a fork could inherit held (by another thread of the parent): made anew in the child.
_SSL_LOCK = threading.Lock()
_FORK_LOCK = threading.Lock()
_ssl_cache: tuple[tuple[object, ...], ssl.SSLContext] | None = None


def _after_fork_in_child() -> None:
    global _SSL_LOCK, _FORK_LOCK
    _SSL_LOCK = threading.Lock()
    _FORK_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _ssl_key() -> tuple[object, ...]:
    """What the context httpx would build depends on: its variables and the bundle's file."""
    cert_file = os.environ.get("SSL_CERT_FILE") or None
    cert_dir = os.environ.get("SSL_CERT_DIR") or None
    source = cert_file or cert_dir or certifi.where()
    try:
        st = os.stat(source)
        stamp: tuple[int, ...] = (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        stamp = ()  # httpx's own load reports it
    return (cert_file, cert_dir, source, stamp)


def shared_ssl_context() -> ssl.SSLContext:
    """The process's SSL context for the Lizard API, as httpx's default client would build it.

    Loading a CA bundle costs about 20 ms of CPU, which httpx pays for every client; one
    context serves every session (an ``SSLContext`` is safe to share between threads). The
    variables httpx reads and the loaded bundle's size, modification time and inode are its
    key, so setting ``SSL_CERT_FILE`` later, or updating the bundle in place, still counts.
    """
    global _ssl_cache
    key = _ssl_key()
    with _SSL_LOCK:
        if _ssl_cache is None or _ssl_cache[0] != key:
            _ssl_cache = (key, httpx.create_ssl_context(verify=True, trust_env=True))
        return _ssl_cache[1]


class Transport:
    """A lazily created, thread-safe pooled ``httpx.Client`` for one session's hot paths."""

    def __init__(self, api_url: str, api_key: str) -> None:
        self._api_url = api_url
        # The SDK's ConnectionConfig.headers, exactly; the key lives here and nowhere else.
        self._headers: Final = {"X-API-Key": api_key, "Content-Type": "application/json"}
        self._lock = threading.Lock()
        self._client: httpx.Client | None = None
        self._closed = False
        self._pid = os.getpid()  # the process whose connections the client holds

    def __repr__(self) -> str:
        with self._own_lock():
            state = "closed" if self._closed else "open" if self._client else "lazy"
        return f"Transport(api_url={self._api_url!r}, state={state})"

    def _own_lock(self) -> threading.Lock:
        """The lock, after forgetting a forked parent's client (and maybe held lock) in a child."""
        if self._pid != os.getpid():
            with _FORK_LOCK:
                if self._pid != os.getpid():
                    # Neither used nor closed: its sockets are the parent's (closing one over
                    # TLS would write to it); the parent's threads, and their locks, are gone.
                    self._client = None
                    self._lock = threading.Lock()
                    self._pid = os.getpid()
        return self._lock

    def _get_client(self) -> httpx.Client:
        with self._own_lock():
            if self._closed:
                raise SandboxGoneError("This session was destroyed or closed; start a new Session.")
            if self._client is None:
                # httpx's defaults otherwise, as the SDK's module-level calls use them (trust
                # env, certifi, no redirects), so TLS and proxies behave as before.
                self._client = httpx.Client(
                    verify=shared_ssl_context(),
                    limits=httpx.Limits(keepalive_expiry=KEEPALIVE_S),
                )
            return self._client

    def api_request(
        self, method: str, path: str, *, json_body: dict[str, Any] | None = None
    ) -> httpx.Response:
        """One account-level request (``{api_url}{path}``) on the pool, read whole.

        The SDK's headers and limit (``HTTP_TIMEOUT_S``, 60 s); the response is returned
        whatever its status (the caller hands a failure to ``handle_api_error``, as the SDK
        does).
        """
        return self._get_client().request(
            method,
            f"{self._api_url}{path}",
            headers=self._headers,
            json=json_body,
            timeout=lizard.config.HTTP_TIMEOUT_S,
        )

    def _url(self, sandbox_id: str, route: str) -> str:
        return f"{self._api_url}/api/sandboxes/{sandbox_id}/{route}"

    def exec_stream(
        self,
        sandbox_id: str,
        cmd: Sequence[str],
        *,
        timeout_ms: int | None = None,
        on_stdout: Callable[[str], None] | None = None,
        on_stderr: Callable[[str], None] | None = None,
        on_pid: Callable[[int], None] | None = None,
        on_abortable: Callable[[Callable[[], None]], None] | None = None,
        collect: bool = True,
    ) -> ProcessResult:
        """``sandbox.process.exec_(cmd, timeout_ms=..., on_stdout=..., ...)`` over the pool.

        Three additions for a stream from untrusted code over a faulty network: every event
        line is bounded by :data:`MAX_EVENT_LINE` (:class:`~lizard_core._lines.LineTooLongError`
        past it); ``collect=False`` leaves the lines out of the result (its ``stdout``/``stderr``
        stay empty) for a caller that reads them through the callbacks and must not hold them
        all; ``on_abortable`` receives, once the response has started, a function that any
        thread may call to cut the stream off (the reading thread then fails at once), so that a
        caller that gave up on a stalled stream does not leave this thread reading it.
        """
        body: dict[str, Any] = {"cmd": [str(a) for a in cmd]}
        if timeout_ms:
            body["timeoutMs"] = timeout_ms
        if on_pid is not None:
            body["pidEvent"] = True
        timeout = (timeout_ms or _DEFAULT_EXEC_TIMEOUT_MS) / 1000
        headers = {**self._headers, "Accept": "text/event-stream"}
        stdout_parts: list[str] = []
        stderr_parts: list[str] = []
        exit_code = 0
        client = self._get_client()
        with client.stream(
            "POST", self._url(sandbox_id, "exec"), headers=headers, json=body, timeout=timeout
        ) as res:
            if not res.is_success:
                res.read()
                handle_api_error(res.status_code, res.text)
            cutter = _Cutter(res)
            if on_abortable is not None:
                on_abortable(cutter.cut)
            for line in bounded_lines(cutter.chunks(), MAX_EVENT_LINE, what="The exec stream"):
                # httpx's iter_lines also ends a line at a lone \r; JSON data never holds one.
                for raw in line.decode("utf-8", "replace").split("\r"):
                    if not raw.startswith("data:"):
                        continue
                    try:
                        ev = json.loads(raw[5:].strip())
                    except ValueError:
                        continue  # a partial or non-JSON keepalive frame, as the SDK skips it
                    if not isinstance(ev, dict):
                        continue  # the SDK would fail on .get(); such a frame carries nothing
                    text = ev.get("line")
                    if isinstance(text, str):
                        is_err = ev.get("stream") == "stderr"
                        if collect:
                            (stderr_parts if is_err else stdout_parts).append(text)
                        callback = on_stderr if is_err else on_stdout
                        if callback is not None:
                            callback(text)
                    if ev.get("pid") is not None and on_pid is not None:
                        on_pid(ev["pid"])
                    if ev.get("exitCode") is not None:
                        exit_code = ev["exitCode"]
        return ProcessResult(
            stdout="\n".join(stdout_parts), stderr="\n".join(stderr_parts), exit_code=exit_code
        )

    def read_bytes(
        self, sandbox_id: str, path: str, *, headers_timeout: float | None = None
    ) -> bytes:
        """``sandbox.fs.read_bytes(path)`` over the pool: one ``GET files``.

        The body is streamed into one buffer, sized from ``Content-Length`` when there is one,
        whose bytes are returned without a final copy (``BytesIO.getvalue``), so a large file is
        held once, not twice, and without a growth margin.

        ``headers_timeout`` (seconds), when given, guards a read of a path not known to be a
        regular file: it replaces the 60 s read limit while the response's headers are awaited;
        once they have arrived the body is read under the SDK's 60 s limit again. Headers that
        do not arrive in time abandon the request (httpx closes its connection, which tells the
        server) and raise :class:`ReadAbandonedError`, and so does a successful answer without a
        ``Content-Length``: a device such as ``/dev/zero`` could stream it without end.
        """
        res = self._open_files(sandbox_id, path, headers_timeout)
        try:
            if headers_timeout is not None and "content-length" not in res.headers:
                raise ReadAbandonedError("The file came without a length; it was not read.")
            buffer = io.BytesIO()
            length = res.headers.get("content-length", "")
            if length.isdigit() and int(length) > 1 and "content-encoding" not in res.headers:
                # Sized at once: growing as pieces arrive over-allocates by an eighth of the file.
                buffer.seek(int(length) - 1)
                buffer.write(b"\0")
                buffer.seek(0)
            for piece in res.iter_bytes():
                buffer.write(piece)
            buffer.truncate()  # what arrived, should the body be shorter than announced
        finally:
            res.close()
        return buffer.getvalue()

    def open_bounded(
        self, sandbox_id: str, path: str, *, max_bytes: int, headers_timeout: float
    ) -> httpx.Response:
        """``GET files`` of a file the guest named, opened for streaming; the caller closes it.

        Nothing about the file is trusted before it is read: headers that do not come within
        ``headers_timeout`` (a FIFO), a body without ``Content-Length`` (a device) or one that
        announces more than ``max_bytes`` abandon the request with :class:`ReadAbandonedError`
        before a byte of the body is read, and no buffer is ever sized from the header. Read
        the body with :meth:`iter_bounded`, which holds the same limit should the body run on.
        """
        res = self._open_files(sandbox_id, path, headers_timeout)
        try:
            length = res.headers.get("content-length", "")
            if not length.isdigit():
                raise ReadAbandonedError("The file came without a length; it was not read.")
            if int(length) > max_bytes:
                raise ReadAbandonedError(
                    f"The file is {int(length):,} bytes, over the {max_bytes:,} bytes this read "
                    "allows; it was not read."
                )
        except BaseException:
            res.close()
            raise
        return res

    def _open_files(
        self, sandbox_id: str, path: str, headers_timeout: float | None
    ) -> httpx.Response:
        """Send ``GET files`` and return its streaming response once it answered with success.

        With ``headers_timeout``, headers late past it abandon the request
        (:class:`ReadAbandonedError`); the body is then read under the SDK's 60 s limit again.
        """
        client = self._get_client()
        request = client.build_request(
            "GET",
            self._url(sandbox_id, "files"),
            headers=self._headers,
            params={"path": path},
            timeout=FILES_TIMEOUT_S
            if headers_timeout is None
            else httpx.Timeout(FILES_TIMEOUT_S, read=headers_timeout),
        )
        try:
            res = client.send(request, stream=True)
        except httpx.ReadTimeout:
            if headers_timeout is None:
                raise
            raise ReadAbandonedError(
                f"No response headers within {headers_timeout:g} s; the request was abandoned."
            ) from None
        try:
            # httpcore reads this limit anew when the body starts: 60 s for it, not the guard.
            res.request.extensions["timeout"]["read"] = FILES_TIMEOUT_S
            if not res.is_success:
                res.read()
                handle_api_error(res.status_code, res.text)
        except BaseException:
            res.close()
            raise
        return res

    @staticmethod
    def iter_bounded(res: httpx.Response, max_bytes: int) -> Iterator[bytes]:
        """The body of a response from :meth:`open_bounded`, stopped past ``max_bytes``."""
        seen = 0
        for piece in res.iter_bytes():
            seen += len(piece)
            if seen > max_bytes:
                raise ReadAbandonedError(f"The file ran past {max_bytes:,} bytes; it was not read.")
            yield piece

    def write_bytes(self, sandbox_id: str, path: str, data: bytes) -> None:
        """``sandbox.fs.write(path, data)`` for bytes over the pool: one ``POST files``.

        The JSON body is assembled as bytes around the base64 form (the same document the SDK
        sends), so a chunk costs one encoded copy rather than three. httpx keeps a request and
        its response in a reference cycle, and the request keeps its body; large bodies do not
        trigger the garbage collector, so after a large upload it is run here, which keeps a
        chunked upload's memory at one chunk instead of growing with the file.
        """
        body = b"".join(
            (
                b'{"path": ',
                json.dumps(path).encode("utf-8"),
                b', "content": "',
                base64.b64encode(data),
                b'", "encoding": "base64"}',
            )
        )
        res = self._get_client().post(
            self._url(sandbox_id, "files"),
            headers=self._headers,
            content=body,
            timeout=FILES_TIMEOUT_S,
        )
        large = len(body) >= GC_AFTER_BYTES
        del body
        try:
            if not res.is_success:
                handle_api_error(res.status_code, res.text)
        finally:
            del res
            if large:
                gc.collect()

    def close(self) -> None:
        """Close the pool (idempotent); later use raises SandboxGoneError."""
        with self._own_lock():
            client, self._client = self._client, None
            self._closed = True
        if client is not None:
            client.close()


class _Cutter:
    """Cuts a streamed response off from another thread, but only while it is being read.

    Once its lines are all read, the connection goes back to the pool and may carry another
    request: the lock keeps a late cut from shutting that one down. (A response left unread
    is closed with its connection, so a cut after that finds a closed socket and does nothing.)
    """

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._lock = threading.Lock()
        self._reading = True

    def chunks(self) -> Iterator[bytes]:
        try:
            yield from self._response.iter_bytes()
        finally:
            with self._lock:
                self._reading = False

    def cut(self) -> None:
        """Shut the socket down: a read blocked on it in another thread fails at once."""
        with self._lock:
            if not self._reading:
                return
            stream = self._response.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if isinstance(sock, socket.socket):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

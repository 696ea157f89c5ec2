"""An exposed port: a loopback listener that checks the access token, then relays to the port.

The platform publishes a sandbox port on an HTTPS hostname and lets through only requests that
carry the port's token: the ``X-Lizard-Access-Token`` header, or ``?lizard_token=`` once (a
browser then gets a cookie). Here the hostname is ``127.0.0.1:<listener>``, plain HTTP. The
first request of each connection is checked (its head read up to :data:`MAX_HEAD` bytes);
without the token it is answered 401 and the connection closed, with it the connection is
relayed both ways to ``127.0.0.1:<port>``, where a sandbox with internet shares the host's
network. A ``?lizard_token=`` request gets a ``lizard_token`` cookie, and the cookie counts.

Bounded: at most :data:`MAX_CONNECTIONS` connections at once per exposed port (more are
answered 503 and closed), and a request head that has not arrived within
:data:`HEAD_TIMEOUT_S` closes its connection, so idle or slow clients cannot hold sockets and
tasks without end.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from urllib.parse import parse_qs, urlsplit

__all__ = ["HEAD_TIMEOUT_S", "MAX_CONNECTIONS", "MAX_HEAD", "PortProxy"]

MAX_HEAD = 64 * 1024
MAX_CONNECTIONS = 64
"""Connections one exposed port serves at once."""
HEAD_TIMEOUT_S = 10.0
"""How long a connection may take to send its first request's head."""
_COOKIE = "lizard_token"


def _token_of(head: bytes) -> tuple[str | None, bool]:
    """(token found in the request head, whether it came as the query parameter)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) >= 2:
        query = parse_qs(urlsplit(parts[1]).query)
        if query.get(_COOKIE):
            return query[_COOKIE][0], True
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "x-lizard-access-token":
            return value.strip(), False
        if name == "cookie":
            for item in value.split(";"):
                key, _, val = item.strip().partition("=")
                if key == _COOKIE:
                    return val, False
    return None, False


class PortProxy:
    """One exposed port of one sandbox."""

    def __init__(
        self,
        port: int,
        token: str,
        *,
        max_connections: int = MAX_CONNECTIONS,
        head_timeout_s: float = HEAD_TIMEOUT_S,
    ) -> None:
        self.port = port
        self.token = token
        self.max_connections = max_connections
        self.head_timeout_s = head_timeout_s
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        """Listen on a free loopback port; return it."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=MAX_HEAD)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening and cut every relayed connection."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._tasks):
            task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._tasks) >= self.max_connections:
            with contextlib.suppress(OSError):
                writer.write(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 20\r\n"
                    b"Connection: close\r\n\r\ntoo many connections"
                )
                writer.close()
            return
        self._tasks.add(task)
        try:
            await self._relay(reader, writer)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.head_timeout_s)
        token, from_query = _token_of(head)
        if token is None or not hmac.compare_digest(token.encode(), self.token.encode()):
            writer.write(
                b"HTTP/1.1 401 Unauthorized\r\nContent-Type: text/plain\r\n"
                b"Content-Length: 22\r\nConnection: close\r\n\r\nmissing or wrong token"
            )
            await writer.drain()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            writer.write(
                b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 28\r\nConnection: close\r\n\r\n"
                b"nothing listens on that port"
            )
            await writer.drain()
            return
        cookie = f"Set-Cookie: {_COOKIE}={self.token}; HttpOnly; Path=/\r\n".encode()
        try:
            up_writer.write(head)
            await asyncio.gather(
                _pipe(reader, up_writer),
                _pipe(up_reader, writer, after_status_line=cookie if from_query else None),
            )
        finally:
            up_writer.close()


async def _pipe(
    src: asyncio.StreamReader, dst: asyncio.StreamWriter, after_status_line: bytes | None = None
) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        if after_status_line is not None:
            status = await src.readuntil(b"\r\n")
            dst.write(status + after_status_line)
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    with contextlib.suppress(OSError):
        if dst.can_write_eof():
            dst.write_eof()

"""An emulated network link in front of lizard-local: TLS on the client side, latency that adds up.

Why it exists: a real link delays what it carries, chunk by chunk, whatever the request.
lizard-local's own injection (``set_latency``) delays each request once, before its handler runs;
this relay delays every chunk of every answer, streamed or not, and gives the clients the TLS
that 0.1.0's packages require.

:class:`Link` listens on 127.0.0.1 with TLS (a certificate from its own throwaway CA, so clients
that require https work) and relays every connection to lizard-local over plain TCP, one
upstream connection per client connection, so lizard-local's request and connection counters
stay exact. Latency, settable at any time with :meth:`Link.set_latency`:

- ``response_ms``: every chunk from the server reaches the client that much later, in order
  (a request-response pays it once; a stream's end arrives that much after the command ended);
- ``connection_ms``: the first request of every new connection reaches the server that much
  later (the handshakes of a client that never reuses connections). The TLS handshake itself is
  real and costs what it costs.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Final

__all__ = ["Link"]

CHUNK: Final = 256 * 1024


class Link:
    """A TLS-terminating, latency-adding TCP relay to ``127.0.0.1:upstream_port``."""

    def __init__(self, upstream_port: int, directory: Path) -> None:
        import trustme  # lizard-local's TLS dependency, so it is installed wherever it is

        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = str(directory / "link-ca.pem")
        ca.cert_pem.write_to_path(self.ca_file)
        self._ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(self._ssl)
        self._upstream_port = upstream_port
        self._response_s = 0.0
        self._connection_s = 0.0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    @property
    def url(self) -> str:
        """``https://127.0.0.1:PORT``: what clients use as ``LIZARD_API_URL``."""
        return f"https://127.0.0.1:{self.port}"

    def set_latency(self, response_ms: float, connection_ms: float = 0.0) -> None:
        """Delays for every later chunk and new connection (read as they happen)."""
        if response_ms < 0 or connection_ms < 0:
            raise ValueError("latencies must not be negative")
        self._response_s = response_ms / 1000
        self._connection_s = connection_ms / 1000

    def start(self) -> Link:
        """Listen, relaying in a thread of its own."""
        started = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._relay, "127.0.0.1", 0, ssl=self._ssl, backlog=1024)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            started.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name="bench-link", daemon=True)
        self._thread.start()
        if not started.wait(30):
            raise RuntimeError("the link did not start")
        return self

    def stop(self) -> None:
        """Stop listening and close every connection."""
        if self._thread is None:
            return

        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            for writer in list(self._writers):
                writer.close()  # the relays see their streams end and finish on their own
            relays = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if relays:
                _, pending = await asyncio.wait(relays, timeout=5)
                for task in pending:
                    task.cancel()  # _relay ends quietly when cancelled
                if pending:
                    await asyncio.wait(pending, timeout=5)

        done = asyncio.run_coroutine_threadsafe(shutdown(), self._loop)
        with contextlib.suppress(Exception):
            done.result(15)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(15)
        if not self._thread.is_alive():
            self._loop.close()
        self._thread = None

    def __enter__(self) -> Link:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        # A cancelled relay (only at stop) returns instead of raising: asyncio's server logs a
        # connection callback that ends with an exception, cancellation included.
        with contextlib.suppress(asyncio.CancelledError):
            await self._relay_streams(client_r, client_w)

    async def _relay_streams(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
    ) -> None:
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self._upstream_port)
        except OSError:
            client_w.close()
            return
        self._writers.update((client_w, server_w))
        for writer in (client_w, server_w):
            raw = writer.get_extra_info("socket")
            if raw is not None:
                with contextlib.suppress(OSError):
                    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream = asyncio.create_task(self._to_server(client_r, server_w))
        downstream = asyncio.create_task(self._to_client(server_r, client_w))
        try:
            await asyncio.wait([upstream, downstream], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (upstream, downstream):
                task.cancel()
            await asyncio.gather(upstream, downstream, return_exceptions=True)
            for writer in (client_w, server_w):
                self._writers.discard(writer)
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()

    async def _to_server(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = True
        while data := await reader.read(CHUNK):
            if first:
                first = False
                if self._connection_s:
                    await asyncio.sleep(self._connection_s)
            writer.write(data)
            await writer.drain()

    async def _to_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Chunks keep their spacing and order, each delivered response_s after it arrived.
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(deliver())
        try:
            while True:
                data = await reader.read(CHUNK)
                queue.put_nowait((time.monotonic() + self._response_s, data))
                if not data:
                    break
            await sender
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender

"""A loopback stand-in for the Lizard cloud that answers what lizard-local never would.

lizard-local speaks the API correctly; a few fault paths need answers it does not give (a 404
without a code, a 2xx whose body is not a sandbox record). This server answers each
``(method, path)`` with a fixed status and body, and 404 with a code for anything else.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class StubApi:
    """``routes[("GET", "/api/sandboxes/x")] = (200, body)``; ``url`` for ``api_url``.

    ``body`` is JSON data, raw bytes, or a callable given the request handler to answer with.
    """

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], tuple[int, Any]] = {}
        self.seen: list[tuple[str, str]] = []
        # Every request whole: method, path with its query, headers, body.
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length)
                path = self.path.split("?", 1)[0]
                stub.seen.append((self.command, path))
                stub.requests.append((self.command, self.path, dict(self.headers), data))
                status, body = stub.routes.get(
                    (self.command, path), (404, {"error": "no route", "code": "NOT_FOUND"})
                )
                if callable(body):
                    body(self)  # answers by itself (a stream that stalls, ...)
                    return
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> StubApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

"""Exposed ports: reach a server the sandbox runs, by URL and access token.

As lizard-sdk 1.0.23 describes the platform's ``expose_port``: the port is published on an
HTTPS hostname and every request needs its token, as the ``X-Lizard-Access-Token`` header or
once as ``?lizard_token=`` (a browser then keeps a cookie). Contract
(``tests/test_ports.py``, against lizard-local):

- The port is checked (1..65535) and a configuration without internet access refused
  (:class:`ValueError`: the platform refuses to expose such a sandbox's ports) before any
  request. :func:`expose_port` is one ``POST`` (idempotent: retried on transient failures),
  :func:`unexpose_port` one ``DELETE``.
- **The token is a secret.** It is registered with lizard_core's redaction the moment it
  arrives, so it never reaches a log line or error text; :class:`ExposedPort`'s ``repr`` shows
  the hostname and port only, and :attr:`ExposedPort.url` (which carries it) is for a browser.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from lizard_core._bridge import run_blocking
from lizard_core._redact import register_secret
from lizard_core.errors import malformed_answer
from lizard_core.session import Session

__all__ = ["ExposedPort", "aexpose_port", "aunexpose_port", "expose_port", "unexpose_port"]


@dataclass(frozen=True)
class ExposedPort:
    """A published sandbox port. Send :attr:`token` as the ``X-Lizard-Access-Token`` header."""

    port: int
    """The sandbox's port."""
    hostname: str
    """The public hostname, without a scheme."""
    url: str = field(repr=False)
    """A browser URL that carries the token."""
    token: str = field(repr=False)
    """The access token every request needs."""

    @property
    def origin(self) -> tuple[str, int, bool]:
        """``(host, port, tls)`` of :attr:`url`, for a client that builds its own URLs.

        ``ValueError`` if the platform's URL has no hostname.
        """
        url = urlsplit(self.url)
        if not url.hostname:
            raise ValueError("the platform's URL for the port has no hostname")
        tls = url.scheme == "https"
        return url.hostname, url.port or (443 if tls else 80), tls

    @property
    def headers(self) -> dict[str, str]:
        """The header that opens the port, for an HTTP client."""
        return {"X-Lizard-Access-Token": self.token}


def _check_port(session: Session, port: object) -> int:
    if not isinstance(session, Session):
        raise TypeError(f"session must be a Session, not {type(session).__name__}")
    if isinstance(port, bool) or not isinstance(port, int):
        raise TypeError(f"port must be an int, not {type(port).__name__}")
    if not 1 <= port <= 65535:
        raise ValueError(f"port must be 1..65535, not {port}")
    return port


def expose_port(session: Session, port: int) -> ExposedPort:
    """Publish the sandbox's ``port`` and return how to reach it (blocking)."""
    _check_port(session, port)
    if not session.config.internet_access:
        raise ValueError("a sandbox without internet access cannot expose ports")
    sandbox = session.sandbox()
    exposed = session.call(sandbox.expose_port, port, idempotent=True)
    token = getattr(exposed, "access_token", None)
    hostname = getattr(exposed, "hostname", None)
    url = getattr(exposed, "url", None)
    if token:
        register_secret(str(token))
    if not isinstance(hostname, str) or not isinstance(url, str) or not isinstance(token, str):
        raise malformed_answer("port exposure", TypeError("missing hostname, url or token"))
    return ExposedPort(port=port, hostname=hostname, url=url, token=token)


def unexpose_port(session: Session, port: int) -> None:
    """Stop publishing ``port`` (blocking)."""
    _check_port(session, port)
    sandbox = session.sandbox()
    session.call(sandbox.unexpose, port, idempotent=True)


async def aexpose_port(session: Session, port: int) -> ExposedPort:
    """Async :func:`expose_port`."""
    return await run_blocking(expose_port, session, port)


async def aunexpose_port(session: Session, port: int) -> None:
    """Async :func:`unexpose_port`."""
    await run_blocking(unexpose_port, session, port)

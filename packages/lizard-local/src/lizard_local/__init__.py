"""lizard-local: a loopback emulator of the Lizard Sandboxes API for offline development and tests.

It is a development tool: it binds 127.0.0.1 only and is not a security boundary. Start it with
the ``lizard-local serve`` command, :class:`LocalServer` from Python, or the pytest plugin's
``lizard_local`` fixture.
"""

from lizard_local.server_process import LocalServer, LocalServerError

__all__ = ["LocalServer", "LocalServerError"]

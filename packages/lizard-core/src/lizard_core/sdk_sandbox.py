"""A :class:`~lizard_core.session.Session` on a ``lizard.Sandbox`` that the caller already holds.

Some adapters' earlier releases took a sandbox made with lizard-sdk (``Sandbox.create`` or
``Sandbox.connect``) and left its lifetime to the caller. :func:`session_for_sdk_sandbox` keeps
that working on the core.

Contract (proven against lizard-local in ``tests/test_sdk_sandbox.py``):

- **No I/O.** It reads the sandbox's id and the credentials the caller gave the SDK (its API key
  and URL, which already passed the SDK's own defaults from ``LIZARD_API_KEY`` and
  ``LIZARD_API_URL``) and makes no request. Anything but a ``lizard.Sandbox`` is a
  :class:`TypeError`; a URL the core refuses (plain HTTP off loopback) a :class:`ValueError`.
- **Attach, never own.** The session attaches to that sandbox on first use (one ``GET``, like any
  attach) and leaves it running when the session is closed or leaves a ``with`` block
  (``destroy_on_exit=False``); only an explicit :meth:`Session.destroy` kills it. A sandbox that
  is gone raises :class:`~lizard_core.errors.SandboxGoneError` and is never replaced.
- **Credentials** stay where they were: the key becomes the configuration's
  :class:`~lizard_core._redact.Secret`, redacted from ``repr``, logs and errors like any other.
"""

from __future__ import annotations

from typing import Any

from lizard import Sandbox

from lizard_core.config import SandboxConfig
from lizard_core.session import Session

__all__ = ["session_for_sdk_sandbox"]


def session_for_sdk_sandbox(
    sandbox: Any,
    *,
    keep_alive: bool = False,
    integration: str = "lizard-core",
    integration_version: str | None = None,
) -> Session:
    """Return a session attached to ``sandbox`` (a ``lizard.Sandbox``) that never kills it.

    ``keep_alive`` extends the sandbox's lifetime while the session is used. See the module
    docstring for the contract.
    """
    api_key, api_url = _credentials(sandbox)
    config = SandboxConfig.from_env(
        api_key=api_key,
        api_url=api_url,
        integration=integration,
        integration_version=integration_version,
        environ={},
    )
    return Session(
        config,
        sandbox_id=str(sandbox.sandbox_id),
        keep_alive=keep_alive,
        destroy_on_exit=False,
    )


def _credentials(sandbox: Any) -> tuple[str, str]:
    """The API key and URL the caller gave lizard-sdk for ``sandbox``; TypeError if none."""
    if not isinstance(sandbox, Sandbox):
        raise TypeError(
            f"sandbox must be a lizard.Sandbox (from Sandbox.create or Sandbox.connect), "
            f"not {type(sandbox).__name__}"
        )
    connection = getattr(sandbox, "_config", None)
    api_key = getattr(connection, "api_key", None)
    api_url = getattr(connection, "api_url", None)
    if not isinstance(api_key, str) or not isinstance(api_url, str):
        raise TypeError("this lizard.Sandbox carries no API key and URL; upgrade lizard-sdk")
    return api_key, api_url

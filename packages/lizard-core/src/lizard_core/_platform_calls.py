"""Account-level calls that belong to no session (volumes, snapshots): retried and translated.

``retried(fn, args, kwargs)`` runs an idempotent lizard-sdk call under the default
:class:`~lizard_core._retry.RetryPolicy`, translating its errors; ``project_id(config)``
resolves the configuration's project (an id, slug or name) to the id the volume and snapshot
paths need, with the SDK's cache.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

import lizard
from lizard.config import ConnectionConfig
from lizard.project import resolve_project_id

from lizard_core._retry import RetryPolicy, attempts
from lizard_core.config import SandboxConfig
from lizard_core.errors import translated

__all__ = ["NOT_FOUND", "project_id", "retried"]

T = TypeVar("T")

NOT_FOUND: Final = (lizard.NotFoundError,)
"""Pass as ``passthrough`` where a 404 means "no such volume/snapshot", not "sandbox gone"."""

_LOOKUP: Final = threading.Lock()


def retried(
    fn: Callable[..., T],
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    idempotent: bool = True,
    passthrough: tuple[type[BaseException], ...] = (),
) -> T:
    """``fn(*args, **kwargs)``, translated, retried on transient failures when idempotent."""
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    for attempt in attempts(RetryPolicy(), idempotent=idempotent, name=name):
        with attempt, translated(passthrough=passthrough):
            return fn(*args, **(kwargs or {}))
        time.sleep(attempt.delay)
    raise AssertionError("unreachable: attempts() is endless")


def project_id(config: SandboxConfig) -> str:
    """The configuration's project as an id (one ``GET /api/projects`` per process at most)."""
    project = config.require_project()
    with _LOOKUP, translated():
        return str(resolve_project_id(project, ConnectionConfig(**config.api_kwargs())))

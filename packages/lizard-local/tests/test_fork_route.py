"""The fork route leaves no copy running when making one fails unexpectedly (or is cancelled).

The failure is injected into a stand-in registry: a real one fails this way only on a host
fault (disk full, a boot that crashes), which a test cannot cause on demand.
"""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from lizard_local.http import Request
from lizard_local.lifecycle_routes import LifecycleRoutes
from lizard_local.sandboxes import Registry


class _Copy:
    def __init__(self, n: int) -> None:
        self.id = f"sbx_copy{n}"

    def record(self) -> dict[str, Any]:
        return {"sandboxId": self.id}


class _Source:
    id = "sbx_source"
    volume = None

    def require_running(self) -> None:
        pass


class _Registry:
    def __init__(self, fail_at: int, failure: BaseException) -> None:
        self.made: list[str] = []
        self.killed: list[str] = []
        self._fail_at, self._failure = fail_at, failure

    def get(self, sandbox_id: str) -> _Source:
        return _Source()

    async def fork(self, sb: _Source, timeout_ms: int) -> _Copy:
        if len(self.made) == self._fail_at:
            raise self._failure
        copy = _Copy(len(self.made))
        self.made.append(copy.id)
        return copy

    async def kill(self, sandbox_id: str) -> bool:
        self.killed.append(sandbox_id)
        return True


@pytest.mark.parametrize("failure", [OSError("No space left on device"), KeyboardInterrupt()])
async def test_an_unexpected_failure_kills_the_copies_already_made(failure: BaseException) -> None:
    registry = _Registry(fail_at=2, failure=failure)
    routes = LifecycleRoutes(cast(Registry, registry))
    request = Request(
        "POST", "/api/sandboxes/sbx_source/fork", {}, {}, json.dumps({"count": 4}).encode()
    )
    request.params["id"] = "sbx_source"
    with pytest.raises(type(failure)):
        await routes.fork(request)
    assert registry.made == ["sbx_copy0", "sbx_copy1"]
    assert registry.killed == registry.made

"""Load through `LizardSandboxBackend`: 8 sandboxes x 50 concurrent commands on lizard-local.

Every result is correct, each backend creates exactly one sandbox however many of its first
commands race (and the project is looked up once for all), nothing is left after `destroy()`,
and host memory stays bounded.
"""

from __future__ import annotations

import threading

import anyio
import pytest

from lizard_local import LocalServer
from pydantic_ai_lizard import LizardSandboxBackend

SANDBOXES = 8
COMMANDS = 50
RSS_GROWTH_LIMIT = 256 * 1024 * 1024
"""Peak host RSS above the baseline while 400 commands run (threads, buffers, connections)."""


def _rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.slow
async def test_eight_sandboxes_run_fifty_concurrent_commands_each(
    lizard_counters: LocalServer,
) -> None:
    baseline = _rss()
    peak = [baseline]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.05):
            peak[0] = max(peak[0], _rss())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    backends = [LizardSandboxBackend(lifetime_ms=300_000) for _ in range(SANDBOXES)]
    results: dict[tuple[int, int], str] = {}

    async def one(index: int, backend: LizardSandboxBackend, number: int) -> None:
        result = await backend.run(["sh", "-c", 'echo "$1-$2"', "sh", str(index), str(number)])
        assert result.exit_code == 0
        results[index, number] = result.stdout

    try:
        with anyio.fail_after(240):
            async with anyio.create_task_group() as tasks:
                for index, backend in enumerate(backends):
                    for number in range(COMMANDS):
                        tasks.start_soon(one, index, backend, number)
    finally:
        sampling.set()
        sampler.join()
        for backend in backends:
            await backend.destroy()
    assert results == {
        (index, number): f"{index}-{number}\n"
        for index in range(SANDBOXES)
        for number in range(COMMANDS)
    }
    routes = lizard_counters.counters()["routes"]
    assert routes["POST /api/sandboxes"] == SANDBOXES  # one create per backend
    assert routes.get("GET /api/projects", 0) <= 1  # one project look-up for all of them
    assert routes["POST /api/sandboxes/{id}/exec"] == SANDBOXES * COMMANDS  # one request each
    ids = {backend.ref.id for backend in backends if backend.ref is not None}
    assert len(ids) == SANDBOXES
    assert not ids & set(lizard_counters.sandboxes())  # nothing left after destroy()
    assert peak[0] - baseline < RSS_GROWTH_LIMIT, f"peak RSS grew {peak[0] - baseline} bytes"

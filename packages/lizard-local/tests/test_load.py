"""Load: 8 sandboxes created at once, each running 50 commands from threads at once (loopback)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from lizard import Sandbox

from lizard_local import LocalServer, procscan

SANDBOXES = 8
COMMANDS = 50


@pytest.mark.slow
def test_many_sandboxes_many_commands(lizard_counters: LocalServer):
    project = lizard_counters.project_id
    start = time.monotonic()
    with ThreadPoolExecutor(SANDBOXES) as pool:
        boxes = list(
            pool.map(lambda _i: Sandbox.create("base", project_id=project), range(SANDBOXES))
        )
    try:
        jobs = [(sb, n) for sb in boxes for n in range(COMMANDS)]

        def run(job: tuple[Sandbox, int]) -> tuple[str, int, str]:
            sb, n = job
            r = sb.process.exec_(f"echo {sb.sandbox_id} {n}; echo err{n} >&2; exit $(({n} % 3))")
            return r.stdout, r.exit_code, r.stderr

        with ThreadPoolExecutor(len(jobs)) as pool:
            results = list(pool.map(run, jobs))
        for (sb, n), (stdout, code, stderr) in zip(jobs, results, strict=True):
            assert (stdout, code, stderr) == (f"{sb.sandbox_id} {n}", n % 3, f"err{n}")
    finally:
        killed = [sb.kill() for sb in boxes]
    elapsed = time.monotonic() - start
    assert killed == [True] * SANDBOXES
    counters = lizard_counters.counters()
    calls = SANDBOXES * COMMANDS
    assert counters["routes"] == {
        "POST /api/sandboxes": SANDBOXES,
        "POST /api/sandboxes/{id}/exec": calls,
        "DELETE /api/sandboxes/{id}": SANDBOXES,
    }
    assert counters["total"] == calls + 2 * SANDBOXES
    assert counters["connections"] == counters["total"]
    for sb in boxes:
        assert procscan.find_marked(f"LIZARD_EMU_SANDBOX={sb.sandbox_id}".encode()) == []
    assert elapsed < 120

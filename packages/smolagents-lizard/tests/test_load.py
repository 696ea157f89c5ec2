"""Load through `LizardExecutor`: 4 executors x 10 dependent steps, on 4 threads at once.

Every step sees the state the previous one left, each executor creates exactly one sandbox,
nothing is left after `cleanup()`, and host memory stays bounded.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

from smolagents.monitoring import AgentLogger, LogLevel

from lizard_local import LocalServer
from smolagents_lizard import LizardExecutor

EXECUTORS = 4
STEPS = 10
RSS_GROWTH_LIMIT = 256 * 1024 * 1024


def _rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_four_executors_run_ten_dependent_steps_on_four_threads(lizard_local: LocalServer) -> None:
    lizard_local.reset_counters()
    baseline, peak = _rss(), [0]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.05):
            peak[0] = max(peak[0], _rss())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    executors = [
        LizardExecutor(logger=AgentLogger(LogLevel.OFF), template="base", lifetime_ms=300_000)
        for _ in range(EXECUTORS)
    ]

    def work(index: int) -> list[Any]:
        executor = executors[index]
        outputs = [executor(f"total = {index} * 1000").output]
        for step in range(1, STEPS):  # each step builds on the one before
            outputs.append(executor(f"total = total + {step}\ntotal").output)
        return outputs

    try:
        with concurrent.futures.ThreadPoolExecutor(EXECUTORS) as pool:
            results = list(pool.map(work, range(EXECUTORS), timeout=240))
    finally:
        sampling.set()
        sampler.join()
        ids = {executor.sandbox_id for executor in executors}
        for executor in executors:
            executor.cleanup()
    for index, outputs in enumerate(results):
        running = [index * 1000 + sum(range(1, step + 1)) for step in range(1, STEPS)]
        assert outputs[1:] == [str(value) for value in running]
    routes = lizard_local.counters()["routes"]
    assert routes["POST /api/sandboxes"] == EXECUTORS  # one create per executor
    assert None not in ids
    assert len(ids) == EXECUTORS
    assert not ids & set(lizard_local.sandboxes())  # nothing left after cleanup()
    assert peak[0] - baseline < RSS_GROWTH_LIMIT, f"peak RSS grew {peak[0] - baseline} bytes"

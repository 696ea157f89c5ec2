"""Counters, injected latency and injected faults, observed through the real SDK."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from lizard import Sandbox
from lizard.errors import LimitExceededError, LizardError

from lizard_local import LocalServer, LocalServerError
from lizard_local.instrumentation import Fault, Instrumentation


def test_counters_count_routes_and_connections(sandbox: Sandbox, lizard_counters: LocalServer):
    sandbox.process.exec_("true")
    sandbox.process.exec_("true", on_stdout=lambda _l: None)
    sandbox.fs.write("/tmp/c", "x")
    sandbox.fs.read("/tmp/c")
    sandbox.get_info()
    counters = lizard_counters.counters()
    assert counters["routes"] == {
        "POST /api/sandboxes/{id}/exec": 2,
        "POST /api/sandboxes/{id}/files": 1,
        "GET /api/sandboxes/{id}/files": 1,
        "GET /api/sandboxes/{id}": 1,
    }
    assert counters["total"] == 5
    assert counters["connections"] == 5  # the SDK opens a connection per call
    lizard_counters.reset_counters()
    assert lizard_counters.counters() == {
        "total": 0,
        "connections": 0,
        "routes": {},
        "seconds": 0,
        "server_time": {},
    }


def test_one_connection_many_requests(lizard_counters: LocalServer):
    with httpx.Client(headers={"X-API-Key": lizard_counters.api_key}) as client:
        for _ in range(3):
            client.get(lizard_counters.url + "/api/projects")
        client.get(lizard_counters.url + "/api/nowhere")
    counters = lizard_counters.counters()
    assert counters["connections"] == 1
    assert counters["routes"] == {"GET /api/projects": 3, "GET <unmatched>": 1}


def test_a_request_can_be_waited_for_while_its_latency_holds_it(lizard_counters: LocalServer):
    headers = {"X-API-Key": lizard_counters.api_key}
    with pytest.raises(TimeoutError, match="GET /api/projects"):
        lizard_counters.wait_for_request("GET /api/projects", timeout=0.1)
    lizard_counters.set_latency(3000)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            answer = pool.submit(httpx.get, lizard_counters.url + "/api/projects", headers=headers)
            lizard_counters.wait_for_request("GET /api/projects", timeout=10)
            assert not answer.done()  # arrived, and still held by its latency
            assert answer.result(timeout=30).status_code == 200
    finally:
        lizard_counters.set_latency(0)
    with pytest.raises(TimeoutError):
        lizard_counters.wait_for_request("GET /api/projects", count=2, timeout=0.1)


def test_latency_per_response_and_per_connection(lizard_local: LocalServer):
    url = lizard_local.url + "/api/projects"
    headers = {"X-API-Key": lizard_local.api_key}
    lizard_local.set_latency(150, connection_ms=300)
    try:
        with httpx.Client(headers=headers) as client:
            start = time.monotonic()
            client.get(url)
            first = time.monotonic() - start
            start = time.monotonic()
            client.get(url)
            second = time.monotonic() - start
    finally:
        lizard_local.set_latency(0)
    assert 0.45 <= first < 2.0
    assert 0.15 <= second < first  # no connection latency on a reused connection
    start = time.monotonic()
    httpx.get(url, headers=headers)
    # Latency off again: a new connection costs less than the injected 450 ms did (the upper
    # bounds are relative, so a loaded machine does not fail them).
    assert time.monotonic() - start < first


@pytest.fixture
def latency(lizard_local: LocalServer) -> Iterator[Callable[..., None]]:
    """``set_latency`` of the session server, switched off again after the test."""
    yield lizard_local.set_latency
    lizard_local.set_latency(0)


# The command prints the host clock when it starts: sandboxes share it, so comparing it with the
# time the call was made shows whether the delay came before the handler started the command.
START_THEN_SLEEP = "python3 -c 'import time; print(time.time()); time.sleep(0.3)'"


def test_latency_adds_to_a_streamed_exec(
    sandbox: Sandbox, lizard_counters: LocalServer, latency: Callable[..., None]
):
    latency(200)
    lines: list[str] = []
    wall, start = time.time(), time.monotonic()
    result = sandbox.process.exec_(START_THEN_SLEEP, on_stdout=lines.append)
    elapsed = time.monotonic() - start
    assert result.exit_code == 0
    assert float(lines[0]) - wall >= 0.19  # the command started after the delay
    assert elapsed >= 0.49  # 200 ms delay + 300 ms of work, not overlapping
    counters = lizard_counters.counters()
    assert counters["routes"] == {"POST /api/sandboxes/{id}/exec": 1}
    assert counters["total"] == 1
    assert counters["connections"] == 1


def test_latency_adds_to_a_json_exec(
    sandbox: Sandbox, lizard_counters: LocalServer, latency: Callable[..., None]
):
    latency(200)
    wall, start = time.time(), time.monotonic()
    result = sandbox.process.exec_(START_THEN_SLEEP)
    elapsed = time.monotonic() - start
    assert result.exit_code == 0
    assert float(result.stdout) - wall >= 0.19
    assert elapsed >= 0.49
    counters = lizard_counters.counters()
    assert {k: counters[k] for k in ("total", "connections", "routes")} == {
        "total": 1,
        "connections": 1,
        "routes": {"POST /api/sandboxes/{id}/exec": 1},
    }
    # The server's time covers the command, not the 200 ms paid before it.
    assert 0.3 <= counters["seconds"] <= elapsed - 0.19


def test_connection_latency_adds_to_a_streamed_exec(sandbox: Sandbox, latency: Callable[..., None]):
    latency(0, connection_ms=200)  # the SDK opens a new connection for every call
    lines: list[str] = []
    wall, start = time.time(), time.monotonic()
    sandbox.process.exec_(START_THEN_SLEEP, on_stdout=lines.append)
    assert float(lines[0]) - wall >= 0.19
    assert time.monotonic() - start >= 0.49


def test_connection_latency_is_paid_once_per_new_connection(
    lizard_counters: LocalServer, latency: Callable[..., None]
):
    url = lizard_counters.url + "/api/projects"
    headers = {"X-API-Key": lizard_counters.api_key}
    latency(0, connection_ms=300)
    timings: list[float] = []
    for _ in range(2):  # two connections, three requests on each
        with httpx.Client(headers=headers) as client:
            for _ in range(3):
                start = time.monotonic()
                assert client.get(url).status_code == 200
                timings.append(time.monotonic() - start)
    for first in (timings[0], timings[3]):
        assert first >= 0.29
    for reused in timings[1:3] + timings[4:]:
        assert reused < 0.25
    counters = lizard_counters.counters()
    assert {k: counters[k] for k in ("total", "connections", "routes")} == {
        "total": 6,
        "connections": 2,
        "routes": {"GET /api/projects": 6},
    }
    # Connection latency is not the server's time either.
    assert counters["server_time"]["GET /api/projects"]["max_s"] < 0.29


def test_errors_wait_too(lizard_counters: LocalServer, latency: Callable[..., None]):
    latency(200)
    start = time.monotonic()
    answer = httpx.get(lizard_counters.url + "/api/projects", headers={"X-API-Key": "wrong"})
    assert answer.status_code == 401
    assert time.monotonic() - start >= 0.19
    assert lizard_counters.counters()["routes"] == {"GET /api/projects": 1}


def test_arrival_counts_and_prices_the_delay():
    instr = Instrumentation(latency_s=0.1, connection_latency_s=0.5)
    assert instr.arrive("GET /x", new_connection=True) == pytest.approx(0.6)
    assert instr.arrive("GET /x", new_connection=False) == pytest.approx(0.1)
    assert instr.arrive("GET /y", new_connection=True) == pytest.approx(0.6)
    assert instr.snapshot() == {
        "total": 3,
        "connections": 2,
        "routes": {"GET /x": 2, "GET /y": 1},
        "seconds": 0,
        "server_time": {},
    }


def test_server_time_per_request_and_route(sandbox: Sandbox, lizard_counters: LocalServer):
    sandbox.fs.write("/tmp/timed", "x")
    sandbox.process.exec_("sleep 0.3")  # one JSON exec
    sandbox.process.exec_("sleep 0.3", on_stdout=lambda _l: None)  # one streamed exec
    counters = lizard_counters.counters()
    timed = counters["server_time"]
    assert set(timed) == {"POST /api/sandboxes/{id}/files", "POST /api/sandboxes/{id}/exec"}
    files = timed["POST /api/sandboxes/{id}/files"]
    assert files["count"] == 1
    assert 0 < files["total_s"] == files["max_s"]
    exec_ = timed["POST /api/sandboxes/{id}/exec"]
    assert exec_["count"] == 2
    assert exec_["total_s"] >= 0.6  # each exec's sleep, streamed to its end
    assert 0.3 <= exec_["max_s"] <= exec_["total_s"]
    assert counters["seconds"] == pytest.approx(files["total_s"] + exec_["total_s"])
    lizard_counters.reset_counters()
    cleared = lizard_counters.counters()
    assert cleared["seconds"] == 0
    assert cleared["server_time"] == {}


def test_server_time_statistics():
    instr = Instrumentation()
    instr.served("GET /x", 0.25)
    instr.served("GET /x", 0.5)
    instr.served("GET /y", 0.125)
    snapshot = instr.snapshot()
    assert snapshot["server_time"] == {
        "GET /x": {"count": 2, "total_s": 0.75, "max_s": 0.5},
        "GET /y": {"count": 1, "total_s": 0.125, "max_s": 0.125},
    }
    assert snapshot["seconds"] == 0.875
    instr.reset()
    assert instr.snapshot()["server_time"] == {}
    instr.latency_s = 0
    assert instr.arrive("GET /x", new_connection=False) == 0


def test_injected_5xx_on_the_next_requests_of_a_route(sandbox: Sandbox, lizard_local: LocalServer):
    lizard_local.inject_fault("POST /api/sandboxes/{id}/exec", status=503, count=2)
    for _ in range(2):
        with pytest.raises(LizardError, match="503"):
            sandbox.process.exec_("true")
    assert sandbox.get_info().status == "running"  # other routes unaffected
    assert sandbox.process.exec_("echo ok").stdout == "ok"


def test_injected_429_carries_retry_after(lizard_local: LocalServer):
    lizard_local.inject_fault("POST /api/sandboxes", status=429, retry_after_s=7)
    with pytest.raises(LimitExceededError) as caught:
        Sandbox.create("base", project_id=lizard_local.project_id)
    assert caught.value.retry_after_s == 7
    assert caught.value.status_code == 429


def test_dropped_stream(sandbox: Sandbox, lizard_local: LocalServer):
    lizard_local.inject_stream_drop(count=1, after_events=2)
    seen: list[str] = []
    with pytest.raises(httpx.HTTPError):
        sandbox.process.exec_(
            "for i in 1 2 3 4 5; do echo $i; sleep 0.05; done", on_stdout=seen.append
        )
    assert seen == ["1", "2"]
    # The next stream is whole again.
    lines: list[str] = []
    assert sandbox.process.exec_("echo whole", on_stdout=lines.append).exit_code == 0
    assert lines == ["whole"]


def test_control_api_validates(lizard_local: LocalServer):
    with pytest.raises(LocalServerError, match="Unknown route"):
        lizard_local.inject_fault("GET /api/nowhere")
    with pytest.raises(LocalServerError, match="400"):
        lizard_local.configure(no_such_setting=1)
    with pytest.raises(LocalServerError, match="404"):
        lizard_local.expire("sbx_unknown")
    assert lizard_local.counters()["total"] >= 0


def test_control_requests_are_not_counted(lizard_counters: LocalServer):
    lizard_counters.info()
    lizard_counters.sandboxes()
    assert lizard_counters.counters()["total"] == 0


def test_fault_bookkeeping():
    instr = Instrumentation()
    instr.faults["GET /x"] = Fault(503, 2)
    assert instr.take_fault("GET /y") is None
    first = instr.take_fault("GET /x")
    assert first is not None
    assert first.status == 503
    assert instr.take_fault("GET /x") is not None
    assert instr.take_fault("GET /x") is None
    limited = Fault(429, 1, 2.5).error()
    assert limited.body()["retryAfterS"] == 2.5
    assert limited.headers["Retry-After"] == "3"

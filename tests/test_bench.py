"""The benchmark harness's own logic (shared/bench), fast.

Statistics, tables, the page and the reading are checked on synthetic results; the driver
protocol in-process; one tiny real run (one operation, one repetition, our side only) proves the
orchestrator, the driver and lizard-local's counters fit together. The full benchmark is
`nox -s bench`.
"""

from __future__ import annotations

import io
import json
import socket
import socketserver
import ssl
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "shared" / "bench"
sys.path.insert(0, str(BENCH))

import catalogue  # noqa: E402
import chart  # noqa: E402
import driver  # noqa: E402
import link  # noqa: E402
import memory_probe  # noqa: E402
import reading  # noqa: E402
import report  # noqa: E402
import run  # noqa: E402
from catalogue import Setting, parse_settings  # noqa: E402
from report import OURS, POOLED, REF, Cell, Run, Sample  # noqa: E402

SLOW = Setting(20, 40)
FAST = Setting(0)


def sample(
    ms: float,
    requests: int = 1,
    connections: int | None = None,
    server_ms: float = 0.0,
    **routes: int,
) -> Sample:
    return Sample(
        seconds=ms / 1000,
        requests=requests,
        connections=requests if connections is None else connections,
        routes=routes or {"POST /api/sandboxes/{id}/exec": requests},
        server_seconds=server_ms / 1000,
    )


def make_run(settings: tuple[Setting, ...] = (SLOW,), **cells: dict[str, list[Sample]]) -> Run:
    """A run at ``settings`` (the same cells at each) : op name -> side -> samples."""
    result = Run(
        settings=list(settings),
        operations=[catalogue.operation(name) for name in cells],
        sides=[REF, OURS, POOLED],
        reps=len(next(iter(next(iter(cells.values())).values()))),
    )
    for setting in settings:
        for name, by_side in cells.items():
            for side, samples in by_side.items():
                result.cell(setting, name, side).samples.extend(samples)
    return result


# ── catalogue ────────────────────────────────────────────────────────────────


def test_settings_parse_and_name_themselves() -> None:
    settings = parse_settings("0, 20,20+40")
    assert settings == [Setting(0), Setting(20), Setting(20, 40)]
    assert [s.name for s in settings] == ["0", "20", "20+40"]
    assert settings[2].description == "20 ms per response + 40 ms per new connection"
    assert settings[0].description == "0 ms added (loopback)"


@pytest.mark.parametrize("bad", ["", "fast", "20+", "-5", "20+40+1"])
def test_bad_settings_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="bad setting"):
        parse_settings(bad)


def test_repetitions_depend_on_the_kind_of_operation() -> None:
    assert catalogue.repetitions(catalogue.operation("code_agent_3_steps"), 5) == 5
    assert catalogue.repetitions(catalogue.operation("stat"), 5) == 9
    assert catalogue.repetitions(catalogue.operation("probe_pooled"), 5) == 20
    # Cold starts a target compares with each other: their medians decide it.
    for name in ("sdk_first_use", "first_use", "executor_start", "restore", "create_setup"):
        assert catalogue.repetitions(catalogue.operation(name), 5) == 11


def test_a_run_alternates_the_operations_a_target_compares_within_each_repetition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = ["stat", "first_use", "executor_start"]
    bench = object.__new__(run.Bench)  # the loop alone: no server, link or driver
    bench.args = run.parse_args(["--reps", "2", "--settings", "0", "--ops", ",".join(names)])
    bench.sides = {REF: ("python", []), OURS: ("python", [])}
    bench.run = Run(settings=[FAST], operations=bench.args.operations, sides=[REF, OURS], reps=2)
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(bench, "set_latency", lambda setting: None)
    monkeypatch.setattr(
        bench, "_attempt", lambda setting, op, side, failed, warm_up=False: calls.append(
            (op.name, side)
        ),
    )  # fmt: skip
    bench.measure()
    stat = [call for call in calls if call[0] == "stat"]
    assert len(stat) == 2 * (1 + 3)  # a warm-up, then 2N-1 repetitions, on each side
    compared = [call for call in calls if call[0] != "stat"]
    forward = [(op, side) for op in names[1:] for side in (REF, OURS)]
    # 2N+1 repetitions, each of every pair, in turn forward and backward.
    assert compared == (forward + forward[::-1]) * 2 + forward


def test_operations_a_target_compares_are_measured_together() -> None:
    names = [
        "stat", "executor_start", "probe_pooled", "restore", "first_use", "command_true",
        "create_setup", "sdk_first_use", "probe_new_connection",
    ]  # fmt: skip
    groups = catalogue.measurement_groups([catalogue.operation(n) for n in names])
    assert [[op.name for op in group] for group in groups] == [
        ["stat"],
        ["executor_start", "first_use", "sdk_first_use"],  # two targets share first_use
        ["probe_pooled", "probe_new_connection"],
        ["restore", "create_setup"],
        ["command_true"],
    ]
    for target in (*catalogue.RATIO_TARGETS, *catalogue.WIN_TARGETS):
        both = [catalogue.operation(target.operation), catalogue.operation(target.versus)]
        assert len(catalogue.measurement_groups(both)) == 1, target


def test_strands_operations_run_on_our_side_only() -> None:
    # strands-lizard has no 0.1.x to compare with; its rows show ours alone.
    for name in ("strands_execute", "strands_first_chunk"):
        op = catalogue.operation(name)
        assert op.kind in catalogue.OURS_ONLY
        assert name in catalogue.REQUEST_TARGETS


def test_every_issue_operation_is_in_the_catalogue_once() -> None:
    names = [op.name for op in catalogue.OPERATIONS + catalogue.PROBES]
    assert len(names) == len(set(names))
    assert len(catalogue.OPERATIONS) == 43
    for op in catalogue.OPERATIONS + catalogue.PROBES:
        assert hasattr(driver.Workload, f"_op_{op.name}"), op.name
    # No 0.1.x release has the OpenAI Agents adapter: its rows are measured on our side only.
    openai = {op.kind for op in catalogue.OPERATIONS if op.name.startswith("openai_")}
    assert openai == {"openai"}
    assert "openai" in catalogue.OURS_ONLY
    for target in catalogue.SPEED_TARGETS:
        assert catalogue.operation(target.operation).kind != "probe"
    assert catalogue.operation("bare_exec") is catalogue.LIMIT
    assert catalogue.LIMIT.kind == "limit"
    assert catalogue.operation("sdk_first_use") is catalogue.COLD_LIMIT
    assert (catalogue.COLD_LIMIT.kind, catalogue.COLD_LIMIT.cold) == ("limit", True)
    for ratio_target in catalogue.RATIO_TARGETS:
        assert catalogue.operation(ratio_target.operation).cold
        assert catalogue.operation(ratio_target.versus).cold
    for reference_target in catalogue.REFERENCE_TARGETS:
        assert catalogue.operation(reference_target.operation).cold
        assert {name for name, _ in reference_target.reference_ms} == {"0", "20", "20+40"}
    assert [t.operation for t in catalogue.LIMIT_TARGETS] == [
        "command_true",
        "stat",
        "step_trivial",
    ]
    for limit_target in catalogue.LIMIT_TARGETS:
        assert not catalogue.operation(limit_target.operation).cold
        assert limit_target.wall_setting == Setting(20)
    with pytest.raises(ValueError, match="unknown operation"):
        catalogue.operation("nope")


# ── statistics and formatting ────────────────────────────────────────────────


def test_cell_takes_medians_and_keeps_the_spread() -> None:
    cell = Cell([sample(300, 7), sample(100, 6), sample(200, 6)])
    assert cell.seconds == pytest.approx(0.2)
    assert list(cell.requests) == [6, 6, 7]
    assert report.format_count(cell.requests) == "6 (6–7)"
    assert report.format_count(Cell([sample(1), sample(2)]).requests) == "1"
    # The breakdown comes from the median-time repetition.
    assert cell.routes == {"POST /api/sandboxes/{id}/exec": 6}
    assert cell.ok
    assert not Cell([sample(1)], error="boom").ok
    assert not Cell().ok


def test_ratio_and_its_wording() -> None:
    assert report.ratio(0.1, 0.5) == pytest.approx(0.2)
    assert report.format_ratio(0.2) == "0.20 (5.0× faster)"
    assert report.format_ratio(2.0) == "2.00 (2.0× slower)"
    with pytest.raises(ValueError, match="positive"):
        report.ratio(0.1, 0)
    assert [report.format_ms(s) for s in (0.0008, 0.0123, 0.142, 1.2345)] == [
        "0.8",
        "12.3",
        "142",
        "1,234",
    ]


def test_markdown_table_pads_and_right_aligns_numbers() -> None:
    table = report.markdown_table(["op", "ms"], [["stat", "5.0"], ["command", "1,234"]])
    lines = table.splitlines()
    assert lines[0] == "| op      |    ms |"
    assert lines[1] == "|---------|------:|"
    assert lines[3] == "| command | 1,234 |"
    with pytest.raises(ValueError, match="columns"):
        report.markdown_table(["a", "b"], [["only one"]])


def test_route_names_are_short() -> None:
    routes = {"POST /api/sandboxes/{id}/exec": 3, "GET /api/sandboxes/{id}/files": 2}
    assert report.format_routes(routes) == "exec 3, download 2"
    assert report.route_name("GET /api/sandboxes/{id}/processes") == "GET /processes"
    assert report.format_routes({}) == "none"


# ── tables, targets, pooled what-if, reading, page ───────────────────────────


def test_setting_table_shows_counts_times_and_ratio() -> None:
    result = make_run(command_true={REF: [sample(700, 6)] * 3, OURS: [sample(140, 1)] * 3})
    result.cell(SLOW, "stat", OURS).error = "GuestProtocolError: broken"
    result.operations.append(catalogue.operation("stat"))
    table = report.setting_table(result, SLOW)
    row = next(line for line in table.splitlines() if "command `true`" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    # No limit measured: server time still shows, the ratios to the limit do not.
    assert cells[1:] == ["6", "1", "6", "1", "700", "140", "0.20 (5.0× faster)", "0.0", "–", "–"]
    stat_row = next(line for line in table.splitlines() if line.startswith("| stat"))
    assert "failed" in stat_row
    assert result.failures() == ["20+40 ms, stat, ours: GuestProtocolError: broken"]


def test_acceptance_marks_met_and_missed_targets() -> None:
    result = make_run(
        command_true={REF: [sample(700, 6)], OURS: [sample(100, 1)]},
        stat={REF: [sample(100)], OURS: [sample(90, 2)]},
        step_trivial={REF: [sample(1000)], OURS: [sample(400)]},
    )
    lines = report.acceptance_lines(result)
    assert "✅ command `true`: at most 1 request — ours: at most 1" in lines[0]
    stat = next(line for line in lines if "stat:" in line)
    assert stat.startswith("- ❌")
    assert "at most 2" in stat
    command = next(line for line in lines if "a workspace command" in line)
    assert command.startswith("- ✅")
    assert "7.0×" in command
    step = next(line for line in lines if "warm smolagents step" in line)
    assert step.startswith("- ❌")
    assert "2.5×" in step
    agent = next(line for line in lines if "CodeAgent" in line)
    assert agent.startswith("- ⚪")
    assert "not measured" in agent


def test_setting_table_puts_ours_over_the_limit() -> None:
    result = make_run(
        bare_exec={
            OURS: [sample(10, server_ms=3), sample(12, server_ms=4), sample(8, server_ms=2)]
        },
        command_true={REF: [sample(700, 6)] * 3, OURS: [sample(40, 1, server_ms=30)] * 3},
    )
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
        for line in report.setting_table(result, SLOW).splitlines()[2:]
    }
    limit = rows[catalogue.LIMIT.label]
    assert limit[1:] == ["–", "1", "–", "1", "–", "10.0", "–", "3.0", "1.0×", "1.0×"]
    command = rows["command `true`"]
    assert command[-3:] == ["30.0", "4.0×", "10.0×"]  # wall 40 / 10, server 30 / 3


def test_limit_targets_judge_server_time_and_wall_time() -> None:
    near = make_run(
        (FAST, Setting(20)),
        bare_exec={OURS: [sample(25, server_ms=3)]},
        command_true={OURS: [sample(30, server_ms=8.5)]},  # 5.5 ms over, 1.2×
        stat={OURS: [sample(40, server_ms=9.5)]},  # 6.5 ms over, 1.6×
    )
    lines = report.limit_lines(near)
    command = [line for line in lines if line.startswith("- ") and "`run(['true'])`" in line]
    assert command[0].startswith("- ✅")
    assert "8.5 ms vs 3.0 ms at 0 ms; 8.5 ms vs 3.0 ms at 20 ms" in command[0]
    assert command[1].startswith("- ✅")
    assert "1.2× (30.0 ms vs 25.0 ms)" in command[1]
    stat = [line for line in lines if "stat:" in line]
    assert [line[:3] for line in stat] == ["- ❌", "- ❌"]
    step = [line for line in lines if "x = 1 + 1" in line]
    assert all(line.startswith("- ⚪") and "not measured" in line for line in step)
    text = "\n".join(reading.reading_lines(near))
    assert (
        "- At 0 ms added (loopback) the bare exec of `true` takes 25.0 ms, 3.0 ms of it on the "
        "server; against it, `run(['true'])` 5.5 ms more on the server, 1.2× its wall time; "
        "stat 6.5 ms more on the server, 1.6× its wall time." in text
    )
    # The page carries them among its acceptance targets.
    page = report.render_page(near, [])
    assert command[0] in page
    assert stat[1] in page


def test_chart_rows_hold_each_side_and_the_limit() -> None:
    result = make_run(
        (FAST, SLOW),
        bare_exec={OURS: [sample(5)]},
        command_true={REF: [sample(700)], OURS: [sample(40)]},
        stat={OURS: [sample(20)]},
        probe_pooled={OURS: [sample(4)]},
    )
    rows = report.chart_rows(result, FAST)
    assert rows == [
        report.ChartRow("command `true`", 700.0, 40.0, 5.0),
        report.ChartRow("stat", None, 20.0, 5.0),
    ]
    assert chart.chart_settings(result) == [FAST]  # connection latency is left out
    assert report.chart_rows(make_run(stat={OURS: [sample(20)]}), SLOW) == []


def test_pooled_table_compares_ours_with_the_pooled_what_if() -> None:
    result = make_run(
        command_true={
            REF: [sample(800, 6)],
            OURS: [sample(100, 1)],
            POOLED: [sample(40, 1, connections=0)],
        },
        stat={REF: [sample(120)], OURS: [sample(90)]},  # no pooled run: no row
    )
    table = report.pooled_table(result, SLOW)
    assert table is not None
    rows = table.splitlines()[2:]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells == ["command `true`", "1", "0", "100", "40.0", "0.40", "8.0×", "20.0×"]
    text = "\n".join(reading.reading_lines(result))
    assert "a workspace command goes from 100 to 40.0 ms with one pooled client" in text
    assert "(20.0× faster than 0.1.0 instead of 8.0×)" in text
    assert report.pooled_table(make_run(stat={OURS: [sample(90)]}), SLOW) is None


def test_reading_judges_memory_growth() -> None:
    result = make_run(command_true={REF: [sample(700, 6)], OURS: [sample(100, 1)]})

    def probe(size: int, write: float, beyond: float) -> dict[str, float]:
        return {"size_mib": size, "write_peak_mib": write, "read_beyond_file_mib": beyond}

    result.cell(SLOW, "read_8m", REF).samples.append(sample(200, 2))
    result.cell(SLOW, "read_8m", OURS).samples.append(sample(400, 4))
    result.memory[OURS] = [probe(8, 20, 10), probe(64, 24, 11)]
    assert "bounded by the chunk size" in "\n".join(reading.reading_lines(result))
    result.memory[OURS] = [probe(8, 20, 10), probe(64, 90, 70)]
    text = "\n".join(reading.reading_lines(result))
    assert "grows with the file size" in text
    assert "command `true`: 6 → 1" in text
    assert "7.0×, which meets the 5× target" in text
    assert "Slower than 0.1.0 at 20 ms per response + 40 ms per new connection: read 8 MiB" in text
    assert "(2.0× the time, 4 requests against 2)" in text


def test_page_has_every_section_and_no_local_paths() -> None:
    result = make_run(
        command_true={REF: [sample(700, 6)], OURS: [sample(100, 1)]},
        probe_new_connection={OURS: [sample(80)]},
        probe_new_connection_cached_ssl={OURS: [sample(60)]},
        probe_pooled={OURS: [sample(30)]},
    )
    result.memory[OURS] = [
        {
            "size_mib": 8,
            "idle_rss_mib": 70,
            "write_peak_mib": 20,
            "read_peak_mib": 18,
            "read_beyond_file_mib": 10,
        },
        {"size_mib": 64, "error": "timed out"},
    ]
    result.machine = {"cores": 2, "cpu": "Test CPU", "os": "Linux", "isolation": "namespace"}
    result.environments = {OURS: {"python": "3.11.7", "versions": {"lizard-core": "0.2.0"}}}
    page = report.render_page(result, reading.reading_lines(result))
    for heading in (
        "# Performance",
        "## Machine",
        "## Reproduce",
        "nox -s bench",
        "### 20 ms per response + 40 ms per new connection",
        "### Requests by route",
        "## Acceptance targets",
        "## What a connection costs",
        "### One request, 20 ms per response + 40 ms per new connection",
        "## Host memory",
        "## Reading",
    ):
        assert heading in page
    assert "Test CPU, 2 cores" in page
    assert "| ours     | 64 MiB | failed" in page
    assert str(BENCH.parents[1]) not in page


# ── command line ─────────────────────────────────────────────────────────────


def test_options_quick_and_full() -> None:
    quick = run.parse_args(["--quick"])
    assert quick.reps == 3
    assert [s.name for s in quick.settings] == ["0", "20+40"]
    assert [op.name for op in quick.operations][: len(catalogue.QUICK_OPERATIONS)] == list(
        catalogue.QUICK_OPERATIONS
    )
    assert quick.memory_sizes == [8]
    full = run.parse_args([])
    assert full.reps == 5
    assert len(full.settings) == 3
    assert len(full.operations) == len(catalogue.OPERATIONS) + len(catalogue.PROBES)
    assert full.memory_sizes == [8, 64]
    assert full.output == run.DEFAULT_OUTPUT
    assert full.latency_at == "link"
    assert not full.pooled  # lizard_core pools its own connections now
    assert not run.parse_args(["--no-pooled", "--latency-at", "lizard-local"]).pooled
    chosen = run.parse_args(["--ops", "stat, exists", "--memory-sizes", "none", "--reps", "7"])
    assert [op.name for op in chosen.operations] == ["stat", "exists"]
    assert chosen.memory_sizes == []
    assert chosen.reps == 7


@pytest.mark.parametrize("argv", [["--ops", "teleport"], ["--reps", "0"], ["--settings", "x"]])
def test_bad_options_exit(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        run.parse_args(argv)


def test_trust_bundle_holds_public_roots_and_the_local_ca(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nLOCAL\n-----END CERTIFICATE-----\n")
    bundle = Path(run.trust_bundle(str(ca), tmp_path)).read_text()
    assert bundle.endswith(ca.read_text())
    assert bundle.count("BEGIN CERTIFICATE") > 50
    with pytest.raises(ValueError, match="TLS"):
        run.trust_bundle(None, tmp_path)


# ── the emulated link ────────────────────────────────────────────────────────

WORK_S = 0.05


class _SlowPong(socketserver.StreamRequestHandler):
    """Upstream: answers each line with "pong" after WORK_S of work."""

    def handle(self) -> None:
        while self.rfile.readline():
            time.sleep(WORK_S)
            self.wfile.write(b"pong\n")
            self.wfile.flush()


@pytest.fixture
def upstream() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _SlowPong)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _exchanges(relay: link.Link, count: int) -> list[float]:
    """Seconds per ping on one TLS connection through the link (the first one opens it)."""
    context = ssl.create_default_context(cafile=relay.ca_file)
    times = []
    start = time.perf_counter()
    with (
        socket.create_connection(("127.0.0.1", relay.port)) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as conn,
    ):
        for _ in range(count):
            conn.sendall(b"ping\n")
            assert conn.recv(16) == b"pong\n"
            times.append(time.perf_counter() - start)
            start = time.perf_counter()
    return times


def test_link_latency_adds_to_the_work_and_new_connections_pay_more(
    upstream: int, tmp_path: Path
) -> None:
    with link.Link(upstream, tmp_path) as relay:
        assert relay.url == f"https://127.0.0.1:{relay.port}"
        quiet = _exchanges(relay, 3)
        relay.set_latency(40, connection_ms=100)
        slow = _exchanges(relay, 3)
        with pytest.raises(ValueError, match="negative"):
            relay.set_latency(-1)
    assert all(t >= WORK_S for t in quiet)
    # On top of the work, not hidden in it: lizard-local's own injection would give ~WORK_S.
    assert all(t >= WORK_S + 0.040 for t in slow[1:])
    assert slow[0] >= WORK_S + 0.040 + 0.100  # a new connection's first request pays both


# ── driver and memory probe ──────────────────────────────────────────────────


def test_driver_protocol_reports_failures_and_closes() -> None:
    requests = io.StringIO(
        "\n".join(
            json.dumps(r)
            for r in (
                {"cmd": "hello"},
                {"cmd": "prepare", "op": "teleport"},
                {"cmd": "act"},
                {"cmd": "finish"},
                {"cmd": "dance"},
                {"cmd": "close"},
            )
        )
        + "\n"
    )
    replies = io.StringIO()
    driver.serve(requests, replies)
    hello, prepare, act, finish, unknown, closed = map(json.loads, replies.getvalue().splitlines())
    assert hello["ok"]
    assert hello["python"].count(".") == 2
    assert "pydantic-ai-lizard" in hello["versions"]
    assert not prepare["ok"]
    assert "teleport" in prepare["error"]
    assert not act["ok"]
    assert "without a successful prepare" in act["error"]
    assert finish == {"ok": True}
    assert not unknown["ok"]
    assert "dance" in unknown["error"]
    assert closed == {"ok": True, "closed": True}


def test_memory_probe_reads_and_resets_the_peak() -> None:
    before = memory_probe.rss_kib()
    assert before > 1000
    grown = bytearray(64 * 1024 * 1024)
    start = memory_probe._reset_peak()
    assert memory_probe._status("VmHWM") - start < 16 * 1024  # reset to about the RSS now
    del grown


# ── a tiny real run ──────────────────────────────────────────────────────────


@pytest.mark.parametrize("latency_at", ["link", "lizard-local"])
def test_one_operation_runs_against_lizard_local_and_is_counted(
    tmp_path: Path, latency_at: str
) -> None:
    output = tmp_path / "performance.md"
    args = run.parse_args(
        [
            "--latency-at",
            latency_at,
            "--ops",
            "bare_exec,command_true",
            "--settings",
            "0",
            "--reps",
            "2",
            "--memory-sizes",
            "none",
            "--pooled",
            "--output",
            str(output),
        ]
    )
    result = run.measure(args)
    assert result.failures() == []
    cell = result.get(Setting(0), "command_true", OURS)
    assert cell is not None
    assert len(cell.samples) == 3  # a warm operation: 2 * reps - 1
    assert all(0 < s.seconds < 30 for s in cell.samples)
    assert list(cell.requests) == [1, 1, 1]  # one streaming exec per command
    assert cell.routes == {"POST /api/sandboxes/{id}/exec": 1}
    assert max(cell.connections) <= 1  # lizard_core keeps the session's connection open
    pooled = result.get(Setting(0), "command_true", POOLED)
    assert pooled is not None
    assert list(pooled.requests) == [1, 1, 1]
    assert pooled.connections[0] == 0  # the kept-alive connection from the previous repetition
    assert result.environments[OURS]["versions"]["lizard-core"]
    assert result.machine["isolation"] in ("namespace", "host")
    assert result.machine["latency_at"] == latency_at
    limit = result.get(Setting(0), "bare_exec", OURS)
    assert limit is not None
    assert list(limit.requests) == [1, 1, 1]
    assert limit.connections[2] == 0  # the kept-alive connection
    assert result.get(Setting(0), "bare_exec", POOLED) is None  # the limit runs on our side only
    for timed in (cell, limit):
        assert all(0 < s.server_seconds <= s.seconds for s in timed.samples)
    assert chart.render_chart(result, tmp_path / "performance.png")
    assert (tmp_path / "performance.png").read_bytes().startswith(b"\x89PNG")
    page = report.render_page(result, reading.reading_lines(result), "performance.png")
    assert "command `true`" in page
    assert "](performance.png)" in page


def test_ratio_targets_hold_cold_starts_to_the_sdk_and_to_each_other() -> None:
    twenty = Setting(20)
    close = make_run(
        (FAST, twenty),
        sdk_first_use={OURS: [sample(80)]},
        first_use={OURS: [sample(120)]},  # 1.5×
        executor_start={OURS: [sample(160)]},  # 1.33×
    )
    first, start = report.ratio_lines(close)
    assert first == (
        "- ✅ a first use within 1.6× of the SDK's own (limit: the SDK's own create + exec of "
        "`true` (new sandbox)) — 1.5× (120 ms vs 80.0 ms) at 0 ms; 1.5× (120 ms vs 80.0 ms) at "
        "20 ms"
    )
    assert start.startswith("- ❌ a new executor's start within 1.3× of a first use")
    assert "1.3× (160 ms vs 120 ms) at 0 ms" in start
    assert first in report.render_page(close, [])
    alone = make_run((twenty,), first_use={OURS: [sample(120)]})
    assert all("not measured" in line for line in report.ratio_lines(alone))


def test_reference_targets_judge_against_the_published_page() -> None:
    fast = make_run((FAST, twenty := Setting(20), SLOW), code_agent_3_steps={OURS: [sample(250)]})
    (line,) = report.reference_lines(fast)
    assert line.startswith("- ✅ a 3-step CodeAgent run (new executor) at least 1.5× faster than")
    assert "1.7× (250 ms vs 419 ms) at 0 ms" in line
    assert "2.3× (250 ms vs 575 ms) at 20+40 ms" in line
    slow = make_run((twenty,), code_agent_3_steps={OURS: [sample(400)]})
    assert report.reference_lines(slow)[0].startswith("- ❌")
    other = make_run((Setting(50),), code_agent_3_steps={OURS: [sample(100)]})
    assert "not measured" in report.reference_lines(other)[0]


def test_win_targets_judge_restore_against_create_and_setup() -> None:
    twenty = Setting(20)
    won = make_run((twenty,), restore={OURS: [sample(90)]}, create_setup={OURS: [sample(140)]})
    assert report.win_lines(won)[0] == (
        "- ✅ restore from a snapshot beats create + setup at 20 ms per response — "
        "90.0 ms vs 140 ms"
    )
    inspect = make_run(
        (twenty,),
        inspect_sample_snapshot={OURS: [sample(80)]},
        inspect_sample_setup={OURS: [sample(130)]},
    )
    assert report.win_lines(inspect)[1] == (
        "- ✅ an Inspect sample from the task's snapshot beats one that runs the setup at 20 ms "
        "per response — 80.0 ms vs 130 ms"
    )
    lost = make_run((twenty,), restore={OURS: [sample(150)]}, create_setup={OURS: [sample(140)]})
    assert report.win_lines(lost)[0].startswith("- ❌")
    assert "not measured" in report.win_lines(make_run((twenty,), restore={OURS: [sample(1)]}))[0]
    assert {op.kind for op in catalogue.OPERATIONS if op.name in ("restore", "fork_warm")} == {
        "lifecycle"
    }


def test_the_lifecycle_rows_run_on_our_side_only(tmp_path: Path) -> None:
    args = run.parse_args(
        [
            "--ops",
            "create_setup,restore,pause_resume,fork_warm",
            "--settings",
            "0",
            "--reps",
            "1",
            "--memory-sizes",
            "none",
            "--output",
            str(tmp_path / "performance.md"),
        ]
    )
    result = run.measure(args)
    assert result.failures() == []
    for name in ("create_setup", "restore", "pause_resume", "fork_warm"):
        cell = result.get(Setting(0), name, OURS)
        assert cell is not None, name
        assert all(0 < s.seconds < 60 for s in cell.samples)
        assert result.get(Setting(0), name, REF) is None
    restore = result.get(Setting(0), "restore", OURS)
    assert restore is not None
    assert restore.routes["POST /api/sandboxes"] == 1
    assert "POST /api/sandboxes/{id}/fork" in result.get(Setting(0), "fork_warm", OURS).routes  # type: ignore[union-attr]
    pause = result.get(Setting(0), "pause_resume", OURS)
    assert pause is not None
    assert pause.routes["POST /api/sandboxes/{id}/pause"] == 1
    assert pause.routes["POST /api/sandboxes/{id}/resume"] == 1

"""Benchmark this repository's packages against the published 0.1.0 ones; write the results page.

``nox -s bench`` prepares both environments and runs this script. By hand::

    python shared/bench/run.py --ref-python PATH/TO/0.1.0/venv/bin/python [--quick]
        [--settings 0,20,20+40] [--reps 5] [--ops a,b] [--memory-sizes 8,64] [--pooled]
        [--latency-at link|lizard-local] [--output FILE]

Without ``--ref-python`` only this repository's side runs (ratios are left empty).

The script starts lizard-local and, in front of it, an emulated network link (``link.py``): TLS
for the clients (0.1.0 requires https; the link's CA, with certifi's roots, reaches every driver
through ``SSL_CERT_FILE``) and latency that adds to the work as on a real link.
``--latency-at lizard-local`` uses lizard-local's own TLS and latency injection instead. It then
starts one driver per environment (``driver.py``), and for every latency setting, operation and
repetition: prepares, resets the counters, lets the driver time the operation, reads the
counters and cleans up. Settings and sides alternate within each repetition, and so do the
operations a ratio or win target compares (``catalogue.measurement_groups``); warm operations get
one untimed warm-up first. A third driver (``--pooled``, off by default since lizard_core pools
its own connections) runs our packages with lizard-sdk's exec and files requests on one pooled
client: the what-if that showed connection reuse was worth building. Host memory is measured
last, at 0 ms, in a fresh process per side and file size (``memory_probe.py``). The tables go to
stdout, the page to ``--output`` (default ``docs/performance.md``), its chart beside it (the
same name, ``.png``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import IO, Any, Final

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from catalogue import (  # noqa: E402
    OPERATIONS,
    OURS_ONLY,
    PROBES,
    QUICK_OPERATIONS,
    SETTINGS,
    Operation,
    Setting,
    measurement_groups,
    operation,
    parse_settings,
    repetitions,
)
from chart import render_chart  # noqa: E402  (siblings, found through the line above)
from link import Link  # noqa: E402
from reading import reading_lines  # noqa: E402
from report import OURS, POOLED, REF, Run, Sample, render_page, setting_table  # noqa: E402

__all__ = ["Driver", "DriverError", "main", "measure", "parse_args"]

ROOT: Final = HERE.parents[1]
DEFAULT_OUTPUT: Final = ROOT / "docs" / "performance.md"
REPLY_TIMEOUT_S: Final = 600.0


class DriverError(RuntimeError):
    """A driver failed to answer (it exited, or took longer than the timeout)."""


class Driver:
    """One driver process (``driver.py``) in one environment, spoken to in JSON lines."""

    def __init__(
        self, side: str, python: str, env: dict[str, str], options: Sequence[str] = ()
    ) -> None:
        self.side = side
        self.python = python
        self._env = env
        self._log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - lives with the driver
        self._replies: queue.Queue[str | None] = queue.Queue()
        self._proc = subprocess.Popen(
            [python, str(HERE / "driver.py"), *options],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            text=True,
            cwd=str(HERE),
        )
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._replies.put(line)
        self._replies.put(None)

    @property
    def alive(self) -> bool:
        """Whether the process is still running."""
        return self._proc.poll() is None

    def log_tail(self, limit: int = 3000) -> str:
        """The end of what the driver wrote to stderr."""
        self._log.seek(0)
        return self._log.read()[-limit:].decode("utf-8", "replace")

    def request(self, message: dict[str, Any], timeout: float = REPLY_TIMEOUT_S) -> dict[str, Any]:
        """Send one request and wait for its reply."""
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps(message) + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise DriverError(f"the {self.side} driver is gone:\n{self.log_tail()}") from exc
        try:
            line = self._replies.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise DriverError(f"the {self.side} driver did not answer in {timeout:g} s") from None
        if line is None:
            raise DriverError(f"the {self.side} driver exited:\n{self.log_tail()}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> str | None:
        """Ask the driver to destroy its sandboxes and exit; an error it reported, if any."""
        problem = None
        if self._proc.poll() is None:
            try:
                reply = self.request({"cmd": "close"}, timeout=120)
                if not reply.get("ok"):
                    problem = str(reply.get("error"))
            except DriverError as exc:
                problem = str(exc)
        self.kill()
        return problem

    def kill(self) -> None:
        """Stop the process (after close, or when it hangs)."""
        if self._proc.poll() is None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()  # type: ignore[union-attr]
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(30)
        self._log.close()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a few operations, 3 repetitions")
    parser.add_argument(
        "--settings",
        type=parse_settings,
        default=None,
        help="latency settings, e.g. 0,20,20+40 (ms per response [+ ms per new connection])",
    )
    parser.add_argument(
        "--reps",
        type=int,
        default=None,
        help=(
            "repetitions of a cold operation (default 5; 3 quick); one a target compares with "
            "another gets 2N+1, a warm one 2N-1, a probe 4N"
        ),
    )
    parser.add_argument("--ops", default=None, help="comma-separated operation names")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="the page to write")
    parser.add_argument("--ref-python", default=None, help="Python of the 0.1.0 environment")
    parser.add_argument("--ours-python", default=sys.executable, help="Python of ours")
    parser.add_argument(
        "--latency-at",
        choices=("link", "lizard-local"),
        default="link",
        help="where latency is added: an emulated link in front of lizard-local (default), or "
        "lizard-local's own injection (which hides part of a streaming exec's run time)",
    )
    # lizard_core pools its exec and files connections since this what-if measured the gain, so
    # the third driver is off by default; it still runs on request for comparison.
    parser.add_argument(
        "--pooled",
        dest="pooled",
        action="store_true",
        default=False,
        help="add the what-if: ours with lizard-sdk's exec and files calls on one pooled client",
    )
    parser.add_argument("--no-pooled", dest="pooled", action="store_false", help=argparse.SUPPRESS)
    parser.add_argument(
        "--memory-sizes",
        default=None,
        help="file sizes in MiB for the memory probe (default 8,64; 8 quick; 'none' to skip)",
    )
    args = parser.parse_args(argv)
    if args.reps is None:
        args.reps = 3 if args.quick else 5
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    if args.settings is None:
        args.settings = [SETTINGS[0], SETTINGS[-1]] if args.quick else list(SETTINGS)
    names = args.ops.split(",") if args.ops else None
    if names is None:
        chosen = [operation(n) for n in QUICK_OPERATIONS] if args.quick else list(OPERATIONS)
        chosen += list(PROBES)
    else:
        try:
            chosen = [operation(n.strip()) for n in names if n.strip()]
        except ValueError as exc:
            parser.error(str(exc))
    args.operations = chosen
    sizes = args.memory_sizes or ("8" if args.quick else "8,64")
    args.memory_sizes = [] if sizes == "none" else [int(s) for s in sizes.split(",")]
    return args


def machine_info() -> dict[str, Any]:
    """What the page says about the machine (nothing that names local paths)."""
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "os": platform.platform(terse=False),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_before": _load(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                info["memory_gib"] = round(int(line.split()[1]) / 1024 / 1024)
                break
    with contextlib.suppress(metadata.PackageNotFoundError):
        info["lizard_local"] = metadata.version("lizard-local")
    return info


def trust_bundle(ca_file: str | None, directory: Path) -> str:
    """A CA bundle with the public roots and lizard-local's CA, for ``SSL_CERT_FILE``.

    Clients that build an SSL context per request (lizard-sdk) load every certificate of the
    bundle each time. Against the cloud that is certifi's bundle (about 150 roots); lizard-local's
    CA alone would make the cost vanish, so both are loaded, as in production.
    """
    import certifi

    if ca_file is None:
        raise ValueError("lizard-local was started without TLS")
    bundle = directory / "ca-bundle.pem"
    roots = Path(certifi.where()).read_text(encoding="ascii")
    local = Path(ca_file).read_text(encoding="ascii")
    bundle.write_text(roots.rstrip("\n") + "\n" + local, encoding="ascii")
    return str(bundle)


def _load() -> str:
    try:
        return " / ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "?"


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Bench:
    """One run: the server, the drivers, and the results they produce."""

    def __init__(
        self, args: argparse.Namespace, server: Any, link: Link | None, scratch: Path
    ) -> None:
        self.args = args
        self.server = server
        self.link = link
        url = server.url if link is None else link.url
        bundle = trust_bundle(server.ca_file if link is None else link.ca_file, scratch)
        self.env = {**os.environ, **server.env, "LIZARD_API_URL": url, "SSL_CERT_FILE": bundle}
        self.env.pop("PYTHONPATH", None)  # each environment sees only its own packages
        # side -> (python, driver options); the 0.1.0 side first, so it leads every repetition.
        self.sides: dict[str, tuple[str, list[str]]] = {}
        if args.ref_python:
            self.sides[REF] = (args.ref_python, [])
        self.sides[OURS] = (args.ours_python, [])
        if args.pooled:
            self.sides[POOLED] = (args.ours_python, ["--pooled"])
        self.drivers: dict[str, Driver] = {}
        self.run = Run(
            settings=list(args.settings),
            operations=list(args.operations),
            sides=list(self.sides),
            reps=args.reps,
        )

    def set_latency(self, setting: Setting) -> None:
        """Apply a setting where this run adds latency: the link, or lizard-local itself."""
        if self.link is not None:
            self.link.set_latency(setting.response_ms, setting.connection_ms)
        else:
            self.server.set_latency(setting.response_ms, connection_ms=setting.connection_ms)

    def driver(self, side: str) -> Driver:
        """The side's driver, (re)started when needed."""
        driver = self.drivers.get(side)
        if driver is None:
            python, options = self.sides[side]
            driver = Driver(side, python, self.env, options)
            hello = driver.request({"cmd": "hello"}, timeout=120)
            if not hello.get("ok"):
                raise DriverError(f"{side} driver: {hello.get('error')}")
            self.run.environments[side] = {"python": hello["python"], "versions": hello["versions"]}
            self.drivers[side] = driver
        return driver

    def sides_for(self, op: Operation) -> list[str]:
        """Probes, the limit, lifecycle rows and adapters new since 0.1.x run on our side only."""
        return [OURS] if op.kind in OURS_ONLY else list(self.sides)

    def repetition(self, op: Operation, side: str) -> Sample:
        """Prepare, reset the counters, act, read the counters, finish; raise on failure."""
        driver = self.driver(side)
        ready = driver.request({"cmd": "prepare", "op": op.name})
        try:
            if not ready.get("ok"):
                raise DriverError(f"prepare: {ready.get('error')}\n{ready.get('traceback', '')}")
            self.server.reset_counters()
            done = driver.request({"cmd": "act"})
            counters = self.server.counters()
            if not done.get("ok"):
                raise DriverError(f"{done.get('error')}\n{done.get('traceback', '')}")
        finally:
            finished = driver.request({"cmd": "finish"})
        if not finished.get("ok"):
            raise DriverError(f"clean-up: {finished.get('error')}")
        return Sample(
            seconds=float(done["seconds"]),
            requests=int(counters["total"]),
            connections=int(counters["connections"]),
            routes=dict(counters["routes"]),
            server_seconds=float(counters["seconds"]),
        )

    def measure(self) -> None:
        """Every operation at every latency setting.

        Settings are interleaved within each repetition, like the sides, so a drift in machine
        load (or anything that is slow early in a run) reaches every setting alike.
        """
        settings = self.run.settings
        for group in measurement_groups(self.run.operations):
            pairs = [(op, side) for op in group for side in self.sides_for(op)]
            failed: set[tuple[str, str, str]] = set()
            for setting in settings:
                for op, side in pairs:
                    self.run.cell(setting, op.name, side)
            # One untimed warm-up per warm operation: imports, SSL and the guest programs'
            # first run are then out of every timed repetition.
            self.set_latency(settings[0])
            for op, side in pairs:
                if not op.cold:
                    self._attempt(settings[0], op, side, failed, warm_up=True)
            for rep in range(max(repetitions(op, self.args.reps) for op in group)):
                for setting in settings if rep % 2 == 0 else settings[::-1]:
                    self.set_latency(setting)
                    for op, side in pairs if rep % 2 == 0 else pairs[::-1]:
                        if (setting.name, op.name, side) not in failed:
                            self._attempt(setting, op, side, failed)
            for op in group:
                for setting in settings:
                    summary = []
                    for side in self.sides_for(op):
                        cell = self.run.cell(setting, op.name, side)
                        ms = "failed" if not cell.ok else f"{cell.seconds * 1000:.0f} ms"
                        summary.append(f"{side} {ms}")
                    _log(f"  [{setting.name}] {op.name}: " + ", ".join(summary))

    def _attempt(
        self,
        setting: Setting,
        op: Operation,
        side: str,
        failed: set[tuple[str, str, str]],
        warm_up: bool = False,
    ) -> None:
        cell = self.run.cell(setting, op.name, side)
        try:
            sample = self.repetition(op, side)
        except DriverError as exc:
            cell.error = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else "failed"
            _log(f"  [{setting.name}] {op.name} on {side} failed: {exc}")
            # A failed warm-up leaves nothing to measure at any setting.
            for each in self.run.settings if warm_up else [setting]:
                failed.add((each.name, op.name, side))
                self.run.cell(each, op.name, side).error = cell.error
            if side in self.drivers and not self.drivers[side].alive:
                self.drivers.pop(side).kill()  # restarted at next use
            return
        if not warm_up:
            cell.samples.append(sample)

    def memory(self) -> None:
        """Peak RSS of large transfers, one fresh process per side and size, at 0 ms."""
        if not self.args.memory_sizes:
            return
        self.set_latency(Setting(0))
        for side in (REF, OURS):
            if side not in self.sides:
                continue
            python = self.sides[side][0]
            results = self.run.memory.setdefault(side, [])
            for size in self.args.memory_sizes:
                try:
                    done = subprocess.run(
                        [python, str(HERE / "memory_probe.py"), str(size)],
                        env=self.env,
                        cwd=str(HERE),
                        capture_output=True,
                        text=True,
                        timeout=REPLY_TIMEOUT_S,
                        check=False,
                    )
                except subprocess.TimeoutExpired:
                    results.append({"size_mib": size, "error": "timed out"})
                    continue
                if done.returncode != 0:
                    tail = done.stderr.strip().splitlines()[-1:] or ["exit " + str(done.returncode)]
                    results.append({"size_mib": size, "error": tail[0][:300]})
                    _log(f"  memory {size} MiB on {side} failed:\n{done.stderr[-2000:]}")
                    continue
                results.append(json.loads(done.stdout.strip().splitlines()[-1]))
                _log(f"  memory {size} MiB on {side}: {results[-1]}")

    def close(self) -> list[str]:
        """Close every driver; problems they reported."""
        problems = []
        for side, driver in self.drivers.items():
            problem = driver.close()
            if problem:
                problems.append(f"{side} driver clean-up: {problem}")
        self.drivers.clear()
        return problems


def measure(args: argparse.Namespace) -> Run:
    """Start lizard-local and the drivers, measure everything, and return the results."""
    from lizard_local import LocalServer

    started = time.monotonic()
    machine = machine_info()
    at_server = args.latency_at == "lizard-local"
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        server = stack.enter_context(LocalServer(tls=at_server))
        link = None
        if not at_server:
            link = stack.enter_context(Link(int(server.url.rsplit(":", 1)[1]), scratch))
        machine["isolation"] = server.isolation
        machine["latency_at"] = args.latency_at
        bench = Bench(args, server, link, scratch)
        try:
            for side in bench.sides:
                bench.driver(side)
            bench.measure()
            for setting in args.settings:
                print(f"\n{setting.description}\n\n{setting_table(bench.run, setting)}\n")
            sys.stdout.flush()
            bench.memory()
        finally:
            problems = bench.close()
        leftovers = server.sandboxes()
    for problem in problems:
        _log(problem)
    if leftovers:
        _log(f"sandboxes left behind by the drivers (the server removed them): {leftovers}")
    machine["load_after"] = _load()
    bench.run.machine = machine
    bench.run.duration_s = time.monotonic() - started
    return bench.run


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the tables, write the page; 1 if any operation failed."""
    args = parse_args(argv)
    run = measure(args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    chart = args.output.with_suffix(".png")
    chart_written = render_chart(run, chart)
    page = render_page(run, reading_lines(run), chart.name if chart_written else None)
    args.output.write_text(page, encoding="utf-8")
    _log(f"wrote {args.output}")
    failures = run.failures()
    for line in failures:
        _log(f"FAILED {line}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

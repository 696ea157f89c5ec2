"""The guest side of the kernel, run directly: kernel_client and kernel_daemon as local processes.

Each test drives the compact client program exactly as the host sends it (``python3 -I -S -c
<program> <call id> <k> <request part> <op> <key> <daemon_sha> <cwd> <daemon>``) and reads its
frame lines; no emulator is involved, so
these are the fast tests of the guest half. ``test_kernel.py`` covers the host API through
lizard-local.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lizard_core._guest import program, source
from lizard_core.guest import ARG_PART

Frame = dict[str, Any]
LINE_SPLIT = 64 * 1024
NAMED = ("op", "key", "daemon_sha", "cwd", "daemon")


def _daemon_source() -> tuple[str, str]:
    text = program("kernel_daemon").encode()
    import zlib

    return hashlib.sha256(text).hexdigest()[:16], base64.b64encode(zlib.compress(text)).decode()


class GuestKernel:
    """Runs kernel_client requests against one kernel key, as the host would."""

    def __init__(self, tmpdir: str, key: str = "k", python: str = sys.executable) -> None:
        self.tmpdir = tmpdir
        self.key = key
        self.python = python
        self.sha, self.daemon = _daemon_source()
        self.env = dict(os.environ, TMPDIR=tmpdir)
        self.env.pop("MPLBACKEND", None)

    @property
    def directory(self) -> Path:
        return Path(self.tmpdir) / f".lizard-kernel-{os.getuid()}" / self.key

    def argv(self, op: str, body: Frame | None = None, **extra: Any) -> list[str]:
        req: Frame = {"op": op, "key": self.key, "daemon_sha": self.sha, "daemon": self.daemon}
        if body is not None:
            req["body"] = body
        req.update(extra)
        # The operation and the daemon travel as plain argv items after the request, as the
        # host sends them; the rest as JSON.
        named = [str(req.pop(name, None) or "") for name in NAMED]
        encoded = base64.b64encode(json.dumps(req).encode()).decode()
        # Split over argv items as the host does (one argument is limited to 128 KiB).
        parts = [encoded[i : i + ARG_PART] for i in range(0, len(encoded), ARG_PART)]
        program_text = program("kernel_client")
        argv = ["call1", str(len(parts)), *parts, *named]
        return [self.python, "-I", "-S", "-c", program_text, *argv]

    def request(self, op: str, body: Frame | None = None, **extra: Any) -> list[Frame]:
        proc = subprocess.run(
            self.argv(op, body, **extra), capture_output=True, env=self.env, timeout=60
        )
        assert proc.returncode == 0, proc.stderr.decode()
        lines = proc.stdout.split(b"\n")
        assert lines[-1] == b""
        assert all(len(line) < LINE_SPLIT for line in lines)
        frames = [json.loads(line) for line in lines[:-1]]
        assert frames[0]["t"] == "pid"
        assert [f["t"] for f in frames].count("end") == 1
        assert frames[-1]["t"] == "end"
        return frames

    def execute(self, code: str, timeout: float = 10, grace: float = 1, **body: Any) -> Outcome:
        body = {"op": "execute", "code": code, "timeout": timeout, "grace": grace, **body}
        return Outcome(self.request("execute", body))

    def popen(self, code: str, timeout: float = 60, **extra: Any) -> subprocess.Popen[bytes]:
        body = {"op": "execute", "code": code, "timeout": timeout, "grace": 1}
        return subprocess.Popen(
            self.argv("execute", body, **extra), stdout=subprocess.PIPE, env=self.env
        )

    def daemon_pid(self) -> int:
        return int((self.directory / "pid").read_text().split()[0])  # pid, start time

    def close(self) -> None:
        self.request("close")


class Outcome:
    """Frames of one execute, decoded."""

    def __init__(self, frames: list[Frame]) -> None:
        self.frames = frames
        self.end = frames[-1]
        self.error = self.end.get("error")
        out: dict[int, bytes] = {1: b"", 2: b""}
        results: dict[int, Frame] = {}
        for frame in frames:
            if frame["t"] == "o":
                out[frame["s"]] += base64.b64decode(frame["d"])
            elif frame["t"] == "res":
                results[frame["i"]] = {"main": frame["main"], "omit": frame["omit"], "data": {}}
            elif frame["t"] == "rd":
                data = results[frame["i"]]["data"]
                data[frame["m"]] = data.get(frame["m"], "") + frame["d"]
        self.raw = out
        self.stdout = out[1].decode("utf-8", "replace")
        self.stderr = out[2].decode("utf-8", "replace")
        self.results = [results[i] for i in sorted(results)]

    @property
    def value(self) -> dict[str, str] | None:
        main = [r for r in self.results if r["main"]]
        return main[0]["data"] if main else None

    @property
    def kernel(self) -> str | None:
        cells = [f for f in self.frames if f["t"] == "cell"]
        return cells[0]["kernel"] if cells else None


@pytest.fixture
def short_tmp() -> Iterator[str]:
    # Short, to keep most kernel directories under the 108-byte socket address limit (the
    # long-path route has its own test).
    path = tempfile.mkdtemp(prefix="lk", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kernel(short_tmp: str) -> Iterator[GuestKernel]:
    guest = GuestKernel(short_tmp)
    yield guest
    pid_file = guest.directory / "pid"
    pid = guest.daemon_pid() if pid_file.exists() else None
    guest.close()
    if pid is not None:
        assert not _alive(pid), "close() left the daemon running"


@pytest.fixture(scope="module")
def rich() -> Iterator[GuestKernel]:
    """One kernel for the rich-result tests, so PIL, matplotlib and pandas are imported once."""
    path = tempfile.mkdtemp(prefix="lk", dir="/tmp")
    guest = GuestKernel(path, key="rich")
    try:
        yield guest
    finally:
        guest.close()
        shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except OSError:
        return False


# -- state and cells ------------------------------------------------------------------------------


def test_state_persists_between_cells(kernel: GuestKernel) -> None:
    assert kernel.execute("x = 21").error is None
    assert kernel.execute("x * 2").value == {"text/plain": "42"}
    kernel.execute("import math\ndef area(r):\n    return math.pi * r * r\nclass P:\n    k = 3")
    assert kernel.execute("round(area(1), 2), P.k").value == {"text/plain": "(3.14, 3)"}


def test_first_execute_starts_the_daemon_and_later_ones_reuse_it(kernel: GuestKernel) -> None:
    first = kernel.execute("1")
    assert [f["t"] for f in first.frames][:3] == ["pid", "spawned", "cell"]
    assert first.end.get("state_lost") is None
    second = kernel.execute("2")
    assert "spawned" not in [f["t"] for f in second.frames]
    assert second.kernel == first.kernel
    assert (first.end["n"], second.end["n"]) == (1, 2)


def test_first_calls_at_once_make_one_daemon_and_their_other_pythons_exit(
    kernel: GuestKernel,
) -> None:
    """Each call that finds no daemon starts the daemon's Python ahead of its own compile.

    Only the one that takes the start lock makes its Python the daemon; the others connect to
    it, and the Pythons they started exit having run nothing of the daemon's.
    """
    calls = [kernel.popen("import os\nprint(os.getpid())") for _ in range(4)]
    outputs = [call.communicate(timeout=60)[0] for call in calls]
    frames = [[json.loads(line) for line in out.splitlines()] for out in outputs]
    printed = {Outcome(f).stdout for f in frames}
    daemon = kernel.daemon_pid()
    assert printed == {f"{daemon}\n"}
    assert sum("spawned" in [frame["t"] for frame in f] for f in frames) == 1

    deadline = time.monotonic() + 15
    while _pythons_of(kernel) != {daemon} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _pythons_of(kernel) == {daemon}


def _pythons_of(guest: GuestKernel) -> set[int]:
    """The live processes started for ``guest``'s kernel directory: daemon or early Python."""
    found = set()
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, ValueError):
            continue
        if entry.isdigit() and str(guest.directory).encode() in argv and _alive(int(entry)):
            found.add(int(entry))
    return found


def _held_while_early(guest: GuestKernel) -> tuple[int, subprocess.Popen[bytes], int]:
    """A first execute held at the start lock, once its daemon's Python has started early.

    Returns the lock's descriptor (closing it lets the call go on), the call and that Python.
    """
    import fcntl

    guest.directory.parent.mkdir(mode=0o700)
    guest.directory.mkdir(mode=0o700)
    lock = os.open(guest.directory / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    call = guest.popen("import os\nprint(os.getpid())")

    deadline = time.monotonic() + 30
    while not _pythons_of(guest) and time.monotonic() < deadline:
        time.sleep(0.005)
    started = _pythons_of(guest)  # no daemon yet: the lock holds the call before its start
    assert len(started) == 1, "no daemon's Python was started early"
    return lock, call, started.pop()


def _outcome(call: subprocess.Popen[bytes]) -> Outcome:
    return Outcome([json.loads(line) for line in call.communicate(timeout=60)[0].splitlines()])


def test_a_kernel_directory_made_anew_meanwhile_gets_a_daemon_of_its_own(
    kernel: GuestKernel,
) -> None:
    """A ``close`` removed the directory the early Python logs to: it is not made the daemon."""
    lock, call, early = _held_while_early(kernel)
    shutil.rmtree(kernel.directory)
    os.close(lock)
    daemon = int(_outcome(call).stdout)
    assert daemon != early
    assert daemon == kernel.daemon_pid()
    opened = {os.readlink(f"/proc/{daemon}/fd/{fd}") for fd in os.listdir(f"/proc/{daemon}/fd")}
    # Its log (its first stderr, kept for fault dumps) is the directory's, not a removed one's.
    assert {path for path in opened if "daemon.log" in path} == {
        str(kernel.directory / "daemon.log")
    }


@pytest.mark.parametrize("recorded", ["with its start time", "as older clients wrote it"])
def test_a_stale_pid_file_naming_the_early_python_neither_stops_nor_loses_the_call(
    kernel: GuestKernel, recorded: str
) -> None:
    """After a restore pids start again from 1: a pid file from before may name the early Python.

    With the start time recorded, it is not taken for the daemon (an interrupt finds none); in
    the old format it is, and the early Python ignores the interrupt until it is the daemon.
    """
    lock, call, early = _held_while_early(kernel)
    stale = f"{early} 1\n" if recorded == "with its start time" else f"{early}\n"
    (kernel.directory / "pid").write_text(stale)
    interrupted = kernel.request("interrupt")[-1]
    os.close(lock)
    out = _outcome(call)
    assert out.error is None
    assert int(out.stdout) == kernel.daemon_pid()
    assert int(out.stdout) == early
    assert interrupted["running"] is (recorded != "with its start time")
    assert kernel.execute("2").value == {"text/plain": "2"}


def _loader(tmp_path: Path, said: bytes) -> subprocess.CompletedProcess[bytes]:
    """A Python started as the client starts the daemon's, told ``said`` on its code pipe."""
    from lizard_core._guest._client_spawn import LOADER

    script = tmp_path / "daemon.py"
    script.write_text("import sys\nprint('ran', __file__ == sys.argv[0], sys.argv[1:])\n")
    code_r, code_w = os.pipe()
    os.write(code_w, said)
    os.close(code_w)
    try:
        argv = [sys.executable, "-c", LOADER, str(script), "DIR", "CWD", str(code_r)]
        return subprocess.run(argv, capture_output=True, timeout=60, pass_fds=(code_r,))
    finally:
        os.close(code_r)


def test_a_daemons_python_not_taken_exits_having_run_nothing(tmp_path: Path) -> None:
    done = _loader(tmp_path, b"")
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


@pytest.mark.parametrize("sent", ["nothing", "code", "a broken code"])
def test_a_daemons_python_taken_runs_the_file_as_python_would(tmp_path: Path, sent: str) -> None:
    """Told ``G``: the code the client compiled, else (none, or unreadable) the file itself."""
    import marshal

    text = "import sys\nprint('ran', __file__ == sys.argv[0], sys.argv[1:])\n"
    code = marshal.dumps(compile(text, str(tmp_path / "daemon.py"), "exec"))
    said = {"nothing": b"G", "code": b"G" + code, "a broken code": b"G" + code[:9]}[sent]
    done = _loader(tmp_path, said)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"ran True ['DIR', 'CWD']\n"


def test_a_new_kernel_listens_without_the_python_layers_it_does_not_need(
    kernel: GuestKernel,
) -> None:
    # A new executor waits for the daemon's start: socket, signal and ast build enums and helpers
    # the daemon never uses; traceback and base64 wait for the first error, or are not needed.
    layers = "{'ast', 'base64', 'signal', 'socket', 'traceback'}"
    probe = f"import sys; sorted({layers} & set(sys.modules))"
    assert kernel.execute(probe).value == {"text/plain": "[]"}
    failed = kernel.execute("1 / 0")
    assert failed.error["name"] == "ZeroDivisionError"
    assert "<cell-2>" in failed.error["traceback"]
    imported = kernel.execute("import socket, signal; int(socket.AF_UNIX), int(signal.SIGINT)")
    assert imported.value == {"text/plain": "(1, 2)"}


def test_cells_run_as_ipython_runs_them(kernel: GuestKernel) -> None:
    assert kernel.execute("a = 1\na + 1").value == {"text/plain": "2"}
    assert kernel.execute("a + 1;").value is None  # a trailing semicolon hides the value
    assert kernel.execute("None").value is None
    assert kernel.execute("_").value == {"text/plain": "2"}
    assert kernel.execute("await __import__('asyncio').sleep(0, 'awaited')").value == {
        "text/plain": "'awaited'"
    }


def test_classes_defined_in_cells_pickle_and_take_future_imports(kernel: GuestKernel) -> None:
    kernel.execute(
        "from __future__ import annotations\nimport dataclasses\n"
        "@dataclasses.dataclass\nclass Point:\n    x: int"
    )
    # The __future__ import holds in later cells too, and __main__ is the namespace.
    kernel.execute("def f(a: Undefined) -> AlsoUndefined:\n    return a")
    out = kernel.execute("import pickle\npickle.loads(pickle.dumps(Point(2))), f(1)")
    assert out.value == {"text/plain": "(Point(x=2), 1)"}


def test_syntax_error_reports_the_line_without_daemon_frames(kernel: GuestKernel) -> None:
    out = kernel.execute("def f(:\n    pass")
    assert out.error is not None
    assert out.error["name"] == "SyntaxError"
    assert "Traceback" not in out.error["traceback"]
    assert "<cell-1>" in out.error["traceback"]
    assert kernel.execute("1 + 1").value == {"text/plain": "2"}


def test_errors_carry_name_message_and_the_cells_traceback(kernel: GuestKernel) -> None:
    out = kernel.execute("def g():\n    raise ValueError('inner')\ng()")
    assert out.error is not None
    assert (out.error["name"], out.error["message"]) == ("ValueError", "inner")
    tb = out.error["traceback"]
    assert tb.startswith("Traceback (most recent call last):\n")
    assert 'File "<cell-1>", line 3, in <module>' in tb
    assert "kernel_daemon" not in tb
    assert "\x1b[" not in tb


@pytest.mark.parametrize(
    ("code", "name", "message"),
    [
        (
            "class FinalAnswerException(BaseException):\n    pass\n"
            "raise FinalAnswerException('safe:42')",
            "FinalAnswerException",
            "safe:42",
        ),
        ("import sys\nsys.exit(3)", "SystemExit", "3"),
        ("raise KeyboardInterrupt('by hand')", "KeyboardInterrupt", "by hand"),
        ("raise GeneratorExit", "GeneratorExit", ""),
    ],
)
def test_any_base_exception_is_reported_and_the_kernel_lives_on(
    kernel: GuestKernel, code: str, name: str, message: str
) -> None:
    kernel.execute("kept = 'yes'")
    out = kernel.execute(code)
    assert out.error is not None
    assert (out.error["name"], out.error["message"]) == (name, message)
    after = kernel.execute("kept")
    assert after.value == {"text/plain": "'yes'"}
    assert after.kernel == out.kernel


def test_forked_children_write_into_the_cell_and_never_serve(kernel: GuestKernel) -> None:
    out = kernel.execute(
        "import os\npid = os.fork()\nif pid == 0:\n    print('child')\n"
        "else:\n    os.waitpid(pid, 0)\n    print('parent')"
    )
    assert out.error is None
    assert out.stdout == "child\nparent\n"
    # Functions defined in cells reach fork workers, whose prints join the cell's output.
    out = kernel.execute(
        "import multiprocessing\ndef square(v):\n    print('worker', v, flush=True)\n"
        "    return v * v\nwith multiprocessing.get_context('fork').Pool(2) as pool:\n"
        "    squares = pool.map(square, [1, 2, 3])\nsquares"
    )
    assert out.value == {"text/plain": "[1, 4, 9]"}
    assert sorted(out.stdout.splitlines()) == ["worker 1", "worker 2", "worker 3"]
    assert kernel.execute("pid != 0").value == {"text/plain": "True"}  # the parent serves


def test_exit_is_reported_and_input_stays_at_eof(kernel: GuestKernel) -> None:
    out = kernel.execute("exit(5)")
    assert out.error is not None
    assert (out.error["name"], out.error["message"]) == ("SystemExit", "5")
    out = kernel.execute("input()")
    assert out.error is not None
    assert out.error["name"] == "EOFError"


def test_a_long_message_arrives_whole(kernel: GuestKernel) -> None:
    # smolagents' final answer is an exception message: it must never be shortened.
    answer = "safe:" + json.dumps({"text": "é" * 200_000})
    out = kernel.execute(
        "import json\nclass FinalAnswerException(BaseException):\n    pass\n"
        "raise FinalAnswerException('safe:' + json.dumps({'text': 'é' * 200_000}))"
    )
    assert out.error is not None
    assert "message" in out.error["framed"]
    pieces = "".join(f["d"] for f in out.frames if f["t"] == "et" and f["f"] == "message")
    assert pieces == answer


def test_env_applies_to_one_cell_only(kernel: GuestKernel) -> None:
    code = "import os\nos.environ.get('LZ_TOKEN'), os.environ.get('HOME') is not None"
    assert kernel.execute(code, env={"LZ_TOKEN": "s3"}).value == {"text/plain": "('s3', True)"}
    assert kernel.execute(code).value == {"text/plain": "(None, True)"}


def test_working_directory_is_importable_and_chosen_by_the_request(
    short_tmp: str,
) -> None:
    work = Path(short_tmp) / "work"
    guest = GuestKernel(short_tmp)
    try:
        out = guest.request(
            "execute", {"op": "execute", "code": "import os\nos.getcwd()"}, cwd=str(work)
        )
        assert Outcome(out).value == {"text/plain": repr(str(work))}
        (work / "helper_mod.py").write_text("VALUE = 7\n")
        assert guest.execute("import helper_mod\nhelper_mod.VALUE").value == {"text/plain": "7"}
    finally:
        guest.close()


def test_the_daemons_own_imports_ignore_modules_in_the_working_directory(
    short_tmp: str,
) -> None:
    # The working directory may be a shared one (/tmp) where another user can plant files: a
    # module there must not stand in for one the daemon imports before it runs any cell.
    work = Path(short_tmp) / "shared"
    work.mkdir()
    marker = work / "planted-ran"
    # Those the daemon's Python imports before it is the daemon, too, and what they import.
    for name in ("ast", "json", "linecache", "threading", "warnings", "select", "re", "enum"):
        plant = f"open({str(marker)!r}, 'a').write({name!r} + ' ')\nraise ImportError\n"
        (work / f"{name}.py").write_text(plant)
    guest = GuestKernel(short_tmp)
    try:
        out = Outcome(guest.request("execute", {"op": "execute", "code": "1"}, cwd=str(work)))
        assert not marker.exists(), marker.read_text()
        assert out.error is None
    finally:
        guest.close()


# -- output ---------------------------------------------------------------------------------------


def test_output_streams_in_order_from_python_and_subprocesses(kernel: GuestKernel) -> None:
    out = kernel.execute(
        "import os, sys\nprint('one')\nos.system('echo two')\nprint('three')\n"
        "print('err', file=sys.stderr)\nsys.stdout.buffer.write(b'\\xff\\n')\n"
        "os.write(2, b'raw\\n')"
    )
    assert out.error is None
    assert out.raw[1] == b"one\ntwo\nthree\n\xff\n"  # bytes are exact, not re-encoded
    assert out.stderr == "err\nraw\n"


def test_output_arrives_while_the_cell_runs(kernel: GuestKernel) -> None:
    kernel.execute("import time")
    proc = kernel.popen("print('first', flush=True)\ntime.sleep(1)\nprint('last')")
    assert proc.stdout is not None
    started = time.monotonic()
    seen_first = None
    for line in proc.stdout:
        frame = json.loads(line)
        if frame["t"] == "o" and base64.b64decode(frame["d"]) == b"first\n":
            seen_first = time.monotonic() - started
        if frame["t"] == "end":
            ended = time.monotonic() - started
    proc.wait()
    assert seen_first is not None
    # The first line came while the cell still slept (a start-up delay shifts both times alike).
    assert ended - seen_first > 0.5


def test_output_past_the_limit_is_cut_with_a_marker_frame(kernel: GuestKernel) -> None:
    out = kernel.execute(
        "import sys\nprint('x' * 3_000_000)\nprint('tail', file=sys.stderr)", max_output=1_000_000
    )
    cuts = [f for f in out.frames if f["t"] == "cut"]
    assert cuts == [{"t": "cut", "s": 1, "limit": 1_000_000}]
    assert len(out.stdout) == 1_000_000
    assert out.stderr == ""
    assert out.end["dropped"] == [2_000_001, 5]


def test_frames_past_the_budget_go_to_the_job_file(kernel: GuestKernel) -> None:
    frames = kernel.request(
        "execute",
        {
            "op": "execute",
            "code": "for i in range(2000):\n    print(i)\n'v' * 50_000",
            "budget": 4096,
        },
    )
    end = frames[-1]
    spill = Path(end["spill"])
    try:
        assert spill.parent == Path("/tmp/.lizard-core/call1")
        assert spill.parent.stat().st_mode & 0o777 == 0o700
        streamed = sum(len(json.dumps(f, separators=(",", ":"))) + 1 for f in frames[2:-1])
        assert streamed <= 4096
        rest = [json.loads(line) for line in spill.read_bytes().splitlines()]
        whole = Outcome([*frames[:-1], *rest, end])
        assert whole.stdout == "".join(f"{i}\n" for i in range(2000))
        assert whole.value == {"text/plain": repr("v" * 50_000)}
    finally:
        shutil.rmtree(spill.parent, ignore_errors=True)


def test_the_protocols_cleanup_list_is_honoured(kernel: GuestKernel) -> None:
    job = Path("/tmp/.lizard-core") / f"test{os.getpid()}"
    job.mkdir(parents=True, exist_ok=True)
    outside = Path(kernel.tmpdir) / "keep"
    outside.mkdir()
    kernel.request("ping", {"op": "ping"}, rm=[str(job), str(outside)])
    assert not job.exists()
    assert outside.exists()


def test_heartbeats_keep_a_silent_cell_talking(kernel: GuestKernel) -> None:
    frames = kernel.request(
        "execute", {"op": "execute", "code": "import time\ntime.sleep(1)", "timeout": 5}, hb=0.2
    )
    assert [f["t"] for f in frames].count("hb") >= 3


# -- rich results ---------------------------------------------------------------------------------


def test_pil_image_gives_png(rich: GuestKernel) -> None:
    kernel = rich
    pytest.importorskip("PIL")
    out = kernel.execute("from PIL import Image\nImage.new('RGB', (4, 3), 'red')")
    assert out.value is not None
    assert set(out.value) == {"image/png", "text/plain"}
    png = base64.b64decode(out.value["image/png"])
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert "size=4x3" in out.value["text/plain"]


def test_matplotlib_figures_become_png_results_and_are_closed(rich: GuestKernel) -> None:
    kernel = rich
    pytest.importorskip("matplotlib")
    out = kernel.execute(
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\n"
        "fig2 = plt.figure()\nplt.plot([3, 2])\nprint('drawn')"
    )
    assert out.error is None
    assert out.stdout == "drawn\n"
    assert out.stderr == ""  # no "non-interactive" warning from plt.show()
    pngs = [r for r in out.results if "image/png" in r["data"]]
    assert len(pngs) == 2
    assert all(not r["main"] for r in pngs)
    assert base64.b64decode(pngs[0]["data"]["image/png"]).startswith(b"\x89PNG")
    assert kernel.execute("plt.get_fignums()").value == {"text/plain": "[]"}
    # A figure as the last expression is the main result, sent once.
    out = kernel.execute("fig, ax = plt.subplots()\nfig")
    assert len(out.results) == 1
    assert out.results[0]["main"]
    assert "image/png" in out.results[0]["data"]


def test_dataframe_gives_html_and_json(rich: GuestKernel) -> None:
    kernel = rich
    pytest.importorskip("pandas")
    out = kernel.execute("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
    assert out.value is not None
    assert set(out.value) == {"text/plain", "text/html", "application/json"}
    assert "<table" in out.value["text/html"]
    assert json.loads(out.value["application/json"]) == {
        "columns": ["a", "b"],
        "index": [0, 1],
        "data": [[1, "x"], [2, "y"]],
    }


def test_repr_methods_and_display(kernel: GuestKernel) -> None:
    out = kernel.execute(
        "class Rich:\n"
        "    def _repr_html_(self):\n        return '<b>rich</b>'\n"
        "    def _repr_json_(self):\n        return {'k': [1]}\n"
        "    def __repr__(self):\n        return 'Rich()'\n"
        "class Anything:\n"
        "    def __getattr__(self, name):\n        return lambda: 'should not be called'\n"
        "display(Rich(), 5)\nAnything()"
    )
    assert out.error is None
    first, second, main = out.results
    assert first["data"] == {
        "text/html": "<b>rich</b>",
        "application/json": '{"k": [1]}',
        "text/plain": "Rich()",
    }
    assert second["data"] == {"text/plain": "5"}
    assert not first["main"]
    assert main["main"]
    assert list(main["data"]) == ["text/plain"]


def test_large_values_are_cut_or_omitted_with_a_marker(rich: GuestKernel) -> None:
    kernel = rich
    out = kernel.execute("'y' * 100_000", max_result=10_000)
    assert out.value is not None
    text = out.value["text/plain"]
    assert text.startswith("'yyy")
    assert text.endswith("[lizard: value cut at 10000 of 100002 characters]")
    pytest.importorskip("PIL")
    out = kernel.execute(
        "import os\nfrom PIL import Image\nImage.frombytes('RGB', (300, 300), os.urandom(270000))",
        max_result=10_000,
    )
    assert out.results[0]["omit"] == ["image/png"]
    assert list(out.results[0]["data"]) == ["text/plain"]


def test_a_big_value_arrives_whole_in_frames_under_the_line_split(kernel: GuestKernel) -> None:
    out = kernel.execute("'é' * 300_000 + 'end'")
    assert out.value == {"text/plain": repr("é" * 300_000 + "end")}
    assert sum(f["t"] == "rd" for f in out.frames) > 1


# -- timeouts, interrupts and lost kernels ---------------------------------------------------------


def test_timeout_interrupts_the_cell_and_keeps_the_namespace(kernel: GuestKernel) -> None:
    kernel.execute("x = 21\nimport time")
    started = time.monotonic()
    out = kernel.execute("time.sleep(10)", timeout=1, grace=2)
    assert time.monotonic() - started < 5  # interrupted at 1 s, not after the 10 s sleep
    assert out.error is not None
    assert out.error["name"] == "TimeoutError"
    assert "KeyboardInterrupt" in out.error["traceback"]
    assert "kernel_daemon" not in out.error["traceback"]
    assert out.end["timed_out"] is True
    assert out.end.get("state_lost") is None
    assert kernel.execute("x * 2").value == {"text/plain": "42"}


def test_a_cell_ignoring_sigint_gets_the_kernel_restarted(kernel: GuestKernel) -> None:
    first = kernel.execute("x = 1")
    started = time.monotonic()
    out = kernel.execute(
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(30)",
        timeout=0.5,
        grace=0.5,
    )
    assert time.monotonic() - started < 5  # restarted after timeout and grace, not after 30 s
    assert out.error is not None
    assert out.error["name"] == "TimeoutError"
    assert out.end["state_lost"] is True
    assert "restarted" in out.end["notice"]
    assert "lost" in out.end["notice"]
    after = kernel.execute("'x' in dir()")
    assert after.value == {"text/plain": "False"}
    assert after.kernel != first.kernel
    assert after.end.get("state_lost") is None  # said once, when it happened


def test_os_exit_is_detected_and_the_next_cell_works(kernel: GuestKernel) -> None:
    kernel.execute("x = 1")
    out = kernel.execute("import os\nos._exit(1)")
    assert out.error is not None
    assert out.error["name"] == "KernelDied"
    assert out.end["state_lost"] is True
    assert "lost" in out.end["notice"]
    after = kernel.execute("1 + 1")
    assert after.value == {"text/plain": "2"}
    assert after.end["n"] == 1


def test_a_crash_shows_the_fault_dump(kernel: GuestKernel) -> None:
    out = kernel.execute("import ctypes\nctypes.string_at(0)")
    assert out.error is not None
    assert out.error["name"] == "KernelDied"
    assert "Segmentation fault" in out.error["traceback"]


def test_a_daemon_killed_while_idle_is_reported_on_the_next_call(kernel: GuestKernel) -> None:
    kernel.execute("x = 1")
    os.kill(kernel.daemon_pid(), signal.SIGKILL)
    out = kernel.execute("'x' in dir()")
    assert out.value == {"text/plain": "False"}
    assert out.end["state_lost"] is True
    assert "had died" in out.end["notice"]


def test_a_daemon_of_another_version_is_replaced_with_a_notice(short_tmp: str) -> None:
    guest = GuestKernel(short_tmp)
    try:
        guest.execute("x = 1")
        guest.sha = "0" * 16  # as if the host library had been upgraded
        out = guest.execute("'x' in dir()")
        assert out.value == {"text/plain": "False"}
        assert out.end["state_lost"] is True
        assert "another lizard-core version" in out.end["notice"]
    finally:
        guest.close()


def test_interrupt_stops_the_running_cell(kernel: GuestKernel) -> None:
    kernel.execute("import time\nx = 5")
    proc = kernel.popen("time.sleep(30)")
    assert proc.stdout is not None
    assert json.loads(proc.stdout.readline())["t"] == "pid"
    assert json.loads(proc.stdout.readline())["t"] == "cell"
    answer = kernel.request("interrupt")
    assert answer[-1]["running"] is True
    frames = [json.loads(line) for line in proc.stdout]
    proc.wait()
    assert frames[-1]["error"]["name"] == "KeyboardInterrupt"
    assert frames[-1]["timed_out"] is False
    assert kernel.execute("x").value == {"text/plain": "5"}


def test_a_vanished_client_interrupts_its_cell(kernel: GuestKernel) -> None:
    kernel.execute("import time\nstopped = False")
    proc = kernel.popen(
        "try:\n    time.sleep(30)\nexcept KeyboardInterrupt:\n    stopped = True\n    raise"
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    proc.stdout.readline()
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 5
    while kernel.execute("stopped").value != {"text/plain": "True"}:
        assert time.monotonic() < deadline


def test_restart_gives_a_fresh_namespace(kernel: GuestKernel) -> None:
    first = kernel.execute("x = 1")
    frames = kernel.request("restart")
    restarted = Outcome(frames)
    assert restarted.kernel != first.kernel
    assert kernel.execute("'x' in dir()").value == {"text/plain": "False"}


def test_concurrent_first_calls_start_one_daemon(kernel: GuestKernel) -> None:
    procs = [kernel.popen("import os\nos.getpid()") for _ in range(4)]
    pids = set()
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        frames = [json.loads(line) for line in out.splitlines()]
        pids.add(frames[-2]["d"])
    assert len(pids) == 1


def test_need_source_when_the_daemon_file_is_missing(kernel: GuestKernel) -> None:
    frames = kernel.request("execute", {"op": "execute", "code": "1"}, daemon=None)
    assert frames[-1]["need_source"] is True


def _other_daemon(text: str) -> dict[str, str]:
    import zlib

    sha = hashlib.sha256(text.encode()).hexdigest()[:16]
    return {"daemon_sha": sha, "daemon": base64.b64encode(zlib.compress(text.encode())).decode()}


def test_a_daemon_that_exits_while_starting_is_reported_at_once(kernel: GuestKernel) -> None:
    started = time.monotonic()
    frames = kernel.request(
        "execute",
        {"op": "execute", "code": "1"},
        **_other_daemon("import sys\nsys.stderr.write('broken here\\n')\nsys.exit(3)\n"),
    )
    error = frames[-1]["error"]
    assert error["name"] == "KernelUnavailable"
    assert "exited while starting (code 3)" in error["message"]
    assert "broken here" in error["message"]
    assert time.monotonic() - started < 30  # told by the ready pair's end, not a start timeout


def test_a_daemon_that_never_listens_is_stopped_at_the_start_timeout(kernel: GuestKernel) -> None:
    frames = kernel.request(
        "execute",
        {"op": "execute", "code": "1"},
        start_timeout=1,
        **_other_daemon("import time\ntime.sleep(120)\n"),
    )
    error = frames[-1]["error"]
    assert error["name"] == "KernelUnavailable"
    assert "did not start in time" in error["message"]
    pid = kernel.daemon_pid()
    assert not _alive(pid)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
def test_with_one_cpu_the_daemon_compiles_its_own_file(kernel: GuestKernel) -> None:
    # The client sends no code where nothing would run side by side; the loader compiles the
    # daemon's file itself, and the kernel works as ever (its functions' file is that file).
    body = {"op": "execute", "code": "import sys\nsys.argv", "timeout": 10, "grace": 1}
    proc = subprocess.run(
        kernel.argv("execute", body),
        capture_output=True,
        env=kernel.env,
        timeout=60,
        preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
    )
    assert proc.returncode == 0, proc.stderr.decode()
    outcome = Outcome([json.loads(line) for line in proc.stdout.splitlines()])
    assert outcome.error is None
    daemon_file = next(kernel.directory.glob("kernel_daemon-*.py"))
    assert outcome.value == {"text/plain": repr([str(daemon_file), str(kernel.directory), ""])}
    assert "ZeroDivisionError" in str(kernel.execute("1 / 0").error)


@pytest.mark.parametrize("key", ["", ".", "..", "a/b"])
def test_a_key_that_is_not_one_directory_name_is_refused(kernel: GuestKernel, key: str) -> None:
    frames = kernel.request("execute", {"op": "execute", "code": "1"}, key=key)
    error = frames[-1]["error"]
    assert error["name"] == "KernelUnavailable"
    assert "bad kernel key" in error["message"]
    assert not kernel.directory.parent.exists() or not any(
        p.name.startswith("kernel_daemon-") for p in kernel.directory.parent.iterdir()
    )


def test_the_daemon_runs_detached_in_its_own_session(kernel: GuestKernel) -> None:
    out = kernel.execute(
        "import os\n"
        "print(os.getsid(0) == os.getpid() == os.getpgid(0), os.readlink('/proc/self/fd/0'))"
    )
    assert out.error is None
    assert out.stdout == f"True {os.devnull}\n"
    log = (kernel.directory / "daemon.log").read_text()
    assert f"listening, pid {kernel.daemon_pid()}" in log  # its stdout and stderr


def test_the_daemon_keeps_no_descriptor_of_its_start(kernel: GuestKernel) -> None:
    # Its only sockets are the listener and the connection of this call, both named by the
    # socket's path; the unnamed end of the pair it said "ready" on is closed.
    out = kernel.execute(
        "import os, socket, sys\n"
        "names = []\n"
        "for fd in sorted(int(f) for f in os.listdir('/proc/self/fd')):\n"
        "    try:\n"
        "        target = os.readlink('/proc/self/fd/%d' % fd)\n"
        "    except FileNotFoundError:\n"
        "        continue  # the listing's own descriptor\n"
        "    if target.startswith('socket:'):\n"
        "        s = socket.socket(fileno=os.dup(fd))\n"
        "        names.append(s.getsockname())\n"
        "        s.close()\n"
        "print(len(sys.argv), names)"
    )
    assert out.error is None
    # Bound as sock.<pid>, then renamed into place: the name the address keeps.
    bound = f"{kernel.directory / 'sock'}.{kernel.daemon_pid()}"
    assert out.stdout.strip() == f"3 {[bound, bound]}"


# -- the private directory ------------------------------------------------------------------------


def test_kernel_directory_is_private(kernel: GuestKernel) -> None:
    kernel.execute("1")
    for path in (kernel.directory.parent, kernel.directory):
        assert path.stat().st_mode & 0o777 == 0o700
    assert (kernel.directory / "sock").stat().st_mode & 0o077 == 0


def test_a_directory_open_to_others_is_refused(short_tmp: str) -> None:
    guest = GuestKernel(short_tmp)
    guest.directory.parent.mkdir(mode=0o777)
    os.chmod(guest.directory.parent, 0o777)
    out = guest.request("execute", {"op": "execute", "code": "1"})
    assert out[-1]["error"]["name"] == "KernelUnavailable"
    assert "not private" in out[-1]["error"]["message"]
    assert not guest.directory.exists()


def test_a_deep_tmpdir_still_works(short_tmp: str) -> None:
    # Unix socket addresses hold 108 bytes; lizard-local's host mode sets a TMPDIR this deep.
    deep = Path(short_tmp) / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    guest = GuestKernel(str(deep))
    try:
        assert len(str(guest.directory / "sock")) > 108
        guest.execute("x = 3")
        assert guest.execute("x").value == {"text/plain": "3"}
    finally:
        guest.close()


def test_close_removes_the_directory(short_tmp: str) -> None:
    guest = GuestKernel(short_tmp)
    guest.execute("1")
    pid = guest.daemon_pid()
    guest.close()
    assert not _alive(pid)
    assert not guest.directory.exists()


# -- installing packages --------------------------------------------------------------------------


def _wheel(directory: Path, name: str = "lizard_demo_pkg") -> Path:
    buf = io.BytesIO()
    dist = f"{name}-1.0.dist-info"
    files = {
        f"{name}/__init__.py": "VALUE = 42\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{dist}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    files[f"{dist}/RECORD"] = "".join(f"{p},,\n" for p in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(buf, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    wheel = directory / f"{name}-1.0-py3-none-any.whl"
    wheel.write_bytes(buf.getvalue())
    return wheel


def _base_python_with_pip() -> str:
    # A user-site install needs an interpreter outside any virtualenv.
    base = getattr(sys, "_base_executable", sys.executable)
    probe = subprocess.run([base, "-m", "pip", "--version"], capture_output=True)
    if probe.returncode != 0 or sys.prefix == sys.base_prefix:
        pytest.skip("no interpreter outside a virtualenv with pip")
    return base


def test_install_into_the_user_site_imports_without_restart(short_tmp: str) -> None:
    guest = GuestKernel(short_tmp, python=_base_python_with_pip())
    guest.env["PYTHONUSERBASE"] = str(Path(short_tmp) / "userbase")
    wheel = _wheel(Path(short_tmp))
    try:
        first = guest.execute("x = 1")
        body = {
            "op": "install",
            "packages": [str(wheel)],
            "pip_args": ["--user", "--no-index"],
            "timeout": 120,
        }
        out = Outcome(guest.request("install", body))
        assert out.error is None, out.stdout
        assert "Successfully installed lizard_demo_pkg" in out.stdout.replace("-", "_")
        after = guest.execute("import lizard_demo_pkg\nlizard_demo_pkg.VALUE, x")
        assert after.value == {"text/plain": "(42, 1)"}
        assert after.kernel == first.kernel
    finally:
        guest.close()


def test_failed_install_reports_pips_output(short_tmp: str) -> None:
    guest = GuestKernel(short_tmp, python=_base_python_with_pip())
    body = {
        "op": "install",
        "packages": ["/nonexistent/lizard_missing-1.0-py3-none-any.whl"],
        "pip_args": ["--no-index"],
        "timeout": 120,
    }
    try:
        out = Outcome(guest.request("install", body))
        assert out.error is not None
        assert out.error["name"] == "PipError"
        assert "pip exited with code 1" in out.error["message"]
        assert "lizard_missing" in out.stdout
        assert "lizard_missing" in out.error["traceback"]  # pip's own words, for the caller
    finally:
        guest.close()


def test_install_without_pip_says_so(kernel: GuestKernel) -> None:
    probe = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("this interpreter has pip")
    out = Outcome(kernel.request("install", {"op": "install", "packages": ["x"], "timeout": 60}))
    assert out.error is not None
    assert out.error["message"] == f"pip is not available for {sys.executable}"


# -- compatibility ---------------------------------------------------------------------------------


def test_the_kernel_runs_under_the_oldest_local_python(old_python: str, short_tmp: str) -> None:
    guest = GuestKernel(short_tmp, key="old", python=old_python)
    try:
        assert guest.execute("x = 21").error is None
        assert guest.execute("x * 2").value == {"text/plain": "42"}
        out = guest.execute("class Done(BaseException): pass\nraise Done('safe:42')")
        assert out.error is not None
        assert (out.error["name"], out.error["message"]) == ("Done", "safe:42")
        assert guest.execute("x").value == {"text/plain": "21"}
    finally:
        guest.close()


@pytest.mark.parametrize("name", ["kernel_client", "kernel_daemon"])
def test_guest_programs_are_python_3_8_syntax(name: str) -> None:
    import ast

    # Both the readable source and the compact form (what travels and what the daemon file holds).
    ast.parse(source(name), feature_version=(3, 8))
    ast.parse(program(name), feature_version=(3, 8))


def test_an_interrupt_sent_as_the_cell_frame_arrives_stops_that_cell(kernel: GuestKernel) -> None:
    """The host may interrupt once it has the ``cell`` frame, before the cell's code runs."""
    kernel.execute("import time")
    daemon = kernel.daemon_pid()
    # The daemon sets the cell's environment after it sent the cell frame: many variables keep
    # it there long enough for the signal to land before the cell's code runs.
    env = {f"LIZARD_TEST_VAR_{i}": "x" for i in range(5000)}
    body = {"op": "execute", "code": "time.sleep(10)", "timeout": 60, "grace": 1, "env": env}
    proc = subprocess.Popen(kernel.argv("execute", body), stdout=subprocess.PIPE, env=kernel.env)
    assert proc.stdout is not None
    assert json.loads(proc.stdout.readline())["t"] == "pid"
    assert json.loads(proc.stdout.readline())["t"] == "cell"
    os.kill(daemon, signal.SIGINT)  # what the interrupt operation sends
    frames = [json.loads(line) for line in proc.stdout]
    proc.wait()
    assert frames[-1]["error"]["name"] == "KeyboardInterrupt"
    assert kernel.execute("'still here'").frames[-1]["error"] is None

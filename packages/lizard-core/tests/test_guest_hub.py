"""The resident hub (lizard_core._guest.hub) and the relay that reaches it (_guest_relay).

Each test gets a sandbox of its own, so the first guest call on it runs the launcher and starts
a hub; which of the two served a call shows in the name of the command's parent process: a
hub's child names itself by the call id, the launcher is ``python3``.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lizard_core import _guest_relay
from lizard_core._guest import PART_BREAK, program, source
from lizard_core._guest._hub_child import STDIO
from lizard_core._guest_relay import guest_argv
from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.kernel import Kernel
from lizard_core.session import Session
from lizard_local import LocalServer

EXEC = "POST /api/sandboxes/{id}/exec"
HUB_DIR = '"$HOME/.cache/lizard-hub-$K"'
HUB_PID = f"$(ls {HUB_DIR} | sed -n 's/^hub[.]\\([0-9]*\\)[.].*/\\1/p')"
# What a command sees of the process that started it and of its own environment.
PROBE = "cat /proc/$PPID/comm; env | sort; pwd; umask; id; ls /proc/self/fd | wc -l"


@pytest.fixture
def session(lizard_local: LocalServer) -> Iterator[Session]:
    config = SandboxConfig.from_env(lifetime_ms=300_000, integration="lizard-core-tests")
    session = Session(config)
    session.sandbox()
    try:
        yield session
    finally:
        session.destroy()


def _shell(session: Session, script: str) -> str:
    """Run ``script`` with ``$K`` set to the hub key; its stdout."""
    result = run_command(session, ["sh", "-c", script], env={"K": _guest_relay.hub_key()})
    assert result.exit_code == 0, result
    return result.stdout.decode()


def _probe(session: Session) -> tuple[str, str]:
    """(the parent's name, everything else the probe printed)."""
    parent, _, rest = run_command(session, ["sh", "-c", PROBE]).stdout.decode().partition("\n")
    return parent, rest


def _served_by_hub(parent: str) -> bool:
    return re.fullmatch(r"[0-9a-f]{15}", parent) is not None


def _wait_for_hub(session: Session) -> None:
    """The launcher starts the hub in the background: wait until its name file names a live one."""
    live = (
        f"for f in {HUB_DIR}/hub.*; do p=${{f##*/hub.}}; p=${{p%%.*}}; "
        '[ "$(cat /proc/$p/comm 2>/dev/null)" = lizard-hub ] && echo live; done; true'
    )
    deadline = time.monotonic() + 30
    while "live" not in _shell(session, live):
        assert time.monotonic() < deadline, "no hub started"
        time.sleep(0.05)


def test_the_hub_program_is_python_3_8_code() -> None:
    ast.parse(source("hub"), feature_version=(3, 8))
    ast.parse(program("launcher"), feature_version=(3, 8))
    # The launcher carries the hub as text, compiled where it is needed.
    namespace: dict[str, Any] = {"__name__": "carrier"}
    exec(program("launcher"), namespace)
    ast.parse(namespace["HUB"], feature_version=(3, 8))
    assert "Hub" not in namespace
    namespace["load_hub"]()
    assert callable(namespace["Hub"])
    # Both programs travel in every request (for the fallback), packed: less than one plain one.
    carried = len(_guest_relay.packed(program("launcher")))
    carried += len(_guest_relay.packed(program("agent")))
    assert carried < len(program("agent"))


def test_a_later_call_is_served_by_the_hub_as_the_launcher_would_run_it(
    session: Session, lizard_counters: LocalServer
) -> None:
    first_parent, first = _probe(session)
    assert not _served_by_hub(first_parent)  # a new sandbox: the launcher ran it
    _wait_for_hub(session)
    lizard_counters.reset_counters()
    parent, later = _probe(session)
    assert _served_by_hub(parent), parent
    # Same environment, directory, umask, user and open descriptors either way.
    assert later == first
    assert lizard_counters.counters()["routes"] == {EXEC: 1}


def test_the_launcher_forks_the_hub_which_shows_none_of_the_request(session: Session) -> None:
    # The first call's request travels in its argv; the hub forked from that call's launcher
    # must not keep showing it (in ps, to every user) for as long as it lives.
    first = run_command(session, ["sh", "-c", ": request-marker-a1b2c3"])
    assert first.exit_code == 0
    _wait_for_hub(session)
    seen = _shell(
        session,
        f"p={HUB_PID}; tr '\\0' ' ' </proc/$p/cmdline; echo; "
        # The pattern matches the marker, not itself (nor this script).
        "grep -l 'request-marker-[a]1b2c3' /proc/[0-9]*/cmdline 2>/dev/null | wc -l",
    ).split("\n")
    assert seen[0].strip() == "lizard-hub"  # forked, not started afresh (``... serve``)
    assert seen[1].strip() == "0"
    parent, _ = _probe(session)
    assert _served_by_hub(parent), parent


def test_files_and_commands_through_the_hub_give_the_same_results(session: Session) -> None:
    from lizard_core.files import SandboxFiles

    files = SandboxFiles(session)
    _probe(session)
    _wait_for_hub(session)
    files.write_bytes("/tmp/hub-check/a.bin", bytes(range(256)) * 64)
    assert files.read_bytes("/tmp/hub-check/a.bin") == bytes(range(256)) * 64
    assert files.stat("/tmp/hub-check/a.bin").size == 256 * 64
    result = run_command(session, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.exit_code, result.stdout, result.stderr) == (3, b"out\n", b"err\n")


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(f"kill -9 {HUB_PID}", id="hub-killed"),
        pytest.param(f"kill -9 {HUB_PID}; rm -rf {HUB_DIR}", id="directory-wiped"),
        pytest.param(
            f"cd {HUB_DIR} && for f in hub.*; do mv $f hub.1.${{f##*.}}; done",
            id="name-file-names-another-process",
        ),
        pytest.param(
            f"cd {HUB_DIR} && for f in hub.*; do p=${{f#hub.}}; mv $f hub.${{p%%.*}}.1; done",
            id="name-file-names-a-reused-pid",
        ),
        pytest.param(f"cd {HUB_DIR} && rm hub.* && : > hub.garbage", id="name-file-garbage"),
        pytest.param(
            # Stopped before the next call checks it (SIGSTOP takes effect when the hub next runs).
            f"p={HUB_PID}; kill -STOP $p; "
            "while [ $(cut -d' ' -f3 /proc/$p/stat) != T ]; do sleep 0.01; done",
            id="hub-stopped",
        ),
    ],
)
def test_a_lost_or_tampered_hub_costs_one_request_and_gives_the_same_result(
    session: Session, lizard_counters: LocalServer, damage: str
) -> None:
    _, expected = _probe(session)
    _wait_for_hub(session)
    _shell(session, damage)
    for _ in range(3):
        lizard_counters.reset_counters()
        _, seen = _probe(session)
        assert seen == expected
        assert lizard_counters.counters()["routes"] == {EXEC: 1}
    if "STOP" in damage:
        return  # a stopped hub keeps its lock: no other starts until it is continued
    # An unreachable hub retires within its check interval; a new one serves again.
    deadline = time.monotonic() + 60
    while not _served_by_hub(_probe(session)[0]):
        assert time.monotonic() < deadline, "no hub serves again"
        time.sleep(0.5)


def test_a_new_hub_replaces_a_killed_one(session: Session) -> None:
    _probe(session)
    _wait_for_hub(session)
    _shell(session, f"kill -9 {HUB_PID}")
    parent, _ = _probe(session)
    assert not _served_by_hub(parent)  # the launcher, in the same exec
    _wait_for_hub(session)
    parent, _ = _probe(session)
    assert _served_by_hub(parent)


def test_a_hub_dying_mid_call_leaves_the_call_to_finish(session: Session) -> None:
    _probe(session)
    _wait_for_hub(session)
    result: dict[str, Any] = {}
    # Runs until the hub is gone (whenever the call got there, however loaded the machine).
    call = (
        "cat /proc/$PPID/comm; : > /tmp/mid-call; "
        "while [ ! -e /tmp/hub-gone ]; do sleep 0.02; done; echo finished"
    )

    def slow() -> None:
        result["r"] = run_command(session, ["sh", "-c", call])

    thread = threading.Thread(target=slow)
    thread.start()
    _wait_until(lambda: "yes" in _shell(session, "[ ! -e /tmp/mid-call ] || echo yes"), "no call")
    _shell(session, f"kill -9 {HUB_PID}; : > /tmp/hub-gone")
    thread.join(60)
    parent, _, rest = result["r"].stdout.decode().partition("\n")
    assert _served_by_hub(parent), parent
    assert (rest, result["r"].exit_code) == ("finished\n", 0)


def test_two_versions_keep_separate_hubs(session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    _probe(session)
    _wait_for_hub(session)
    mine = _guest_relay.hub_key()
    other = "0" * 16
    monkeypatch.setattr(_guest_relay, "hub_key", lambda: other)  # another version's relay
    parent, _ = _probe(session)
    assert not _served_by_hub(parent)  # this version's hub does not serve another's relay
    _wait_for_hub(session)
    parent, _ = _probe(session)
    assert _served_by_hub(parent)
    monkeypatch.undo()
    parent, _ = _probe(session)
    assert _served_by_hub(parent)  # and the first one still serves its own
    listing = _shell(session, 'ls -a "$HOME/.cache"').split()
    assert {f"lizard-hub-{mine}", f"lizard-hub-{other}"} <= set(listing)


def test_stdout_that_is_a_socket_is_the_execs_own(session: Session) -> None:
    """A relay whose stdout is a socket: the hub's child writes to that very socket."""
    _probe(session)
    _wait_for_hub(session)
    request = base64.b64encode(json.dumps({"op": "exists", "path": "/tmp"}).encode()).decode()
    argv = guest_argv(program("agent"), ["c0ffee00c0ffee00", "1", request])
    wrapper = (
        "import json, socket, subprocess, sys\n"
        "argv = json.loads(sys.stdin.read())\n"
        "mine, theirs = socket.socketpair()\n"
        "proc = subprocess.Popen(argv, stdout=theirs, stdin=subprocess.DEVNULL)\n"
        "theirs.close()\n"
        "out = b''.join(iter(lambda: mine.recv(65536), b''))\n"
        "sys.stdout.write(json.dumps([proc.wait(), out.decode()]))\n"
    )
    done = run_command(session, ["python3", "-c", wrapper], input=json.dumps(argv).encode())
    status, output = json.loads(done.stdout)
    frames = [json.loads(line) for line in output.splitlines()]
    assert (status, frames[-1]) == (0, {"t": "end", "v": True})
    parent, _ = _probe(session)
    assert _served_by_hub(parent)  # the hub still serves


def _local_call(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(argv, env=env, capture_output=True, timeout=60, check=True)
    frame: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return frame


def _hub_in(directory: Path) -> int:
    """The pid the hub's name file in ``directory`` gives, or 0."""
    names = list(directory.glob("hub.*"))
    return int(names[0].name.split(".")[1]) if names else 0


def _wait_until(condition: Any, what: str, poll: float = 0.05) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(poll)


@pytest.mark.parametrize("why", ["idle", "directory-replaced"])
def test_a_hub_exits_when_idle_or_unreachable(tmp_path: Path, why: str) -> None:
    """Outside any sandbox, with a hub whose limits are cut to fractions of a second."""
    hub = program("launcher").replace("CHECK_S = 5.0", "CHECK_S = 0.1")
    idle = 1.0
    if why == "idle":
        hub = hub.replace("IDLE_S = 600.0", f"IDLE_S = {idle}")
    assert "CHECK_S = 0.1" in hub
    assert (f"IDLE_S = {idle}" in hub) == (why == "idle")
    key = "5" * 16
    directory = tmp_path / ".cache" / f"lizard-hub-{key}"
    request = base64.b64encode(json.dumps({"op": "exists", "path": "/"}).encode()).decode()
    argv = [
        "sh", "-c", _guest_relay.RELAY, "lizard-guest", key,
        _guest_relay.packed(hub), _guest_relay.packed(program("agent")),
        "c0ffee00c0ffee00", "1", request,
    ]  # fmt: skip
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    since = time.monotonic()
    assert _local_call(argv, env) == {"t": "end", "v": True}
    _wait_until(lambda: _hub_in(directory) > 0, "no hub started")
    pid = _hub_in(directory)
    try:
        if why == "directory-replaced":
            os.rename(directory, tmp_path / "elsewhere")
        else:
            # Busy, it stays: a call whose end comes within the idle limit of the start of the
            # call before it (which bounds the hub's own wait, however loaded the machine) finds
            # the same hub. Calls that came too late on a loaded machine prove nothing: more.
            kept = 0
            deadline = time.monotonic() + 30
            while kept < 2:
                assert time.monotonic() < deadline, "no two calls within the idle limit"
                time.sleep(idle / 4)
                begun = time.monotonic()
                assert _local_call(argv, env) == {"t": "end", "v": True}
                seen = _hub_in(directory)  # looked at before the clock is: within the limit
                if pid and time.monotonic() - since < idle:
                    assert seen == pid
                    kept += 1
                since, pid = begun, seen
            _wait_until(lambda: _hub_in(directory) > 0, "no hub started")
            pid = _hub_in(directory)
        _wait_until(lambda: not Path(f"/proc/{pid}").exists(), "the hub did not exit")
        assert not list(directory.glob("hub.*"))
        assert _local_call(argv, env) == {"t": "end", "v": True}  # the launcher, again
    finally:
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, 9)
        # The hub the last call started in the background, once it has named itself.
        deadline = time.monotonic() + 10
        while not _hub_in(directory) and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            if _hub_in(directory):
                os.kill(_hub_in(directory), 9)


_FORKS_AT_ITS_CALL = """\
HUB_FORK = globals().get("HUB_FORK")
import os, sys
def children():
    with open("/proc/self/task/%d/children" % os.getpid()) as f:
        return len(f.read().split())
before = children()
if sys.argv[1] == "call":
    HUB_FORK()
    HUB_FORK()
print(before, children(), HUB_FORK is not None)
"""


@pytest.mark.parametrize("calls", [True, False])
def test_a_program_naming_hub_fork_has_the_hub_forked_where_it_calls_it(
    tmp_path: Path, calls: bool
) -> None:
    """Outside any sandbox: the launcher leaves the hub's fork to such a program."""
    key = "6" * 16
    directory = tmp_path / ".cache" / f"lizard-hub-{key}"
    argv = [
        "sh", "-c", _guest_relay.RELAY, "lizard-guest", key,
        _guest_relay.packed(program("launcher")), _guest_relay.packed(_FORKS_AT_ITS_CALL),
        "call" if calls else "no",
    ]  # fmt: skip
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    done = subprocess.run(argv, env=env, capture_output=True, timeout=60, check=True)
    # Nothing forked before the program ran; one go-between for the two calls, not yet reaped.
    assert done.stdout.decode() == ("0 1 True\n" if calls else "0 0 True\n")
    try:
        if calls:
            _wait_until(lambda: _hub_in(directory) > 0, "no hub started")
        else:
            time.sleep(1.0)  # a hub forked at all names itself within milliseconds of the call
            assert _hub_in(directory) == 0, "a hub was forked though the program never asked"
    finally:
        if _hub_in(directory):
            os.kill(_hub_in(directory), 9)
    # Run by no launcher (python3 -c, a hub's child), the program finds no fork to call.
    plain = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _FORKS_AT_ITS_CALL, "no"],
        capture_output=True, timeout=60, check=True,
    )  # fmt: skip
    assert plain.stdout.decode() == "0 0 False\n"


def test_output_buffered_before_hub_fork_is_the_first_calls_alone(tmp_path: Path) -> None:
    key = "8" * 16
    directory = tmp_path / ".cache" / f"lizard-hub-{key}"
    first = 'HUB_FORK = globals().get("HUB_FORK")\nprint("FIRST")\nHUB_FORK()\nprint("after")\n'
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}

    def call(text: str) -> bytes:
        argv = [
            "sh", "-c", _guest_relay.RELAY, "lizard-guest", key,
            _guest_relay.packed(program("launcher")), _guest_relay.packed(text), "c0ffee",
        ]  # fmt: skip
        return subprocess.run(argv, env=env, capture_output=True, timeout=60, check=True).stdout

    assert call(first) == b"FIRST\nafter\n"  # a pipe: print buffers
    try:
        _wait_until(lambda: _hub_in(directory) > 0, "no hub started")
        second = 'print(open("/proc/self/comm").read().strip(), "SECOND")\n'
        # A hub's child runs it (named by its first argument), and writes its own output alone.
        assert call(second) == b"c0ffee SECOND\n"
        assert call(second) == b"c0ffee SECOND\n"
    finally:
        if _hub_in(directory):
            os.kill(_hub_in(directory), 9)


_FIRST = 'import sys\nprint("first", flush=True)'
_IN_PARTS = _FIRST + PART_BREAK + 'print("second", open("/proc/self/comm").read().strip())\n'


def test_a_program_in_parts_runs_each_part_before_the_next_is_compiled(tmp_path: Path) -> None:
    key = "5" * 16
    directory = tmp_path / ".cache" / f"lizard-hub-{key}"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}

    def call(text: str) -> subprocess.CompletedProcess[bytes]:
        argv = [
            "sh", "-c", _guest_relay.RELAY, "lizard-guest", key,
            _guest_relay.packed(program("launcher")), _guest_relay.packed(text), "c0ffee",
        ]  # fmt: skip
        return subprocess.run(argv, env=env, capture_output=True, timeout=60)

    assert _guest_relay.packed(_IN_PARTS).count(".") == 1
    broken = call(_FIRST + PART_BREAK + "print(\n")
    # The first part ran before the second failed to compile; as one text, nothing would.
    assert (broken.returncode, broken.stdout) == (1, b"first\n")
    assert b"SyntaxError" in broken.stderr
    whole = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _FIRST + PART_BREAK + "print(\n"], capture_output=True
    )
    assert (whole.returncode, whole.stdout) == (1, b"")
    try:
        _wait_until(lambda: _hub_in(directory) > 0, "no hub started")
        # Both parts, in one namespace, whether the launcher or a hub's child runs them.
        first = call(_IN_PARTS).stdout
        assert first in (b"first\nsecond python3\n", b"first\nsecond c0ffee\n")
        _wait_until(lambda: call(_IN_PARTS).stdout == b"first\nsecond c0ffee\n", "no hub child")
    finally:
        if _hub_in(directory):
            os.kill(_hub_in(directory), 9)


_PRELOAD_PROBE = """\
import os, subprocess, sys
namespace = {"__name__": "probe"}
exec(sys.argv[1], namespace)
namespace["load_hub"]()
child = os.fork()
if not child:
    if sys.argv[2] == "exited":
        os._exit(0)
    os.read(os.pipe()[0], 1)  # waits until killed
while sys.argv[2] == "exited" and open("/proc/%d/stat" % child).read().split()[2] != "Z":
    pass
before = set(sys.modules)
namespace["preload"](os.open("/proc/%d" % child, os.O_RDONLY), os.pidfd_open(child))
print(sorted(set(namespace["PRELOAD"]) & (set(sys.modules) - before)))
os.kill(child, 9)
"""


@pytest.mark.parametrize("launcher", ["exited", "running"])
def test_a_hub_stops_preloading_once_its_launcher_has_exited(launcher: str) -> None:
    """Run as the guest runs (python3 -I -S, the launcher's compact program), outside a sandbox."""
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _PRELOAD_PROBE, program("launcher"), launcher],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    imported = json.loads(done.stdout.replace("'", '"'))
    if launcher == "exited":
        assert imported == []  # it names itself first; Hub.serve imports them before a spare
    else:
        assert {"json", "traceback"} <= set(imported)


def test_a_hub_whose_launcher_exited_before_it_preloaded_serves_with_its_preload(
    tmp_path: Path,
) -> None:
    """The launcher exits at once: the hub names itself first, then imports before a spare."""
    key = "4" * 16
    directory = tmp_path / ".cache" / f"lizard-hub-{key}"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    # Exits at once: the hub it forked names itself before it preloaded anything.
    text = (
        'HUB_FORK = globals().get("HUB_FORK")\nif HUB_FORK:\n    HUB_FORK()\nimport sys\n'
        'print(sorted({"shutil", "subprocess", "traceback"} & set(sys.modules)))\n'
    )

    def call() -> str:
        argv = [
            "sh", "-c", _guest_relay.RELAY, "lizard-guest", key,
            _guest_relay.packed(program("launcher")), _guest_relay.packed(text), "probe",
        ]  # fmt: skip
        done = subprocess.run(argv, env=env, capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode()

    assert call() == "[]\n"
    try:
        _wait_until(lambda: _hub_in(directory) > 0, "no hub started")
        # The first call the hub serves: by a spare forked once the hub had imported them all.
        assert call() == "['shutil', 'subprocess', 'traceback']\n"
    finally:
        if _hub_in(directory):
            os.kill(_hub_in(directory), 9)


def test_a_program_that_does_not_name_hub_fork_has_the_hub_forked_before_it_runs(
    tmp_path: Path,
) -> None:
    key = "7" * 16
    directory = tmp_path / ".cache" / f"lizard-hub-{key}"
    text = _FORKS_AT_ITS_CALL.replace('HUB_FORK = globals().get("HUB_FORK")', "HUB_FORK = None")
    text = text.replace("HUB_FORK", "NO_FORK")
    argv = [
        "sh", "-c", _guest_relay.RELAY, "lizard-guest", key,
        _guest_relay.packed(program("launcher")), _guest_relay.packed(text), "no",
    ]  # fmt: skip
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    done = subprocess.run(argv, env=env, capture_output=True, timeout=60, check=True)
    assert done.stdout.decode() == "1 1 False\n"  # the go-between, before the program ran
    try:
        _wait_until(lambda: _hub_in(directory) > 0, "no hub started")
    finally:
        if _hub_in(directory):
            os.kill(_hub_in(directory), 9)


def test_a_new_sandboxs_first_kernel_call_starts_its_daemon_before_the_hub(
    session: Session,
) -> None:
    """The kernel client forks the hub once its daemon is on its way, not before it starts."""
    kernel = Kernel(session, name="first")
    try:
        assert kernel.execute("print(6 * 7)", timeout=60).stdout == "42\n"
        pid_file = 'cat "${TMPDIR:-/tmp}"/.lizard-kernel-$(id -u)/*/pid'
        daemon = int(_shell(session, pid_file).split()[0])  # pid, start time
        _wait_for_hub(session)
        hub = int(_shell(session, 'ls "$HOME/.cache/lizard-hub-$K"').split(".")[1])
        # Pids go up (a sandbox's own pid space, far from its limit): the daemon came first.
        assert daemon < hub
    finally:
        kernel.close()


def test_the_hub_runs_under_the_oldest_local_python(old_python: str, tmp_path: Path) -> None:
    """Outside any sandbox: the relay and hub under the oldest Python 3.8+ here."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # The interpreter itself: a version manager's shim would pick its own python3.
    probe = [old_python, "-c", "import sys; print(sys.executable)"]
    real = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()
    (bin_dir / "python3").symlink_to(real)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    request = base64.b64encode(json.dumps({"op": "exists", "path": "/"}).encode()).decode()
    argv = guest_argv(program("agent"), ["c0ffee00c0ffee00", "1", request])
    directory = tmp_path / ".cache" / f"lizard-hub-{_guest_relay.hub_key()}"
    try:
        for _ in range(3):
            done = subprocess.run(argv, env=env, capture_output=True, timeout=60, check=True)
            assert json.loads(done.stdout.splitlines()[-1]) == {"t": "end", "v": True}
            deadline = time.monotonic() + 30
            while not _hub_in(directory):
                assert time.monotonic() < deadline, done.stderr
                time.sleep(0.05)
        hub = _hub_in(directory)
        assert os.path.realpath(f"/proc/{hub}/exe") == os.path.realpath(real)
    finally:
        if _hub_in(directory):
            os.kill(_hub_in(directory), 9)


# ── across users, and the exec's own process state ──────────────────────

_RUNNER = (
    "import base64, json, subprocess, sys\n"
    "spec = json.loads(sys.stdin.read())\n"
    "done = subprocess.run(['sh', '-c', spec['prefix'] + ' exec \"$@\"', 'sh'] + spec['argv'],\n"
    "    input=base64.b64decode(spec['stdin']), capture_output=True, timeout=20)\n"
    "print(json.dumps([done.returncode, done.stdout.decode(), done.stderr.decode()]))\n"
)
# Prints who ran it: a hub's child names itself by its first argument.
_WHO = """\
import sys
comm = open('/proc/self/comm').read().strip()
print('hub' if comm == sys.argv[1][:15] else 'launcher')
"""
# The same, then what it was given.
_REPORT = """\
import os, resource, sys
comm = open('/proc/self/comm').read().strip()
print('hub' if comm == sys.argv[1][:15] else 'launcher')
print(sys.stdin.read())
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], os.nice(0), sorted(os.getgroups()))
print(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))
sys.exit(int(sys.argv[2]))
"""


def _relay(
    session: Session,
    text: str,
    args: list[str],
    prefix: str = "",
    stdin: bytes = b"",
    user: str | None = None,
) -> tuple[int, str, str]:
    """Run ``text`` through the relay in the sandbox, under ``prefix`` (shell) and ``stdin``."""
    spec = {
        "argv": guest_argv(text, args),
        "prefix": prefix,
        "stdin": base64.b64encode(stdin).decode(),
    }
    runner = ["python3", "-c", _RUNNER]
    # The user's own HOME and working directory (root's are closed to it: a hub's child could
    # not enter them, so it would decline every call and the launcher would run it).
    env, cwd = ({"HOME": "/home/user"}, "/home/user") if user == "user" else (None, None)
    done = run_command(
        session, runner, input=json.dumps(spec).encode(), user=user, env=env, cwd=cwd
    )
    assert done.exit_code == 0, done
    code, out, err = json.loads(done.stdout)
    return code, out, err


def _until_served(session: Session) -> None:
    """Until a hub serves this sandbox's commands (wherever it keeps its directory)."""
    deadline = time.monotonic() + 30
    while not _served_by_hub(_probe(session)[0]):
        assert time.monotonic() < deadline, "no hub serves"
        time.sleep(0.05)


def _served_warm(session: Session) -> None:
    """Until a hub serves this user's calls."""
    deadline = time.monotonic() + 30
    while _relay(session, _WHO, ["warm-up-call-id"])[1] != "hub\n":
        assert time.monotonic() < deadline, "no hub serves"
        time.sleep(0.1)


def test_exit_codes_stdin_and_descriptors_are_the_execs_own(session: Session) -> None:
    _served_warm(session)
    code, out, err = _relay(session, _REPORT, ["exact-call-id", "3"], stdin=b"given\n")
    lines = out.split("\n")
    assert (code, lines[0], lines[1], err) == (3, "hub", "given", "")
    code, out, _ = _relay(session, _REPORT, ["exact-call-id", "255"])
    assert code == 255


@pytest.mark.parametrize(
    ("prefix", "field", "expected"),
    [
        ("ulimit -n 64;", 0, "64"),
        ("renice -n 7 $$ >/dev/null;", 1, "7"),
        ('set -- setpriv --groups 4242 -- "$@";', 2, "[4242]"),
    ],
    ids=["rlimit", "nice", "groups"],
)
def test_an_exec_with_other_limits_priority_or_groups_gets_them(
    session: Session, prefix: str, field: int, expected: str
) -> None:
    """The hub cannot carry these over: the relay runs the launcher, with no extra descriptor."""
    _served_warm(session)
    code, out, _ = _relay(session, _REPORT, ["limits-call-id", "0"], prefix=prefix)
    lines = out.split("\n")
    assert code == 0
    assert lines[2].split(" ", 2)[field] == expected  # nofile, nice, groups
    assert lines[0] == "launcher"
    assert lines[3] == "[0, 1, 2, 3]"


def test_stdout_appended_to_a_file_keeps_what_was_there(session: Session) -> None:
    _served_warm(session)
    _shell(session, "printf 'kept\\n' > /tmp/appended.log")
    text = "import sys\nprint('added')\n"
    code, _, _ = _relay(session, text, ["append-call-id"], prefix="exec >>/tmp/appended.log;")
    assert code == 0
    assert _shell(session, "cat /tmp/appended.log") == "kept\nadded\n"


def test_no_program_runs_in_a_spare_before_its_call(session: Session) -> None:
    """A learned program's top level runs in its own call only, never in a later one's."""
    _served_warm(session)
    noisy = "import sys\nprint('noisy top level', sys.argv[1:])\n"
    for _ in range(3):
        assert _relay(session, noisy, ["noisy-call-id"])[1] == "noisy top level ['noisy-call-id']\n"
    quiet = "print('quiet')\n"
    for _ in range(3):
        assert _relay(session, quiet, ["quiet-call-id"])[1] == "quiet\n"


def test_another_users_planted_hub_cannot_touch_root_and_each_user_gets_its_own(
    session: Session,
) -> None:
    """An unprivileged user's first command plants what it can; root's calls are unharmed."""
    key = _guest_relay.hub_key()
    plant = (
        "set -e; for d in /tmp/.lizard-hub-$K ${TMPDIR:-/tmp}/.lizard-hub-$K; do "
        "mkdir -p $d; ln -sf /etc/passwd $d/in; : > $d/wait; done; "
        "sleep 60 3</etc/passwd >/dev/null 2>&1 & "
        "echo $! > /tmp/.lizard-hub-$K/pid; echo planted"
    )
    planted = run_command(session, ["sh", "-c", plant], env={"K": key}, user="user")
    assert planted.stdout == b"planted\n", planted
    before = _shell(session, "sha256sum /etc/passwd")
    from lizard_core.files import SandboxFiles

    files = SandboxFiles(session)
    for _ in range(3):
        assert files.exists("/etc/passwd")
        assert run_command(session, ["sh", "-c", "echo root; exit 5"]).exit_code == 5
    _served_warm(session)
    assert files.stat("/etc/passwd").size > 0
    assert _shell(session, "sha256sum /etc/passwd") == before
    # The other way round: a relay run as the user (a command of the user's running a guest
    # program) gets a hub of the user's own, and root's calls still get root's.
    deadline = time.monotonic() + 30
    while _relay(session, _REPORT, ["user-call-id", "6"], user="user")[1][:4] != "hub\n":
        assert time.monotonic() < deadline, "no hub of the user's"
        time.sleep(0.1)
    code, out, _ = _relay(session, _REPORT, ["user-call-id", "6"], user="user", stdin=b"u\n")
    assert (code, out.split("\n")[:2]) == (6, ["hub", "u"])
    assert run_command(session, ["sh", "-c", "echo root; exit 5"]).exit_code == 5
    hubs = _shell(session, "ps -eo uid=,comm= | grep lizard-hub | sort -n").split()
    assert hubs == ["0", "lizard-hub", "1000", "lizard-hub"], hubs


def test_thirty_two_calls_at_once_each_get_their_own_result(session: Session) -> None:
    _until_served(session)

    def one(n: int) -> tuple[int, bytes, bytes]:
        done = run_command(session, ["sh", "-c", f"echo out{n}; echo err{n} >&2; exit {n % 8}"])
        return done.exit_code, done.stdout, done.stderr

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(one, range(32)))
    assert results == [(n % 8, b"out%d\n" % n, b"err%d\n" % n) for n in range(32)]


def test_hubs_killed_and_removed_every_30_ms_change_no_result(session: Session) -> None:
    _until_served(session)
    # Every hub: an orphan named lizard-hub (or python3, as hubs before it were) whose command
    # line is ``lizard-hub`` (forked by a launcher) or ends with ``serve`` (started afresh); its
    # children have the same command line, but the call id for a name.
    churn = (
        "n=0; end=$(($(date +%s) + 60)); "
        "while [ $(date +%s) -lt $end ] && [ ! -e /tmp/churn-stop ]; do "
        "for p in $(ps -eo pid=,ppid=,comm= | awk '$2 == 1 && $3 ~ /^(lizard-hub|python3)$/ "
        "{print $1}'); do "
        "a=$(tr '\\0' '\\n' </proc/$p/cmdline 2>/dev/null | grep -v '^$' | tail -n 1); "
        '{ [ "$a" = serve ] || [ "$a" = lizard-hub ]; } && '
        "kill -9 $p 2>/dev/null && n=$((n + 1)); done; "
        'rm -rf "$HOME"/.cache/lizard-hub-* /tmp/.lizard-hub-*; echo $n > /tmp/churn-n; '
        "sleep 0.03; done; echo $n"
    )
    done: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: done.setdefault("r", run_command(session, ["sh", "-c", churn]))
    )
    thread.start()
    try:
        # 50 calls at least, and on until 5 hubs were killed (a loaded machine churns slowly).
        n = 0
        while n < 50 or (
            n % 10 or int(_shell(session, 'n=$(cat /tmp/churn-n 2>/dev/null); echo "${n:-0}"')) < 5
        ):
            assert n < 1000, "hubs were not killed while the calls ran"
            result = run_command(session, ["sh", "-c", f"echo call{n}; exit {n % 5}"])
            assert (result.exit_code, result.stdout) == (n % 5, b"call%d\n" % n)
            n += 1
    finally:
        _shell(session, ": > /tmp/churn-stop")
        thread.join(90)
    assert int(done["r"].stdout) >= 5  # hubs were killed while the calls ran


@contextlib.contextmanager
def _stand_in_hub(home: Path, with_wait: bool) -> Iterator[subprocess.Popen[bytes]]:
    """A process that passes every check the relay makes of a hub, then serves nothing.

    It reads the relay's pid and exits; without ``with_wait`` it never had ``wait``'s write end
    (fd 11), as a hub that has died leaves it. The hub the launcher then starts is killed after.
    """
    fake = (
        "import os, sys\n"
        "open('/proc/self/comm', 'w').write('lizard-hub')\n"
        "r, w = os.pipe(); os.dup2(r, 3); os.dup2(w, 12)\n"
        + ("r2, w2 = os.pipe(); os.dup2(w2, 11); os.close(r2)\n" if with_wait else "")
        + "start = open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19]\n"
        "open(os.path.join(sys.argv[1], 'hub.%d.%s' % (os.getpid(), start)), 'w').close()\n"
        "print('ready', flush=True)\n"
        "os.read(3, 64)\n"
    )
    directory = home / ".cache" / f"lizard-hub-{_guest_relay.hub_key()}"
    directory.mkdir(parents=True, mode=0o700)
    hub = subprocess.Popen(["python3", "-c", fake, str(directory)], stdout=subprocess.PIPE)
    try:
        assert hub.stdout is not None
        assert hub.stdout.readline() == b"ready\n"
        yield hub
    finally:
        hub.kill()
        hub.wait()
        for path in directory.glob("hub.*"):  # the hub the launcher started
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(path.name.split(".")[1]), 9)


def _run_lost_call(home: Path, timeout: float) -> subprocess.CompletedProcess[bytes]:
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    argv = guest_argv("import sys\nprint('ran')\nsys.exit(4)\n", ["lost-call-id"])
    return subprocess.run(argv, env=env, capture_output=True, timeout=timeout)


def test_a_hub_lost_before_the_program_started_means_the_launcher(tmp_path: Path) -> None:
    """A stand-in hub takes the relay's pid and exits: the relay runs the program itself."""
    with _stand_in_hub(tmp_path, with_wait=True):
        done = _run_lost_call(tmp_path, timeout=60)
        assert (done.returncode, done.stdout) == (4, b"ran\n")


def test_a_hub_lost_between_the_relays_check_and_its_open_of_wait_means_the_launcher(
    tmp_path: Path,
) -> None:
    """The relay checked a live hub, then the hub went: no hang, the launcher runs the program.

    Deterministic: the stand-in passes every check the relay makes of a hub, but what the relay
    opens next is in the state the hub's death leaves it: ``wait`` has no writer. A relay that
    blocked opening it stalled the host until its deadline (and one that opened it by path in a
    directory removed meanwhile exited 2 with no output); this relay opens nothing by path after
    its check, and nothing it opens can block.
    """
    with _stand_in_hub(tmp_path, with_wait=False) as hub:
        done = _run_lost_call(tmp_path, timeout=30)
        assert (done.returncode, done.stdout) == (4, b"ran\n")
        assert hub.poll() is None  # it was there all along: only ``wait`` was lost


def _holds(hub: int, relay: int) -> bool:
    """Whether ``hub`` has taken ``relay``: it keeps ``/proc/<relay>`` open while the call runs."""
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{hub}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{hub}/fd/{fd}") == f"/proc/{relay}":
                    return True
    return False


def _queued(relay: int) -> bool:
    """Whether a relay has written its pid to its hub and waits: fd 8 (the hub) closed, 5 open."""
    fds = os.listdir(f"/proc/{relay}/fd")
    return "5" in fds and "8" not in fds


class _Queue:
    """Relays driven on the host (``HOME`` a test's own) and a relay queued behind a busy hub."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {"PATH": os.environ["PATH"], "HOME": str(home)}
        self.directory = home / ".cache" / f"lizard-hub-{_guest_relay.hub_key()}"
        self.started: list[subprocess.Popen[bytes]] = []

    def call(self, text: str, call_id: str) -> subprocess.Popen[bytes]:
        self.started.append(
            subprocess.Popen(guest_argv(text, [call_id]), env=self.env, stdout=subprocess.PIPE)
        )
        return self.started[-1]

    def queue(
        self, slow: str, quick: str, count: int = 1
    ) -> tuple[int, subprocess.Popen[bytes], list[subprocess.Popen[bytes]]]:
        """A hub stopped with ``count`` relays of ``quick`` queued in turn, none taken.

        Returns (hub, long, queued). The hub is held busy while the relays queue by the first
        call of ``slow``, a new program that takes a while to compile (the hub compiles it
        beside its child).
        """
        hub = 0
        for attempt in range(3):
            hub, long, queued = self.queue_once(slow, quick, count, attempt, hub)
            if all(relay.poll() is None and not _holds(hub, relay.pid) for relay in queued):
                return hub, long, queued  # queued, and not taken
            os.kill(hub, signal.SIGKILL)  # the hub was quicker than this test: again
        pytest.fail("the hub took every queued call before it could be stopped")

    def queue_once(
        self, slow: str, quick: str, count: int, attempt: int, previous: int
    ) -> tuple[int, subprocess.Popen[bytes], list[subprocess.Popen[bytes]]]:
        first = self.call("print('first')", f"first-{attempt}")
        assert first.communicate(timeout=60)[0] == b"first\n"
        _wait_until(
            lambda: _hub_in(self.directory) not in (0, previous), "no hub started", poll=0.002
        )
        hub = _hub_in(self.directory)
        long = self.call(slow, f"long-{attempt}")
        # Taken: the hub now compiles the new program for a while, beside its child.
        _wait_until(lambda: _holds(hub, long.pid), "the long call was never taken", poll=0.002)
        queued = []
        for n in range(count):  # one after the other: queued in this order
            relay = self.call(quick, f"queued-{attempt}-{n}")
            _wait_until(
                lambda r=relay: r.poll() is not None or _queued(r.pid), "never queued", poll=0.002
            )
            queued.append(relay)
        os.kill(hub, signal.SIGSTOP)
        return hub, long, queued

    def clean_up(self) -> None:
        for process in self.started:
            process.kill()
            process.wait()
        for entry in os.listdir("/proc"):  # the long calls' children, orphaned by the kills
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            pid = int(entry)
            with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as environ:
                if f"HOME={self.home}".encode() in environ.read().split(b"\0"):
                    os.kill(pid, signal.SIGKILL)


_SLOW_TO_COMPILE = "x = [" + "1," * 150_000 + "]\n"
_QUICK = "import sys\nprint('ran')\nsys.exit(4)\n"


@pytest.mark.timeout(180)
def test_a_relay_queued_when_its_hub_dies_runs_at_once_though_another_call_runs_on(
    tmp_path: Path,
) -> None:
    """The hub is killed with a relay's pid still in ``in``: that relay runs the launcher now.

    Every child of the hub holds ``wait`` open, so a relay left in the queue used to wait for the
    end of file until every other call's program had ended: here one that sleeps a minute
    (hub churn under load stalled a call this way). The hub is held busy while the relay queues
    by the first call of a new program that takes a while to compile (the hub compiles it
    beside its child), then stopped, checked not to have taken the relay, and killed.
    """
    relays = _Queue(tmp_path)
    try:
        hub, long, [queued] = relays.queue(
            "import time\ntime.sleep(60)\n" + _SLOW_TO_COMPILE, _QUICK
        )
        os.kill(hub, signal.SIGKILL)
        out, _ = queued.communicate(timeout=20)  # not the minute the long call still runs
        assert (queued.returncode, out) == (4, b"ran\n")
        assert long.poll() is None  # still running: its child, not the launcher, holds it
    finally:
        relays.clean_up()


@pytest.mark.timeout(180)
def test_a_relay_stopped_in_the_queue_holds_up_none_behind_it(tmp_path: Path) -> None:
    """The watcher wakes every queued relay at once; a stopped one acts once it runs again.

    Woken one after the other, each waited for until it acted, a stopped relay first in the
    queue held every relay behind it for the watcher's 60 s, and those behind it then waited
    for the other call's end, as if there were no watcher.
    """
    relays = _Queue(tmp_path)
    try:
        hub, long, [stopped, behind] = relays.queue(
            "import time\ntime.sleep(120)\n" + _SLOW_TO_COMPILE, _QUICK, count=2
        )
        os.kill(stopped.pid, signal.SIGSTOP)
        os.kill(hub, signal.SIGKILL)
        out, _ = behind.communicate(timeout=20)
        assert (behind.returncode, out) == (4, b"ran\n")
        os.kill(stopped.pid, signal.SIGCONT)
        out, _ = stopped.communicate(timeout=20)
        assert (stopped.returncode, out) == (4, b"ran\n")
        assert long.poll() is None
    finally:
        relays.clean_up()


def _watcher_of(hub: int) -> int:
    """The pid of ``hub``'s watcher (``lizard-watch``, its child), or 0."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/stat", "rb") as stat:
                head, _, tail = stat.read().rpartition(b")")
                if head.endswith(b"(lizard-watch") and int(tail.split()[1]) == hub:
                    return int(entry)
    return 0


def _gone(pid: int) -> bool:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rpartition(b")")[2].split()[0] in (b"Z", b"X")
    return True


@pytest.mark.timeout(180)
def test_a_relay_queued_when_its_hub_dies_is_left_to_the_watcher_alone(tmp_path: Path) -> None:
    """A queued relay of a lost hub is woken by the watcher only, never also by end of file.

    With the hub and all its children gone, the relay would read the end of file on ``wait``
    and run the launcher itself, while the watcher, having found it still the relay, sent it
    ``USR2``: landing after the exec, that signal killed the launcher (exit code 140; about one
    call in 270 with hubs killed in the middle of bursts of calls). So the watcher holds
    ``wait`` until it is done: stopped here, the relay waits for it; continued, it wakes it.
    """
    relays = _Queue(tmp_path)
    try:
        hub, long, [queued] = relays.queue(_SLOW_TO_COMPILE, _QUICK)
        assert long.communicate(timeout=60)[1] is None  # over: no child of the hub holds wait
        watcher = _watcher_of(hub)
        assert watcher
        os.kill(watcher, signal.SIGSTOP)
        os.kill(hub, signal.SIGKILL)
        _wait_until(lambda: _gone(hub), "the hub never died", poll=0.002)
        with contextlib.suppress(subprocess.TimeoutExpired):
            queued.wait(timeout=3)
        assert queued.poll() is None, "the relay ran the launcher while the watcher could signal it"
        os.kill(watcher, signal.SIGCONT)
        out, _ = queued.communicate(timeout=20)
        assert (queued.returncode, out) == (4, b"ran\n")
        _wait_until(lambda: _gone(watcher), "the watcher never exited", poll=0.002)
    finally:
        relays.clean_up()


def test_only_a_relay_waiting_on_this_hubs_wait_pipe_is_its_own() -> None:
    """A pid reused by a process that waits on another hub's ``wait`` (or on none) is not ours.

    The watcher and the spares signal a relay only if its fd 5 is the ``wait`` pipe they hold
    (fd 11), so that a pid taken since by another hub's relay of the same user and version is
    never sent ``USR2`` or ``STARTED``.
    """
    probe = (
        "import fcntl, os, stat, subprocess, sys\n"
        "from lizard_core._guest._hub_child import WAIT_FD, waits_here\n"
        "def high(ends):\n"  # clear of fd 5 and WAIT_FD, so no dup2 below replaces them
        "    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 20) for fd in ends]\n"
        "    for fd in ends:\n"
        "        os.close(fd)\n"
        "    return moved\n"
        "ours, theirs = high(os.pipe()), high(os.pipe())\n"
        "os.dup2(ours[1], WAIT_FD)\n"
        "found = []\n"
        "for ends in (ours, theirs, None):\n"
        "    if ends:\n"
        "        os.dup2(ends[0], 5)\n"
        "    else:\n"
        "        os.close(5)\n"
        "    child = subprocess.Popen(['sleep', '30'], pass_fds=[5] if ends else [])\n"
        "    proc = os.open('/proc/%d' % child.pid, os.O_RDONLY | os.O_DIRECTORY)\n"
        "    try:\n"
        "        pipe = stat.S_ISFIFO(os.stat('fd/5', dir_fd=proc).st_mode)\n"
        "    except OSError:\n"
        "        pipe = None\n"
        "    found.append((pipe, waits_here(proc)))\n"
        "    os.close(proc)\n"
        "    child.kill(); child.wait()\n"
        "print(found)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=60)
    # (fd 5 is a pipe, waits_here): another pipe is not ours either, only the one we hold.
    assert done.stdout == b"[(True, True), (True, False), (None, False)]\n", done.stderr


def test_a_relay_is_signalled_through_its_pidfd_only(tmp_path: Path) -> None:
    """A pidfd names one process: a pid reused since cannot be signalled by mistake."""
    from lizard_core._guest import _hub_child

    gone = subprocess.Popen(["true"])
    pidfd = os.pidfd_open(gone.pid)
    gone.wait()
    alive = subprocess.Popen(["sleep", "30"])  # stands for a process that reused the pid
    proc = os.open(f"/proc/{alive.pid}", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert not _hub_child.signal_relay(alive.pid, proc, 9, pidfd)
        assert alive.poll() is None
    finally:
        os.close(proc)
        os.close(pidfd)
        alive.kill()
        alive.wait()


# A relay whose last signal was noted just before its blocking read started: the read goes on
# blocking (as a shell's does), until another signal interrupts it and the noted one acts.
_MISSED_WAKEUP = """\
import os, signal, sys
noted = []
class Woken(Exception):
    pass
def wake(signum, frame):
    if not noted or 'woken' in noted:
        return
    noted.append('woken')  # once: like the relay's exit or exec, what it wakes into is final
    raise Woken
signal.signal(signal.SIGUSR1, lambda signum, frame: noted.append('exit'))
signal.signal(signal.SIGUSR2, lambda signum, frame: noted.append('launcher'))
signal.signal(signal.SIGURG, wake)
r, w = os.pipe()
try:
    print('ready', flush=True)
    while True:
        os.read(r, 1)
except Woken:
    if 'exit' in noted:
        sys.exit(0)
    os.execvp('sleep', ['sleep', '60'])
"""


@contextlib.contextmanager
def _missed_wakeup_relay(pidfd: bool) -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    relay = subprocess.Popen(
        [sys.executable, "-c", _MISSED_WAKEUP], stdout=subprocess.PIPE, text=True
    )
    assert relay.stdout is not None
    assert relay.stdout.readline() == "ready\n"
    proc = os.open(f"/proc/{relay.pid}", os.O_RDONLY | os.O_DIRECTORY)
    handle = os.pidfd_open(relay.pid) if pidfd else -1
    try:
        yield relay, proc, handle
    finally:
        os.close(proc)
        if handle >= 0:
            os.close(handle)
        relay.kill()
        relay.wait()


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "no-pidfd"])
def test_a_relay_that_missed_its_last_signal_is_woken_until_it_exits(pidfd: bool) -> None:
    """A signal landing just before the relay's read blocks would leave the call hanging."""
    from lizard_core._guest import _hub_child

    with _missed_wakeup_relay(pidfd) as (relay, proc, handle):
        _hub_child.send_status(relay.pid, proc, 0, handle, within=30)
        assert relay.wait(timeout=30) == 0


@pytest.mark.timeout(30)
def test_a_relay_woken_into_the_launcher_is_left_to_run_it() -> None:
    """Once the relay has become the launcher, the wake-ups stop: nothing signals the program."""
    from lizard_core._guest import _hub_child

    with _missed_wakeup_relay(pidfd=True) as (relay, proc, handle):
        # Returns once the relay runs something else, long before the 60 s bound.
        _hub_child.end_relay(relay.pid, proc, [signal.SIGUSR2], handle, within=60)
        assert _hub_child.relay_state(proc)[0] == b"sleep"
        assert relay.poll() is None


@pytest.fixture
def local_hub(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of calls outside any sandbox that a live hub of this version serves."""
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    directory = tmp_path / ".cache" / f"lizard-hub-{_guest_relay.hub_key()}"
    try:
        subprocess.run(guest_argv("pass", ["warm-up"]), env=env, timeout=60, check=True)
        _wait_until(lambda: _hub_in(directory), "the launcher started no hub")
        yield env
    finally:
        if _hub_in(directory):
            os.kill(_hub_in(directory), 9)


_SERVED_BY = "import sys\nassert open('/proc/self/comm').read().strip() == sys.argv[1][:15]\n"


def test_ending_calls_by_name_cannot_reach_a_call_that_has_ended(
    local_hub: dict[str, str],
) -> None:
    """A call whose status is sent is no longer named by its id (the agent's ``kill`` looks).

    Its child waits for the relay to act on the status; killed then, it made the hub report a
    second status on top of the program's own (a stopped relay then exited 2 | 128 + 9 = 139).
    """
    text = _SERVED_BY + "import time\ntime.sleep(float(sys.argv[2]))\nsys.exit(2)\n"
    relay = subprocess.Popen(
        guest_argv(text, ["ended-call-id", "0.3"]), env=local_hub, stderr=subprocess.PIPE
    )
    try:
        _wait_until(lambda: _named("ended-call-id"), "the hub's child never ran the call")
        relay.send_signal(signal.SIGSTOP)
        # Stopped, the relay keeps the status signals pending: the last one says all were sent.
        _wait_until(lambda: _pending(relay.pid, 43), "the status never reached the relay")
        for pid in _named("ended-call-id"):  # what ending the call by its id does
            os.kill(pid, signal.SIGKILL)
    finally:
        relay.send_signal(signal.SIGCONT)
    _, err = relay.communicate(timeout=60)
    assert (relay.returncode, err) == (2, b"")


def _pending(pid: int, signum: int) -> bool:
    """Whether ``signum`` is pending for process ``pid``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) >> signum - 1 & 1:
            return True
    return False


def test_a_fork_of_the_program_that_returns_does_not_end_the_call(
    local_hub: dict[str, str],
) -> None:
    """Only the call's own process reports its exit status; a fork's return is not the call's."""
    text = _SERVED_BY + (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    sys.exit(5)\n"
        "os.wait()\n"
        "time.sleep(0.3)\n"
        "print('parent done')\n"
    )
    done = subprocess.run(
        guest_argv(text, ["fork-call-id"]), env=local_hub, capture_output=True, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"parent done\n", b"")


def _named(name: str) -> list[int]:
    """The pids of processes whose ``comm`` is ``name``."""
    found = []
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if entry.isdigit() and Path(f"/proc/{entry}/comm").read_text().strip() == name:
                found.append(int(entry))
    return found


def test_a_killed_exec_hangs_up_on_the_hubs_child(session: Session) -> None:
    """Before its pid frame arrives, the host can stop a call only by killing the exec."""
    _until_served(session)
    text = "import os, sys, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)\n"
    killer = (
        "import json, os, signal, subprocess, sys, time\n"
        "argv = json.loads(sys.stdin.read())\n"
        "relay = subprocess.Popen(argv, stdout=subprocess.PIPE)\n"
        "child = int(relay.stdout.readline())\n"
        "relay.kill(); relay.wait()\n"
        "deadline = time.monotonic() + 10\n"
        "while os.path.exists('/proc/%d' % child) and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
        "print(child != relay.pid, os.path.exists('/proc/%d' % child))\n"
    )
    argv = guest_argv(text, ["hangup-call-id"])
    done = run_command(session, ["python3", "-c", killer], input=json.dumps(argv).encode())
    # A hub's child (not the relay itself) ran the program, and it is gone with its exec.
    assert done.stdout == b"True False\n", done


# A stand-in hub whose ``in`` pipe is full, so that a relay blocks in the very write of its pid;
# it prints that pipe, then drains it once a line arrives on its stdin.
_FULL_HUB = (
    "import os, sys\n"
    "open('/proc/self/comm', 'w').write('lizard-hub')\n"
    "r, w = os.pipe(); os.dup2(r, 3); os.dup2(w, 12)\n"
    "r2, w2 = os.pipe(); os.dup2(w2, 11); os.close(r2)\n"
    "os.set_blocking(12, False)\n"
    "try:\n"
    "    while True: os.write(12, b'x' * 4096)\n"
    "except BlockingIOError: pass\n"
    "start = open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19]\n"
    "open(os.path.join(sys.argv[1], 'hub.%d.%s' % (os.getpid(), start)), 'w').close()\n"
    "print(os.readlink('/proc/self/fd/3'), flush=True)\n"
    "sys.stdin.readline()\n"
    "while os.read(3, 65536): pass\n"
)


@contextlib.contextmanager
def _relay_writing_its_pid(
    home: Path, text: str, call_id: str
) -> Iterator[tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    """``(hub, relay)``: a relay of ``text`` blocked writing its pid to a :data:`_FULL_HUB`."""
    directory = home / ".cache" / f"lizard-hub-{_guest_relay.hub_key()}"
    directory.mkdir(parents=True, mode=0o700)
    hub = subprocess.Popen(
        ["python3", "-c", _FULL_HUB, str(directory)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    relay = None
    try:
        assert hub.stdout is not None
        pipe = hub.stdout.readline().decode().strip()
        env = {"PATH": os.environ["PATH"], "HOME": str(home)}
        std = subprocess.PIPE
        relay = subprocess.Popen(
            guest_argv(text, [call_id]), env=env, stdin=std, stdout=std, stderr=std
        )

        def writing() -> bool:
            assert relay is not None
            with contextlib.suppress(OSError):
                state = Path(f"/proc/{relay.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                return state == "S" and os.readlink(f"/proc/{relay.pid}/fd/3") == pipe
            return False

        _wait_until(writing, "the relay never wrote to the hub")
        yield hub, relay
    finally:
        if relay is not None:
            relay.kill()
            relay.wait()
        hub.kill()
        hub.wait()


def test_a_decline_while_the_relay_writes_its_pid_leaves_it_nothing_of_the_hub(
    tmp_path: Path,
) -> None:
    """``SIGUSR2`` can arrive while the relay still writes its pid (a loaded machine): the
    launcher it runs then gets the exec's own stderr and none of the relay's descriptors."""
    text = (
        "import os, sys\nprint(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))\n"
        "print('err', file=sys.stderr)\nsys.exit(4)\n"
    )
    with _relay_writing_its_pid(tmp_path, text, "declined-call-id") as (hub, relay):
        relay.send_signal(12)  # what a spare that declines the relay sends
        assert hub.stdin is not None
        hub.stdin.write(b"drain\n")  # the write completes, so the relay goes on
        hub.stdin.flush()
        out, err = relay.communicate(timeout=60)
        assert (relay.returncode, out, err) == (4, b"[0, 1, 2, 3]\n", b"err\n")


def test_while_the_relay_writes_its_pid_what_the_child_takes_is_the_execs_own_stdio(
    tmp_path: Path,
) -> None:
    """A hub's child takes the relay's stdio copies (``STDIO``) as soon as it reads the pid,
    which can be before the relay's write has returned (on a loaded machine, often): during that
    write they must already be the exec's own stdin, stdout and stderr, or output is lost."""
    with _relay_writing_its_pid(tmp_path, "pass", "stdio-call-id") as (_, relay):
        assert relay.stdin is not None
        assert relay.stdout is not None
        assert relay.stderr is not None
        own = [os.readlink(f"/proc/self/fd/{f.fileno()}") for f in (relay.stdin, relay.stdout)]
        own.append(os.readlink(f"/proc/self/fd/{relay.stderr.fileno()}"))
        taken = [os.readlink(f"/proc/{relay.pid}/fd/{fd}") for fd in STDIO]
        assert taken == own


# A process of the user's that passes for a hub: named lizard-hub, its pipes where a hub keeps
# them, a name file for it in sys.argv[1] (sys.argv[2]: "own", or "link" to a file of root's).
_FAKE_HUB = """\
import os, sys, time
open('/proc/self/comm', 'w').write('lizard-hub')
r, w = os.pipe(); os.dup2(r, 3); os.dup2(w, 12)
r2, w2 = os.pipe(); os.dup2(w2, 11); os.close(r2)
start = open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19]
os.makedirs(sys.argv[1], exist_ok=True)
marker = os.path.join(sys.argv[1], 'hub.%d.%s' % (os.getpid(), start))
if sys.argv[2] == 'link':
    os.symlink('/etc/passwd', marker)
else:
    open(marker, 'w').close()
time.sleep(120)
"""


@pytest.mark.parametrize("marker", ["own", "link"])
def test_a_hub_named_in_a_shared_home_by_another_user_is_not_used(
    session: Session, marker: str
) -> None:
    """Root's ``HOME`` is a directory of root's the user may write (``/tmp``): the user's
    stand-in hub named there (through a link to root's ``/tmp``, by a file of the user's or a
    link to one of root's) never gets root's call, which it would hold until the host gave up."""
    # Its directory must be root's: a link to /tmp itself, where the user may add files.
    directory = f"/tmp/.cache/lizard-hub-{_guest_relay.hub_key()}"
    plant = (
        f"mkdir -p /tmp/.cache && ln -s /tmp {directory} && "
        f'(setsid python3 -c "$FAKE" /tmp {marker} </dev/null >/dev/null 2>&1 &) && '
        "while ! ls /tmp/hub.* >/dev/null 2>&1; do sleep 0.05; done; echo planted"
    )
    planted = run_command(session, ["sh", "-c", plant], env={"FAKE": _FAKE_HUB}, user="user")
    assert planted.stdout == b"planted\n", planted
    code, out, _ = _relay(session, _WHO, ["shared-home-call-id"], prefix="export HOME=/tmp;")
    assert (code, out) == (0, "launcher\n")


def test_the_relay_checks_and_opens_one_process_through_one_descriptor() -> None:
    # /proc/<pid> is opened once; the stat the checks read and both pipes are reached through
    # that descriptor, which keeps naming the hub it was opened on (a pid reused since cannot
    # answer through it). Reaching them by /proc/<pid>/... paths would reopen the pid each time.
    relay = _guest_relay.RELAY
    assert relay.count("/proc/$p") == 1
    assert '8<"/proc/$p"' in relay
    for reached in ("/proc/self/fd/8/stat", "/proc/self/fd/8/fd/11", "/proc/self/fd/8/fd/3"):
        assert reached in relay
    # Neither the launcher nor anything the hub's child takes over keeps it.
    assert relay.count("8<&-") == 3
    # What that rests on: once its process is gone, a held /proc/<pid> reads nothing, so it
    # can never show the process that takes the pid next.
    script = (
        "sleep 30 & p=$!; exec 8</proc/$p; read -r l </proc/self/fd/8/stat && echo before; "
        "kill -9 $p; wait $p; { read -r l </proc/self/fd/8/stat && echo after; } 2>/dev/null; "
        "echo done"
    )
    done = subprocess.run(["sh", "-c", script], capture_output=True, timeout=30)
    assert done.stdout == b"before\ndone\n"


def test_a_process_whose_name_forges_the_start_time_is_not_a_hub(tmp_path: Path) -> None:
    """A name with spaces and a parenthesis shifts ``/proc/<pid>/stat``'s fields: here its
    thread count (1) reads as the start time. Such a process (one that took a dead hub's pid,
    say) never gets a call, which it would hold until the host gave up."""
    fake = (
        "import os, sys, time\n"
        "open('/proc/self/comm', 'w').write('lizard-hub) R 1')\n"
        "r, w = os.pipe(); os.dup2(r, 3); os.dup2(w, 12)\n"
        "r2, w2 = os.pipe(); os.dup2(w2, 11); os.close(r2)\n"
        "open(os.path.join(sys.argv[1], 'hub.%d.1' % os.getpid()), 'w').close()\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    directory = tmp_path / ".cache" / f"lizard-hub-{_guest_relay.hub_key()}"
    directory.mkdir(parents=True, mode=0o700)
    hub = subprocess.Popen(["python3", "-c", fake, str(directory)], stdout=subprocess.PIPE)
    try:
        assert hub.stdout is not None
        assert hub.stdout.readline() == b"ready\n"
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
        argv = guest_argv("import sys\nprint('ran')\nsys.exit(4)\n", ["forged-call-id"])
        done = subprocess.run(argv, env=env, capture_output=True, timeout=20)
        assert (done.returncode, done.stdout) == (4, b"ran\n")
        # The launcher started a real hub, which takes the directory over: end it.
        _wait_until(lambda: _hub_in(directory) not in (0, hub.pid), "no hub started")
        os.kill(_hub_in(directory), 9)
    finally:
        hub.kill()
        hub.wait()


# A stand-in hub as above that prints the first relay pid written to it, then keeps waiting.
_LISTENING_HUB = _FAKE_HUB.replace(
    "time.sleep(120)", "print(os.read(3, 64).decode().strip(), flush=True)\ntime.sleep(120)"
)


def _status_field(pid: int, field: str) -> str:
    with open(f"/proc/{pid}/status") as status:
        return next(line.split()[1] for line in status if line.startswith(field + ":"))


@pytest.mark.timeout(60)
def test_the_waiting_relay_is_woken_by_the_nudge_and_acts_on_its_signals(tmp_path: Path) -> None:
    """The real relay, blocked on ``wait``: ``URG`` interrupts its read (the trap that makes the
    hub child's nudges wake a relay that noted its last signal too late) and changes nothing."""
    directory = tmp_path / ".cache" / f"lizard-hub-{_guest_relay.hub_key()}"
    hub = subprocess.Popen(
        [sys.executable, "-c", _LISTENING_HUB, str(directory), "own"], stdout=subprocess.PIPE
    )
    _wait_until(lambda: directory.is_dir() and _hub_in(directory) > 0, "no stand-in hub")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    relay = subprocess.Popen(guest_argv("print('ran')", ["nudged-call-id"]), env=env)
    try:
        assert hub.stdout is not None
        assert hub.stdout.readline() == f"{relay.pid:08d}\n".encode()  # one 9-byte record
        _wait_until(lambda: _status_field(relay.pid, "State") == "S", "the relay never waited")
        caught = int(_status_field(relay.pid, "SigCgt"), 16)
        for signum in [signal.SIGUSR1, signal.SIGUSR2, signal.SIGURG, *range(35, 45)]:
            assert caught >> (signum - 1) & 1, signum
        switches = int(_status_field(relay.pid, "voluntary_ctxt_switches"))
        relay.send_signal(signal.SIGURG)
        _wait_until(
            lambda: int(_status_field(relay.pid, "voluntary_ctxt_switches")) > switches,
            "URG did not interrupt the relay's read",
        )
        time.sleep(0.2)
        assert relay.poll() is None  # woken, and waiting again
        relay.send_signal(signal.SIGUSR1)
        assert relay.wait(timeout=30) == 0
    finally:
        relay.kill()
        relay.wait()
        hub.kill()
        hub.wait()


def test_a_hub_preloads_once_its_launcher_waits_or_at_its_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The preload waits for the launcher to wait (its CPU is then free), bounded by a limit."""
    from lizard_core._guest import hub

    waiting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    procs = {p: os.open(f"/proc/{p.pid}", os.O_RDONLY | os.O_DIRECTORY) for p in (waiting, busy)}
    try:
        time.sleep(0.5)  # both past their start
        monkeypatch.setattr(hub, "IDLE_WAIT_S", 60.0)
        started = time.monotonic()
        hub.wait_until_idle(procs[waiting])
        assert time.monotonic() - started < 30, "a waiting launcher was not seen to wait"
        monkeypatch.setattr(hub, "IDLE_WAIT_S", 0.5)
        started = time.monotonic()
        hub.wait_until_idle(procs[busy])
        assert time.monotonic() - started >= 0.5, "a running launcher was taken for waiting"
        busy.kill()
        busy.wait()
        monkeypatch.setattr(hub, "IDLE_WAIT_S", 60.0)
        started = time.monotonic()
        hub.wait_until_idle(procs[busy])  # reaped: gone
        assert time.monotonic() - started < 30, "a launcher that is gone was waited for"
    finally:
        for p, fd in procs.items():
            os.close(fd)
            p.kill()
            p.wait()

"""Shared contract tests for Lizard framework adapters: subclass :class:`AdapterContract`.

An adapter's test module subclasses :class:`AdapterContract` and provides four fixtures; each
test of the class then proves one rule against lizard-local (the session's ``lizard_local``
server from this package's pytest plugin), inspecting the sandbox from the outside:

- **Constructors do no I/O.** Building the adapter's object (from the environment or from
  arguments), its ``repr`` and ``str``, make no request and create no sandbox, and show no key.
- **Bad configuration fails early.** An insecure ``api_url``, a non-string or empty ``api_key``
  and an empty ``project_id`` raise :class:`ValueError` / :class:`TypeError` before any request.
- **Credentials stay on the host.** While an operation runs, no process of the sandbox carries
  the API key (or a variable that exists only in the host's environment) in its argv or
  environment; afterwards neither a new command's ``env``, nor the sandbox's record, nor any
  file under the sandbox's private directories, nor the log records of the host contain it. The
  key is searched as it is, by its tail, and base64-encoded at every alignment (requests to the
  guest travel base64-encoded in argv).
- **Cleanup leaves no sandbox.** The adapter's cleanup call destroys the sandbox it created and
  every process in it, can be called again, and makes no request for an adapter never used.
- **Cancellation leaves nothing running.** Cancelling an operation (the task, for an async
  adapter; Ctrl-C, for a sync one) returns promptly, stops the work in the sandbox, and leaves
  the adapter usable.
- **Errors map to the framework's types** (:class:`ExpectedErrors`): a sandbox killed under the
  adapter, a rejected key and a transient API failure each raise the type the framework expects,
  with no key in the text of the whole exception chain, and no replacement sandbox is created.

Fixtures to provide (see :class:`AdapterContract` for their exact shapes): ``make_adapter``
(keyword arguments ``api_key``, ``api_url``, ``project_id`` -> the adapter's object),
``run_python`` (run Python source in the sandbox through the adapter, as a user of the framework
would), ``cleanup_adapter`` (the adapter's cleanup call) and ``expected_errors``. Functions may
be plain or ``async def``: an async one runs under :func:`anyio.run` (asyncio by default), one
event loop per call. Rules an adapter cannot meet are opted out of by name, with a reason, e.g.
``skip_cancellation = "the framework offers no way to cancel a step"``; the skip shows the
reason.

The rules read the sandbox's processes from the host's ``/proc`` (by lizard-local's per-sandbox
environment marker), so they need Linux, like lizard-local itself.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import inspect
import json
import logging
import os
import secrets
import signal
import ssl
import threading
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, TypeAlias, cast

import anyio
import pytest

from lizard_local import procscan
from lizard_local.server_process import LocalServer

__all__ = [
    "EXEC_ROUTE",
    "AdapterContract",
    "ErrorTypes",
    "ExpectedErrors",
    "pids_carrying",
    "quick_operation",
    "sandbox_pids",
]

ErrorTypes: TypeAlias = type[BaseException] | tuple[type[BaseException], ...]
"""What ``pytest.raises`` accepts: one exception type or a tuple of them."""

EXEC_ROUTE: Final = "POST /api/sandboxes/{id}/exec"
"""The counter key of the exec request, which the transient-failure rule fails by default."""

START_TIMEOUT_S: Final = 120.0
"""How long an operation may take to get its work running (a first use creates the sandbox)."""
STOP_TIMEOUT_S: Final = 30.0
"""How long cancelled or cleaned-up work may take to disappear from the sandbox."""
CALL_RETURN_S: Final = 30.0
"""How long a cancelled call may take to return to its caller."""

_MARKER_NAME: Final = "LIZARD_EMU_SANDBOX"
_HOST_ONLY_VARIABLE: Final = "LIZARD_CONTRACT_HOST_ONLY"
# The work an operation starts in the cancellation and in-flight rules: a child process that
# carries a unique token in its argv, so that the host can find it, and sleeps.
_LONG_CODE: Final = (
    "import subprocess, sys\n"
    "_ = subprocess.run([sys.executable, '-c', 'import time; time.sleep(600)', {token!r}])\n"
)
_QUICK_CODE: Final = "print('lizard contract')\n"

# Runs inside the sandbox (Python 3.8+, stdlib): report which files under the given roots hold
# one of the masked needles. The needles travel XOR-masked, so the probe's own argv carries no
# secret; the decoy proves that the scan finds what it looks for.
_FILE_PROBE: Final = r"""
import json, os, re, stat, sys
spec = json.loads(sys.argv[1])
mask = bytes.fromhex(spec["mask"])
def unmask(text):
    raw = bytes.fromhex(text)
    return bytes(b ^ mask[i % len(mask)] for i, b in enumerate(raw))
groups = {name: [unmask(n) for n in needles] for name, needles in spec["needles"].items()}
longest = max(len(n) for needles in groups.values() for n in needles)
roots = spec["roots"] or [os.environ.get("HOME", ""), os.environ.get("TMPDIR", ""), os.getcwd()]
# Host folders mounted read-only into the private ones (the Python installation under /root,
# say) are not the sandbox's files: skip every mount point below a root.
mounts = set()
try:
    with open("/proc/self/mounts") as handle:
        for line in handle:
            fields = line.split()
            if len(fields) > 1:
                mounts.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1]))
except OSError:
    pass
hits = {name: [] for name in groups}
seen = set()
for root in roots:
    if not root or not os.path.isdir(root):
        continue
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if os.path.join(folder, d) not in mounts]
        for name in names:
            path = os.path.join(folder, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
            found = set()
            try:
                with open(path, "rb") as handle:
                    tail = b""
                    while True:
                        chunk = handle.read(1 << 20)
                        if not chunk:
                            break
                        data = tail + chunk
                        for group, needles in groups.items():
                            if any(n in data for n in needles):
                                found.add(group)
                        tail = data[-longest:]
            except OSError:
                continue
            for group in found:
                hits[group].append(path)
print(json.dumps({"hits": hits, "files": len(seen)}))
"""

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExpectedErrors:
    """The exception types the framework expects for each failure the contract provokes."""

    sandbox_gone: ErrorTypes
    """Raised by an operation on a sandbox that was killed or expired (e.g. "unavailable")."""
    credentials_rejected: ErrorTypes
    """Raised by the first operation when Lizard rejects the API key."""
    transient: ErrorTypes
    """Raised when the operation's request fails with a 5xx (a failure a retry may fix)."""


# ── looking at a sandbox from the outside ────────────────────────────────────


def _needles(secret: str) -> list[bytes]:
    """Byte strings whose presence means ``secret`` leaked: as is, its tail, and in base64.

    For base64, the key can start at any of three offsets of a 3-byte group; for each, only the
    characters fully determined by the key's own bytes are searched.
    """
    raw = secret.encode()
    found = {raw}
    if len(raw) >= 24:
        found.add(raw[-16:])  # a key cut short still leaks its secret part
    for offset in range(3):
        part = raw[offset:]
        whole = len(part) // 3 * 3
        if whole >= 12:
            found.add(base64.b64encode(part[:whole]))
            found.add(base64.urlsafe_b64encode(part[:whole]))
    return sorted(found, key=len, reverse=True)


def _leaked(data: bytes, secrets_: Mapping[str, Sequence[bytes]]) -> list[str]:
    """Names of the secrets whose needles occur in ``data``."""
    return [name for name, needles in secrets_.items() if any(n in data for n in needles)]


def _shown(data: bytes, secrets_: Mapping[str, Sequence[bytes]], limit: int = 160) -> str:
    """``data`` made printable for a failure message, with every needle blanked out."""
    for needles in secrets_.values():
        for needle in needles:
            data = data.replace(needle, b"<secret>")
    text = data.replace(b"\0", b" ").decode("utf-8", "replace").strip()
    return text if len(text) <= limit else text[:limit] + "..."


def _assert_hidden(data: bytes, secrets_: Mapping[str, Sequence[bytes]], where: str) -> None:
    """Fail, naming the secrets, if any of them is in ``data`` (what ``where`` shows)."""
    leaks = _leaked(data, secrets_)
    assert not leaks, f"{', '.join(leaks)} in {where}"


def _assert_error_hides(error: BaseException, keys: Mapping[str, str]) -> None:
    """Fail if the text of ``error`` (its whole chain) shows one of ``keys`` (name -> key)."""
    text = _exception_text(error).encode()
    leaks = _leaked(text, {name: _needles(key) for name, key in keys.items()})
    assert not leaks, f"the error shows {', '.join(leaks)}"


def _assert_no_requests(server: LocalServer, what: str) -> None:
    """Fail if ``server`` counted a request since its counters were reset."""
    counters = server.counters()
    assert counters["total"] == 0, f"{what} made requests: {counters['routes']}"


def _read_proc(pid: int, name: str) -> bytes | None:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as handle:
            return handle.read()
    except OSError:  # the process ended meanwhile
        return None


def sandbox_pids(sandbox_id: str) -> list[int]:
    """Host pids of every process of ``sandbox_id`` (lizard-local marks each one)."""
    return procscan.find_marked(f"{_MARKER_NAME}={sandbox_id}".encode())


def pids_carrying(token: str) -> list[int]:
    """Host pids whose argv contains ``token`` (other than this process)."""
    wanted = token.encode()
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        cmdline = _read_proc(int(entry), "cmdline")
        if cmdline is not None and wanted in cmdline:
            found.append(int(entry))
    return found


def _process_leaks(sandbox_id: str, secrets_: Mapping[str, Sequence[bytes]]) -> list[str]:
    """One line per secret found in the argv or environment of a process of the sandbox."""
    problems = []
    for pid in sandbox_pids(sandbox_id):
        cmdline = _read_proc(pid, "cmdline") or b""
        for where in ("cmdline", "environ"):
            data = _read_proc(pid, where)
            if data is None:
                continue
            for name in _leaked(data, secrets_):
                place = "argv" if where == "cmdline" else "environment"
                problems.append(
                    f"{name} is in the {place} of sandbox process {pid} "
                    f"({_shown(cmdline, secrets_)})"
                )
    return problems


def _exception_text(error: BaseException) -> str:
    """Everything a user could see of ``error``.

    The formatted traceback, and each chained exception's text, repr, arguments and notes.
    """
    parts = ["".join(traceback.format_exception(error))]
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts += [str(current), repr(current), repr(current.args)]
        parts += [str(note) for note in getattr(current, "__notes__", ())]
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


class _Api:
    """Raw requests to lizard-local's API, to look at a sandbox without the adapter."""

    def __init__(self, server: LocalServer) -> None:
        self._server = server
        ca_file = server.ca_file
        self._ssl = ssl.create_default_context(cafile=ca_file) if ca_file else None

    def request(self, method: str, path: str, body: object = None, timeout: float = 60) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self._server.url + path,
            data=data,
            method=method,
            headers={"X-API-Key": self._server.api_key, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout, context=self._ssl) as response:
            return json.loads(response.read() or b"null")

    def exec(self, sandbox_id: str, argv: Sequence[str], timeout_s: int = 60) -> dict[str, Any]:
        """Run ``argv`` in the sandbox (JSON mode); return the decoded answer."""
        answer = self.request(
            "POST",
            f"/api/sandboxes/{sandbox_id}/exec",
            {"cmd": list(argv), "timeoutMs": timeout_s * 1000},
            timeout=timeout_s + 30,
        )
        assert isinstance(answer, dict)
        return answer

    def drain_fault(self, route: str, sandbox_id: str) -> None:
        """Send one request to ``route`` so that an injected fault nobody hit is used up."""
        method, _, template = route.partition(" ")
        path = template.replace("{id}", sandbox_id).replace("{pid}", self._server.project_id)
        path = path.replace("{port}", "1").replace("{rest:path}", "")
        with contextlib.suppress(urllib.error.HTTPError):
            self.request(method, path, {} if method != "GET" else None)


class _Background:
    """Run one call in a worker thread and keep its outcome."""

    def __init__(self, call: Callable[[], object]) -> None:
        self.result: object = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], object]) -> None:
        try:
            self.result = call()
        except BaseException as error:  # reported to the test thread
            self.error = error

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            pytest.fail(f"the operation did not finish within {timeout:g} s")
        if self.error is not None:
            raise self.error

    def describe(self) -> str:
        if self.error is not None:
            return f"it raised {type(self.error).__name__}: {self.error}"
        return f"it returned {self.result!r}"


def _wait_for(token: str, running: Callable[[], bool], describe: Callable[[], str]) -> list[int]:
    """Wait until a process carrying ``token`` exists; fail if the operation ends first."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        pids = pids_carrying(token)
        if pids:
            return pids
        if not running():
            pytest.fail(
                f"the operation ended before its work was seen in the sandbox: {describe()}"
            )
        if time.monotonic() > deadline:
            pytest.fail(f"the operation's work did not start within {START_TIMEOUT_S:g} s")
        time.sleep(0.05)


def _wait_gone(token: str, what: str) -> None:
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while pids := pids_carrying(token):
        if time.monotonic() > deadline:
            details = [_shown(_read_proc(pid, "cmdline") or b"", {}) for pid in pids]
            pytest.fail(f"{what}: still running {STOP_TIMEOUT_S:g} s later: {details}")
        time.sleep(0.05)


def _is_async(fn: Callable[..., object]) -> bool:
    target = fn.func if isinstance(fn, functools.partial) else fn
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)  # noqa: B004 - an object with an async __call__
    )


# ── the contract ─────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class _AdapterKit:
    """The adapter's fixtures, gathered: how a rule builds, drives and cleans up its object."""

    make: Callable[..., Any]
    run_python: Callable[[Any, str], object]
    operate: Callable[[Any], object]
    cleanup: Callable[[Any], object]
    errors: ExpectedErrors
    fault_route: str


class AdapterContract:
    """Subclass in an adapter's test module and provide the fixtures below.

    Required fixtures:

    ``make_adapter``
        ``Callable[..., object]``: build the adapter's object from keyword arguments
        ``api_key``, ``api_url`` and ``project_id`` (each may be absent: the environment,
        pointed at lizard-local by the plugin, supplies it). Anything else the adapter needs,
        pass here.
    ``run_python``
        ``Callable[[adapter, str], object]`` (plain or ``async def``): run the Python source in
        the sandbox through the adapter, as a user of the framework would (a code executor runs
        it; a shell tool runs ``python3 -c <source>``), and wait for it. The first call creates
        the sandbox.
    ``cleanup_adapter``
        ``Callable[[adapter], object]`` (plain or ``async def``): the adapter's cleanup path,
        e.g. ``close()``, ``cleanup()`` or ``destroy()``.
    ``expected_errors``
        An :class:`ExpectedErrors`.

    Optional fixtures: ``operate`` (one cheap operation; default: a one-line ``run_python``) and
    ``fault_route`` (the counter key of the request ``operate`` makes; default
    :data:`EXEC_ROUTE`).

    Opt-outs are class attributes: set one to the reason to skip its rule.
    """

    skip_cancellation: ClassVar[str | None] = None
    """Why the framework cannot cancel an operation in flight; skips the cancellation rule."""

    skip_transient_errors: ClassVar[str | None] = None
    """Why the framework has no type for a transient failure; skips that rule."""

    event_loop_backend: ClassVar[str] = "asyncio"
    """The anyio backend that runs ``async def`` fixtures' functions."""

    replaces_gone_sandbox: ClassVar[str | None] = None
    """Why the adapter replaces a sandbox it created that is gone (and tells the model its state
    was lost) instead of raising. The rule then checks the replacement instead: the operation
    succeeds in exactly one new sandbox, the gone one stays gone, and cleanup destroys the new
    one."""

    # ── fixtures the adapter provides ──

    @pytest.fixture
    def make_adapter(self) -> Callable[..., Any]:
        """Build the adapter's object from ``api_key``/``api_url``/``project_id`` keywords."""
        raise NotImplementedError("provide a `make_adapter` fixture")

    @pytest.fixture
    def run_python(self) -> Callable[[Any, str], object]:
        """Run Python source in the adapter's sandbox and wait for it."""
        raise NotImplementedError("provide a `run_python` fixture")

    @pytest.fixture
    def cleanup_adapter(self) -> Callable[[Any], object]:
        """The adapter's cleanup call."""
        raise NotImplementedError("provide a `cleanup_adapter` fixture")

    @pytest.fixture
    def expected_errors(self) -> ExpectedErrors:
        """The framework's exception types."""
        raise NotImplementedError("provide an `expected_errors` fixture")

    @pytest.fixture
    def operate(self, run_python: Callable[[Any, str], object]) -> Callable[[Any], object]:
        """One cheap operation (it creates the sandbox on first use)."""
        return quick_operation(run_python)

    @pytest.fixture
    def fault_route(self) -> str:
        """The counter key of the request ``operate`` makes once the sandbox exists."""
        return EXEC_ROUTE

    @pytest.fixture
    def adapter_kit(
        self,
        make_adapter: Callable[..., Any],
        run_python: Callable[[Any, str], object],
        operate: Callable[[Any], object],
        cleanup_adapter: Callable[[Any], object],
        expected_errors: ExpectedErrors,
        fault_route: str,
    ) -> _AdapterKit:
        """The fixtures above as one object, for the rules that use several of them."""
        return _AdapterKit(
            make_adapter, run_python, operate, cleanup_adapter, expected_errors, fault_route
        )

    @pytest.fixture(autouse=True)
    def _no_sandbox_left(self, lizard_local: LocalServer) -> Iterator[None]:
        # Kill what a failing rule left behind, so that one failure does not fail the session.
        before = set(lizard_local.sandboxes())
        yield
        for sandbox_id in set(lizard_local.sandboxes()) - before:
            _log.warning("adapter contract: killing sandbox %s left by the test", sandbox_id)
            with contextlib.suppress(Exception):
                lizard_local.expire(sandbox_id)

    # ── helpers ──

    def _call(self, fn: Callable[..., object], *args: Any) -> Any:
        """Call a plain or async function to completion."""
        if _is_async(fn):
            coroutine_fn = cast(Callable[..., Awaitable[object]], fn)
            return anyio.run(
                functools.partial(coroutine_fn, *args), backend=self.event_loop_backend
            )
        result = fn(*args)
        if inspect.isawaitable(result):
            awaitable = result

            async def wait() -> object:
                return await awaitable

            return anyio.run(wait, backend=self.event_loop_backend)
        return result

    def _opt_out(self, name: str) -> None:
        reason = getattr(self, name)
        if reason is None:
            return
        if not isinstance(reason, str) or not reason.strip():
            raise TypeError(f"{type(self).__name__}.{name} must be None or the reason to skip")
        pytest.skip(f"{name}: {reason}")

    @staticmethod
    def _new_sandbox(server: LocalServer, before: set[str]) -> str:
        created = set(server.sandboxes()) - before
        assert created, "the operation created no sandbox"
        assert len(created) == 1, f"one adapter object created {len(created)} sandboxes"
        return created.pop()

    def _operated_adapter(self, server: LocalServer, kit: _AdapterKit) -> tuple[set[str], Any, str]:
        """The sandboxes there were, and a new adapter with the one sandbox its operation made."""
        before = set(server.sandboxes())
        adapter = kit.make()
        self._call(kit.operate, adapter)
        return before, adapter, self._new_sandbox(server, before)

    # ── rules ──

    def test_construction_makes_no_request(
        self, lizard_counters: LocalServer, make_adapter: Callable[..., Any]
    ) -> None:
        """Building the adapter, and its repr and str, make no request and show no key."""
        server = lizard_counters
        before = set(server.sandboxes())
        server.reset_counters()
        from_env = make_adapter()
        explicit = make_adapter(
            api_key=server.api_key, api_url=server.url, project_id=server.project_id
        )
        shown = " ".join(f(a) for a in (from_env, explicit) for f in (repr, str)).encode()
        _assert_no_requests(server, "building the adapter")
        assert set(server.sandboxes()) == before
        assert not _leaked(shown, {"the API key": _needles(server.api_key)}), (
            "the adapter's repr or str shows the API key"
        )

    def test_invalid_configuration_is_refused_before_any_request(
        self, lizard_counters: LocalServer, make_adapter: Callable[..., Any]
    ) -> None:
        """Insecure URLs and bad credentials raise ValueError/TypeError with no request."""
        server = lizard_counters
        with pytest.raises(ValueError):  # noqa: PT011 - any ValueError; the message is the adapter's
            make_adapter(api_url="http://lizard.invalid")  # plain HTTP off loopback
        with pytest.raises(TypeError):
            make_adapter(api_key=12345)
        with pytest.raises(ValueError):  # noqa: PT011
            make_adapter(api_key="")
        with pytest.raises(ValueError):  # noqa: PT011
            make_adapter(project_id="")
        _assert_no_requests(server, "refusing bad input")

    def test_cleanup_of_an_unused_adapter_makes_no_request(
        self, lizard_counters: LocalServer, adapter_kit: _AdapterKit
    ) -> None:
        """Cleaning up an adapter that never ran anything makes no request."""
        server = lizard_counters
        before = set(server.sandboxes())
        adapter = adapter_kit.make()
        server.reset_counters()
        self._call(adapter_kit.cleanup, adapter)
        _assert_no_requests(server, "cleanup")
        assert set(server.sandboxes()) == before

    def test_cleanup_destroys_the_sandbox_and_everything_in_it(
        self, lizard_local: LocalServer, adapter_kit: _AdapterKit
    ) -> None:
        """Cleanup destroys the sandbox and its processes, and may be called again."""
        before, adapter, sandbox_id = self._operated_adapter(lizard_local, adapter_kit)
        assert sandbox_pids(sandbox_id), "the sandbox's processes cannot be found by their marker"
        self._call(adapter_kit.cleanup, adapter)
        assert sandbox_id not in lizard_local.sandboxes(), "cleanup left the sandbox alive"
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while sandbox_pids(sandbox_id):
            assert time.monotonic() < deadline, "processes of the sandbox outlived cleanup"
            time.sleep(0.05)
        self._call(adapter_kit.cleanup, adapter)  # a second cleanup is harmless
        assert set(lizard_local.sandboxes()) == before

    def test_credentials_never_reach_the_sandbox(
        self,
        lizard_local: LocalServer,
        adapter_kit: _AdapterKit,
        monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """The key (and the host's environment) reach no argv, environment, file or log."""
        host_only = "lzl_contract_host_only_" + secrets.token_hex(16)
        monkeypatch.setenv(_HOST_ONLY_VARIABLE, host_only)
        caplog.set_level(logging.DEBUG)
        watched = {
            "the API key": _needles(lizard_local.api_key),
            f"the host-only variable {_HOST_ONLY_VARIABLE}": _needles(host_only),
        }
        api = _Api(lizard_local)
        before = set(lizard_local.sandboxes())
        adapter = adapter_kit.make()
        token = "lizard-contract-" + secrets.token_hex(8)
        code = _LONG_CODE.format(token=token)
        work = _Background(lambda: self._call(adapter_kit.run_python, adapter, code))
        try:
            workers = _wait_for(token, lambda: not work.done, work.describe)
            sandbox_id = self._new_sandbox(lizard_local, before)
            assert set(workers) <= set(sandbox_pids(sandbox_id)), (
                "the operation's processes are not marked as the sandbox's: cannot inspect them"
            )
            in_flight = _process_leaks(sandbox_id, watched)
        finally:
            for pid in pids_carrying(token):  # let the operation finish normally
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            work.join(STOP_TIMEOUT_S + CALL_RETURN_S)
        assert not in_flight, "\n".join(in_flight)
        assert not _process_leaks(sandbox_id, watched), "\n".join(
            _process_leaks(sandbox_id, watched)
        )

        env = api.exec(sandbox_id, ["env"])
        assert env["exitCode"] == 0, env
        _assert_hidden(env["stdout"].encode(), watched, "the environment of a new command")
        record = json.dumps(api.request("GET", f"/api/sandboxes/{sandbox_id}")).encode()
        _assert_hidden(record, watched, "the sandbox's record (metadata, envs)")

        hits = self._scan_files(lizard_local, api, sandbox_id, watched)
        assert not hits, f"secrets in the sandbox's files: {hits}"
        _assert_hidden(caplog.text.encode(), watched, "the host's log records")
        self._call(adapter_kit.cleanup, adapter)

    def _scan_files(
        self,
        server: LocalServer,
        api: _Api,
        sandbox_id: str,
        watched: Mapping[str, Sequence[bytes]],
    ) -> dict[str, list[str]]:
        """Grep the sandbox's private directories for the watched secrets."""
        decoy = "lizard-contract-decoy-" + secrets.token_hex(8)
        made = api.exec(
            sandbox_id, ["sh", "-c", 'printf %s "$1" > "$HOME/.lizard-contract-decoy"', "sh", decoy]
        )
        assert made["exitCode"] == 0, made
        mask = secrets.token_bytes(16)

        def masked(needle: bytes) -> str:
            return bytes(b ^ mask[i % len(mask)] for i, b in enumerate(needle)).hex()

        groups = {"decoy": [decoy.encode()], **watched}
        spec = {
            "mask": mask.hex(),
            "needles": {name: [masked(n) for n in needles] for name, needles in groups.items()},
            # Host mode shares /tmp and /root with the host: scan the sandbox's own folders only.
            "roots": ["/tmp", "/root", "/home/user", "/workspace"]
            if server.isolation == "namespace"
            else [],
        }
        answer = api.exec(sandbox_id, ["python3", "-c", _FILE_PROBE, json.dumps(spec)], 120)
        assert answer["exitCode"] == 0, f"the file scan failed: {answer['stderr']}"
        report = json.loads(answer["stdout"])
        hits: dict[str, list[str]] = report["hits"]
        assert hits.pop("decoy"), "the file scan did not find its decoy: it cannot be trusted"
        return {name: paths for name, paths in hits.items() if paths}

    def test_cancellation_stops_the_work_and_leaves_the_adapter_usable(
        self, lizard_local: LocalServer, adapter_kit: _AdapterKit
    ) -> None:
        """A cancelled operation returns promptly, its work stops, the adapter still works."""
        self._opt_out("skip_cancellation")
        run_python = adapter_kit.run_python
        adapter = adapter_kit.make()
        token = "lizard-contract-" + secrets.token_hex(8)
        code = _LONG_CODE.format(token=token)
        if _is_async(run_python):
            returned_after = anyio.run(
                self._cancel_task, run_python, adapter, code, token, backend=self.event_loop_backend
            )
        else:
            returned_after = self._interrupt_call(run_python, adapter, code, token)
        assert returned_after < CALL_RETURN_S, (
            f"the cancelled call took {returned_after:.1f} s to return"
        )
        _wait_gone(token, "the cancelled operation's work")
        self._call(adapter_kit.operate, adapter)  # the adapter still works
        self._call(adapter_kit.cleanup, adapter)

    @staticmethod
    async def _cancel_task(
        run_python: Callable[[Any, str], Any], adapter: Any, code: str, token: str
    ) -> float:
        """Start the operation as a task, cancel it once its work runs; the seconds it took."""
        outcome: list[str] = []

        async def operation() -> None:
            try:
                await run_python(adapter, code)
            except BaseException as error:
                outcome.append(f"it raised {type(error).__name__}: {error}")
                raise
            outcome.append("it returned")

        async with anyio.create_task_group() as group:
            group.start_soon(operation)
            deadline = time.monotonic() + START_TIMEOUT_S
            while not pids_carrying(token):
                if outcome:
                    pytest.fail(f"the operation ended before its work was seen: {outcome[0]}")
                if time.monotonic() > deadline:
                    pytest.fail(f"the operation's work did not start within {START_TIMEOUT_S:g} s")
                await anyio.sleep(0.05)
            cancelled_at = time.monotonic()
            group.cancel_scope.cancel()
        assert outcome != ["it returned"], "the cancelled operation returned as if it had finished"
        return time.monotonic() - cancelled_at

    @staticmethod
    def _interrupt_call(
        run_python: Callable[[Any, str], object], adapter: Any, code: str, token: str
    ) -> float:
        """Ctrl-C a blocking operation once its work runs; the seconds it took to return."""
        if threading.current_thread() is not threading.main_thread():
            pytest.skip("interrupting a blocking call needs the main thread (Ctrl-C)")
        main = threading.main_thread().ident
        assert main is not None
        lock = threading.Lock()
        state = {"finished": False, "sent_at": 0.0}
        problems: list[str] = []

        def interrupt_when_running() -> None:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not pids_carrying(token):
                with lock:
                    if state["finished"]:
                        return
                if time.monotonic() > deadline:
                    problems.append(f"the operation's work did not start in {START_TIMEOUT_S:g} s")
                    break
                time.sleep(0.05)
            with lock:
                if not state["finished"]:
                    state["sent_at"] = time.monotonic()
                    signal.pthread_kill(main, signal.SIGINT)

        watcher = threading.Thread(target=interrupt_when_running, daemon=True)
        outcome = "it returned"
        # Python leaves SIGINT ignored when it started ignored (a background job of a shell):
        # Ctrl-C's own handler, for this call.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            watcher.start()
            try:
                run_python(adapter, code)
            finally:
                with lock:
                    state["finished"] = True
        except KeyboardInterrupt:
            outcome = "interrupted"
        except Exception as error:
            outcome = f"it raised {type(error).__name__}: {error}"
        finally:
            signal.signal(signal.SIGINT, previous)
        returned_at = time.monotonic()
        watcher.join()
        assert not problems, problems[0]
        assert state["sent_at"], f"the operation ended before its work was seen: {outcome}"
        assert outcome == "interrupted", f"Ctrl-C did not interrupt the operation: {outcome}"
        return returned_at - state["sent_at"]

    def test_a_killed_sandbox_raises_the_frameworks_error_and_is_not_replaced(
        self, lizard_local: LocalServer, adapter_kit: _AdapterKit
    ) -> None:
        """A sandbox killed under the adapter raises the framework's error; none replaces it."""
        before, adapter, sandbox_id = self._operated_adapter(lizard_local, adapter_kit)
        lizard_local.expire(sandbox_id)
        if self.replaces_gone_sandbox is not None:
            self._call(adapter_kit.operate, adapter)
            new = set(lizard_local.sandboxes()) - before
            assert len(new) == 1, f"expected one replacement sandbox, found {sorted(new)}"
            assert sandbox_id not in new
            self._call(adapter_kit.cleanup, adapter)
            assert set(lizard_local.sandboxes()) == before
            return
        with pytest.raises(adapter_kit.errors.sandbox_gone) as caught:
            self._call(adapter_kit.operate, adapter)
        assert set(lizard_local.sandboxes()) == before, "a replacement sandbox was created"
        _assert_error_hides(caught.value, {"the API key": lizard_local.api_key})
        self._call(adapter_kit.cleanup, adapter)  # a sandbox already gone counts as cleaned up
        assert set(lizard_local.sandboxes()) == before

    def test_a_rejected_key_raises_the_frameworks_error_without_the_key(
        self, lizard_counters: LocalServer, adapter_kit: _AdapterKit
    ) -> None:
        """A rejected key raises the framework's error, with neither key in its text."""
        server = lizard_counters
        before = set(server.sandboxes())
        wrong = "lzl_contract_wrong_" + secrets.token_hex(16)
        adapter = adapter_kit.make(api_key=wrong)
        with pytest.raises(adapter_kit.errors.credentials_rejected) as caught:
            self._call(adapter_kit.operate, adapter)
        assert server.counters()["total"] >= 1, "the operation never asked the API"
        assert set(server.sandboxes()) == before
        _assert_error_hides(
            caught.value, {"the rejected key": wrong, "the API key": server.api_key}
        )
        self._call(adapter_kit.cleanup, adapter)

    def test_a_transient_failure_raises_the_frameworks_error_and_passes(
        self, lizard_local: LocalServer, adapter_kit: _AdapterKit
    ) -> None:
        """A 5xx raises the framework's transient error, and the next operation works."""
        self._opt_out("skip_transient_errors")
        _, adapter, sandbox_id = self._operated_adapter(lizard_local, adapter_kit)
        fault_route, transient = adapter_kit.fault_route, adapter_kit.errors.transient
        lizard_local.reset_counters()
        lizard_local.inject_fault(fault_route, status=503, count=1)
        error: BaseException | None = None
        try:
            self._call(adapter_kit.operate, adapter)
        except BaseException as raised:
            error = raised
        if not lizard_local.counters()["routes"].get(fault_route):
            _Api(lizard_local).drain_fault(fault_route, sandbox_id)
            pytest.fail(f"the operation made no {fault_route!r} request: set `fault_route`")
        assert error is not None, "a 503 did not fail the operation (was the request retried?)"
        if not isinstance(error, transient):
            raise AssertionError(
                f"a 503 raised {type(error).__name__}, expected {transient}"
            ) from error
        _assert_error_hides(error, {"the API key": lizard_local.api_key})
        self._call(adapter_kit.operate, adapter)  # the failure passed; the adapter works again
        self._call(adapter_kit.cleanup, adapter)


def quick_operation(run_python: Callable[[Any, str], object]) -> Callable[[Any], object]:
    """The default ``operate``: ``run_python`` with a one-line program."""
    return functools.partial(_run_quick, run_python)


def _run_quick(run_python: Callable[[Any, str], object], adapter: Any) -> object:
    return run_python(adapter, _QUICK_CODE)

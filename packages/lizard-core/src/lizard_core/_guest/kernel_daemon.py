"""Persistent Python kernel daemon: one namespace per sandbox, served on a private Unix socket.

Its parts (``_daemon_state``, ``_daemon_values``, ``_daemon_output``, ``_prelude``) are bundled
into this one program by ``lizard_core._guest.source``; :class:`Interpreter` runs the cells.

Standard library only, Python 3.8+. ``kernel_client`` starts it as ``python3 <this file> DIR CWD
READY`` would (through ``_client_daemon.LOADER``, which runs this file's code as the client compiled
it meanwhile, or compiles it itself), detached (own session and process group, stdin from /dev/null,
stdout and stderr to ``DIR/daemon.log``), and talks to it through ``DIR/sock``; DIR is a 0700
directory that the client has created and checked. READY is a descriptor the daemon writes one byte
to once it listens, then closes (and drops from ``sys.argv``), so the client waits without polling.
The file holds the compact form of this program (``lizard_core._guest.program``): no docstrings or
annotations to compile, no ``typing`` to import.

Contract with the client:

- One connection carries one request, a JSON object on one line. The daemon answers with frame
  lines in the guest protocol's shape (compact JSON objects with a type ``t``, each well under the
  64 KiB line split), ready to relay verbatim, and closes the connection after the last. The first
  frame is ``cell``, the last is ``end``.
- ``{"op": "execute", "code", "env", "timeout", "grace", "max_output", "max_result"}`` runs a cell
  the way IPython runs it: the statements, then the last expression, whose value becomes the main
  rich result (``text/plain`` always; ``image/png`` for PIL images, matplotlib figures and
  ``_repr_png_``; ``text/html``, ``application/json`` and the other ``_repr_*_`` forms when the
  object offers them; DataFrames also as JSON). Matplotlib figures left open by the cell are sent
  as PNG results and closed. Every BaseException (KeyboardInterrupt, SystemExit, an exception
  class defined in the cell) is reported by class name and message, and the daemon lives on.
  ``env`` is applied to ``os.environ`` for the cell only.
- Output written to ``sys.stdout``/``sys.stderr`` and to file descriptors 1 and 2 (subprocesses,
  C code) is streamed while the cell runs, in order within each stream, up to ``max_output``
  bytes per request; past that a ``cut`` frame marks the spot and the rest is counted, not sent.
- With ``budget`` and ``job`` in the request, at most ``budget`` bytes of frame lines go to the
  socket; the frames after them are written, unchanged and in order, to ``job/frames`` (created
  0700), and the ``end`` frame names that file as ``spill``: the exec stream's output is capped
  by the platform, so a large answer travels as a file.
- Timeout: at ``timeout`` seconds the cell gets SIGINT (KeyboardInterrupt, namespace kept), again
  every half second during ``grace``, and the error is reported as ``TimeoutError``. A cell that
  still runs after that is the client's to kill. A client that disconnects interrupts its cell.
- ``{"op": "install", "packages", "timeout", "pip_args"}`` runs pip in a subprocess (output
  streamed), then puts the user site on ``sys.path`` and invalidates import caches, so the new
  packages import without a restart.
- ``{"op": "ping"}`` answers ``cell`` and ``end`` only (readiness and identity).
- While a connection is served, ``DIR/busy`` holds the pid of the client on its other end, so
  that a client queued behind an orphaned cell (its client killed) can tell and restart the
  kernel (see ``kernel_client``).

The daemon bounds what a cell that behaves sends (see ``_daemon_output``); it cannot bound a
cell that does not (cell code runs in this process), so the host validates and bounds whatever
arrives on its own (``lizard_core._kernel_frames``, ``_spill``). The frame kinds and keys are
named on the host in ``lizard_core._wire``, whose test holds this program to them.
"""

from __future__ import annotations
import __future__

# Imported on the way to listening, the start every new kernel waits for: the C modules under
# ``ast``, ``signal`` and ``socket`` (whose Python layers build enums and helpers the daemon never
# uses: about 10 ms in a new sandbox); ``traceback`` and ``base64`` not at all (the first error
# imports ``traceback``; ``binascii`` encodes).
import _ast
import _signal  # type: ignore[import-not-found]  # CPython's, as _socket; no stub
import _socket
import builtins
import linecache
import os
import select
import sys
import time
import types
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: never evaluated, so the daemon runs on Python 3.8
    from typing import Any, Dict, List, Optional, Tuple

    from ._prelude import Frame

    Bundle = Dict[str, str]

from ._daemon_output import (
    DATA_CHUNK,
    DATA_FRAME_MAX,
    CellStream,
    Channel,
    DaemonLog,
    FdCapture,
    Router,
    cell_frame,
    error_frames,
    mark_busy,
    read_request,
)
from ._daemon_state import (
    DAEMON_PID,
    KERNEL_ID,
    STATE,
    Watchdog,
    client_gone,
    interrupt_point,
    on_sigint,
)
from ._daemon_values import (
    CellNotCompiled,
    cap_bundle,
    describe_compile_error,
    describe_error,
    png_of_figure,
    rich_bundle,
)
from ._prelude import frame_line

FUTURE_FLAGS = [getattr(__future__, name).compiler_flag for name in __future__.all_feature_names]
TOP_LEVEL_AWAIT = getattr(_ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
CO_COROUTINE = 0x80


class Interpreter:
    """The namespace and the cells run in it."""

    def __init__(self, router: Router, capture: FdCapture, log: DaemonLog) -> None:
        self.router = router
        self.capture = capture
        self.log = log
        self.future_flags = 0
        self.module = types.ModuleType("__main__")
        self.ns = self.module.__dict__
        self.ns["__builtins__"] = builtins
        self.ns["display"] = self.display
        # Classes and functions defined in cells live in the importable ``__main__`` module, so
        # pickle, dataclasses and typing find them by name.
        sys.modules["__main__"] = self.module
        self.stdout = CellStream("stdout", 1, router, capture)
        self.stderr = CellStream("stderr", 2, router, capture)
        self.channel: Optional[Channel] = None
        self.result_index = 0
        self.max_result = 0
        self.loop: Any = None
        self.watchdog = Watchdog()

    def reset_streams(self) -> None:
        sys.stdout = self.stdout
        sys.stderr = self.stderr
        if sys.stdin is None or sys.stdin.closed:  # exit() closes it
            sys.stdin = open(os.devnull)

    # -- results -------------------------------------------------------------------------------
    def send_result(self, data: Bundle, main: bool) -> None:
        kept, omitted = cap_bundle(data, self.max_result)
        channel = self.channel
        assert channel is not None  # results are sent while a request is served
        index = self.result_index
        self.result_index += 1
        channel.frame({"t": "res", "i": index, "main": main, "omit": omitted})
        for mime, text in kept.items():
            step = DATA_CHUNK
            pos = 0
            while pos < len(text) or (pos == 0 and not text):
                piece = text[pos : pos + step]
                line = frame_line({"t": "rd", "i": index, "m": mime, "d": piece})
                if len(line) > DATA_FRAME_MAX and step > 1:
                    step = max(1, step // 4)
                    continue
                channel.frame({"t": "rd", "i": index, "m": mime, "d": piece})
                pos += len(piece)
                if not text:
                    break
                step = DATA_CHUNK

    def display(self, *objs: object) -> None:
        """Show each object as a rich result of the running cell (IPython's ``display``)."""
        for obj in objs:
            if self.channel is not None:
                self.send_result(rich_bundle(obj), False)
        interrupt_point()

    def collect_figures(self, skip: object, bundles: List[Tuple[Bundle, bool]]) -> None:
        """Every matplotlib figure the cell left open, as a PNG result; each is closed."""
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        for num in list(plt.get_fignums()):
            fig = plt.figure(num)
            try:
                if fig is not skip:
                    bundles.append(
                        ({"image/png": png_of_figure(fig), "text/plain": repr(fig)}, False)
                    )
            finally:
                plt.close(fig)

    # -- running code --------------------------------------------------------------------------
    def compile_cell(
        self, code: str, filename: str
    ) -> Tuple[types.CodeType, Optional[types.CodeType]]:
        """Compile a cell into its statements and, when it ends with one, its last expression."""
        # What ast.parse does, without importing ast.
        tree: _ast.Module = compile(  # type: ignore[assignment]  # a Module, in "exec" mode
            code, filename, "exec", _ast.PyCF_ONLY_AST, True
        )
        last: Optional[_ast.Expr] = None
        # As in IPython, a trailing semicolon hides the value.
        final_statement = tree.body[-1] if tree.body else None
        if isinstance(final_statement, _ast.Expr) and not code.rstrip().endswith(";"):
            last = final_statement
            tree.body.pop()
        body = self.compile_tracked(_ast.Module(body=tree.body, type_ignores=[]), filename, "exec")
        expr = None
        if last is not None:
            expr = self.compile_tracked(_ast.Expression(body=last.value), filename, "eval")
        return body, expr

    def compile_tracked(self, node: _ast.AST, filename: str, mode: str) -> types.CodeType:
        code: types.CodeType = compile(
            node,  # type: ignore[call-overload]  # Module or Expression
            filename,
            mode,
            self.future_flags | TOP_LEVEL_AWAIT,
            True,
        )
        # A __future__ import holds for the cells after it too, as in IPython.
        for flag in FUTURE_FLAGS:
            if code.co_flags & flag:
                self.future_flags |= flag
        return code

    def run_code(self, code_obj: types.CodeType) -> Any:
        result = eval(code_obj, self.ns)
        if code_obj.co_flags & CO_COROUTINE:  # the cell used top-level await
            import asyncio

            if self.loop is None or self.loop.is_closed():
                self.loop = asyncio.new_event_loop()
            result = self.loop.run_until_complete(result)
        return result

    def execute(self, req: Frame, channel: Channel, conn: _socket.socket) -> Frame:
        STATE.count += 1
        count = STATE.count
        code = req.get("code", "")
        filename = "<cell-%d>" % count
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        self.max_result = int(req.get("max_result") or 4 * 1024 * 1024)
        self.result_index = 0
        STATE.deferred = False
        STATE.starting = True
        channel.frame(cell_frame(count))
        saved_env = self.apply_env(req.get("env") or {})
        error = None
        shown = None
        self.channel = channel
        self.router.channel = channel
        self.reset_streams()
        _signal.signal(_signal.SIGINT, on_sigint)
        watchdog = self.watchdog
        bundles = []
        started = time.monotonic()
        watchdog.arm(req.get("timeout"), conn)
        try:
            try:
                STATE.executing = True
                STATE.starting = False
                try:
                    interrupt_point()  # one that came after the cell frame, before this
                    try:
                        body, expr = self.compile_cell(code, filename)
                    except (SyntaxError, ValueError, OverflowError, RecursionError) as exc:
                        raise CellNotCompiled(exc) from None
                    self.run_code(body)
                    if expr is not None:
                        value = self.run_code(expr)
                        if value is not None:
                            self.ns["_"] = value
                            shown = value
                            # Formatting runs the value's own code, so it stays interruptible;
                            # sending waits until no cell code runs.
                            bundles.append((rich_bundle(value), True))
                except CellNotCompiled as exc:
                    error = describe_compile_error(exc.args[0])
                except BaseException as exc:
                    error = describe_error(exc)
                try:
                    self.collect_figures(shown, bundles)
                except BaseException as exc:
                    if error is None:
                        error = describe_error(exc)
                STATE.executing = False
            except KeyboardInterrupt as exc:
                # An interrupt that landed in the daemon's own bookkeeping above.
                STATE.executing = False
                if error is None:
                    error = describe_error(exc)
        finally:
            if os.getpid() != DAEMON_PID:
                # A child forked by the cell that ran on to here: it must never serve requests.
                os._exit(0)
            STATE.executing = False
            watchdog.disarm()
            # Now, before the daemon opens anything (the next connection) that could take a
            # descriptor the cell closed.
            self.capture.restore()
        elapsed = time.monotonic() - started
        for stream in (sys.__stdout__, sys.__stderr__):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass
        self.capture.drain()
        self.router.channel = None
        for bundle, main in bundles:
            self.send_result(bundle, main)
        self.channel = None
        self.restore_env(saved_env)
        if watchdog.timed_out:
            original = error
            error = {
                "name": "TimeoutError",
                "message": "the cell ran longer than its %g s timeout and was interrupted"
                % float(req.get("timeout") or 0),
                "traceback": original["traceback"] if original else "",
            }
        return {
            "t": "end",
            "kernel": KERNEL_ID,
            "n": count,
            "error": error,
            "timed_out": watchdog.timed_out,
            "client_gone": watchdog.client_gone,
            "dropped": [channel.dropped["stdout"], channel.dropped["stderr"]],
            "ms": round(elapsed * 1000, 3),
        }

    @staticmethod
    def apply_env(env: Dict[str, str]) -> Dict[str, Optional[str]]:
        saved = {}
        for key, value in env.items():
            saved[key] = os.environ.get(key)
            os.environ[key] = value
        return saved

    @staticmethod
    def restore_env(saved: Dict[str, Optional[str]]) -> None:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    # -- installing packages -------------------------------------------------------------------
    def install(self, req: Frame, channel: Channel) -> Frame:
        import importlib
        import site
        import subprocess

        channel.frame(cell_frame(STATE.count))
        packages = [str(p) for p in req.get("packages") or []]
        timeout: Optional[float] = req.get("timeout") or None
        self.router.channel = channel
        base = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
        base += [str(a) for a in req.get("pip_args") or []]
        started = time.monotonic()
        error = None
        timed_out = False
        tail = bytearray()
        attempts = [base + ["--"] + packages]
        while attempts:
            argv = attempts.pop(0)
            tail = bytearray()
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                error = {
                    "name": "PipError",
                    "message": "could not run pip: %s" % exc,
                    "traceback": "",
                }
                break
            deadline = None if timeout is None else time.monotonic() + timeout
            assert proc.stdout is not None
            fd = proc.stdout.fileno()
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    timed_out = True
                    try:
                        os.killpg(proc.pid, _signal.SIGKILL)
                    except OSError:
                        pass
                    break
                r, _, _ = select.select([fd], [], [], 0.5 if left is None else min(0.5, left))
                if r:
                    data = os.read(fd, 65536)
                    if not data:
                        break
                    tail += data
                    del tail[:-65536]
                    channel.output("stdout", data)
            proc.stdout.close()
            rc = proc.wait()
            if timed_out:
                error = {
                    "name": "TimeoutError",
                    "message": "pip did not finish within %g s and was stopped" % (timeout or 0),
                    "traceback": "",
                }
                break
            if rc == 0:
                error = None
                break
            text = tail.decode("utf-8", "replace")
            if "externally-managed-environment" in text and "--break-system-packages" not in argv:
                # A disposable sandbox: a distribution's "managed" marker must not block installs.
                attempts.append(base + ["--break-system-packages", "--"] + packages)
                channel.output("stdout", b"[lizard: retrying with --break-system-packages]\n")
                continue
            if "No module named pip" in text:
                message = "pip is not available for %s" % sys.executable
            else:
                lines = [line for line in text.strip().splitlines() if line.strip()]
                message = "pip exited with code %d: %s" % (rc, lines[-1] if lines else "no output")
            error = {"name": "PipError", "message": message, "traceback": text[-8000:]}
        self.router.channel = None
        # The user site may not have existed when the interpreter started.
        user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
        if user_site and os.path.isdir(user_site) and user_site not in sys.path:
            system = set(site.getsitepackages()) if hasattr(site, "getsitepackages") else set()
            positions = [i for i, p in enumerate(sys.path) if p in system]
            sys.path.insert(min(positions) if positions else len(sys.path), user_site)
        if user_site and os.path.isdir(user_site):
            site.addsitedir(user_site)  # runs .pth files; the path is already present
        importlib.invalidate_caches()
        return {
            "t": "end",
            "kernel": KERNEL_ID,
            "n": STATE.count,
            "error": error,
            "timed_out": timed_out,
            "client_gone": False,
            "dropped": [channel.dropped["stdout"], channel.dropped["stderr"]],
            "ms": round((time.monotonic() - started) * 1000, 3),
        }

    def ping(self, channel: Channel) -> Frame:
        channel.frame(cell_frame(STATE.count))
        return {
            "t": "end",
            "kernel": KERNEL_ID,
            "n": STATE.count,
            "error": None,
            "timed_out": False,
            "client_gone": False,
            "dropped": [0, 0],
            "ms": 0,
        }


def serve(kernel: Interpreter, listener: _socket.socket, log: DaemonLog, directory: str) -> None:
    busy = os.path.join(directory, "busy")
    while True:
        try:
            # socket.socket.accept, by hand: a blocking connection (accept4 with O_CLOEXEC only).
            fd, _ = listener._accept()  # type: ignore[attr-defined]  # unlisted in the stub
            conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, fd)
        except InterruptedError:
            continue
        except OSError as exc:
            log.write(("accept failed: %s\n" % exc).encode())
            return
        try:
            mark_busy(busy, conn)
            handle(kernel, conn, log)
        except BaseException as exc:  # one bad request never takes the namespace down
            log.write(("request failed: %r\n" % (exc,)).encode())
        finally:
            try:
                conn.close()
            except OSError:
                pass
            try:
                os.unlink(busy)
            except OSError:
                pass


def handle(kernel: Interpreter, conn: _socket.socket, log: DaemonLog) -> None:
    try:
        req = read_request(conn)
    except (ValueError, OSError) as exc:
        log.write(("bad request: %s\n" % exc).encode())
        return
    if req is None:
        return
    if client_gone(conn):
        # The client gave up while another cell held the kernel: do not run its request late.
        log.write(b"client left before its request started\n")
        return
    channel = Channel(
        conn, int(req.get("max_output") or 1024 * 1024), req.get("budget"), req.get("job")
    )
    final: Optional[Frame] = None
    try:
        op = req.get("op")
        if op == "execute":
            final = kernel.execute(req, channel, conn)
        elif op == "install":
            final = kernel.install(req, channel)
        else:
            final = kernel.ping(channel)
    except BaseException as exc:
        # A failure of the daemon itself, not of the cell: say what it was; the daemon lives on.
        import traceback

        text = traceback.format_exc()
        log.write(("request failed: %s\n" % text).encode())
        final = {
            "t": "end",
            "kernel": KERNEL_ID,
            "n": STATE.count,
            "error": {"name": "KernelError", "message": repr(exc), "traceback": text},
            "timed_out": False,
            "client_gone": False,
            "dropped": [channel.dropped["stdout"], channel.dropped["stderr"]],
            "ms": 0,
        }
    finally:
        STATE.executing = False
        kernel.router.channel = None
        kernel.channel = None
        assert final is not None
        if final.get("error"):
            for frame in error_frames(final["error"]):
                channel.frame(frame)
        channel.finish(final)


def main() -> None:
    directory = sys.argv[1]
    # The client's end of a pair it waits on (see ``kernel_client``): told once we listen. Taken
    # out of argv now, so cells see the arguments the daemon always had.
    ready = int(sys.argv.pop(3)) if len(sys.argv) > 3 else -1
    log = DaemonLog(os.dup(2))
    os.chdir(sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else os.getcwd())
    # Modules in the working directory import, as in IPython.
    sys.path[0] = ""
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    warnings.filterwarnings("ignore", message="FigureCanvasAgg is non-interactive")
    warnings.filterwarnings("ignore", message="Matplotlib is currently using agg")
    try:
        import faulthandler

        faulthandler.enable(file=log.fd, all_threads=False)
    except (ImportError, OSError, ValueError):
        pass
    router = Router(log)
    capture = FdCapture(router)
    kernel = Interpreter(router, capture, log)
    kernel.reset_streams()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=router.after_fork_in_child)
    _signal.signal(_signal.SIGINT, on_sigint)
    path = os.path.join(directory, "sock")
    listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    tmp = path + ".%d" % os.getpid()
    try:
        os.unlink(tmp)
    except OSError:
        pass
    old_umask = os.umask(0o177)
    dir_fd = None
    address = tmp
    if len(tmp.encode()) > 100:
        # A Unix socket address holds 108 bytes; the directory's descriptor gives the same
        # file a short name (the client connects the same way).
        dir_fd = os.open(directory, os.O_RDONLY)
        address = "/proc/self/fd/%d/%s" % (dir_fd, os.path.basename(tmp))
    try:
        listener.bind(address)
    finally:
        os.umask(old_umask)
        if dir_fd is not None:
            os.close(dir_fd)
    listener.listen(16)
    # Renamed into place only once listening, so a client that finds the path can connect.
    os.rename(tmp, path)
    if ready >= 0:
        try:
            os.write(ready, b"1")
        except OSError:
            pass  # the client gave up: it finds the socket on its next call
        os.close(ready)
    log.write(
        (
            "kernel %s listening, pid %d, python %s\n"
            % (KERNEL_ID, os.getpid(), sys.version.split()[0])
        ).encode()
    )
    serve(kernel, listener, log, directory)


if __name__ == "__main__":
    sys.modules["lizard_kernel_daemon"] = sys.modules[__name__]
    main()

"""Sessions beyond a run: restore against create + setup, pause + resume, fork of a warm executor.

These operations exist on this repository's side only (the 0.1.x packages have none of them),
so they are written against ``lizard_core`` itself, the layer every adapter's keep/pause/fork
goes through. Mixed into :class:`workload.Workload`; the same prepare / act / check / finish
split, every ``act`` checked after the clock stops.

- ``create_setup``: a new session, one setup step that writes what the snapshot holds (100
  files of 10 KiB, as a small installed package would be), and a first command.
- ``restore``: a new session from a snapshot holding those files, and the same first command.
  ``catalogue.WIN_TARGETS`` asks it to beat ``create_setup``.
- ``inspect_sample_setup`` / ``inspect_sample_snapshot``: the same through inspect-lizard, as
  Inspect's eval loop inits a sample: ``sample_init`` then the setup and the first command,
  against ``sample_init`` from the task's setup snapshot (made once by ``task_init``) and the
  first command.
- ``pause_resume``: pause a warm session, resume it, run a first command.
- ``fork_warm``: fork a session whose kernel holds state and run a first cell in the copy.
"""

from __future__ import annotations

import shlex
from typing import Any, Final

__all__ = ["LifecycleOps"]

SETUP: Final = (
    "import os\n"
    "os.makedirs('/opt/bench-app', exist_ok=True)\n"
    "for i in range(100):\n"
    "    with open(f'/opt/bench-app/module_{i:03d}.py', 'w') as f:\n"
    "        f.write('#' * 10240)\n"
)
FIRST_COMMAND: Final = ["sh", "-c", "ls /opt/bench-app | wc -l"]
LIFECYCLE_LIFETIME_MS: Final = 600_000


class LifecycleOps:
    """The lifecycle operations; state lives in the attributes set up on first use."""

    _lifecycle: dict[str, Any]

    def _lifecycle_state(self) -> dict[str, Any]:
        if not hasattr(self, "_lifecycle"):
            self._lifecycle = {}
        return self._lifecycle

    @staticmethod
    def _config() -> Any:
        from lizard_core import SandboxConfig

        return SandboxConfig.from_env(lifetime_ms=LIFECYCLE_LIFETIME_MS, integration="bench")

    @staticmethod
    def _check_files(result: object) -> None:
        from workload import WorkloadError

        stdout = getattr(result, "stdout", b"")
        if stdout.strip() != b"100":
            raise WorkloadError(f"the first command saw {stdout!r}, not 100 files")

    def _op_create_setup(self) -> Any:
        from workload import Prepared

        from lizard_core import Session, run_command

        made: list[Any] = []

        def act() -> object:
            session = Session(self._config())
            made.append(session)
            run_command(session, ["python3", "-c", SETUP])
            return run_command(session, FIRST_COMMAND)

        return Prepared(act, self._check_files, lambda: [s.destroy() for s in made] and None)

    def _op_restore(self) -> Any:
        from workload import Prepared

        from lizard_core import Session, run_command
        from lizard_core.snapshots import take_snapshot

        state = self._lifecycle_state()
        if "snapshot" not in state:
            with Session(self._config()) as source:
                run_command(source, ["python3", "-c", SETUP])
                state["snapshot"] = take_snapshot(source, "bench").snapshot_id
        made: list[Any] = []

        def act() -> object:
            session = Session(self._config(), snapshot_id=state["snapshot"])
            made.append(session)
            return run_command(session, FIRST_COMMAND)

        return Prepared(act, self._check_files, lambda: [s.destroy() for s in made] and None)

    @staticmethod
    def _inspect_config(setup: str | None) -> Any:
        from inspect_lizard import LizardSandboxConfig

        return LizardSandboxConfig(
            template="base", lifetime_ms=LIFECYCLE_LIFETIME_MS, keep_alive=False, setup=setup
        )

    def _inspect_sample(self, config: Any, setup: bool) -> Any:
        import anyio
        from inspect_ai.util import ExecResult
        from workload import Prepared, WorkloadError

        from inspect_lizard import LizardSandboxEnvironment as Env

        made: list[Any] = []

        async def init() -> ExecResult[str]:
            environments = await Env.sample_init("bench", config, {})
            made.append(environments)
            sandbox = environments["default"]
            if setup:
                await sandbox.exec(["python3", "-c", SETUP])
            return await sandbox.exec(FIRST_COMMAND)

        def check(result: object) -> None:
            if getattr(result, "stdout", "").strip() != "100":
                raise WorkloadError(f"the first command saw {result!r}, not 100 files")

        def finish() -> None:
            for environments in made:
                anyio.run(Env.sample_cleanup, "bench", config, environments, False)

        return Prepared(lambda: anyio.run(init), check, finish)

    def _op_inspect_sample_setup(self) -> Any:
        return self._inspect_sample(self._inspect_config(None), setup=True)

    def _op_inspect_sample_snapshot(self) -> Any:
        import anyio

        from inspect_lizard import LizardSandboxEnvironment as Env

        state = self._lifecycle_state()
        if "inspect_config" not in state:
            config = self._inspect_config(f"python3 -c {shlex.quote(SETUP)}")
            anyio.run(Env.task_init, "startup", config)  # the setup, once, snapshotted
            state["inspect_config"] = config
        return self._inspect_sample(state["inspect_config"], setup=False)

    def _op_pause_resume(self) -> Any:
        from workload import Prepared

        from lizard_core import Session, run_command

        state = self._lifecycle_state()
        if "warm" not in state:
            state["warm"] = Session(self._config())
            run_command(state["warm"], ["python3", "-c", SETUP])
        session = state["warm"]

        def act() -> object:
            session.pause()
            session.resume()
            return run_command(session, FIRST_COMMAND)

        return Prepared(act, self._check_files)

    def _op_fork_warm(self) -> Any:
        from workload import Prepared, WorkloadError

        from lizard_core import Kernel, Session
        from lizard_core.forks import fork_sessions

        state = self._lifecycle_state()
        if "executor" not in state:
            source = Session(self._config())
            kernel = Kernel(source)
            kernel.execute("import json, math; warm = [i * i for i in range(1000)]", timeout=60)
            state["executor"] = (source, kernel)
        source, _ = state["executor"]
        made: list[Any] = []

        def act() -> object:
            [copy] = fork_sessions(source)
            made.append(copy)
            return Kernel(copy).execute("1 + 1", timeout=60)

        def check(result: object) -> None:
            results = getattr(result, "results", ())
            if getattr(result, "error", None) is not None or not results or results[0].text != "2":
                raise WorkloadError(f"the forked executor's first cell failed: {result!r}")

        return Prepared(act, check, lambda: [s.destroy() for s in made] and None)

    def close_lifecycle(self) -> list[str]:
        """Destroy the warm sessions and the snapshot; the errors met, as text."""
        errors: list[str] = []
        state = self._lifecycle_state()
        sessions = [state.get("warm"), (state.get("executor") or (None,))[0]]
        for session in sessions:
            if session is None:
                continue
            try:
                session.destroy()
            except Exception as exc:  # keep closing the rest
                errors.append(f"lifecycle session destroy: {exc!r}")
        if "inspect_config" in state:
            try:
                import anyio

                from inspect_lizard import LizardSandboxEnvironment

                config = state["inspect_config"]
                anyio.run(LizardSandboxEnvironment.task_cleanup, "shutdown", config, True)
            except Exception as exc:
                errors.append(f"inspect setup snapshot delete: {exc!r}")
        if "snapshot" in state:
            try:
                from lizard_core.snapshots import delete_snapshots

                delete_snapshots(self._config(), [state["snapshot"]])
            except Exception as exc:
                errors.append(f"snapshot delete: {exc!r}")
        state.clear()
        return errors

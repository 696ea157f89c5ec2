"""The release dry run: build every package once, check the files, install them as users will.

Usage: ``python shared/release/release_check.py [X.Y.Z] [--dist DIR] [--strict] [--keep-envs]``
(``nox -s release_check -- X.Y.Z`` runs it, and the release workflow runs exactly that on a tag
``vX.Y.Z``, with ``--strict``). Without a version it uses the repository's ``VERSION``.

Passing proves, in this order (the first failure stops the run and names the package):

1. every package builds once, the sdist first and the wheel from that sdist, into DIST (emptied);
2. ``twine check --strict`` accepts every file;
3. every file is at X.Y.Z, and every adapter pins lizard-core ``==X.Y.Z`` (``check_dists``);
4. ``CHANGELOG.md`` has a dated section for X.Y.Z (the GitHub release notes are made from it);
5. in fresh virtual environments, with this repository's packages from DIST and only their
   third-party dependencies from the package index: each package installed alone brings the siblings
   it requires and nothing of the others (no other adapter, none of another adapter's own
   dependencies, no lizard-local); all four together resolve; every installed file is
   byte-identical to the built wheel's; each imports and passes its smoke step (``smoke.py``)
   against a lizard-local started from the built lizard-local, which must end with no sandbox left;
   uninstalling one adapter leaves the others installed and working.

The index stays on because lizard-sdk, smolagents and pydantic-ai are real dependencies; the proof
that our own packages came from DIST is the byte comparison in ``smoke.py``, which also holds when a
re-run after a half-failed release finds some of them already on PyPI.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

import changelog
from check_dists import check, wheel_metadata
from packages import EMULATOR, ROOT, adapters, package_dirs

SMOKE = Path(__file__).resolve().with_name("smoke.py")
SERVER_START_TIMEOUT_S = 120
STEP_TIMEOUT_S = 900


class ReleaseCheckError(Exception):
    """A release check failed; the message says which package and why."""


@dataclass(frozen=True)
class Built:
    """One built package: its wheel and the names it requires unconditionally."""

    name: str
    wheel: Path
    requires: frozenset[str]


def release_version(given: str | None) -> str:
    """The version to check: ``given`` (X.Y.Z, normalized PEP 440), else the ``VERSION`` file."""
    version = given if given is not None else (ROOT / "VERSION").read_text("utf-8").strip()
    if version.startswith("v"):
        raise ReleaseCheckError(f"give the version ({version[1:]}), not the tag ({version})")
    try:
        parsed = Version(version)
    except InvalidVersion:
        raise ReleaseCheckError(f"{version!r} is not a version (X.Y.Z)") from None
    if str(parsed) != version:
        raise ReleaseCheckError(f"{version!r} is not normalized; PyPI would call it {parsed}")
    return version


def verify_built(dist: Path, version: str) -> None:
    """Raise unless DIST holds exactly one release of every package at ``version``, pinned right."""
    problems = check(dist, version)
    if problems:
        raise ReleaseCheckError(
            f"the built files are not a release of {version}:\n  " + "\n  ".join(problems)
        )


def verify_changelog(path: Path, version: str) -> str:
    """Return ``version``'s release notes from the changelog at ``path``, or raise."""
    try:
        return changelog.release_notes(path.read_text("utf-8"), version)
    except (OSError, changelog.ChangelogError) as exc:
        raise ReleaseCheckError(str(exc)) from None


def unconditional_requirements(wheel: Path) -> frozenset[str]:
    """Canonical names a wheel requires with no marker (extras and platform deps left out)."""
    names = set()
    for raw in wheel_metadata(wheel).get_all("Requires-Dist") or []:
        requirement = Requirement(raw)
        if requirement.marker is None:
            names.add(canonicalize_name(requirement.name))
    return frozenset(names)


def closure(name: str, built: dict[str, Built]) -> set[str]:
    """``name`` and every sibling it requires, directly or through another sibling."""
    found, todo = set(), [name]
    while todo:
        current = todo.pop()
        if current not in found:
            found.add(current)
            todo.extend(built[current].requires & built.keys())
    return found


def forbidden_alone(name: str, built: dict[str, Built]) -> dict[str, str]:
    """What an environment holding only ``name`` (and what it pulled in) must not contain, and why.

    Siblings outside ``name``'s closure must be absent; so must each other adapter's own
    dependencies (its framework), i.e. those that nothing in the closure requires directly.
    """
    wanted = closure(name, built)
    forbidden = {sibling: "a package it does not need" for sibling in built.keys() - wanted}
    needed_by_closure = set().union(*(built[n].requires for n in wanted))
    for other in sorted({canonicalize_name(a) for a in adapters()} - wanted):
        for dep in built[other].requires - built.keys() - needed_by_closure:
            forbidden.setdefault(dep, f"only {other} needs it")
    return forbidden


def unexpected_in_alone(
    name: str,
    built: dict[str, Built],
    installed: set[str],
    required_by: Mapping[str, set[str]] | None = None,
) -> list[str]:
    """One line for each forbidden distribution that ``name`` alone brought in.

    ``required_by`` (name -> the installed distributions requiring it) clears a dependency that
    something allowed needs too: ``rich`` is smolagents-lizard's own, and inspect-ai's as well.
    """
    forbidden = forbidden_alone(name, built)
    return [
        f"{name} installed alone brought {dep} ({why})"
        for dep, why in sorted(forbidden.items())
        if dep in installed and not (required_by or {}).get(dep, set()) - forbidden.keys()
    ]


def run(
    command: Sequence[str | Path], *, cwd: Path | None = None, what: str, quiet: bool = False
) -> None:
    """Run a command; raise ``ReleaseCheckError`` naming ``what`` if it fails.

    Its output passes through, or with ``quiet`` is shown only when the command fails.
    """
    args = [str(arg) for arg in command]
    print("$ " + " ".join(args), flush=True)
    result = subprocess.run(
        args,
        cwd=cwd,
        check=False,
        timeout=STEP_TIMEOUT_S,
        stdout=subprocess.PIPE if quiet else None,
        stderr=subprocess.STDOUT if quiet else None,
        text=True,
    )
    if result.returncode != 0:
        if quiet:
            print(result.stdout, flush=True)
        raise ReleaseCheckError(f"{what} failed (exit {result.returncode})")


def clean_environment() -> dict[str, str]:
    """This process's environment without Lizard credentials or Python settings.

    The smoke steps must reach only the built lizard-local, never a cloud project named by the
    caller's ``LIZARD_*`` variables, and see only what is installed in their environment.
    """
    dropped = ("LIZARD_", "PYTHON", "VIRTUAL_ENV")
    return {key: value for key, value in os.environ.items() if not key.startswith(dropped)}


@contextlib.contextmanager
def watchdog(process: subprocess.Popen[str], seconds: float) -> Iterator[None]:
    """Kill ``process`` if the block has not finished after ``seconds``."""
    timer = threading.Timer(seconds, process.kill)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


@contextlib.contextmanager
def step(title: str, timings: list[tuple[str, float]]) -> Iterator[None]:
    """Print a step's title, and record how long it took."""
    print(f"\n== {title}", flush=True)
    start = time.monotonic()
    try:
        yield
    finally:
        timings.append((title, time.monotonic() - start))


class Environment:
    """A fresh virtual environment made with uv, holding only what the release check installs."""

    def __init__(self, root: Path, label: str, uv: str, dist: Path) -> None:
        self.label = label
        self.path = root / label
        self.python = self.path / "bin" / "python"
        self._uv = uv
        self._dist = dist
        self._cwd = root  # outside the repository, so no project configuration is discovered

    def create(self) -> None:
        """Create the environment with the interpreter running this check."""
        self._uv_run(
            "venv", "-q", "--python", sys.executable, self.path, what=f"{self.label}: venv"
        )

    def install(
        self, requirements: Sequence[str], own: Sequence[str], offline: bool = False
    ) -> None:
        """Install ``requirements``; ``own`` packages only as built wheels from DIST."""
        options: list[str | Path] = ["--find-links", self._dist]
        # uv caches wheels from --find-links by name and version: without a refresh it may install
        # an earlier build of the same version (smoke.py's byte comparison caught exactly that).
        for name in own:
            options += [f"--only-binary={name}", f"--refresh-package={name}"]
        if offline:
            options.append("--no-index")
        self._uv_run(
            "pip",
            "install",
            "-q",
            "--python",
            self.python,
            *options,
            *requirements,
            what=f"{self.label}: installing {' '.join(requirements)}",
        )

    def uninstall(self, name: str) -> None:
        """Uninstall one distribution (and nothing it depends on)."""
        self._uv_run(
            "pip", "uninstall", "-q", "--python", self.python, name, what=f"{self.label}: uninstall"
        )

    def installed(self) -> set[str]:
        """Canonical names of every distribution in the environment."""
        listing = subprocess.run(
            [self._uv, "--no-config", "pip", "list", "--format", "json", "--python", self.python],
            cwd=self._cwd,
            capture_output=True,
            text=True,
            check=True,
            timeout=STEP_TIMEOUT_S,
        )
        return {canonicalize_name(d["name"]) for d in json.loads(listing.stdout)}

    def required_by(self) -> dict[str, set[str]]:
        """Canonical name -> the installed distributions that require it (extras left out)."""
        script = (
            "import importlib.metadata as m, json; print(json.dumps("
            "[[d.metadata['Name'], d.requires or []] for d in m.distributions()]))"
        )
        listing = subprocess.run(
            [self.python, "-I", "-c", script],
            cwd=self._cwd,
            capture_output=True,
            text=True,
            check=True,
            timeout=STEP_TIMEOUT_S,
        )
        graph: dict[str, set[str]] = {}
        for dist, requires in json.loads(listing.stdout):
            for raw in requires:
                requirement = Requirement(raw)
                if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                    graph.setdefault(canonicalize_name(requirement.name), set()).add(
                        canonicalize_name(dist)
                    )
        return graph

    def _uv_run(self, *args: str | Path, what: str) -> None:
        run([self._uv, "--no-config", *args], cwd=self._cwd, what=what)


class SharedEmulator:
    """The built lizard-local, serving every smoke step (``smoke.py serve``)."""

    def __init__(self, environment: Environment) -> None:
        self._environment = environment
        self._process: subprocess.Popen[str] | None = None
        self.settings: dict[str, str] = {}
        self.not_landed: str | None = None

    def start(self) -> None:
        """Start the server and read its address and credentials (loopback only)."""
        process = subprocess.Popen(
            [self._environment.python, "-I", SMOKE, "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=self._environment.path,
            env=clean_environment(),
        )
        self._process = process
        assert process.stdout is not None
        answer: dict[str, str] = {}
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while not answer:
            ready, _, _ = select.select([process.stdout], [], [], deadline - time.monotonic())
            line = process.stdout.readline() if ready else ""
            if not line:
                self.stop()
                raise ReleaseCheckError(f"{EMULATOR}: the built LocalServer did not start")
            with contextlib.suppress(ValueError):
                answer = json.loads(line) if line.startswith("{") else {}
            if not answer:
                print(line, end="", file=sys.stderr)  # not the protocol line: pass it on
        if "not_landed" in answer:
            self.not_landed = answer["not_landed"]
            process.wait(timeout=60)
            self._process = None
            return
        self.settings = {
            "LIZARD_API_URL": answer["url"],
            "LIZARD_API_KEY": answer["api_key"],
            "LIZARD_PROJECT_ID": answer["project_id"],
        }
        print(f"{EMULATOR} (built) serving at {answer['url']}", flush=True)

    def stop(self) -> dict[str, object]:
        """Stop the server; raise if a smoke step left a sandbox behind."""
        process, self._process = self._process, None
        if process is None:
            return {}
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.close()
        with watchdog(process, 120):
            rest = process.stdout.read()
            code = process.wait()
        if code < 0:
            raise ReleaseCheckError(f"{EMULATOR}: the built LocalServer did not stop in 120 s")
        lines = [line for line in rest.splitlines() if line.strip()]
        summary: dict[str, object] = json.loads(lines[-1]) if lines else {}
        if code != 0:
            leftover = summary.get("leftover")
            raise ReleaseCheckError(
                f"{EMULATOR}: server exited {code}; sandboxes left by the smoke steps: {leftover}"
            )
        return summary


class ReleaseCheck:
    """Every check of the module docstring, for one version and one dist folder."""

    def __init__(self, version: str, dist: Path, strict: bool, keep_envs: bool) -> None:
        self.version = version
        self.dist = dist
        self.strict = strict
        self.keep_envs = keep_envs
        self.timings: list[tuple[str, float]] = []
        self.skipped: set[str] = set()
        self.built: dict[str, Built] = {}
        self.names = {canonicalize_name(n): n for n in package_dirs()}
        self._emulator: SharedEmulator | None = None

    def run(self) -> None:
        """Run the whole check; raise ``ReleaseCheckError`` at the first failure."""
        uv = shutil.which("uv")
        if uv is None:
            raise ReleaseCheckError("uv is required on PATH (python -m pip install uv)")
        with step("build: sdist, then the wheel from the sdist", self.timings):
            self.build()
        with step("twine check --strict", self.timings):
            files = sorted(self.dist.iterdir())
            run([sys.executable, "-m", "twine", "check", "--strict", *files], what="twine check")
        with step(f"versions and pins at {self.version}", self.timings):
            verify_built(self.dist, self.version)
            print(f"ok: {len(self.names)} packages at {self.version}, siblings pinned exactly")
        with step(f"CHANGELOG.md section for {self.version}", self.timings):
            notes = verify_changelog(ROOT / "CHANGELOG.md", self.version)
            print(f"ok: {len(notes.splitlines())} lines of release notes")
        self.built = {
            name: Built(name, wheel, unconditional_requirements(wheel))
            for name in self.names
            for wheel in self.dist.glob(f"{name.replace('-', '_')}-{self.version}-*.whl")
        }
        root = Path(tempfile.mkdtemp(prefix="release-check-"))
        try:
            self.install_and_smoke(root, uv)
        finally:
            if self._emulator is not None:
                self._emulator.stop()
            if self.keep_envs:
                print(f"environments kept in {root}")
            else:
                shutil.rmtree(root, ignore_errors=True)

    def build(self) -> None:
        """Empty DIST and build each package into it once (``python -m build``: sdist, wheel)."""
        shutil.rmtree(self.dist, ignore_errors=True)
        self.dist.mkdir(parents=True)
        for name, folder in package_dirs().items():
            run(
                [sys.executable, "-m", "build", "--installer", "uv", "-o", self.dist, folder],
                what=f"building {name}",
                quiet=True,
            )
        for path in sorted(self.dist.iterdir()):
            print(f"built {path.name}")

    def install_and_smoke(self, root: Path, uv: str) -> None:
        """Each package alone, then all together, then each adapter uninstalled in turn."""
        own = sorted(self.names)
        pin = {name: f"{name}=={self.version}" for name in self.names}
        emulator_first = sorted(self.names, key=lambda n: (n != canonicalize_name(EMULATOR), n))
        for name in emulator_first:
            with step(f"{self.names[name]} alone in a fresh environment", self.timings):
                environment = Environment(root, f"alone-{name}", uv, self.dist)
                environment.create()
                environment.install([pin[name]], own)
                installed = environment.installed()
                wanted = closure(name, self.built)
                problems = [f"{name} installed alone lacks {m}" for m in sorted(wanted - installed)]
                problems += unexpected_in_alone(
                    name, self.built, installed, environment.required_by()
                )
                if problems:
                    raise ReleaseCheckError("\n  ".join(problems))
                brought = ", ".join(sorted(wanted - {name})) or "no sibling"
                forbidden = set(forbidden_alone(name, self.built))
                absent = ", ".join(sorted(forbidden - installed))
                shared = ", ".join(sorted(forbidden & installed))  # cleared by required_by
                also = f"; {shared} only as required by what it needs" if shared else ""
                print(f"ok: brings {brought}; none of {absent}{also}")
                if name == canonicalize_name(EMULATOR):
                    self._emulator = SharedEmulator(environment)
                    self._emulator.start()
                self.smoke(environment, sorted(wanted))
        with step("all packages together in a fresh environment", self.timings):
            together = Environment(root, "together", uv, self.dist)
            together.create()
            together.install([pin[n] for n in own], own)
            self.smoke(together, own)
        for adapter in sorted(canonicalize_name(a) for a in adapters()):
            with step(f"together, with {self.names[adapter]} uninstalled", self.timings):
                together.uninstall(adapter)
                installed = together.installed()
                rest = [n for n in own if n != adapter]
                if adapter in installed or set(rest) - installed:
                    raise ReleaseCheckError(
                        f"uninstalling {adapter} left {sorted(installed & set(own))} installed"
                    )
                self.smoke(together, rest)
                together.install([pin[adapter]], own, offline=True)
        if self._emulator is not None:
            emulator, self._emulator = self._emulator, None
            if emulator.not_landed:
                self.skipped.add(f"the shared lizard-local: {emulator.not_landed}")
                if self.strict:
                    raise ReleaseCheckError(f"{EMULATOR}: {emulator.not_landed}")
            summary = emulator.stop()
            if summary:
                print(f"\nok: {EMULATOR} served {summary.get('requests')} requests; none left")

    def smoke(self, environment: Environment, names: Sequence[str]) -> None:
        """Run ``smoke.py check`` for ``names`` with the environment's interpreter, isolated."""
        env = clean_environment()
        if self._emulator is not None:
            env.update(self._emulator.settings)
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost,::1"
        command = [environment.python, "-I", SMOKE, "check", "--dist", self.dist]
        command += ["--version", self.version, *(["--strict"] if self.strict else []), *names]
        print("$ " + " ".join(str(arg) for arg in command), flush=True)
        process = subprocess.Popen(
            [str(arg) for arg in command],
            cwd=environment.path,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        with watchdog(process, STEP_TIMEOUT_S):
            for line in process.stdout:
                print(f"  {line}", end="", flush=True)
                if line.startswith("skip: "):
                    self.skipped.add(line.removeprefix("skip: ").strip())
            code = process.wait()
        if code != 0:
            raise ReleaseCheckError(f"{environment.label}: smoke test failed (see the lines above)")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", nargs="?", help="X.Y.Z (default: the VERSION file)")
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    parser.add_argument("--strict", action="store_true", help="a skipped smoke step fails")
    parser.add_argument("--keep-envs", action="store_true", help="keep the virtual environments")
    args = parser.parse_args(argv)
    start = time.monotonic()
    version = args.version or "?"
    try:
        version = release_version(args.version)
        release = ReleaseCheck(version, args.dist.resolve(), args.strict, args.keep_envs)
        try:
            release.run()
        finally:
            print("\n== timings")
            for title, seconds in release.timings:
                print(f"{seconds:7.1f} s  {title}")
    except ReleaseCheckError as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        print(f"release check FAILED for {version} after {time.monotonic() - start:.0f} s")
        return 1
    for reason in sorted(release.skipped):
        print(f"skipped: {reason}")
    print(f"release check passed for {version} in {time.monotonic() - start:.0f} s", end="")
    print(f" ({len(release.skipped)} smoke uses skipped)" if release.skipped else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Every check a person or CI runs on this repository.

`nox -l` lists the sessions. `nox -t offline` runs the whole offline matrix (lint, typecheck, every
package's tests at both dependency bounds on each installed Python 3.11-3.13, the workspace tests,
the build and the workflow check); `nox -t offline -p 3.11` is the subset CI runs on every change.
Packages are discovered from `packages/*/pyproject.toml`, so a new adapter joins every session
without an edit here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
PYTHONS = ["3.11", "3.12", "3.13"]
DEFAULT_PYTHON = "3.11"
BOUNDS = ["lowest", "latest"]
# The suites wait on sandboxes far more than they compute (a lizard-core run takes about 2.5 times
# its CPU time), so more pytest-xdist workers than cores pays off; each worker starts its own
# lizard-local. Tests are dealt out one by one (`--dist load`), not a module per worker: the
# longest module set the pace (smolagents-lizard 163 s -> 115 s, lizard-core 217 s -> 173 s on
# one loaded machine), and a module-scoped sandbox is simply made once per worker that needs it.
# LIZARD_TEST_WORKERS=0 runs a suite in one process.
WORKERS = os.environ.get("LIZARD_TEST_WORKERS", "4")

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv"
nox.options.sessions = []  # `nox` alone lists nothing to run; name sessions or tags explicitly.
# A missing interpreter is skipped locally (nox turns this into an error when CI is set).
nox.options.error_on_missing_interpreters = False
# uv must find the interpreters already on the machine, never download one.
os.environ.setdefault("UV_PYTHON_DOWNLOADS", "never")


def _expose_pyenv_versions() -> None:
    """Let `python3.12`-style shims resolve when pyenv holds several versions but selects one.

    pyenv's shims run only the versions named in PYENV_VERSION (which `pyenv exec` sets to the
    selected one when nox itself runs through a shim), so every installed version is appended.
    """
    if shutil.which("pyenv") is None:
        return
    bare = subprocess.run(
        ["pyenv", "versions", "--bare"], capture_output=True, text=True, check=False
    )
    installed = [v for v in bare.stdout.split() if v[:1].isdigit() and "/" not in v]
    selected = [v for v in os.environ.get("PYENV_VERSION", "").split(":") if v]
    others = [v for v in installed if v not in selected]
    if others:
        os.environ["PYENV_VERSION"] = ":".join(selected + others)


_expose_pyenv_versions()


sys.path.insert(0, str(ROOT / "shared" / "release"))
from packages import package_dirs  # noqa: E402  (the one list of packages: shared/release)


def _packages() -> dict[str, dict[str, object]]:
    """Distribution name -> its `[tool.lizard-integrations]` table (test and demo extras)."""
    found: dict[str, dict[str, object]] = {}
    for name, folder in package_dirs().items():
        data = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
        found[name] = data.get("tool", {}).get("lizard-integrations", {})
    return found


PACKAGES = _packages()


def _group(name: str) -> list[str]:
    return list(nox.project.dependency_groups(PYPROJECT, name))


def _path(package: str) -> str:
    return f"packages/{package}"


def _parallel() -> list[str]:
    """pytest-xdist's arguments for :data:`WORKERS` (none for 0: one process)."""
    return [] if WORKERS == "0" else ["-n", WORKERS, "--dist", "load"]


def _install_package(session: nox.Session, package: str, bound: str = "latest") -> None:
    """Install a package with lizard-core and lizard-local (the test fixture) from this checkout.

    `lowest` resolves the declared direct dependencies to their lowest allowed versions (uv's
    lowest-direct), so every range in a pyproject is exercised at both ends.
    """
    options = PACKAGES[package]
    # `test-extras-<bound>` overrides `test-extras` at that bound (pydantic-ai-lizard drops the
    # harness at `latest`, since each harness release pins an older pydantic-ai-slim exactly).
    extras = options.get(f"test-extras-{bound}", options.get("test-extras", []))
    assert isinstance(extras, list)
    target = _path(package) + (f"[{','.join(extras)}]" if extras else "")
    # lizard-local's `interpreter` extra gives sandboxes the data stack (numpy, pillow, Jupyter).
    local = {"lizard-core": "", "lizard-local": "[interpreter]"}
    args = [a for dep, x in local.items() if dep != package for a in ("-e", _path(dep) + x)]
    args += ["-e", target]
    if bound == "lowest":
        session.install("--resolution=lowest-direct", *args)
    else:
        session.install(*args)


@nox.session(python=DEFAULT_PYTHON, tags=["offline"])
def lint(session: nox.Session) -> None:
    """Ruff lint and format check over the whole repository."""
    session.install(*_group("lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=DEFAULT_PYTHON, tags=["offline"])
@nox.parametrize("package", list(PACKAGES))
def typecheck(session: nox.Session, package: str) -> None:
    """Mypy --strict over one package's sources (`packages/<name>/src`); tests are not checked.

    The test group is installed because the sources import pytest (lizard-local's plugin)."""
    _install_package(session, package)
    session.install(*_group("typecheck"), *_group("test"))
    session.run("mypy", "--strict", f"{_path(package)}/src")


@nox.session(python=PYTHONS, tags=["offline"])
@nox.parametrize("bound", BOUNDS)
@nox.parametrize("package", list(PACKAGES))
def tests(session: nox.Session, package: str, bound: str) -> None:
    """One package's offline tests at one dependency bound (sockets limited to loopback)."""
    session.install(*_group("test"))
    _install_package(session, package, bound)
    session.run(
        "pytest",
        f"{_path(package)}/tests",
        "-m",
        "not live",
        *_parallel(),
        *session.posargs,
        env={"LIZARD_LIVE_TESTS": "0"},
    )


@nox.session(python=DEFAULT_PYTHON, tags=["offline"])
def tests_sdk_0_1(session: nox.Session) -> None:
    """lizard-local's tests driven by lizard-sdk 0.1.82, the SDK the 0.1.0 adapters pinned."""
    session.install(*_group("test"))
    session.install("-e", "packages/lizard-local[interpreter]", "lizard-sdk==0.1.82")
    # The adapter contract tests need lizard_core, which needs lizard-sdk 1.0.
    session.run(
        "pytest",
        "packages/lizard-local/tests",
        "--ignore=packages/lizard-local/tests/test_contract.py",
        *_parallel(),
        *session.posargs,
    )


@nox.session(python=DEFAULT_PYTHON, tags=["offline"])
def workspace(session: nox.Session) -> None:
    """Cross-package tests: lockstep versions, packaging, the adapter kit, and the python blocks
    of README.md, packages/*/README.md and docs/*.md (tests/test_docs_snippets.py says how they
    are marked to run against lizard-local or be skipped)."""
    # matplotlib: tests/test_bench.py draws the benchmark chart of a tiny run.
    session.install(*_group("test"), "build", "hatchling>=1.27", "matplotlib")
    # One install: a package that sorts before lizard-core needs it from this checkout.
    session.install(*[arg for package in PACKAGES for arg in ("-e", _path(package))])
    session.run("pytest", "tests", *_parallel(), *session.posargs)


@nox.session(python=DEFAULT_PYTHON)
@nox.parametrize("package", list(PACKAGES))
def live(session: nox.Session, package: str) -> None:
    """One package's tests against the Lizard cloud (LIZARD_LIVE_TESTS=1 and credentials)."""
    missing = [name for name in ("LIZARD_API_KEY", "LIZARD_PROJECT_ID") if not os.environ.get(name)]
    if os.environ.get("LIZARD_LIVE_TESTS") != "1" or missing:
        session.error(
            "Live tests create real sandboxes in your Lizard project. Set LIZARD_LIVE_TESTS=1, "
            "LIZARD_API_KEY and LIZARD_PROJECT_ID (LIZARD_API_URL is optional); missing: "
            + ", ".join(missing or ["LIZARD_LIVE_TESTS=1"])
        )
    session.install(*_group("test"))
    _install_package(session, package)
    session.run("pytest", f"{_path(package)}/tests", "-m", "live", "--force-enable-socket")


@nox.session(python=DEFAULT_PYTHON, tags=["offline"])
def build(session: nox.Session) -> None:
    """Build every package's sdist, then its wheel from that sdist, into dist/, and check them."""
    session.install("build", "twine")
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    for package in PACKAGES:
        # python -m build makes the sdist first and builds the wheel from it, which proves sdists
        # are self-contained.
        session.run("python", "-m", "build", "--installer", "uv", "-o", str(dist), _path(package))
    session.run("twine", "check", "--strict", *sorted(str(p) for p in dist.iterdir()))
    session.run("python", "shared/release/check_dists.py", str(dist), silent=False)


@nox.session(python=DEFAULT_PYTHON)
def release_check(session: nox.Session) -> None:
    """The release dry run (`-- X.Y.Z`, default VERSION): build once, check, install each package
    alone and all together from dist/, smoke-test against the built lizard-local. The release
    workflow runs this on a tag; see shared/release/release_check.py."""
    session.install("build", "twine", "packaging")
    session.run("python", "shared/release/release_check.py", *session.posargs)


@nox.session(python=DEFAULT_PYTHON)
def demo(session: nox.Session) -> None:
    """Run every adapter's example: against lizard-local with scripted models, or the cloud when
    LIZARD_API_KEY is set."""
    examples = sorted(ROOT.glob("packages/*/examples/*.py"))
    editable = []
    for package in PACKAGES:
        extras = PACKAGES[package].get("demo-extras", [])
        assert isinstance(extras, list)
        editable += ["-e", _path(package) + (f"[{','.join(extras)}]" if extras else "")]
    # One install: a package that sorts before lizard-core needs it from this checkout.
    session.install(*editable)
    if not examples:
        session.log("No adapter examples yet: nothing to demo.")
        return
    for example in examples:
        session.log(f"== {example.relative_to(ROOT)}")
        session.run("python", str(example))


@nox.session(python=DEFAULT_PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks against the 0.1.0 packages on lizard-local; writes docs/performance.md.

    This session's environment holds this repository's packages (and lizard-local, which serves
    both sides); a second one next to it, `bench-0-1-0`, holds smolagents-lizard 0.1.0,
    pydantic-ai-lizard 0.1.0, inspect-lizard 0.1.0, lizard-adk 0.1.1 and langchain-lizard 0.1.0
    from PyPI with the lizard-sdk 0.1.x they pin, and the same smolagents, pydantic-ai-slim,
    inspect-ai, google-adk and deepagents versions. Arguments after `--` go to shared/bench/run.py:
    `--quick`, `--settings 0,20,20+40`, `--reps N`, `--ops a,b`, `--output FILE`.
    """
    uv = shutil.which("uv") or session.error("uv is required: python -m pip install uv")
    ours = [arg for package in PACKAGES for arg in ("-e", _path(package))]
    # lizard-local's `interpreter` template runs on this environment's site-packages: ipykernel
    # and jupyter_client keep 0.1.0's CodeSandbox state in a kernel, and pip, numpy and pillow let
    # 0.1.0's executor run the `pip install` of final_answer's requirements it runs in the cloud.
    session.install(
        *ours, "ipykernel", "jupyter_client", "pip", "numpy", "pillow", "certifi", "matplotlib"
    )
    frameworks_used = ("smolagents", "pydantic-ai-slim", "inspect-ai", "google-adk", "deepagents")
    pins = "from importlib.metadata import version as v; " + "; ".join(
        f"print('{name}==' + v('{name}'))" for name in frameworks_used
    )
    frameworks = session.run("python", "-c", pins, silent=True)
    assert isinstance(frameworks, str)
    reference = Path(session.virtualenv.location).parent / "bench-0-1-0"
    reference_python = str(reference / "bin" / "python")
    session.run(
        uv, "venv", "-q", "--allow-existing", "-p", DEFAULT_PYTHON, str(reference), external=True
    )
    session.run(
        uv,
        "pip",
        "install",
        "-q",
        "-p",
        reference_python,
        "smolagents-lizard==0.1.0",
        "pydantic-ai-lizard==0.1.0",
        "inspect-lizard==0.1.0",
        "lizard-adk==0.1.1",
        "langchain-lizard==0.1.0",
        *frameworks.split(),
        external=True,
    )
    session.run("python", "shared/bench/run.py", "--ref-python", reference_python, *session.posargs)


@nox.session(python=DEFAULT_PYTHON, tags=["offline"])
def workflows(session: nox.Session) -> None:
    """Validate the GitHub workflows offline: the vendored schema, then zizmor's offline audits."""
    session.install("check-jsonschema", "zizmor")
    files = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    session.run("check-jsonschema", "--builtin-schema", "vendor.github-workflows", *files)
    session.run("zizmor", "--offline", "--min-severity", "medium", *files)


@nox.session(python=False)
def dev(session: nox.Session) -> None:
    """Create .venv with every package installed editable and all development tools."""
    uv = shutil.which("uv") or session.error("uv is required: python -m pip install uv")
    venv = ROOT / ".venv"
    session.run(uv, "venv", "--allow-existing", "-p", DEFAULT_PYTHON, str(venv), external=True)
    python = str(venv / "bin" / "python")
    editable = []
    for package in PACKAGES:
        extras = PACKAGES[package].get("test-extras", [])
        assert isinstance(extras, list)
        editable += ["-e", _path(package) + (f"[{','.join(extras)}]" if extras else "")]
    tools = _group("test") + _group("lint") + _group("typecheck") + ["build", "twine", "nox"]
    session.run(uv, "pip", "install", "-p", python, *editable, *tools, external=True)
    session.log(f"Ready: source {venv.relative_to(ROOT)}/bin/activate")


@nox.session(python=False)
def new_adapter(session: nox.Session) -> None:
    """Create packages/<framework>-lizard from the adapter template: `-- <framework>`
    (`-- adk --dist lizard-adk` for a distribution named otherwise)."""
    script = ROOT / "shared" / "new_adapter.py"
    session.run(sys.executable, str(script), *session.posargs, external=True)


if __name__ == "__main__":  # pragma: no cover - `python noxfile.py` is not how to run it
    sys.exit("Run sessions with nox, e.g. `nox -l`.")

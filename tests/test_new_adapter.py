"""The adapter kit proves itself: the generator's rules, then a generated adapter end to end.

The end-to-end test copies this checkout (committed files plus the working tree's untracked,
unignored ones) to a temporary folder, generates an adapter for a throwaway framework there,
and runs, in that copy, what CI would run for it: `nox -l` lists its sessions, the release list
names it, its test session (a fresh uv virtual environment with lizard-core and lizard-local, as
for every package) passes with the shared contract tests among them, its typecheck session
passes, ruff finds nothing, and its example runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from packages import ROOT

FRAMEWORK = "kit-check"
DIST = "kit-check-lizard"
MODULE = "kit_check_lizard"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("new_adapter", ROOT / "shared" / "new_adapter.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["new_adapter"] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


# ── names ────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("framework", "dist", "module"),
    [
        ("crewai", "crewai-lizard", "crewai_lizard"),
        ("llama-index", "llama-index-lizard", "llama_index_lizard"),
        ("ag2", "ag2-lizard", "ag2_lizard"),
    ],
)
def test_a_framework_name_gives_the_distribution_and_import_names(
    framework: str, dist: str, module: str
) -> None:
    names = gen.check_names(framework)
    assert (names.dist, names.module, names.title) == (dist, module, framework)


@pytest.mark.parametrize(
    ("framework", "message"),
    [
        ("", "give the framework's name"),
        ("CrewAI", "did you mean 'crewai'"),
        ("llama_index", "did you mean 'llama-index'"),
        ("2fast", "not a valid framework name"),
        ("foo--bar", "not a valid framework name"),
        ("-foo", "not a valid framework name"),
        ("foo-", "not a valid framework name"),
        ("foo/bar", "not a valid framework name"),
        ("a" * 26, "longer than 25"),
        ("crewai-lizard", "name the framework only"),
        ("lizardly", "name the framework only"),
    ],
)
def test_bad_names_are_refused_with_a_reason(framework: str, message: str) -> None:
    with pytest.raises(gen.AdapterError, match=message):
        gen.check_names(framework)


@pytest.mark.parametrize("title", ["", "x" * 31, "Crew\nAI", "`rm -rf`"])
def test_bad_titles_are_refused(title: str) -> None:
    with pytest.raises(gen.AdapterError, match="title"):
        gen.check_names("crewai", title)


@pytest.mark.parametrize(
    ("dist", "module", "expected"),
    [
        ("lizard-adk", None, ("lizard-adk", "lizard_adk")),
        ("lizard-adk", "lizard_google_adk", ("lizard-adk", "lizard_google_adk")),
        ("google-adk-lizard", None, ("google-adk-lizard", "google_adk_lizard")),
    ],
)
def test_dist_and_module_replace_the_default_names(
    dist: str, module: str | None, expected: tuple[str, str]
) -> None:
    names = gen.check_names("adk", "ADK", dist=dist, module=module)
    assert (names.dist, names.module, names.framework, names.title) == (*expected, "adk", "ADK")


@pytest.mark.parametrize(
    ("dist", "module", "message"),
    [
        ("Lizard-ADK", None, "--dist 'Lizard-ADK' must be lowercase"),
        ("lizard_adk", None, "--dist 'lizard_adk' must be lowercase"),
        ("lizard--adk", None, "must be lowercase"),
        ("adk-tools", None, "must name Lizard as a word"),
        ("lizardly-adk", None, "must name Lizard as a word"),
        ("lizard-" + "a" * 26, None, "longer than 32"),
        ("lizard-adk", "lizard-adk", "--module 'lizard-adk' must be lowercase"),
        ("lizard-adk", "adk_tools", "--module 'adk_tools' must name Lizard"),
        ("lizard-adk", "lizard_adk.sub", "must be lowercase"),
        (None, "lizard_adk", "--module needs --dist"),
    ],
)
def test_bad_dist_or_module_names_are_refused_with_a_reason(
    dist: str | None, module: str | None, message: str
) -> None:
    with pytest.raises(gen.AdapterError, match=re.escape(message)):
        gen.check_names("adk", dist=dist, module=module)


def test_the_command_line_refuses_a_bad_name_with_exit_status_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert gen.main(["Bad_Name", "--root", str(tmp_path)]) == 2
    assert "error: 'Bad_Name' is not a valid framework name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# ── import sorting and the ruff registration ─────────────────────────────────


@pytest.mark.parametrize("module", ["crewai_lizard", "zeta_lizard", "lizzy_lizard"])
def test_first_party_imports_are_sorted_around_the_new_package(module: str) -> None:
    text = (
        "import pytest\n\n"
        f"from {module} import A\n"
        "from lizard_local.contract import B\n"
        "from lizard_core import errors\n"
        f"from {module}._errors import C\n"
        "\nX = 1\n"
    )
    sorted_text = gen.sort_first_party_imports(text, {"lizard_core", "lizard_local", module})
    block = [line for line in sorted_text.splitlines() if line.startswith("from ")]
    assert block == sorted(block, key=lambda line: line.split()[1])
    assert sorted_text.startswith("import pytest\n\n")
    assert sorted_text.endswith("\nX = 1\n")


# ── generating into a minimal repository ─────────────────────────────────────


@pytest.fixture
def scratch_root(tmp_path: Path) -> Path:
    """Just enough of a repository for the generator: packages/, LICENSE, pyproject.toml."""
    (tmp_path / "packages" / "lizard-core").mkdir(parents=True)
    (tmp_path / "packages" / "lizard-core" / "pyproject.toml").write_text(
        '[project]\nname = "lizard-core"\n'
    )
    shutil.copyfile(ROOT / "LICENSE", tmp_path / "LICENSE")
    shutil.copyfile(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_generation_writes_the_package_and_its_docs_page(scratch_root: Path) -> None:
    gen.generate(scratch_root, gen.check_names("zeta-flow", "Zeta Flow"))
    package = scratch_root / "packages" / "zeta-flow-lizard"
    assert os.readlink(package / "VERSION") == "../../VERSION"
    assert os.readlink(package / "lockstep.py") == "../../shared/build/lockstep.py"
    assert (package / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()
    assert (package / "src" / "zeta_flow_lizard" / "py.typed").is_file()
    pyproject = (package / "pyproject.toml").read_text()
    assert 'name = "zeta-flow-lizard"' in pyproject
    assert '"lizard-core=={version}"' in pyproject
    assert "Zeta Flow" in (scratch_root / "docs" / "zeta-flow-lizard.md").read_text()
    # ruff's `src` covers packages/*/src: the root pyproject needs no edit
    assert (scratch_root / "pyproject.toml").read_bytes() == (ROOT / "pyproject.toml").read_bytes()
    for path in package.rglob("*"):
        if path.is_file() and not path.is_symlink():
            text = path.read_text()
            assert not gen._PLACEHOLDER.search(text), path
    assert not [p for p in (scratch_root / "packages").iterdir() if p.name.startswith(".")]


def test_an_existing_package_or_docs_page_is_never_overwritten(scratch_root: Path) -> None:
    names = gen.check_names("zeta")
    gen.generate(scratch_root, names)
    readme = scratch_root / "packages" / "zeta-lizard" / "README.md"
    readme.write_text("mine")
    with pytest.raises(gen.AdapterError, match="exists already"):
        gen.generate(scratch_root, names)
    assert readme.read_text() == "mine"

    (scratch_root / "docs" / "omega-lizard.md").write_text("mine")
    with pytest.raises(gen.AdapterError, match=r"docs/omega-lizard\.md exists already"):
        gen.generate(scratch_root, gen.check_names("omega"))
    assert not (scratch_root / "packages" / "omega-lizard").exists()
    assert not [p for p in (scratch_root / "packages").iterdir() if p.name.startswith(".")]


def test_generation_with_dist_writes_the_package_under_that_name(scratch_root: Path) -> None:
    written = gen.main(
        ["adk", "--title", "ADK", "--dist", "lizard-adk", "--root", str(scratch_root)]
    )
    assert written == 0
    package = scratch_root / "packages" / "lizard-adk"
    assert (package / "src" / "lizard_adk" / "py.typed").is_file()
    assert 'name = "lizard-adk"' in (package / "pyproject.toml").read_text()
    assert "from lizard_adk import LizardTool" in (package / "README.md").read_text()
    assert 'package_version("lizard-adk")' in (package / "src/lizard_adk/_tool.py").read_text()
    assert (scratch_root / "docs" / "lizard-adk.md").is_file()
    assert not (scratch_root / "packages" / "adk-lizard").exists()


def test_a_module_name_an_existing_package_imports_as_is_refused(scratch_root: Path) -> None:
    (scratch_root / "packages" / "lizard-core" / "src" / "lizard_core").mkdir(parents=True)
    names = gen.check_names("core2", dist="lizard-core2", module="lizard_core")
    with pytest.raises(gen.AdapterError, match="imports as 'lizard_core' already"):
        gen.generate(scratch_root, names)
    assert not (scratch_root / "packages" / "lizard-core2").exists()


def test_the_longest_dist_keeps_python_lines_within_ruffs_limit(scratch_root: Path) -> None:
    dist = "lizard-" + "d" * (gen.MAX_DIST - len("lizard-"))
    names = gen.check_names("a" * gen.MAX_NAME, "T" * gen.MAX_TITLE, dist=dist)
    gen.generate(scratch_root, names)
    for path in (scratch_root / "packages" / dist).rglob("*.py"):
        if not path.is_symlink():
            assert all(len(line) <= 100 for line in path.read_text().splitlines()), path


def test_the_longest_names_keep_python_lines_within_ruffs_limit(scratch_root: Path) -> None:
    names = gen.check_names("a" * gen.MAX_NAME, "T" * gen.MAX_TITLE)
    gen.generate(scratch_root, names)
    for path in (scratch_root / "packages" / names.dist).rglob("*.py"):
        if path.is_symlink():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            assert len(line) <= 100, f"{path.name}:{number} is {len(line)} characters"


# ── the whole path, in a copy of this checkout ───────────────────────────────


def _copy_checkout(destination: Path) -> None:
    """Copy the committed files and the untracked, unignored ones (symlinks as symlinks)."""
    try:
        listing = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"needs a git checkout: {error}")
    for raw in listing.split(b"\0"):
        if not raw:
            continue
        relative = os.fsdecode(raw)
        source, target = ROOT / relative, destination / relative
        if not source.is_symlink() and not source.exists():
            continue  # deleted in the working tree
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)


def _clean_environment() -> dict[str, str]:
    """This process's environment without what would leak into the copy's runs."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("LIZARD_", "PYTEST_", "NOX_"))
        and name not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "SSL_CERT_FILE"}
    }
    # Leave out the environment this test runs in, so that nox and uv pick a base interpreter.
    venv_bin = str(Path(sys.prefix) / "bin")
    if sys.prefix != sys.base_prefix:
        env["PATH"] = os.pathsep.join(
            p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin
        )
    env["UV_PYTHON_DOWNLOADS"] = "never"
    return env


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 900) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{output[-6000:]}"
    return output


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """(copy of the checkout with the adapter generated, nox executable, environment)."""
    uv = shutil.which("uv")
    if uv is None:
        if os.environ.get("CI"):
            pytest.fail("uv is required (python -m pip install uv)")
        pytest.skip("needs uv on PATH")
    base = tmp_path_factory.mktemp("kit")
    copy = base / "repo"
    _copy_checkout(copy)
    env = _clean_environment()
    _run([sys.executable, "shared/new_adapter.py", FRAMEWORK, "--title", "Kit Check"], copy, env)
    tools = base / "tools"
    _run([uv, "venv", "-q", "-p", sys.executable, str(tools)], base, env)
    python = str(tools / "bin" / "python")
    _run([uv, "pip", "install", "-q", "-p", python, "nox", "ruff"], base, env)
    env["PATH"] = os.pathsep.join([str(tools / "bin"), env.get("PATH", "")])
    yield copy, tools / "bin" / "nox", env
    shutil.rmtree(base, ignore_errors=True)  # a copy, a few virtual environments: ~150 MB


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_nox_the_ci_matrix_and_the_release_list_include_the_new_package(
    kit: tuple[Path, Path, dict[str, str]],
) -> None:
    copy, nox, env = kit
    listed = _run([str(nox), "-l"], copy, env)
    for session in (
        f"typecheck(package='{DIST}')",
        f"tests-{PYTHON}(package='{DIST}', bound='lowest')",
        f"tests-{PYTHON}(package='{DIST}', bound='latest')",
        f"live(package='{DIST}')",
    ):
        assert session in listed, f"`nox -l` does not list {session}:\n{listed}"
    release = _run([sys.executable, "shared/release/packages.py"], copy, env)
    assert DIST in json.loads(release)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_generated_package_passes_its_tests_and_the_contract(
    kit: tuple[Path, Path, dict[str, str]],
) -> None:
    copy, nox, env = kit
    report = copy / "kit-report.xml"
    session = f"tests-{PYTHON}(package='{DIST}', bound='latest')"
    _run(
        [str(nox), "-s", session, "--", f"--junitxml={report}", "-p", "no:cacheprovider"], copy, env
    )
    suite = ElementTree.parse(report).getroot()
    cases = suite.findall(".//testcase")
    failed = [
        f"{case.get('classname')}.{case.get('name')}"
        for case in cases
        if case.find("failure") is not None or case.find("error") is not None
    ]
    assert not failed, failed
    passed_contract = [
        case.get("name")
        for case in cases
        if (case.get("classname") or "").endswith("test_contract.TestLizardToolContract")
        and case.find("skipped") is None
    ]
    assert len(passed_contract) >= 9, f"contract tests that ran and passed: {passed_contract}"
    assert any((case.get("classname") or "").endswith("test_tool") for case in cases)

    example = next((copy / ".nox").glob("tests*kit-check-lizard*latest*/bin/python"))
    shown = _run([str(example), f"packages/{DIST}/examples/run_command.py"], copy, env, 300)
    assert "exit code 0" in shown
    assert "Linux" in shown


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_generated_package_is_lint_and_type_clean(
    kit: tuple[Path, Path, dict[str, str]],
) -> None:
    copy, nox, env = kit
    ruff = str(nox.parent / "ruff")
    _run([ruff, "check", f"packages/{DIST}"], copy, env)
    _run([ruff, "format", "--check", f"packages/{DIST}"], copy, env)
    _run([str(nox), "-s", f"typecheck(package='{DIST}')"], copy, env)

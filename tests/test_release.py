"""The release scripts' logic, fast: synthetic dist folders and changelogs, no build, no network.

The whole dry run (build, install into fresh environments, smoke test) is `nox -s release_check`.
"""

from __future__ import annotations

import json
import re
import sys
import tarfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

import pytest

import changelog
import smoke
from packages import ROOT, adapters, package_dirs
from release_check import (
    Built,
    ReleaseCheckError,
    clean_environment,
    closure,
    forbidden_alone,
    release_version,
    unconditional_requirements,
    unexpected_in_alone,
    verify_built,
    verify_changelog,
)

VERSION = (ROOT / "VERSION").read_text(encoding="utf-8").strip()
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"

# What the four packages require today, with the hook's {version} placeholder.
REQUIRES = {
    "lizard-core": ["lizard-sdk>=1.0.23,<2", "anyio>=4.4,<5"],
    "langchain-lizard": [
        "lizard-core=={version}",
        "deepagents>=0.6,<0.8",
        "langchain-tests>=1.1.9,<1.2; extra == 'test'",
    ],
    "lizard-local": ["starlette>=0.40", "uvicorn>=0.30", "anyio>=4.4,<5"],
    "pydantic-ai-lizard": [
        "lizard-core=={version}",
        "pydantic-ai-slim>=2.57,<3",
        "pydantic-ai-harness>=0.57; extra == 'harness'",
    ],
    "smolagents-lizard": ["lizard-core=={version}", "smolagents>=1.26,<1.27"],
    "inspect-lizard": ["lizard-core=={version}", "inspect-ai>=0.3.280,<0.4"],
    "lizard-adk": ["lizard-core=={version}", "google-adk>=2.12,<3"],
    "strands-lizard": ["lizard-core=={version}", "strands-agents>=1.44,<2"],
    "openai-agents-lizard": ["lizard-core=={version}", "openai-agents>=0.19,<0.25"],
}


def metadata(name: str, version: str, requires: Iterable[str]) -> str:
    lines = ["Metadata-Version: 2.4", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    return "\n".join(lines) + "\n"


def write_dists(
    folder: Path, name: str, version: str, requires: Iterable[str] | None = None
) -> Path:
    """Write a minimal wheel and sdist of ``name``; return the wheel."""
    requires = list(REQUIRES[name] if requires is None else requires)
    meta = metadata(name, version, [r.format(version=version) for r in requires])
    stem = name.replace("-", "_")
    wheel = folder / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{stem}/__init__.py", '"""Built."""\n')
        archive.writestr(f"{stem}-{version}.dist-info/METADATA", meta)
    pkg_info = folder / "PKG-INFO"
    pkg_info.write_text(meta, encoding="utf-8")
    with tarfile.open(folder / f"{stem}-{version}.tar.gz", "w:gz") as archive:
        archive.add(pkg_info, arcname=f"{stem}-{version}/PKG-INFO")
    pkg_info.unlink()
    return wheel


@pytest.fixture
def release(tmp_path: Path) -> Path:
    """A dist folder holding a consistent release of every package at 0.2.0."""
    for name in package_dirs():
        write_dists(tmp_path, name, "0.2.0")
    return tmp_path


# Versions and pins of the built files.


def test_a_consistent_release_passes(release: Path) -> None:
    verify_built(release, "0.2.0")


def test_a_mismatched_version_names_every_package(release: Path) -> None:
    with pytest.raises(ReleaseCheckError) as failure:
        verify_built(release, "0.2.1")
    for name in package_dirs():
        assert f"{name}: wheel version 0.2.0 != 0.2.1" in str(failure.value)
        assert f"{name}: sdist version 0.2.0 != 0.2.1" in str(failure.value)


def test_one_package_at_another_version_is_the_one_named(release: Path) -> None:
    for stale in release.glob("smolagents_lizard-*"):
        stale.unlink()
    write_dists(release, "smolagents-lizard", "0.1.9")
    with pytest.raises(ReleaseCheckError) as failure:
        verify_built(release, "0.2.0")
    problems = str(failure.value).splitlines()[1:]
    assert problems
    assert all(line.strip().startswith("smolagents-lizard: ") for line in problems)


def test_an_adapter_pinning_the_core_loosely_is_named(release: Path) -> None:
    write_dists(release, "pydantic-ai-lizard", "0.2.0", ["lizard-core>=0.2.0"])
    with pytest.raises(
        ReleaseCheckError, match=r"pydantic-ai-lizard: wheel requires lizard-core>="
    ):
        verify_built(release, "0.2.0")


def test_an_adapter_without_the_core_is_named(release: Path) -> None:
    write_dists(release, "smolagents-lizard", "0.2.0", ["smolagents>=1.26,<1.27"])
    with pytest.raises(
        ReleaseCheckError, match="smolagents-lizard: wheel does not require lizard-core"
    ):
        verify_built(release, "0.2.0")


def test_a_package_requiring_the_emulator_is_named(release: Path) -> None:
    write_dists(release, "lizard-core", "0.2.0", ["lizard-local==0.2.0"])
    with pytest.raises(ReleaseCheckError, match="lizard-core: wheel requires lizard-local"):
        verify_built(release, "0.2.0")


def test_a_missing_sdist_is_named(release: Path) -> None:
    (release / "lizard_local-0.2.0.tar.gz").unlink()
    with pytest.raises(ReleaseCheckError, match="lizard-local: no sdist"):
        verify_built(release, "0.2.0")


# The version argument.


def test_without_an_argument_the_version_file_is_used() -> None:
    assert release_version(None) == VERSION


@pytest.mark.parametrize(
    ("given", "reason"),
    [("v0.2.0", "not the tag"), ("banana", "not a version"), ("0.02.0", "not normalized")],
)
def test_a_bad_version_argument_is_refused(given: str, reason: str) -> None:
    with pytest.raises(ReleaseCheckError, match=reason):
        release_version(given)


# What a package installed alone may bring.


def built_release(folder: Path) -> dict[str, Built]:
    found = {}
    for name in package_dirs():
        wheel = write_dists(folder, name, "0.2.0")
        found[name] = Built(name, wheel, unconditional_requirements(wheel))
    return found


def test_extras_are_not_unconditional_requirements(tmp_path: Path) -> None:
    built = built_release(tmp_path)
    assert built["pydantic-ai-lizard"].requires == {"lizard-core", "pydantic-ai-slim"}


def test_an_adapter_alone_needs_exactly_the_core(tmp_path: Path) -> None:
    built = built_release(tmp_path)
    for adapter in adapters():
        assert closure(adapter, built) == {adapter, "lizard-core"}
    assert closure("lizard-local", built) == {"lizard-local"}


def test_an_adapter_alone_with_its_own_dependencies_only_is_clean(tmp_path: Path) -> None:
    built = built_release(tmp_path)
    installed = {"smolagents-lizard", "lizard-core", "smolagents", "lizard-sdk", "anyio", "rich"}
    assert unexpected_in_alone("smolagents-lizard", built, installed) == []


def test_another_adapter_framework_or_the_emulator_is_named(tmp_path: Path) -> None:
    built = built_release(tmp_path)
    installed = {
        "smolagents-lizard",
        "lizard-core",
        "smolagents",
        "pydantic-ai-slim",
        "lizard-local",
    }
    assert unexpected_in_alone("smolagents-lizard", built, installed) == [
        "smolagents-lizard installed alone brought lizard-local (a package it does not need)",
        "smolagents-lizard installed alone brought pydantic-ai-slim "
        "(only pydantic-ai-lizard needs it)",
    ]


def test_what_an_adapter_alone_must_not_bring(tmp_path: Path) -> None:
    built = built_release(tmp_path)
    assert set(forbidden_alone("pydantic-ai-lizard", built)) == {
        "lizard-local",
        "smolagents-lizard",
        "smolagents",
        "inspect-lizard",
        "inspect-ai",
        "lizard-adk",
        "google-adk",
        "langchain-lizard",
        "deepagents",
        "strands-lizard",
        "strands-agents",
        "openai-agents-lizard",
        "openai-agents",
    }
    assert set(forbidden_alone("lizard-core", built)) == {
        "lizard-local",
        "pydantic-ai-lizard",
        "smolagents-lizard",
        "lizard-adk",
        "pydantic-ai-slim",
        "smolagents",
        "inspect-lizard",
        "inspect-ai",
        "google-adk",
        "langchain-lizard",
        "deepagents",
        "strands-lizard",
        "strands-agents",
        "openai-agents-lizard",
        "openai-agents",
    }


def test_a_dependency_shared_with_the_core_is_not_blamed_on_another_adapter(
    tmp_path: Path,
) -> None:
    built = built_release(tmp_path)
    built["pydantic-ai-lizard"] = Built(
        "pydantic-ai-lizard",
        built["pydantic-ai-lizard"].wheel,
        frozenset({"lizard-core", "pydantic-ai-slim", "anyio"}),
    )
    installed = {"smolagents-lizard", "lizard-core", "smolagents", "anyio"}
    assert unexpected_in_alone("smolagents-lizard", built, installed) == []


def test_a_dependency_an_allowed_package_also_needs_is_not_blamed(tmp_path: Path) -> None:
    # rich is smolagents-lizard's own requirement, and inspect-ai's too.
    built = built_release(tmp_path)
    built["smolagents-lizard"] = Built(
        "smolagents-lizard",
        built["smolagents-lizard"].wheel,
        frozenset({"lizard-core", "smolagents", "rich"}),
    )
    installed = {"inspect-lizard", "lizard-core", "inspect-ai", "rich"}
    assert unexpected_in_alone("inspect-lizard", built, installed, {"rich": {"inspect-ai"}}) == []
    assert unexpected_in_alone("inspect-lizard", built, installed, {}) == [
        "inspect-lizard installed alone brought rich (only smolagents-lizard needs it)"
    ]
    # A forbidden package's own needs explain nothing.
    with_smolagents = installed | {"smolagents"}
    needs = {"rich": {"smolagents"}}
    assert unexpected_in_alone("inspect-lizard", built, with_smolagents, needs) == [
        "inspect-lizard installed alone brought rich (only smolagents-lizard needs it)",
        "inspect-lizard installed alone brought smolagents (only smolagents-lizard needs it)",
    ]


# The changelog and the release notes.

CHANGELOG = """# Changelog

## [Unreleased]

## [1.1.0] - 2026-01-02

### Added

- A feature described on
  two lines.

```
keep
  this
```

## [1.0.0] - 2025-12-01

- First.

[Unreleased]: https://example.invalid/compare/v1.1.0...HEAD
[1.1.0]: https://example.invalid/releases/tag/v1.1.0
"""


def test_a_section_runs_to_the_next_version_heading() -> None:
    notes = changelog.section(CHANGELOG, "1.1.0")
    assert notes.startswith("### Added")
    assert "First." not in notes
    assert notes.endswith("```")


def test_link_definitions_are_left_out_of_the_last_section() -> None:
    notes = changelog.section(CHANGELOG, "1.0.0")
    assert notes == "- First."


def test_release_notes_join_wrapped_lines_and_keep_blocks() -> None:
    notes = changelog.release_notes(CHANGELOG, "1.1.0")
    assert "- A feature described on two lines." in notes.splitlines()
    assert "```\nkeep\n  this\n```" in notes
    assert "### Added\n\n- A feature" in notes


@pytest.mark.parametrize(
    ("text", "version", "reason"),
    [
        (CHANGELOG, "1.2.0", "no '## \\[1.2.0\\] - YYYY-MM-DD' section"),
        (CHANGELOG, "Unreleased", "has no date"),
        ("## [1.0.0] - 1st of May\n\n- x\n", "1.0.0", "is not YYYY-MM-DD"),
        ("## [1.0.0] - 2025-01-01\n\n## [0.9.0] - 2024-01-01\n- x\n", "1.0.0", "is empty"),
        ("## [1.0.0] - 2025-01-01\n- x\n## [1.0.0] - 2025-01-02\n- y\n", "1.0.0", "2 sections"),
    ],
)
def test_a_missing_or_unusable_section_is_refused(text: str, version: str, reason: str) -> None:
    with pytest.raises(changelog.ChangelogError, match=reason):
        changelog.section(text, version)


def test_the_changelog_has_notes_for_the_current_version() -> None:
    notes = verify_changelog(ROOT / "CHANGELOG.md", VERSION)
    assert "lizard-core" in notes
    assert "## [Unreleased]" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def test_the_changelog_cli_prints_the_notes_and_fails_without_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert changelog.main([VERSION]) == 0
    assert "lizard-core" in capsys.readouterr().out
    assert changelog.main(["0.0.0"]) == 1
    assert "no '## [0.0.0]" in capsys.readouterr().err


# smoke.py: proving that what is installed is what was built.


def fake_install(site: Path, name: str, version: str, body: str = '"""Built."""\n') -> Path:
    """Lay out an installed distribution in ``site`` as an installer would; return its module."""
    stem = name.replace("-", "_")
    (site / stem).mkdir(parents=True)
    module = site / stem / "__init__.py"
    module.write_text(body, encoding="utf-8")
    info = site / f"{stem}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(metadata(name, version, []), encoding="utf-8")
    return module


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path, Path]:
    """A distribution 'release-smoke-probe' built into dist/ and installed into a site folder."""
    name = f"release-smoke-probe-{tmp_path.name.replace('_', '-').lower()}"
    dist, site = tmp_path / "dist", tmp_path / "site"
    dist.mkdir()
    stem = name.replace("-", "_")
    with zipfile.ZipFile(dist / f"{stem}-1.0-py3-none-any.whl", "w") as archive:
        archive.writestr(f"{stem}/__init__.py", '"""Built."""\n')
        archive.writestr(f"{stem}-1.0.dist-info/METADATA", metadata(name, "1.0", []))
    module = fake_install(site, name, "1.0")
    monkeypatch.syspath_prepend(str(site))
    return name, dist, module


def test_an_installed_copy_of_the_built_wheel_is_accepted(
    installed: tuple[str, Path, Path],
) -> None:
    name, dist, _ = installed
    assert smoke.verify_installed(name, "1.0", dist) == (1, [name.replace("-", "_")])


def test_an_installed_file_that_differs_from_the_wheel_is_refused(
    installed: tuple[str, Path, Path],
) -> None:
    name, dist, module = installed
    module.write_text('"""From somewhere else."""\n', encoding="utf-8")
    with pytest.raises(smoke.SmokeFailure, match="differs from the built wheel"):
        smoke.verify_installed(name, "1.0", dist)


def test_a_built_file_that_was_not_installed_is_refused(installed: tuple[str, Path, Path]) -> None:
    name, dist, module = installed
    module.unlink()
    with pytest.raises(smoke.SmokeFailure, match="is in the wheel but not installed"):
        smoke.verify_installed(name, "1.0", dist)


def test_another_installed_version_is_refused(installed: tuple[str, Path, Path]) -> None:
    name, dist, _ = installed
    with pytest.raises(smoke.SmokeFailure, match=r"installed version 1\.0, expected 1\.1"):
        smoke.verify_installed(name, "1.1", dist)


def test_an_editable_install_is_refused(installed: tuple[str, Path, Path]) -> None:
    name, dist, module = installed
    info = next(module.parents[1].glob("*.dist-info"))
    direct_url = {"url": "file:///src", "dir_info": {"editable": True}}
    (info / "direct_url.json").write_text(json.dumps(direct_url), encoding="utf-8")
    with pytest.raises(smoke.SmokeFailure, match="installed editable"):
        smoke.verify_installed(name, "1.0", dist)


def test_a_public_name_not_yet_written_is_not_landed() -> None:
    with pytest.raises(smoke.NotLanded, match="does not exist yet"):
        smoke.public("release_smoke_no_such_module")
    with pytest.raises(smoke.NotLanded, match="has no NoSuchName yet"):
        smoke.public("json", "dumps", "NoSuchName")
    assert smoke.public("json", "dumps") == [json.dumps]


def test_a_module_that_fails_to_import_is_a_failure_not_a_skip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "release_smoke_broken.py").write_text(
        "import release_smoke_missing_dependency\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "release_smoke_broken", raising=False)
    with pytest.raises(ModuleNotFoundError, match="release_smoke_missing_dependency"):
        smoke.public("release_smoke_broken", "anything")


def test_every_package_has_a_smoke_use() -> None:
    assert set(package_dirs()) <= set(smoke.USES)


# The workflow: what the offline validators do not check.

USES = re.compile(r"uses:\s*(?P<action>[\w.-]+/[\w./-]+)@(?P<ref>\S+)(?:\s*#\s*(?P<comment>.*))?")


def test_every_action_is_pinned_by_commit_with_its_version_named() -> None:
    uses = list(USES.finditer(WORKFLOW.read_text(encoding="utf-8")))
    assert uses
    for use in uses:
        assert re.fullmatch(r"[0-9a-f]{40}", use["ref"]), use.group(0)
        assert use["comment"], use.group(0)
        assert use["comment"].startswith("v"), use.group(0)


def test_the_publish_action_accepts_metadata_2_5_and_skips_existing_files() -> None:
    text = WORKFLOW.read_text(encoding="utf-8")
    publish = [u for u in USES.finditer(text) if u["action"] == "pypa/gh-action-pypi-publish"]
    assert publish
    for use in publish:
        major, minor, *_ = (int(part) for part in use["comment"].removeprefix("v").split("."))
        assert (major, minor) >= (1, 13), "Metadata-Version 2.5 needs gh-action-pypi-publish 1.13+"
    assert text.count("skip-existing: true") == len(publish)


def test_checkouts_keep_no_credentials_and_the_build_runs_the_release_check() -> None:
    text = WORKFLOW.read_text(encoding="utf-8")
    assert text.count("actions/checkout@") == text.count("persist-credentials: false")
    assert 'nox -s release_check -- "${TAG#v}" --strict' in text
    assert "permissions: {}" in text


def test_smoke_steps_never_see_the_callers_lizard_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LIZARD_API_KEY", "lz_cloud_key")
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    monkeypatch.setenv("RELEASE_CHECK_PROBE", "kept")
    env = clean_environment()
    assert "LIZARD_API_KEY" not in env
    assert "PYTHONPATH" not in env
    assert env["RELEASE_CHECK_PROBE"] == "kept"

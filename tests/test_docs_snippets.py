"""The Python code blocks of the READMEs and docs/ run as written, offline, against lizard-local.

Every ```` ```python ```` block in ``README.md``, ``packages/*/README.md`` and ``docs/*.md`` has a
marker: an HTML comment on the line just before its opening fence (GitHub and PyPI do not show it).

- ``<!-- snippet: run -->``: the block runs as a script in a fresh interpreter, with the
  ``LIZARD_*`` variables pointing at the test run's lizard-local; it must exit 0 and leave no
  sandbox alive.
- ``<!-- snippet: pytest -->``: the block is a test module; pytest runs it in a fresh interpreter
  (lizard-local's plugin gives it its own server and fixtures) and every test in it must pass.
- ``<!-- snippet: skip: <reason> -->``: the block is not run; the reason (a model provider's key,
  the cloud, a fragment of a larger file) is the skip's message.

A block without a marker fails here, so every snippet is either proven or says why it cannot be.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from lizard_local import LocalServer

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *ROOT.glob("packages/*/README.md"), *ROOT.glob("docs/*.md")])
MARKER = re.compile(r"<!--\s*snippet:\s*(run|pytest|skip)\s*(?::\s*(.*?))?\s*-->")
FENCE = re.compile(r"^(`{3,}|~{3,})(.*)$")
# Generous: a snippet may start a server or a sandbox on a loaded 2-core machine.
SNIPPET_TIMEOUT_S = 240


@dataclass(frozen=True)
class Snippet:
    """One fenced Python block and the marker before it (``None`` when it has none)."""

    path: Path
    line: int  # of the opening fence, 1-based
    code: str
    mode: str | None
    reason: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _snippets(path: Path) -> list[Snippet]:
    found: list[Snippet] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i].strip())
        if opening is None:
            i += 1
            continue
        fence, info = opening.group(1), opening.group(2).strip()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        if info.split()[:1] == ["python"]:
            before = lines[i - 1].strip() if i > 0 else ""
            marker = MARKER.fullmatch(before)
            found.append(
                Snippet(
                    path=path,
                    line=i + 1,
                    code="\n".join(lines[i + 1 : end]) + "\n",
                    mode=marker.group(1) if marker else None,
                    reason=(marker.group(2) or "") if marker else "",
                )
            )
        i = end + 1
    return found


SNIPPETS = [snippet for path in DOCS for snippet in _snippets(path)]


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a snippet's process in ``cwd``, its output kept, within the snippet time limit."""
    return subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=SNIPPET_TIMEOUT_S,
        check=False,
    )


def _output(result: subprocess.CompletedProcess[str]) -> str:
    out, err = result.stdout, result.stderr
    return f"exit code {result.returncode}\n--- stdout\n{out}\n--- stderr\n{err}"


def test_the_docs_have_runnable_snippets() -> None:
    """The collection itself works: it finds the blocks that are known to be runnable."""
    names = {s.name.split(":")[0] for s in SNIPPETS if s.mode in ("run", "pytest")}
    assert "packages/lizard-core/README.md" in names
    assert "packages/lizard-local/README.md" in names


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: s.name)
def test_snippet(
    snippet: Snippet, lizard_local: LocalServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if snippet.mode is None:
        pytest.fail(
            f"{snippet.name}: a python block needs a marker on the line before its fence: "
            "<!-- snippet: run -->, <!-- snippet: pytest --> or <!-- snippet: skip: <reason> -->"
        )
    if snippet.mode == "skip":
        assert snippet.reason, f"{snippet.name}: a skip marker must give its reason"
        pytest.skip(snippet.reason)
    env = {**os.environ, **lizard_local.env, "LIZARD_LIVE_TESTS": "0"}
    if snippet.mode == "run":
        script = tmp_path / "snippet.py"
        script.write_text(snippet.code, encoding="utf-8")
        before = set(lizard_local.sandboxes())
        result = _run([sys.executable, str(script)], tmp_path, env)
        assert result.returncode == 0, _output(result)
        assert set(lizard_local.sandboxes()) == before, "the snippet left a sandbox alive"
        return
    module = tmp_path / "test_snippet.py"
    module.write_text(snippet.code, encoding="utf-8")
    isolation = request.config.getoption("--lizard-local-isolation")
    pytest_argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    isolation_flag = f"--lizard-local-isolation={isolation}"
    result = _run(
        [*pytest_argv, isolation_flag, "--rootdir", str(tmp_path), str(module)], tmp_path, env
    )
    assert result.returncode == 0, _output(result)
    summary = result.stdout.strip().splitlines()[-1]
    assert re.match(r"\d+ passed", summary), _output(result)
    assert "skipped" not in summary, _output(result)

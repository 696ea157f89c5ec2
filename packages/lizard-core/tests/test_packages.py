"""lizard_core.packages: names become safe pip requirements, checked in one cell.

The naming rules are plain functions, tested on the host; the check runs against lizard-local.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.kernel import Kernel
from lizard_core.packages import (
    PackageCheck,
    _check_code,
    _parse_missing,
    amissing_requirements,
    missing_requirements,
    module_name,
    requirements,
)
from lizard_core.session import Session

EXEC = "POST /api/sandboxes/{id}/exec"
ABSENT = "lizard-surely-absent-pkg"
BAD = ["--index-url=https://evil", "-e .", "pkg; rm -rf /", "a b", "git+https://x/y.git"]


# ── names ────────────────────────────────────────────────────────────────


def test_module_names_become_distributions() -> None:
    names = ["PIL", "numpy.linalg", "*", "os", "json", "sklearn", "emoji==2.15.0", "numpy"]
    assert requirements(names) == ["pillow", "numpy", "scikit-learn", "emoji==2.15.0"]


def test_smolagents_wildcard_imports_are_accepted() -> None:
    # smolagents' own form for "this package and its submodules".
    assert requirements(["numpy.*", "PIL.*", "os.*", "pandas"]) == ["numpy", "pillow", "pandas"]
    with pytest.raises(ValueError, match="not a package name"):
        requirements(["numpy.*.linalg"])


def test_requirements_are_kept_and_stable() -> None:
    names = [" yaml ", "bs4", "dateutil", "cv2", "requests[socks]", "Pillow", "pkg>=1,<2", ""]
    reqs = requirements(names)
    assert reqs == [
        "pyyaml",
        "beautifulsoup4",
        "python-dateutil",
        "opencv-python",
        "requests[socks]",
        "Pillow",
        "pkg>=1,<2",
    ]
    assert requirements(reqs) == reqs


@pytest.mark.parametrize("bad", BAD)
def test_pip_options_and_urls_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a package name"):
        requirements([bad])


def test_non_strings_are_refused() -> None:
    with pytest.raises(TypeError):
        requirements([3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="not a str"):
        requirements("numpy")  # would be n, u, m, p, y


def test_module_name_only_for_bare_names() -> None:
    assert module_name("pillow") == "PIL"
    assert module_name("PyYAML") == "yaml"
    assert module_name("typing-extensions") == "typing_extensions"
    assert module_name("emoji==2.15.0") is None
    assert module_name("requests[socks]") is None


def test_check_cell_reports_what_is_missing_here() -> None:
    reqs = ["pillow", "surely-not-installed-pkg", "emoji==2.15.0"]
    value = eval(_check_code(reqs))  # the cell is one expression; run it on the host
    assert value == ["surely-not-installed-pkg", "emoji==2.15.0"]
    assert _parse_missing(repr(value), reqs) == value


def test_unreadable_check_result_means_install_everything() -> None:
    assert _parse_missing("Traceback ...", ["a", "b"]) == ["a", "b"]
    assert _parse_missing("['c']", ["a", "b"]) == ["a", "b"]
    assert _parse_missing("", ["a", "b"]) == ["a", "b"]
    assert _parse_missing("{'a': 1}", ["a", "b"]) == ["a", "b"]


# ── the check, in a sandbox ──────────────────────────────────────────────


@pytest.fixture
def kernel(module_session: Session) -> Iterator[Kernel]:
    kernel = Kernel(module_session, name=f"p{uuid.uuid4().hex[:10]}")
    try:
        yield kernel
    finally:
        kernel.close()


def test_nothing_is_requested_for_bad_arguments(
    sandbox_config: SandboxConfig, api_requests: Any
) -> None:
    session = Session(sandbox_config)
    kernel = Kernel(session)
    for bad in BAD:
        with pytest.raises(ValueError, match="not a pip requirement"):
            missing_requirements(kernel, ["numpy", bad])
    with pytest.raises(ValueError, match="not a pip requirement"):
        missing_requirements(kernel, ["numpy\n"])
    with pytest.raises(TypeError):
        missing_requirements(kernel, "numpy")
    with pytest.raises(TypeError):
        missing_requirements(kernel, [b"numpy"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="Kernel"):
        missing_requirements(session, ["numpy"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        missing_requirements(kernel, ["numpy"], timeout=0)
    with pytest.raises(ValueError, match="not a pip requirement"):
        asyncio.run(amissing_requirements(kernel, ["-e ."]))
    assert missing_requirements(kernel, []) == PackageCheck(())
    assert asyncio.run(amissing_requirements(kernel, [])) == PackageCheck(())
    assert api_requests.counts() == {}
    assert session.sandbox_id is None


def test_the_check_is_one_request(kernel: Kernel, api_requests: Any) -> None:
    kernel.execute("x = 21", timeout=30)
    api_requests.reset()
    reqs = ["json", ABSENT, "emoji==2.15.0", "requests[socks]"]
    check = missing_requirements(kernel, reqs)
    assert check == PackageCheck((ABSENT, "emoji==2.15.0", "requests[socks]"))
    assert not check.state_lost
    assert check.notice is None
    assert api_requests.counts() == {EXEC: 1}
    # The namespace is untouched: no names leak from the check.
    result = kernel.execute("(x, 'req' in dir(), 'mod' in dir())", timeout=30)
    assert result.text == "(21, False, False)"


def test_the_check_sees_the_running_kernels_modules(kernel: Kernel) -> None:
    # A module that appears in the running kernel (here on a new sys.path entry) counts as
    # installed, and a distribution is looked up by its module's name (pyyaml -> yaml).
    root = f"/tmp/lizard-core-test-{uuid.uuid4().hex[:12]}"
    code = (
        "import os, sys\n"
        f"os.makedirs({root!r} + '/yaml', exist_ok=True)\n"
        f"open({root!r} + '/yaml/__init__.py', 'w').close()\n"
        f"sys.path.insert(0, {root!r})\n"
    )
    try:
        before = missing_requirements(kernel, ["pyyaml", ABSENT]).missing
        assert before in (("pyyaml", ABSENT), (ABSENT,))
        assert kernel.execute(code, timeout=30).error is None
        assert missing_requirements(kernel, ["pyyaml", ABSENT]) == PackageCheck((ABSENT,))
    finally:
        kernel.execute(f"import shutil\nshutil.rmtree({root!r}, ignore_errors=True)", timeout=30)


def test_a_failed_check_reports_every_requirement(kernel: Kernel) -> None:
    # A namespace that shadows __import__ makes the check cell fail: install everything.
    kernel.execute("__import__ = None", timeout=30)
    assert missing_requirements(kernel, ["json", ABSENT]) == PackageCheck(("json", ABSENT))
    kernel.execute("del __import__", timeout=30)
    assert missing_requirements(kernel, ["json", ABSENT]) == PackageCheck((ABSENT,))


def test_the_async_check(kernel: Kernel, api_requests: Any) -> None:
    async def main() -> PackageCheck:
        return await amissing_requirements(kernel, ["json", ABSENT, "emoji==2.15.0"])

    assert asyncio.run(main()) == PackageCheck((ABSENT, "emoji==2.15.0"))
    assert api_requests.counts() == {EXEC: 1}


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_check_that_finds_the_kernel_dead_reports_the_loss(
    kernel: Kernel, asynchronous: bool
) -> None:
    pid = kernel.execute("import os\nkept = 1\nos.getpid()", timeout=30).text
    assert pid is not None
    # From outside, between two calls: killed and gone (a kill returns before the process has
    # died, and a check reaching a daemon still dying finds it lost mid-cell, which reports
    # every requirement missing, as documented).
    gone = (
        f"kill -9 {pid}; while [ -e /proc/{pid} ] && "
        f"! grep -q '^{pid} (.*) Z' /proc/{pid}/stat 2>/dev/null; do sleep 0.01; done"
    )
    run_command(kernel.session, ["sh", "-c", gone], timeout=30)
    reqs = ["json", ABSENT]
    if asynchronous:
        check = asyncio.run(amissing_requirements(kernel, reqs))
    else:
        check = missing_requirements(kernel, reqs)
    # The fresh kernel answered the check, and the loss is not swallowed.
    assert check.missing == (ABSENT,)
    assert check.state_lost
    assert check.notice is not None
    assert "died" in check.notice
    after = kernel.execute("'kept' in dir()", timeout=30)
    assert after.error is None
    assert after.text == "False"
    assert not after.state_lost  # reported once, by the check
    assert after.notice is None

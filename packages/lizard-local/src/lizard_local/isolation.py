"""How sandboxes are isolated on this host, and the templates they run.

Two modes:

``namespace``
    Root on Linux with ``unshare``: every sandbox gets a long-lived mount + PID + UTS namespace
    (plus a network namespace when created with ``internetAccess: false``) and a minimal root of
    its own, like a fresh microVM: the host's system directories read-only, the interpreter the
    templates use, a private copy of ``/etc``, empty ``/tmp``, ``/root``, ``/home/user`` and
    ``/workspace``, and nothing else of the host (see :mod:`lizard_local.sandbox_root` and
    :mod:`lizard_local.sandbox_agent`). Processes see only their own sandbox's processes.
``host``
    Everything else: commands run as host processes. ``HOME``, ``TMPDIR`` and the default working
    directory point at per-sandbox directories, and every process carries the sandbox marker;
    the SDK's code runner is pointed at a per-sandbox state directory. Absolute paths such as
    ``/tmp/x`` are the host's own and are shared between sandboxes, and a command can change or
    delete any host file its user may: this mode protects nothing.

``auto`` picks namespace mode whenever it works. As root on Linux it falls back to host mode only
with a warning on stderr, because then every absolute path a sandbox touches is the host's.

Templates are tiny virtual environments built at start-up (a ``pyvenv.cfg`` and a ``python3``
link, no copying): ``base`` is the host's base Python with no site-packages, so Jupyter is absent
and ``CodeSandbox.run_code`` takes its process path; ``interpreter`` adds the site-packages of the
Python running the server (ipykernel, jupyter_client, numpy, pandas, matplotlib, pillow when
installed there), so ``run_code`` keeps state in a Jupyter kernel. In namespace mode they name
the interpreter and those folders where sandboxes see them (under ``/opt/lizard-local``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from lizard_local.sandbox_root import MOUNT_ROOT, RootPlan, plan_root, server_site_dirs

__all__ = [
    "PRIVATE_DIRS",
    "USERS",
    "Isolation",
    "Template",
    "UserAccount",
    "build_templates",
    "detect_mode",
]

PRIVATE_DIRS = ("/tmp", "/root", "/home/user", "/workspace")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class UserAccount:
    """A Linux account a command can run as."""

    name: str
    uid: int
    gid: int
    home: str


USERS = {
    "root": UserAccount("root", 0, 0, "/root"),
    "user": UserAccount("user", 1000, 1000, "/home/user"),
}


@dataclass(frozen=True)
class Template:
    """A template: the directory whose ``bin`` comes first on every command's PATH."""

    name: str
    prefix: str
    has_jupyter: bool

    @property
    def path(self) -> str:
        """The PATH commands of this template start with."""
        return f"{self.prefix}/bin:{SYSTEM_PATH}"


@dataclass
class Isolation:
    """The active mode, the state directory and the templates."""

    mode: str  # "namespace" or "host"
    state_dir: Path
    templates: dict[str, Template]
    #: What a namespace sandbox's root is made of (None in host mode).
    root: RootPlan | None = None

    @property
    def namespace(self) -> bool:
        """Whether sandboxes get their own namespaces."""
        return self.mode == "namespace"

    @property
    def can_switch_user(self) -> bool:
        """Whether commands can really run as another uid (only as root)."""
        return os.geteuid() == 0


def _could_use_namespaces() -> bool:
    return sys.platform.startswith("linux") and os.geteuid() == 0 and bool(shutil.which("unshare"))


def _probe_namespaces() -> str | None:
    """None when ``unshare`` works, else why not."""
    if not _could_use_namespaces():
        return "namespace isolation needs root on Linux and `unshare`"
    try:
        probe = subprocess.run(
            ["unshare", "--mount", "--pid", "--uts", "--fork", "--kill-child", "true"],
            capture_output=True,
            timeout=30,  # generous: a busy machine must not silently downgrade the isolation
            check=False,
            env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"`unshare` failed: {exc}"
    if probe.returncode != 0:
        return f"`unshare` failed: {probe.stderr.decode(errors='replace').strip()}"
    return None


def detect_mode(requested: str = "auto") -> str:
    """``namespace`` or ``host``; ``requested`` is ``auto``, ``namespace`` or ``host``."""
    if requested not in ("auto", "namespace", "host"):
        raise ValueError(f"isolation must be auto, namespace or host, not {requested!r}")
    if requested == "host":
        return "host"
    problem = _probe_namespaces()
    if problem is None:
        return "namespace"
    if requested == "namespace":
        raise RuntimeError(problem)
    if _could_use_namespaces():
        # Root, yet namespaces failed: host mode would let sandboxes write the host's /tmp, /root
        # and everything else as root. Say so loudly rather than degrade in silence.
        print(
            f"lizard-local: WARNING: {problem}; falling back to host isolation, in which "
            "sandbox commands run as host processes and absolute paths are the host's own",
            file=sys.stderr,
            flush=True,
        )
    return "host"


def _has_jupyter() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("ipykernel", "jupyter_client"))


def _make_venv(prefix: Path, base_exe: str, site_dirs: list[str]) -> None:
    """A minimal virtual environment over ``base_exe``: a config file and links.

    ``base_exe`` and ``site_dirs`` are paths as the sandbox's commands see them.
    """
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    (prefix / "bin").mkdir(parents=True, exist_ok=True)
    purelib = prefix / "lib" / f"python{version}" / "site-packages"
    purelib.mkdir(parents=True, exist_ok=True)
    (prefix / "pyvenv.cfg").write_text(
        f"home = {os.path.dirname(base_exe)}\n"
        "include-system-site-packages = false\n"
        f"version = {sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}\n"
    )
    for name in ("python3", "python", f"python{version}"):
        link = prefix / "bin" / name
        if not link.exists():
            link.symlink_to(base_exe)
    if site_dirs:
        lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in site_dirs)
        (purelib / "lizard_local_interpreter.pth").write_text(lines)


def build_templates(
    state_dir: Path, site_dirs: list[str], root: RootPlan | None = None
) -> dict[str, Template]:
    """Create the ``base`` and ``interpreter`` templates under ``state_dir/templates``.

    ``site_dirs`` (host paths) go into ``interpreter``. With a namespace ``root`` the templates
    name the interpreter and those folders where sandboxes see them, and their own prefix is
    the one they have inside a sandbox.
    """
    host_root = state_dir / "templates"
    base_exe = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    inside = list(site_dirs)
    seen_root = str(host_root)
    if root is not None:
        base_exe = root.python
        inside = [root.site_dirs[d] for d in site_dirs]
        seen_root = f"{MOUNT_ROOT}/templates"
    _make_venv(host_root / "base", base_exe, [])
    _make_venv(host_root / "interpreter", base_exe, inside)
    return {
        "base": Template("base", f"{seen_root}/base", False),
        "interpreter": Template("interpreter", f"{seen_root}/interpreter", bool(site_dirs)),
    }


def prepare(requested_mode: str, state_dir: Path) -> Isolation:
    """Detect the mode, plan the sandboxes' root and build templates; called at start-up."""
    mode = detect_mode(requested_mode)
    site_dirs = server_site_dirs() if _has_jupyter() else []
    root = plan_root(state_dir, site_dirs) if mode == "namespace" else None
    templates = build_templates(state_dir, site_dirs, root)
    return Isolation(mode, state_dir, templates, root)

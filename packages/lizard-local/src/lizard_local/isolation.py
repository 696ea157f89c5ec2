"""How sandboxes are isolated on this host, and the templates they run.

Two modes:

``namespace``
    Root on Linux with ``unshare``: every sandbox gets a long-lived mount + PID + UTS namespace
    (plus a network namespace when created with ``internetAccess: false``). Its ``/tmp``, ``/root``,
    ``/home/user`` and ``/workspace`` are private directories, and so are ``/dev`` and
    ``/dev/shm``; the rest of the host filesystem is bound in **read-only** (see
    :mod:`lizard_local.agent`). Processes see only their own sandbox's processes.
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
installed there), so ``run_code`` keeps state in a Jupyter kernel.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

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
#: Host paths a namespace sandbox does not see as they are: its private directories, and ``/dev``
#: (replaced by a private one).
REPLACED_DIRS = (*PRIVATE_DIRS, "/dev")
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
    keep_paths: list[str] = field(default_factory=list)
    #: Sandbox path -> host file bound over it in namespace mode (``/etc/passwd``, ``/etc/group``).
    etc_files: dict[str, str] = field(default_factory=dict)

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


def _make_venv(prefix: Path, site_dirs: list[str]) -> None:
    """A minimal virtual environment over the base interpreter: a config file and links."""
    base_exe = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
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


def _server_site_dirs() -> list[str]:
    dirs = [d for d in site.getsitepackages() if os.path.isdir(d)]
    purelib = sysconfig.get_paths()["purelib"]
    if purelib not in dirs and os.path.isdir(purelib):
        dirs.append(purelib)
    return dirs


def build_templates(state_dir: Path) -> dict[str, Template]:
    """Create the ``base`` and ``interpreter`` templates under ``state_dir/templates``."""
    root = state_dir / "templates"
    base = root / "base"
    _make_venv(base, [])
    jupyter = _has_jupyter()
    interp = root / "interpreter"
    _make_venv(interp, _server_site_dirs() if jupyter else [])
    return {
        "base": Template("base", str(base), False),
        "interpreter": Template("interpreter", str(interp), jupyter),
    }


def _under_private(path: str) -> bool:
    return any(path == d or path.startswith(d + "/") for d in REPLACED_DIRS)


def keep_paths(state_dir: Path) -> list[str]:
    """Host paths under a replaced directory that sandboxes still need (bound in read-only)."""
    candidates = {
        os.path.realpath(sys.base_prefix),
        os.path.realpath(sys.prefix),
        os.path.realpath(sys.exec_prefix),
        os.path.realpath(os.path.dirname(getattr(sys, "_base_executable", sys.executable))),
        str(state_dir / "templates"),
        *(os.path.realpath(p) for p in sys.path if p and os.path.isabs(p) and os.path.isdir(p)),
    }
    kept = sorted(p for p in candidates if _under_private(p) and p not in REPLACED_DIRS)
    # Drop paths already covered by a kept parent.
    out: list[str] = []
    for p in kept:
        if not any(p.startswith(k + "/") for k in out):
            out.append(p)
    return out


def account_files(state_dir: Path) -> dict[str, str]:
    """Copies of ``/etc/passwd`` and ``/etc/group`` in which uid/gid 1000 is ``user``."""
    out: dict[str, str] = {}
    wanted = {
        "/etc/passwd": ("user:x:1000:1000::/home/user:/bin/sh", 2),
        "/etc/group": ("user:x:1000:", 2),
    }
    (state_dir / "etc").mkdir(exist_ok=True)
    for inner, (entry, id_field) in wanted.items():
        try:
            lines = Path(inner).read_text().splitlines()
        except OSError:
            continue
        kept = [
            line
            for line in lines
            if not line.startswith("user:")
            and not (len(line.split(":")) > id_field and line.split(":")[id_field] == "1000")
        ]
        target = state_dir / "etc" / Path(inner).name
        target.write_text("\n".join([*kept, entry]) + "\n")
        os.chmod(target, 0o644)
        out[inner] = str(target)
    return out


def prepare(requested_mode: str, state_dir: Path) -> Isolation:
    """Detect the mode and build templates; the one call the server makes at start-up."""
    mode = detect_mode(requested_mode)
    templates = build_templates(state_dir)
    if mode != "namespace":
        return Isolation(mode, state_dir, templates)
    return Isolation(mode, state_dir, templates, keep_paths(state_dir), account_files(state_dir))

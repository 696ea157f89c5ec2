"""The SDK's sandbox lifecycle, as its own integration tests define it, for a Lizard session.

Written fresh after the OpenAI Agents SDK's ``tests/sandbox/integration_tests/_helpers.py``: a
manifest with every built-in entry type but the cloud mounts (they need the mount tool in the
sandbox: ``test_lifecycle.py`` checks the error that names them), a patch applied through
``apply_patch``, workspace escapes refused, an archive extracted, and the workspace found again
after persist, delete and resume.

The ``GitRepo`` entry clones for real: the SDK asks git for ``https://github.com/...``, and git's
``url.<base>.insteadOf`` (set through the sandbox's environment) sends it to a repository made in
the sandbox first.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping
from pathlib import Path

from agents.editor import ApplyPatchOperation
from agents.sandbox.entries import Dir, File, GitRepo, LocalDir, LocalFile
from agents.sandbox.errors import (
    ApplyPatchPathError,
    InvalidManifestPathError,
    WorkspaceReadNotFoundError,
)
from agents.sandbox.files import EntryKind
from agents.sandbox.manifest import Manifest
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.sandbox.workspace_paths import SandboxPathGrant

from openai_agents_lizard import LizardSandboxClientOptions

OPTIONS = LizardSandboxClientOptions(lifetime_ms=300_000)
"""The tests' sandboxes: default template, a lifetime that outlasts a slow run."""

FIXTURE_REPO = "/tmp/fixture-repo.git"
ECHO_LINES = "printf 'ready\\n'; while IFS= read -r line; do printf 'got:%s\\n' \"$line\"; done"
"""The SDK's PTY probe: says ready, then echoes each line it reads."""
GIT_URL = "https://github.com/lizard-build/fixture.git"
GIT_ENVS = {
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": f"url.file://{FIXTURE_REPO}.insteadOf",
    "GIT_CONFIG_VALUE_0": GIT_URL,
}

DURABLE = {
    "inline.txt": "inline file v1\n",
    "delete_me.txt": "delete me v1\n",
    "tree/nested.txt": "nested file v1\n",
    "copied_file.txt": "local file source v1\n",
    "copied_dir/child.txt": "local dir child v1\n",
    "copied_dir/nested/grandchild.txt": "local dir grandchild v1\n",
    "repo/README.md": "fixture repo readme v1\n",
    "repo/pkg/module.py": "VALUE = 'fixture module v1'\n",
}
EPHEMERAL = {"tree/ephemeral.txt": "ephemeral file v1\n"}
ARCHIVE = {"archive_dir/hello.txt": "hello from tar archive\n"}
RUNTIME = {"runtime_note.txt": "runtime note v1\n"}
PATCHED = {"inline.txt": "inline file v2\n", "created_by_patch.txt": "created by patch"}

RESTORED_DIRS = {"archive_dir", "copied_dir", "copied_dir/nested", "repo", "repo/pkg", "tree"}
RESTORED_FILES = {
    "archive_dir/hello.txt",
    "bundle.tar",
    "copied_dir/child.txt",
    "copied_dir/nested/grandchild.txt",
    "copied_file.txt",
    "created_by_patch.txt",
    "inline.txt",
    "repo/README.md",
    "repo/pkg/module.py",
    "runtime_note.txt",
    "tree/ephemeral.txt",
    "tree/nested.txt",
}

_MAKE_FIXTURE_REPO = """
set -e
work=$(mktemp -d)
mkdir -p "$work/pkg"
printf 'fixture repo readme v1\\n' > "$work/README.md"
printf "VALUE = 'fixture module v1'\\n" > "$work/pkg/module.py"
git -C "$work" init -q -b main
git -C "$work" add .
git -C "$work" -c user.name=t -c user.email=t@example.com commit -q -m fixture
rm -rf "$1"
git clone -q --bare "$work" "$1"
rm -rf "$work"
"""


def make_local_sources(tmp_path: Path) -> Path:
    """Host files for the ``LocalFile`` and ``LocalDir`` entries."""
    root = tmp_path / "sources"
    (root / "local-dir" / "nested").mkdir(parents=True)
    (root / "local-file.txt").write_text(DURABLE["copied_file.txt"])
    (root / "local-dir" / "child.txt").write_text(DURABLE["copied_dir/child.txt"])
    grandchild = DURABLE["copied_dir/nested/grandchild.txt"]
    (root / "local-dir" / "nested" / "grandchild.txt").write_text(grandchild)
    return root


def manifest_with_every_entry_type(sources: Path) -> Manifest:
    """Every built-in entry type except the cloud mounts."""
    return Manifest(
        # The SDK reads local sources only under a granted path.
        extra_path_grants=(SandboxPathGrant(path=str(sources)),),
        entries={
            "inline.txt": File(content=DURABLE["inline.txt"].encode()),
            "delete_me.txt": File(content=DURABLE["delete_me.txt"].encode()),
            "tree": Dir(
                children={
                    "nested.txt": File(content=DURABLE["tree/nested.txt"].encode()),
                    "ephemeral.txt": File(
                        content=EPHEMERAL["tree/ephemeral.txt"].encode(), ephemeral=True
                    ),
                }
            ),
            "copied_file.txt": LocalFile(src=sources / "local-file.txt"),
            "copied_dir": LocalDir(src=sources / "local-dir"),
            "repo": GitRepo(repo="lizard-build/fixture", ref="main"),
        },
    )


async def make_fixture_repo(session: BaseSandboxSession) -> None:
    """The repository the ``GitRepo`` entry clones, made inside the sandbox."""
    made = await session.exec("sh", "-c", _MAKE_FIXTURE_REPO, "sh", FIXTURE_REPO, shell=False)
    assert made.ok(), made.stderr


async def read_text(session: BaseSandboxSession, path: str) -> str:
    handle = await session.read(Path(path))
    try:
        data = handle.read()
    finally:
        handle.close()
    return data.decode() if isinstance(data, bytes) else str(data)


async def write_text(session: BaseSandboxSession, path: str, text: str) -> None:
    await session.write(Path(path), io.BytesIO(text.encode()))


async def assert_texts(session: BaseSandboxSession, expected: Mapping[str, str]) -> None:
    assert {path: await read_text(session, path) for path in expected} == dict(expected)


async def assert_missing(session: BaseSandboxSession, path: str) -> None:
    try:
        await read_text(session, path)
    except WorkspaceReadNotFoundError:
        return
    raise AssertionError(f"{path} should be missing")


def patch_operations() -> list[ApplyPatchOperation | dict[str, object]]:
    return [
        ApplyPatchOperation(
            type="update_file", path="inline.txt", diff="@@\n-inline file v1\n+inline file v2\n"
        ),
        ApplyPatchOperation(
            type="create_file", path="created_by_patch.txt", diff="+created by patch\n"
        ),
        ApplyPatchOperation(type="delete_file", path="delete_me.txt"),
    ]


async def assert_patched(session: BaseSandboxSession) -> None:
    kept = {path: text for path, text in DURABLE.items() if path != "delete_me.txt"}
    await assert_texts(session, {**kept, **RUNTIME, **PATCHED})
    await assert_missing(session, "delete_me.txt")


async def _blocked(action: object, path: str) -> None:
    try:
        await action  # type: ignore[misc]
    except (InvalidManifestPathError, ApplyPatchPathError):
        return
    raise AssertionError(f"{path} escaped the workspace")


async def assert_escapes_blocked(session: BaseSandboxSession) -> None:
    """``../``, an absolute path outside and a symlink out: refused for read, write and patch."""
    outside = "/tmp/symlink-outside.txt"
    made = await session.exec(
        "sh",
        "-c",
        'printf secret > "$1" && ln -sfn "$1" symlink_escape.txt',
        "sh",
        outside,
        shell=False,
    )
    assert made.ok(), made.stderr
    try:
        for path in ("../outside.txt", "/tmp/sandbox-outside.txt", "symlink_escape.txt"):
            await _blocked(read_text(session, path), path)
            await _blocked(write_text(session, path, "outside write\n"), path)
            create = ApplyPatchOperation(type="create_file", path=path, diff="+outside\n")
            await _blocked(session.apply_patch(create), path)
        # The target outside is untouched.
        assert (await session.exec("cat", outside, shell=False)).stdout == b"secret"
    finally:
        await session.exec("rm", "-f", "symlink_escape.txt", outside, shell=False)


def tar_of(members: Mapping[str, str]) -> io.BytesIO:
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    archive.seek(0)
    return archive


async def workspace_tree(session: BaseSandboxSession) -> tuple[set[str], set[str]]:
    root = Path(session.state.manifest.root)
    dirs: set[str] = set()
    files: set[str] = set()

    async def collect(path: Path) -> None:
        for entry in await session.ls(path):
            rel = Path(entry.path)
            rel_text = (rel.relative_to(root) if rel.is_absolute() else rel).as_posix()
            if rel_text == "repo/.git":
                continue  # the clone's own metadata (the SDK copies the whole checkout)
            if entry.kind == EntryKind.DIRECTORY:
                dirs.add(rel_text)
                await collect(Path(rel_text))
            else:
                assert entry.kind == EntryKind.FILE, (rel_text, entry.kind)
                files.add(rel_text)

    await collect(Path("."))
    return dirs, files


async def assert_restored(session: BaseSandboxSession) -> None:
    """Everything the first session left: patched files, the archive, the ephemeral entry."""
    await assert_patched(session)
    await assert_texts(session, {**ARCHIVE, **EPHEMERAL})
    assert await workspace_tree(session) == (RESTORED_DIRS, RESTORED_FILES)

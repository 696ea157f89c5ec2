"""Exec semantics: environment, working directory, users, output framing, limits, timeouts."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from lizard import Sandbox

from lizard_local import LocalServer


def stream(sb: Sandbox, cmd: str | list[str], **kw: object) -> tuple[list[str], list[str], int]:
    out: list[str] = []
    err: list[str] = []
    result = sb.process.exec_(cmd, on_stdout=out.append, on_stderr=err.append, **kw)  # type: ignore[arg-type]
    return out, err, result.exit_code


def test_environment_precedence_and_defaults(new_sandbox):
    sb = new_sandbox(envs={"A": "create", "B": "create"})
    r = sb.process.exec_('echo "$A $B $HOME $USER $LANG"; pwd', envs={"B": "command"})
    assert r.stdout.splitlines() == ["create command /root root C.UTF-8", "/root"]
    assert "LIZARD_API_KEY" not in sb.process.exec_("env").stdout


def test_workdir_and_missing_workdir(sandbox: Sandbox):
    assert sandbox.process.exec_("pwd", workdir="/workspace").stdout == "/workspace"
    missing = sandbox.process.exec_("pwd", workdir="/no/such/dir")
    assert missing.exit_code == 1
    assert "/no/such/dir" in missing.stderr


def test_user_account(sandbox: Sandbox, lizard_local: LocalServer):
    r = sandbox.process.exec_("id -u; echo $HOME; pwd", user="user")
    if lizard_local.isolation == "namespace":
        assert r.stdout.splitlines() == ["1000", "/home/user", "/home/user"]
    sandbox.fs.write("/home/user/mine.txt", "x", user="user")
    assert sandbox.fs.stat("/home/user/mine.txt").owner == "user"


def test_argv_is_not_interpreted_by_a_shell(sandbox: Sandbox):
    text = "$(echo no) ; `x` 'q' \"d\""
    assert sandbox.process.exec_(["printf", "%s", text]).stdout == text


def test_stdin_is_dev_null(sandbox: Sandbox):
    r = sandbox.process.exec_("cat; echo rc=$?", timeout_ms=5000)
    assert r.stdout == "rc=0"


def test_returns_when_main_process_exits_even_if_a_child_holds_the_pipes(sandbox: Sandbox):
    start = time.monotonic()
    r = sandbox.process.exec_("sleep 30 & echo started")
    assert r.stdout == "started"
    assert time.monotonic() - start < 2
    out, _, code = stream(sandbox, "sleep 30 & echo streamed")
    assert (out, code) == (["streamed"], 0)


def test_death_by_signal_is_128_plus_signal(sandbox: Sandbox):
    assert sandbox.process.exec_("kill -9 $$").exit_code == 137
    assert sandbox.process.exec_(["sh", "-c", "kill -TERM $$"]).exit_code == 143


def test_stderr_and_stdout_are_separate_streams(sandbox: Sandbox):
    out, err, code = stream(sandbox, "echo o1; echo e1 >&2; echo o2; exit 4")
    assert (out, err, code) == (["o1", "o2"], ["e1"], 4)
    r = sandbox.process.exec_("echo o1; echo e1 >&2")
    assert (r.stdout, r.stderr) == ("o1", "e1")


def test_sse_lines_are_byte_faithful(sandbox: Sandbox):
    script = (
        "import sys\n"
        "w = sys.stdout.buffer.write\n"
        "w(b'\\n\\nfirst\\n\\n')\n"
        "w(b'tabs\\tand unicode \\xc3\\xa9 \\xe2\\x80\\xa8 sep\\n')\n"
        "w(b'x' * 70000 + b'\\n')\n"
        "w(b'crlf\\r\\n')\n"
        "w(b'no newline at end')\n"
    )
    sandbox.fs.write("/tmp/emit.py", script)
    out, _, code = stream(sandbox, ["python3", "/tmp/emit.py"])
    assert code == 0
    assert out == [
        "",
        "",
        "first",
        "",
        "tabs\tand unicode é \u2028 sep",
        "x" * 65536,
        "x" * (70000 - 65536),
        "crlf",
        "no newline at end",
    ]


def test_json_mode_output_cap_sets_truncated(sandbox: Sandbox, lizard_local: LocalServer):
    lizard_local.configure(stream_cap_bytes=1000)
    try:
        r = sandbox.process.exec_("head -c 5000 /dev/zero | tr '\\0' a; echo; echo small >&2")
        assert r.truncated is True
        assert r.stdout == "a" * 1000
        assert r.stderr == "small"
        out, _, _ = stream(sandbox, "head -c 5000 /dev/zero | tr '\\0' b")
        assert out == ["b" * 1000]
    finally:
        lizard_local.configure(stream_cap_bytes=512 * 1024)
    r = sandbox.process.exec_("head -c 600000 /dev/zero | tr '\\0' c")
    assert r.truncated is True
    assert len(r.stdout) == 512 * 1024
    assert sandbox.process.exec_("echo fine").truncated is False


def test_verbatim_json_output_keeps_trailing_newlines(sandbox: Sandbox, lizard_local: LocalServer):
    lizard_local.configure(json_output="verbatim")
    try:
        assert sandbox.process.exec_("printf 'a\\r\\nb\\n'").stdout == "a\r\nb\n"
    finally:
        lizard_local.configure(json_output="lines")


def test_keepalive_comments_on_a_silent_command(
    sandbox: Sandbox, lizard_local: LocalServer, api: httpx.Client
):
    lizard_local.configure(keepalive_s=0.2)
    try:
        with api.stream(
            "POST",
            f"/api/sandboxes/{sandbox.sandbox_id}/exec",
            json={"cmd": "sleep 0.7; echo done"},
            headers={"Accept": "text/event-stream"},
        ) as res:
            assert res.headers["content-type"] == "text/event-stream"
            lines = list(res.iter_lines())
    finally:
        lizard_local.configure(keepalive_s=15.0)
    assert lines.count(": keepalive") >= 2
    assert 'data: {"stream":"stdout","line":"done"}' in lines
    assert lines[-3:] == ["event: exit", 'data: {"exitCode":0}', ""]


def test_pid_event_only_when_asked(sandbox: Sandbox, api: httpx.Client):
    def events(body: dict[str, object]) -> list[str]:
        res = api.post(
            f"/api/sandboxes/{sandbox.sandbox_id}/exec",
            json=body,
            headers={"Accept": "text/event-stream"},
        )
        return [line for line in res.text.splitlines() if line.startswith("data:")]

    plain = events({"cmd": "echo x"})
    assert plain == ['data: {"stream":"stdout","line":"x"}', 'data: {"exitCode":0}']
    with_pid = events({"cmd": "echo x", "pidEvent": True})
    assert with_pid[0].startswith('data: {"pid":')
    assert with_pid[1:] == plain


def test_streaming_timeout_and_missing_program(sandbox: Sandbox):
    out, err, code = stream(sandbox, "echo before; sleep 5", timeout_ms=1000)
    assert (out, code) == (["before"], 124)
    assert err == ["command timed out after 1s"]
    _, err, code = stream(sandbox, ["no-such-program"])
    assert (err, code) == (["no-such-program: not found"], 127)


def test_a_disconnected_client_kills_its_command(sandbox: Sandbox, lizard_local: LocalServer):
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{lizard_local.url}/api/sandboxes/{sandbox.sandbox_id}/exec",
            headers={"X-API-Key": lizard_local.api_key},
            json={"cmd": "sleep 40"},
            timeout=0.5,
        )
    deadline = time.monotonic() + 5
    while sandbox.process.list() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox.process.list() == []


def test_concurrent_commands_in_one_sandbox(sandbox: Sandbox):
    results: list[str] = []

    def run(i: int) -> None:
        results.append(sandbox.process.exec_(f"sleep 0.3; echo {i}").stdout)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(10)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results, key=int) == [str(i) for i in range(10)]
    assert time.monotonic() - start < 2.5  # they ran side by side

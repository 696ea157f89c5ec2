"""Isolation modes and templates: namespace and host mode, base and interpreter, run_code state."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest
from lizard import Sandbox
from lizard.code_interpreter import CodeSandbox

from lizard_local import LocalServer, isolation, procscan
from lizard_local.isolation import detect_mode


def kernels_of(sandbox_id: str) -> list[int]:
    out = []
    for pid in procscan.find_marked(f"LIZARD_EMU_SANDBOX={sandbox_id}".encode()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"ipykernel_launcher" in f.read():
                    out.append(pid)
        except OSError:
            continue
    return out


@pytest.fixture(scope="module")
def code_sandbox(lizard_local: LocalServer) -> Iterator[CodeSandbox]:
    cs = CodeSandbox.create(project_id=lizard_local.project_id)
    yield cs
    cs.kill()


def test_mode_is_reported(lizard_local: LocalServer):
    expected = "namespace" if os.geteuid() == 0 and detect_mode() == "namespace" else "host"
    assert lizard_local.isolation == expected
    assert lizard_local.info()["isolation"] == expected


def test_detect_mode_validates_its_argument():
    with pytest.raises(ValueError, match="isolation"):
        detect_mode("chroot")
    assert detect_mode("host") == "host"


def test_auto_mode_says_so_when_root_falls_back_to_host_mode(monkeypatch, capsys):
    monkeypatch.setattr(isolation, "_probe_namespaces", lambda: "`unshare` failed: test")
    monkeypatch.setattr(isolation, "_could_use_namespaces", lambda: True)
    assert detect_mode("auto") == "host"
    assert "WARNING: `unshare` failed: test; falling back to host" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match="unshare"):
        detect_mode("namespace")
    monkeypatch.setattr(isolation, "_could_use_namespaces", lambda: False)
    assert detect_mode("auto") == "host"
    assert capsys.readouterr().err == ""  # not root: host mode is the expected mode


def test_base_template_has_python_without_jupyter(sandbox: Sandbox):
    assert sandbox.process.exec_(["python3", "-c", "print(2 ** 10)"]).stdout == "1024"
    r = sandbox.process.exec_(["python3", "-c", "import ipykernel"])
    assert r.exit_code == 1
    assert "ModuleNotFoundError" in r.stderr


def test_run_code_keeps_state_in_the_interpreter_template(code_sandbox: CodeSandbox):
    assert code_sandbox.run_code("x = 21").error is None
    assert code_sandbox.run_code("x * 2").results[0].data == "42"
    err = code_sandbox.run_code("1/0").error
    assert err is not None
    assert err.name == "ZeroDivisionError"
    timed = code_sandbox.run_code("import time; time.sleep(5)", timeout_ms=1000).error
    assert timed is not None
    assert timed.name == "TimeoutError"
    assert code_sandbox.run_code("x").results[0].data == "21"  # the kernel survived


def test_data_stack_imports(code_sandbox: CodeSandbox):
    r = code_sandbox.run_code("import numpy, pandas, matplotlib, PIL; numpy.arange(3).sum()")
    assert r.error is None
    assert r.results[0].data == "np.int64(3)" or r.results[0].data == "3"


def test_big_code_goes_through_a_file(code_sandbox: CodeSandbox, lizard_counters: LocalServer):
    code = "y = '" + "z" * 200_000 + "'\nlen(y)"  # ~200 KB: over the SDK's argv limit
    assert code_sandbox.run_code(code).results[0].data == "200000"
    routes = lizard_counters.counters()["routes"]
    assert routes["POST /api/sandboxes/{id}/files"] == 1


def test_concurrent_code_sandboxes_do_not_share_variables(lizard_local: LocalServer):
    boxes: list[CodeSandbox] = []
    lock = threading.Lock()

    def make(value: int) -> None:
        cs = CodeSandbox.create(project_id=lizard_local.project_id)
        with lock:
            boxes.append(cs)
        cs.run_code(f"v = {value}")

    threads = [threading.Thread(target=make, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        seen = sorted(b.run_code("v").results[0].data for b in boxes)
        assert seen == ["1", "2"]
        ids = [b.sandbox_id for b in boxes]
        assert all(kernels_of(i) for i in ids)
    finally:
        for b in boxes:
            b.kill()
    assert [kernels_of(i) for i in ids] == [[], []]


def test_base_template_runs_code_without_state(new_sandbox):
    cs = new_sandbox()
    code = CodeSandbox.connect(cs.sandbox_id)
    assert code.run_code("print('hi')").stdout == "hi\n"
    err = code.run_code("1/0").error
    assert err is not None
    assert err.name == "ExitError"


def test_no_internet_sandbox_has_its_own_network(
    offline_sandbox: Sandbox, new_sandbox, lizard_local: LocalServer
):
    if lizard_local.isolation != "namespace":
        pytest.skip("network namespaces need namespace mode")
    sb = offline_sandbox
    port = lizard_local.url.rsplit(":", 1)[1]
    probe = (
        "import socket; s = socket.socket(); s.settimeout(2)\n"
        f"print(s.connect_ex(('127.0.0.1', {port})))"
    )
    assert sb.process.exec_(["python3", "-c", probe]).stdout != "0"
    online = new_sandbox()
    assert online.process.exec_(["python3", "-c", probe]).stdout == "0"


def test_host_mode(host_server: LocalServer):
    assert host_server.isolation == "host"
    kw = {"api_key": host_server.api_key, "api_url": host_server.url, "project_id": "proj_local"}
    a = Sandbox.create("base", **kw)  # type: ignore[arg-type]
    b = Sandbox.create("base", **kw)  # type: ignore[arg-type]
    try:
        home_a = a.process.exec_("echo $HOME").stdout
        home_b = b.process.exec_("echo $HOME").stdout
        assert home_a != home_b
        assert a.process.exec_("pwd").stdout == home_a
        a.process.exec_("setsid sleep 93 >/dev/null 2>&1 < /dev/null &")
        env = a.process.exec_("env").stdout.splitlines()
        assert f"LIZARD_EMU_SANDBOX={a.sandbox_id}" in env
        a.fs.write(home_a + "/f.txt", "host")
        assert a.fs.read(home_a + "/f.txt") == "host"
        assert a.kill() is True
        assert procscan.find_marked(f"LIZARD_EMU_SANDBOX={a.sandbox_id}".encode()) == []
        assert b.process.exec_("echo ok").stdout == "ok"
    finally:
        a.kill()
        b.kill()


def test_host_mode_code_sandboxes_keep_separate_state(host_server: LocalServer):
    kw = {"api_key": host_server.api_key, "api_url": host_server.url, "project_id": "proj_local"}
    one = CodeSandbox.create(**kw)  # type: ignore[arg-type]
    two = CodeSandbox.create(**kw)  # type: ignore[arg-type]
    try:
        one.run_code("w = 'one'")
        two.run_code("w = 'two'")
        assert one.run_code("w").results[0].data == "'one'"
        assert two.run_code("w").results[0].data == "'two'"
    finally:
        one.kill()
        two.kill()
    assert kernels_of(one.sandbox_id) == []

"""The lizard-local command: exports, a clean exit on SIGINT, the key by descriptor, errors."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import sys

import httpx

from lizard_local import procscan
from lizard_local.cli import main


def read_exports(proc: subprocess.Popen[str]) -> dict[str, str]:
    assert proc.stdout is not None
    env: dict[str, str] = {}
    for line in proc.stdout:
        if line.startswith("export "):
            name, _, value = line[7:].strip().partition("=")
            env[name] = value
        if line.startswith("# ready"):
            break
    return env


def test_serve_prints_exports_and_cleans_up_on_sigint():
    proc = subprocess.Popen(
        [sys.executable, "-m", "lizard_local", "serve", "--port", "0", "--isolation", "host"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        env = read_exports(proc)
        assert set(env) == {"LIZARD_API_URL", "LIZARD_API_KEY", "LIZARD_PROJECT_ID"}
        url, key = env["LIZARD_API_URL"], env["LIZARD_API_KEY"]
        headers = {"X-API-Key": key}
        created = httpx.post(url + "/api/sandboxes", headers=headers, json={"template": "base"})
        sid = created.json()["sandboxId"]
        marker = f"LIZARD_EMU_SANDBOX={sid}".encode()
        httpx.post(
            f"{url}/api/sandboxes/{sid}/exec",
            headers=headers,
            json={"cmd": "setsid sleep 95 >/dev/null 2>&1 < /dev/null &"},
        )
        assert procscan.find_marked(marker)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        assert procscan.find_marked(marker) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_tls_prints_the_ca_file():
    proc = subprocess.Popen(
        [sys.executable, "-m", "lizard_local", "serve", "--tls", "--isolation", "host"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        env = read_exports(proc)
        assert env["LIZARD_API_URL"].startswith("https://127.0.0.1:")
        res = httpx.get(
            env["LIZARD_API_URL"] + "/api/projects",
            headers={"X-API-Key": env["LIZARD_API_KEY"]},
            verify=ssl.create_default_context(cafile=env["SSL_CERT_FILE"]),
        )
        assert res.json()[0]["id"] == env["LIZARD_PROJECT_ID"]
    finally:
        proc.terminate()
        proc.wait(30)


def test_bad_arguments(capsys):
    assert main(["serve", "--port", "-1"]) == 2
    assert main(["serve", "--latency-ms", "-5"]) == 2
    assert "must" in capsys.readouterr().err


def test_the_key_can_come_through_a_file_descriptor():
    key_r, key_w = os.pipe()
    os.write(key_w, b"fd-key-123\n")
    os.close(key_w)
    proc = subprocess.Popen(
        [sys.executable, "-m", "lizard_local", "serve", "--api-key-fd", str(key_r)],
        stdout=subprocess.PIPE,
        text=True,
        pass_fds=[key_r],
    )
    pipe = f"pipe:[{os.fstat(key_r).st_ino}]"
    os.close(key_r)
    try:
        env = read_exports(proc)
        assert env["LIZARD_API_KEY"] == "fd-key-123"
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            assert b"fd-key-123" not in f.read()
        targets = []
        for fd in os.listdir(f"/proc/{proc.pid}/fd"):
            # A descriptor can close between the listing and the read (the server is running).
            with contextlib.suppress(FileNotFoundError):
                targets.append(os.readlink(f"/proc/{proc.pid}/fd/{fd}"))
        assert pipe not in targets  # the server closed the key's pipe
        res = httpx.get(
            env["LIZARD_API_URL"] + "/api/projects", headers={"X-API-Key": "fd-key-123"}
        )
        assert res.status_code == 200
    finally:
        proc.terminate()
        proc.wait(30)


def test_an_empty_or_bad_key_descriptor_is_an_error(capsys):
    key_r, key_w = os.pipe()
    os.close(key_w)
    assert main(["serve", "--api-key-fd", str(key_r)]) == 2
    assert main(["serve", "--api-key-fd", "987654"]) == 2
    assert "--api-key-fd" in capsys.readouterr().err

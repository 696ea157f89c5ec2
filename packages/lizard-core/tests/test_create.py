"""The create on the session's pooled connection (``lizard_core._create``).

Parity with lizard-sdk's own ``Sandbox.create``: both are sent to one recording server and must
send the same requests and raise the same errors; then, against lizard-local, a new session's
create and first command share one connection, and every session shares one SSL context.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import lizard
import lizard.config
import pytest
from lizard import Sandbox
from stub_api import StubApi

from lizard_core._create import create_sandbox
from lizard_core._transport import Transport, shared_ssl_context
from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.errors import LizardIntegrationError
from lizard_core.session import Session
from lizard_local import LocalServer

KEY = "lz_" + "k" * 32
CREATE = ("POST", "/api/sandboxes")


@pytest.fixture
def stub() -> Iterator[StubApi]:
    with StubApi() as api:
        yield api


def _sent(stub: StubApi) -> list[tuple[str, str, str | None, str | None, Any]]:
    """What reached the server: method, path, the SDK's two headers, the JSON body."""
    out = []
    for method, path, headers, body in stub.requests:
        lowered = {k.lower(): v for k, v in headers.items()}
        out.append(
            (
                method,
                path,
                lowered.get("x-api-key"),
                lowered.get("content-type"),
                json.loads(body) if body else None,
            )
        )
    return out


def _both(
    stub: StubApi, setup: Callable[[], None] | None = None, **kwargs: Any
) -> tuple[list[Any], list[Any], Any, Any]:
    """Send ``kwargs`` through the SDK, then through ours; what each sent and returned/raised.

    ``setup`` runs before each, to give both the same (stateful) routes.
    """
    outcomes: list[Any] = []
    sent: list[list[Any]] = []
    for make in (
        lambda: Sandbox.create(api_key=KEY, api_url=stub.url, **kwargs),
        lambda: create_sandbox(Transport(stub.url, KEY), api_key=KEY, api_url=stub.url, **kwargs),
    ):
        stub.requests.clear()
        if setup is not None:
            setup()
        try:
            outcomes.append(make())
        except Exception as exc:
            outcomes.append(exc)
        sent.append(_sent(stub))
    return sent[0], sent[1], outcomes[0], outcomes[1]


CASES: list[dict[str, Any]] = [
    {"project_id": "p1"},
    {"project_id": "p1", "template": "interpreter", "timeout_ms": 0},
    {
        "project_id": "p1",
        "template": "base",
        "size": "small",
        "region": "eu-west-1",
        "timeout_ms": 90_000,
        "metadata": {"lizard-integration": "x", "run": "r1"},
        "envs": {"A": "1", "B": "two words"},
        "internet_access": True,
    },
    {"project_id": "p1", "snapshot_id": "snap_1", "metadata": {"k": "v"}},
    {"project_id": "p1", "volume_name": "data", "template": "base"},
    {"project_id": "p1", "metadata": {}, "envs": {}},
]


@pytest.mark.parametrize("kwargs", CASES, ids=range(len(CASES)))
def test_the_create_sends_what_the_sdk_sends(stub: StubApi, kwargs: dict[str, Any]) -> None:
    stub.routes[CREATE] = (201, {"sandboxId": "sbx_1", "status": "running"})
    sdk_sent, ours_sent, sdk, ours = _both(stub, **kwargs)
    assert ours_sent == sdk_sent
    assert len(ours_sent) == 1
    assert isinstance(sdk, Sandbox)
    assert isinstance(ours, Sandbox)
    assert (ours.sandbox_id, ours._config.api_url, ours._config.timeout_ms) == (
        sdk.sandbox_id,
        sdk._config.api_url,
        sdk._config.timeout_ms,
    )


@pytest.mark.parametrize(
    ("kwargs", "answer"),
    [
        ({"internet_access": False}, {"sandboxId": "sbx_1", "internetAccess": False}),
        (
            {"allowed_hosts": ["pypi.org", "10.0.0.0/8"]},
            {"sandboxId": "sbx_1", "internetAccess": False, "allowedHosts": ["pypi.org"]},
        ),
    ],
)
def test_no_internet_is_sent_and_believed_as_the_sdk_does(
    stub: StubApi, kwargs: dict[str, Any], answer: dict[str, Any]
) -> None:
    stub.routes[CREATE] = (201, answer)
    sdk_sent, ours_sent, sdk, ours = _both(stub, project_id="p1", **kwargs)
    assert ours_sent == sdk_sent
    assert sdk_sent[0][4]["internetAccess"] is False
    assert isinstance(ours, Sandbox)
    assert isinstance(sdk, Sandbox)


@pytest.mark.parametrize(
    ("kwargs", "answer"),
    [
        ({"internet_access": False}, {"sandboxId": "sbx_1"}),
        ({"internet_access": False}, {"sandboxId": "sbx_1", "internetAccess": True}),
        ({"allowed_hosts": ["pypi.org"]}, {"sandboxId": "sbx_1", "internetAccess": False}),
    ],
)
def test_a_server_that_ignored_no_internet_gets_its_sandbox_deleted(
    stub: StubApi, kwargs: dict[str, Any], answer: dict[str, Any]
) -> None:
    """Never handed over with internet when none was asked for: deleted, and the SDK's error."""
    stub.routes[CREATE] = (201, answer)
    stub.routes[("DELETE", "/api/sandboxes/sbx_1")] = (200, {})
    sdk_sent, ours_sent, sdk, ours = _both(stub, project_id="p1", **kwargs)
    assert ours_sent == sdk_sent
    assert [(m, p) for m, p, *_ in ours_sent] == [CREATE, ("DELETE", "/api/sandboxes/sbx_1")]
    assert type(ours) is type(sdk) is lizard.errors.LizardError
    assert str(ours) == str(sdk)


def test_a_failed_delete_of_such_a_sandbox_still_raises_the_sdks_error(stub: StubApi) -> None:
    stub.routes[CREATE] = (201, {"sandboxId": "sbx_1"})
    stub.routes[("DELETE", "/api/sandboxes/sbx_1")] = (500, {"error": "boom"})
    _, ours_sent, sdk, ours = _both(stub, project_id="p1", internet_access=False)
    assert ("DELETE", "/api/sandboxes/sbx_1") in [(m, p) for m, p, *_ in ours_sent]
    assert type(ours) is type(sdk) is lizard.errors.LizardError
    assert str(ours) == str(sdk)


def _region_unavailable_once() -> Callable[[Any], None]:
    """A create handler: 503 ``region_unavailable`` first, then a sandbox."""
    calls: list[int] = []

    def answer(handler: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            status, body = 503, {"error": "closed", "code": "region_unavailable"}
        else:
            status, body = 201, {"sandboxId": "sbx_2"}
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    return answer


def test_a_closed_default_region_is_asked_again_without_one(stub: StubApi) -> None:
    def setup() -> None:
        stub.routes[CREATE] = (0, _region_unavailable_once())

    sdk_sent, ours_sent, sdk, ours = _both(stub, setup, project_id="p1")
    assert ours_sent == sdk_sent
    assert [("region" in body) for *_, body in ours_sent] == [True, False]
    assert ours.sandbox_id == sdk.sandbox_id == "sbx_2"


def test_a_named_region_is_never_swapped(stub: StubApi) -> None:
    def setup() -> None:
        stub.routes[CREATE] = (0, _region_unavailable_once())

    sdk_sent, ours_sent, sdk, ours = _both(stub, setup, project_id="p1", region="eu-west-1")
    assert ours_sent == sdk_sent
    assert len(ours_sent) == 1
    assert type(ours) is type(sdk)
    assert str(ours) == str(sdk)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (401, {"error": "bad key", "code": "UNAUTHORIZED"}),
        (403, {"error": "trial", "code": "TRIAL_SANDBOX_SIZE"}),
        (429, {"error": "slow down", "limit": 2, "running": 2, "retryAfterS": 3}),
        (500, {"error": "down"}),
        (503, {"error": "closed", "code": "region_unavailable"}),
        (400, b"not json at all"),
    ],
)
def test_a_refused_create_raises_the_sdks_exception(stub: StubApi, status: int, body: Any) -> None:
    stub.routes[CREATE] = (status, body)
    _, _, sdk, ours = _both(stub, project_id="p1", region="us-east-1")
    assert isinstance(sdk, lizard.errors.LizardError)
    assert type(ours) is type(sdk)
    assert str(ours) == str(sdk)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"<html>not json</html>", ValueError),
        ([], TypeError),
        ({"id": "sbx_1"}, KeyError),
        ({"sandboxId": 7}, TypeError),
        ({"sandboxId": None}, TypeError),
    ],
)
def test_a_malformed_answer_raises_what_the_session_reports_as_malformed(
    stub: StubApi, body: Any, error: type[Exception]
) -> None:
    stub.routes[CREATE] = (201, body)
    with pytest.raises(error):
        create_sandbox(Transport(stub.url, KEY), api_key=KEY, api_url=stub.url, project_id="p1")


PROJECTS = ("GET", "/api/projects")


def test_a_session_reports_a_malformed_create_answer_as_such(stub: StubApi) -> None:
    stub.routes[PROJECTS] = (200, [{"id": "p1", "slug": "p1", "name": "p1"}])
    stub.routes[CREATE] = (201, {"sandboxId": ["not", "an", "id"]})
    config = SandboxConfig.from_env(api_key=KEY, api_url=stub.url, project_id="p1")
    with Session(config) as session, pytest.raises(LizardIntegrationError, match="create"):
        session.sandbox()
    assert CREATE in stub.seen  # the create's answer was refused, not the project look-up


def test_a_numeric_sandbox_id_is_deleted_before_the_answer_is_refused(stub: StubApi) -> None:
    """The SDK would take ``7`` as an id: it may name a sandbox, so it is not left billing."""
    stub.routes[PROJECTS] = (200, [{"id": "p1", "slug": "p1", "name": "p1"}])
    stub.routes[CREATE] = (201, {"sandboxId": 7})
    stub.routes[("DELETE", "/api/sandboxes/7")] = (200, {})
    config = SandboxConfig.from_env(api_key=KEY, api_url=stub.url, project_id="p1")
    with Session(config) as session, pytest.raises(LizardIntegrationError, match="create"):
        session.sandbox()
    assert stub.seen[-2:] == [CREATE, ("DELETE", "/api/sandboxes/7")]


def test_the_create_has_the_sdks_time_limit(stub: StubApi, monkeypatch: pytest.MonkeyPatch) -> None:
    """``lizard.config.HTTP_TIMEOUT_S``, read when sent: a create that never answers ends."""
    stalled = threading.Event()

    def never_answer(handler: Any) -> None:
        stalled.wait(10)

    stub.routes[CREATE] = (0, never_answer)
    monkeypatch.setattr(lizard.config, "HTTP_TIMEOUT_S", 0.5)
    try:
        with pytest.raises(httpx.ReadTimeout):
            create_sandbox(Transport(stub.url, KEY), api_key=KEY, project_id="p1")
    finally:
        stalled.set()


def test_an_argument_the_create_does_not_know_is_refused_unsent(stub: StubApi) -> None:
    with pytest.raises(TypeError, match="lizard_token"):
        create_sandbox(Transport(stub.url, KEY), api_key=KEY, project_id="p1", lizard_token="liz_x")
    assert stub.requests == []


def test_the_create_sends_every_header_the_sdk_sends(stub: StubApi) -> None:
    stub.routes[CREATE] = (201, {"sandboxId": "sbx_1"})
    headers = []
    for make in (
        lambda: Sandbox.create(api_key=KEY, api_url=stub.url, project_id="p1"),
        lambda: create_sandbox(Transport(stub.url, KEY), api_key=KEY, project_id="p1"),
    ):
        stub.requests.clear()
        make()
        headers.append({k.lower(): v for k, v in stub.requests[0][2].items()})
    assert headers[1] == headers[0]


def test_a_new_sessions_create_and_first_command_share_one_connection(
    sandbox_config: SandboxConfig,
    lizard_local: LocalServer,
    api_requests: Any,
    no_new_sandboxes: None,
) -> None:
    Session(sandbox_config)._create_kwargs()  # the project look-up, cached for the process
    api_requests.reset()
    with Session(sandbox_config) as session:
        assert run_command(session, ["true"]).exit_code == 0
        counters = lizard_local.counters()
        routes = api_requests.counts()
    assert routes == {api_requests.CREATE: 1, api_requests.EXEC: 1}
    assert counters["connections"] == 1, counters


def test_every_session_shares_one_ssl_context(monkeypatch: pytest.MonkeyPatch) -> None:
    first = shared_ssl_context()
    assert shared_ssl_context() is first
    clients = []
    for _ in range(2):
        transport = Transport("https://127.0.0.1:9", KEY)
        clients.append(transport._get_client())
        transport.close()
    contexts = {id(c._transport._pool._ssl_context) for c in clients}  # type: ignore[attr-defined]
    assert contexts == {id(first)}


def test_a_changed_ssl_cert_file_is_trusted_by_the_next_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """httpx's rule (``SSL_CERT_FILE``) holds for the shared context, read again on change."""
    with LocalServer(tls=True) as server:
        assert server.ca_file is not None
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        before = shared_ssl_context()
        monkeypatch.setenv("SSL_CERT_FILE", server.ca_file)
        after = shared_ssl_context()
        assert after is not before
        assert isinstance(after, ssl.SSLContext)
        config = SandboxConfig.from_env(
            api_key=server.env["LIZARD_API_KEY"],
            api_url=server.url,
            project_id=server.env["LIZARD_PROJECT_ID"],
            lifetime_ms=60_000,
        )
        with Session(config) as session:
            assert run_command(session, ["true"]).exit_code == 0
        assert server.sandboxes() == []


def _tls_config(server: LocalServer) -> SandboxConfig:
    return SandboxConfig.from_env(
        api_key=server.env["LIZARD_API_KEY"],
        api_url=server.url,
        project_id=server.env["LIZARD_PROJECT_ID"],
        lifetime_ms=60_000,
    )


def test_a_ca_bundle_updated_in_place_is_trusted_by_the_next_session(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As when each client loaded the bundle: the next session reads it again once it changed."""
    bundle = tmp_path / "ca.pem"
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    outputs = []
    for _ in range(2):  # two servers, two CAs, one bundle file rewritten in place
        with LocalServer(tls=True) as server:
            assert server.ca_file is not None
            shutil.copy(server.ca_file, bundle)
            with Session(_tls_config(server)) as session:
                outputs.append(run_command(session, ["echo", "ok"]).stdout)
    assert outputs == [b"ok\n", b"ok\n"]


def _run_in_both(session: Session) -> tuple[str, str]:
    """Fork; parent and child each run a command on ``session`` at once; what each got."""
    read, write = os.pipe()
    pid = os.fork()
    me = "child" if pid == 0 else "parent"
    try:
        got = run_command(session, ["sh", "-c", f"sleep 0.05; echo {me}"]).stdout
        text = got.decode().strip()
    except BaseException as exc:  # reported in the result, not hidden
        text = f"{type(exc).__name__}: {exc}"[:200]
    if pid == 0:
        os.write(write, text.encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode()
    return text, child


def test_a_child_forked_after_the_create_uses_a_connection_of_its_own(
    sandbox_config: SandboxConfig, no_new_sandboxes: None
) -> None:
    """Two processes on one socket would read each other's answers."""
    outcomes = []
    for _ in range(3):
        with Session(sandbox_config) as session:
            session.sandbox()
            outcomes.append(_run_in_both(session))
    assert outcomes == [("parent", "child")] * 3


def test_over_tls_a_child_leaves_the_parents_connection_working(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The child's TLS records (or its close) on the parent's connection would break it."""
    with LocalServer(tls=True) as server:
        assert server.ca_file is not None
        monkeypatch.setenv("SSL_CERT_FILE", server.ca_file)
        with Session(_tls_config(server)) as session:
            session.sandbox()
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    run_command(session, ["true"])
                    session.close()  # drops the parent's client without closing it
                    code = 0
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0
            assert run_command(session, ["echo", "parent"]).stdout == b"parent\n"

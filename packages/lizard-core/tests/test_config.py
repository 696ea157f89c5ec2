from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import re
import socket
import typing
from collections.abc import Iterator
from typing import Any

import lizard
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lizard_core import _redact
from lizard_core.config import (
    DEFAULT_API_URL,
    DEFAULT_LIFETIME_MS,
    LIZARD_CORE_VERSION,
    MAX_ALLOWED_HOSTS,
    MAX_LIFETIME_MS,
    METADATA_INTEGRATION_KEY,
    METADATA_MACHINE_KEY,
    METADATA_RUN_KEY,
    METADATA_VERSION_KEY,
    MIN_LIFETIME_MS,
    SIZES,
    BasicSandboxOptions,
    SandboxConfig,
    SandboxOptions,
)
from lizard_core.origin import machine_id, run_id

KEY = "liz_test_0123456789abcdef"
ENV = {"LIZARD_API_KEY": KEY, "LIZARD_PROJECT_ID": "proj_123"}


@pytest.fixture(autouse=True)
def forget_generated_keys() -> Iterator[None]:
    """Every key a config is built with is scrubbed from error text for the rest of the process;
    keep the random keys generated here from scrubbing other tests' messages."""
    with _redact._lock:
        known = set(_redact._known)
    yield
    with _redact._lock:
        _redact._known.intersection_update(known)


def build(**kwargs: Any) -> SandboxConfig:
    kwargs.setdefault("environ", ENV)
    return SandboxConfig.from_env(**kwargs)


# ── sources and precedence ─────────────────────────────────────────────────


def test_reads_the_three_lizard_variables() -> None:
    config = build(environ={**ENV, "LIZARD_API_URL": "https://eu.lizard.example/"})
    assert config.api_key.reveal() == KEY
    assert config.project_id == "proj_123"
    assert config.api_url == "https://eu.lizard.example"


def test_arguments_win_over_the_environment() -> None:
    config = build(
        environ={**ENV, "LIZARD_API_URL": "https://env.example"},
        api_key="liz_argument_key_000",
        api_url="https://arg.example",
        project_id="my-project",
    )
    assert config.api_key.reveal() == "liz_argument_key_000"
    assert config.api_url == "https://arg.example"
    assert config.project_id == "my-project"


def test_reads_os_environ_when_no_mapping_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIZARD_API_KEY", KEY)
    monkeypatch.setenv("LIZARD_PROJECT_ID", "from-os-environ")
    monkeypatch.delenv("LIZARD_API_URL", raising=False)
    config = SandboxConfig.from_env()
    assert config.project_id == "from-os-environ"
    assert config.api_url == DEFAULT_API_URL


def test_defaults() -> None:
    config = build()
    assert config.api_url == DEFAULT_API_URL
    assert config.template == "base"
    assert config.size is None
    assert config.lifetime_ms == DEFAULT_LIFETIME_MS
    assert config.region is None
    assert config.internet_access is True
    assert config.allowed_hosts is None
    assert dict(config.envs) == {}
    assert config.integration == "lizard-core"
    assert config.integration_version == LIZARD_CORE_VERSION


@pytest.mark.parametrize("environ", [{}, {"LIZARD_API_KEY": ""}], ids=["unset", "empty"])
def test_missing_api_key_names_the_variable(environ: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="LIZARD_API_KEY"):
        SandboxConfig.from_env(environ={**environ, "LIZARD_PROJECT_ID": "p"})


def test_explicit_empty_api_key_is_refused() -> None:
    with pytest.raises(ValueError, match="LIZARD_API_KEY"):
        build(api_key="")


@pytest.mark.parametrize("environ", [{}, {"LIZARD_PROJECT_ID": ""}], ids=["unset", "empty"])
def test_a_missing_project_is_enough_to_attach_and_named_when_creating(
    environ: dict[str, str],
) -> None:
    config = SandboxConfig.from_env(environ={**environ, "LIZARD_API_KEY": KEY})
    assert config.project_id is None
    assert "project_id=None" in repr(config)
    with pytest.raises(ValueError, match="LIZARD_PROJECT_ID"):
        config.require_project()
    with pytest.raises(ValueError, match="LIZARD_PROJECT_ID"):
        config.create_kwargs()
    assert config.api_kwargs() == {"api_key": KEY, "api_url": DEFAULT_API_URL}
    assert config.replace(project_id="proj_9").require_project() == "proj_9"


def test_an_explicit_empty_project_is_refused() -> None:
    with pytest.raises(ValueError, match="LIZARD_PROJECT_ID"):
        build(project_id="")


@pytest.mark.parametrize("project", ["proj_123", "my-project", "My Project"])
def test_project_may_be_an_id_slug_or_name(project: str) -> None:
    config = build(project_id=project)
    assert config.project_id == project
    assert config.create_kwargs()["project"] == project


@pytest.mark.parametrize("project", [" p", "p\n", "a\x00b", "   "])
def test_malformed_project_is_refused(project: str) -> None:
    with pytest.raises(ValueError, match="project"):
        build(project_id=project)


# ── the API URL ────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("url", "normalised"),
    [
        ("https://lizard.build", "https://lizard.build"),
        ("https://lizard.build/", "https://lizard.build"),
        ("HTTPS://Lizard.Example:8443/prefix/", "https://Lizard.Example:8443/prefix"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://127.4.5.6", "http://127.4.5.6"),
        ("http://localhost:9", "http://localhost:9"),
        ("http://LOCALHOST", "http://LOCALHOST"),
        ("http://[::1]:7000/", "http://[::1]:7000"),
    ],
)
def test_valid_urls_are_normalised(url: str, normalised: str) -> None:
    assert build(api_url=url).api_url == normalised


@pytest.mark.parametrize(
    "url",
    [
        "http://lizard.build",
        "http://10.0.0.1",
        "http://192.168.1.5:8080",
        "http://localhost.evil.example",
        "http://127.0.0.1.nip.io",
        "http://[::2]",
        "ftp://lizard.build",
        "lizard.build",
        "//lizard.build",
        "https://",
        "https://user:secret@lizard.build",
        "https://user@lizard.build",
        "https://lizard.build?x=1",
        "https://lizard.build/#top",
        "https://lizard.build:99999",
        " https://lizard.build",
        "https://lizard.build/a b",
        "https://lizard.build/\n",
        "",
    ],
)
def test_invalid_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="api_url"):
        build(api_url=url)


def test_invalid_url_from_the_environment_names_the_variable() -> None:
    with pytest.raises(ValueError, match="LIZARD_API_URL"):
        build(environ={**ENV, "LIZARD_API_URL": "http://lizard.build"})


def test_url_error_does_not_echo_credentials() -> None:
    with pytest.raises(ValueError, match="credentials") as caught:
        build(api_url="https://bob:hunter2-secret@lizard.build")
    assert "hunter2" not in str(caught.value)


# ── values ─────────────────────────────────────────────────────────────────


def test_sizes_are_exactly_the_sdks() -> None:
    hints = typing.get_type_hints(lizard.Sandbox.create)
    sdk_sizes = {arg for arg in typing.get_args(hints["size"]) if arg is not type(None)}
    literal_args: set[object] = set()
    for arg in sdk_sizes:
        literal_args.update(typing.get_args(arg) or (arg,))
    assert set(SIZES) == literal_args
    assert len(SIZES) == 6


@pytest.mark.parametrize("size", SIZES)
def test_every_size_is_accepted(size: str) -> None:
    config = build(size=size)
    assert config.create_kwargs()["size"] == size


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"size": "xl"}, ValueError),
        ({"size": "Small"}, ValueError),
        ({"size": 2}, TypeError),
        ({"lifetime_ms": True}, TypeError),
        ({"lifetime_ms": 60_000.0}, TypeError),
        ({"lifetime_ms": "60000"}, TypeError),
        ({"lifetime_ms": 0}, ValueError),
        ({"lifetime_ms": MIN_LIFETIME_MS - 1}, ValueError),
        ({"lifetime_ms": MAX_LIFETIME_MS + 1}, ValueError),
        ({"lifetime_ms": -5}, ValueError),
        ({"template": ""}, ValueError),
        ({"template": "base; rm -rf /"}, ValueError),
        ({"template": None}, TypeError),
        ({"region": "US EAST"}, ValueError),
        ({"region": 1}, TypeError),
        ({"internet_access": 0}, TypeError),
        ({"internet_access": "no"}, TypeError),
        ({"integration": "Smol Agents"}, ValueError),
        ({"integration": None}, TypeError),
        ({"integration_version": ""}, ValueError),
        ({"integration_version": 1.0}, TypeError),
        ({"api_key": 12345}, TypeError),
        ({"api_key": b"liz_bytes_key_0000"}, TypeError),
        ({"api_key": "liz key with spaces"}, ValueError),
        ({"api_key": "liz_ключ_non_ascii"}, ValueError),
        ({"api_url": 443}, TypeError),
        ({"project_id": 7}, TypeError),
        ({"environ": [("LIZARD_API_KEY", KEY)]}, TypeError),
    ],
)
def test_invalid_values_raise(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        build(**kwargs)


def test_lifetime_bounds_are_inclusive() -> None:
    assert build(lifetime_ms=MIN_LIFETIME_MS).lifetime_ms == MIN_LIFETIME_MS
    assert build(lifetime_ms=MAX_LIFETIME_MS).lifetime_ms == MAX_LIFETIME_MS


def test_metadata_is_always_tagged_with_the_integration() -> None:
    config = build(metadata={"team": "search"}, integration="smolagents-lizard")
    assert dict(config.metadata) == {"team": "search"}
    assert config.sandbox_metadata == {
        "team": "search",
        METADATA_INTEGRATION_KEY: "smolagents-lizard",
        METADATA_VERSION_KEY: LIZARD_CORE_VERSION,
        METADATA_RUN_KEY: run_id(),
        METADATA_MACHINE_KEY: machine_id(),
    }
    assert config.create_kwargs()["metadata"] == config.sandbox_metadata
    bare = build(integration_version="1.2.3").replace(run_id="r-1", machine_id="m.2")
    assert bare.sandbox_metadata == {
        METADATA_INTEGRATION_KEY: "lizard-core",
        METADATA_VERSION_KEY: "1.2.3",
        METADATA_RUN_KEY: "r-1",
        METADATA_MACHINE_KEY: "m.2",
    }


def test_run_and_machine_ids_are_plain_stable_and_reveal_nothing() -> None:
    assert run_id() == build().run_id == build().run_id
    assert re.fullmatch(r"[0-9a-f]{16}", machine_id())
    assert socket.gethostname() not in machine_id()
    bad_ids = (("", ValueError), ("a b", ValueError), ("x" * 65, ValueError), (1, TypeError))
    for bad, error in bad_ids:
        with pytest.raises(error):
            build().replace(run_id=bad)
        with pytest.raises(error):
            build().replace(machine_id=bad)


@pytest.mark.parametrize(
    "key", [METADATA_INTEGRATION_KEY, METADATA_VERSION_KEY, METADATA_RUN_KEY, METADATA_MACHINE_KEY]
)
def test_metadata_cannot_override_the_integration_tags(key: str) -> None:
    with pytest.raises(ValueError, match="set by the integration"):
        build(metadata={key: "spoofed"})


@pytest.mark.parametrize(
    ("mapping", "error"),
    [
        ([("a", "b")], TypeError),
        ("a=b", TypeError),
        ({1: "x"}, TypeError),
        ({"a": 1}, TypeError),
        ({"a": None}, TypeError),
        ({"": "x"}, ValueError),
        ({"a\x00": "x"}, ValueError),
        ({"a": "x\x00"}, ValueError),
    ],
)
@pytest.mark.parametrize("name", ["metadata", "envs"])
def test_invalid_mappings_raise(name: str, mapping: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=name):
        build(**{name: mapping})


def test_env_names_must_not_contain_equals() -> None:
    with pytest.raises(ValueError, match="envs"):
        build(envs={"A=B": "x"})


@pytest.mark.parametrize("name", ["envs", "metadata"])
def test_the_api_key_never_goes_into_envs_or_metadata(name: str) -> None:
    with pytest.raises(ValueError, match="API key") as caught:
        build(**{name: {"TOKEN": f"Bearer {KEY}"}})
    assert KEY not in str(caught.value)


def test_a_short_toy_key_is_compared_exactly_not_as_a_substring() -> None:
    # (A key that no other test's text contains: registered keys are scrubbed process-wide.)
    config = build(api_key="Zq9x", envs={"FLAGS": "-k Zq9xy"})
    assert config.envs["FLAGS"] == "-k Zq9xy"
    with pytest.raises(ValueError, match="API key"):
        build(api_key="Zq9x", envs={"K": "Zq9x"})


def test_envs_are_passed_only_when_given() -> None:
    assert "envs" not in build().create_kwargs()
    assert build(envs={"A": "1"}).create_kwargs()["envs"] == {"A": "1"}


def test_allowed_hosts_imply_no_internet() -> None:
    config = build(allowed_hosts=["pypi.org", "*.pythonhosted.org"])
    assert config.internet_access is False
    assert config.allowed_hosts == ("pypi.org", "*.pythonhosted.org")
    kwargs = config.create_kwargs()
    assert kwargs["internet_access"] is False
    assert kwargs["allowed_hosts"] == ["pypi.org", "*.pythonhosted.org"]


@pytest.mark.parametrize(
    ("hosts", "error"),
    [
        ("pypi.org", TypeError),
        (b"pypi.org", TypeError),
        (42, TypeError),
        ([1], TypeError),
        ([], ValueError),
        ([""], ValueError),
        (["py pi.org"], ValueError),
        ([f"h{i}.example" for i in range(MAX_ALLOWED_HOSTS + 1)], ValueError),
    ],
)
def test_invalid_allowed_hosts_raise(hosts: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="allowed_hosts"):
        build(allowed_hosts=hosts)


def test_allowed_hosts_limit_is_inclusive() -> None:
    hosts = [f"h{i}.example" for i in range(MAX_ALLOWED_HOSTS)]
    assert build(allowed_hosts=hosts).allowed_hosts == tuple(hosts)


# ── redaction and immutability ─────────────────────────────────────────────


def test_the_key_never_appears_in_repr_str_or_format() -> None:
    config = build(envs={"SECRET_TOKEN": "envvalue-not-shown"}, metadata={"k": "v"})
    for text in (repr(config), str(config), f"{config}", f"{config!r:>10}", repr(config.api_key)):
        assert KEY not in text
        assert "envvalue-not-shown" not in text
    assert "***" in repr(config)
    assert "SECRET_TOKEN" in repr(config)  # names are shown, values are not
    assert str(config.api_key) == "***"


def test_config_is_frozen() -> None:
    config = build(metadata={"k": "v"}, envs={"A": "1"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.lifetime_ms = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.metadata["k"] = "x"  # type: ignore[index]
    with pytest.raises(TypeError):
        config.envs["A"] = "2"  # type: ignore[index]


def test_configs_compare_hash_copy_and_pickle() -> None:
    config = build(metadata={"k": "v"}, envs={"A": "1"}, allowed_hosts=["pypi.org"])
    assert config == build(metadata={"k": "v"}, envs={"A": "1"}, allowed_hosts=["pypi.org"])
    assert config != build(metadata={"k": "w"}, envs={"A": "1"}, allowed_hosts=["pypi.org"])
    assert hash(config) == hash(copy.deepcopy(config))
    restored = pickle.loads(pickle.dumps(config))
    assert restored == config
    assert restored.api_key.reveal() == KEY


def test_replace_validates_again() -> None:
    config = build()
    assert config.replace(lifetime_ms=60_000).lifetime_ms == 60_000
    assert config.replace(api_key="liz_other_key_99999").api_key.reveal() == "liz_other_key_99999"
    assert config.replace(allowed_hosts=["a.example"]).internet_access is False
    assert config.replace(integration="x-lizard").sandbox_metadata["integration"] == "x-lizard"
    with pytest.raises(ValueError, match="lifetime_ms"):
        config.replace(lifetime_ms=0)
    with pytest.raises(ValueError, match="https"):
        config.replace(api_url="http://lizard.build")


def test_direct_construction_requires_a_secret() -> None:
    with pytest.raises(TypeError, match="Secret"):
        SandboxConfig(api_key=KEY, api_url=DEFAULT_API_URL, project_id="p")  # type: ignore[arg-type]


def test_create_kwargs_fit_the_sdk_signature() -> None:
    config = build(
        size="small",
        region="eu-west-1",
        metadata={"k": "v"},
        envs={"A": "1"},
        allowed_hosts=["pypi.org"],
        template="interpreter",
    )
    kwargs = config.create_kwargs()
    bound = inspect.signature(lizard.Sandbox.create).bind(**kwargs)
    assert bound.arguments["template"] == "interpreter"
    assert bound.arguments["timeout_ms"] == config.lifetime_ms
    assert bound.arguments["api_key"] == KEY
    assert config.api_kwargs() == {"api_key": KEY, "api_url": DEFAULT_API_URL}


# ── property: any input is either valid or TypeError/ValueError, with no I/O ───


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fail any socket use, DNS included, and record the attempt."""
    attempts: list[str] = []

    def refuse(name: str) -> Any:
        def refused(*args: object, **kwargs: object) -> None:
            attempts.append(name)
            raise AssertionError(f"configuration attempted I/O: {name}")

        return refused

    monkeypatch.setattr(socket, "socket", refuse("socket"))
    monkeypatch.setattr(socket, "create_connection", refuse("create_connection"))
    monkeypatch.setattr(socket, "getaddrinfo", refuse("getaddrinfo"))
    monkeypatch.setattr(socket, "gethostbyname", refuse("gethostbyname"))
    return attempts


junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.binary(max_size=10),
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    st.dictionaries(st.integers(), st.integers(), max_size=2),
    st.tuples(st.text(max_size=3)),
)

FIELD_STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "api_key": st.one_of(st.just(KEY), st.text(max_size=30), junk),
    "api_url": st.one_of(
        st.sampled_from(
            ["https://lizard.build", "http://127.0.0.1:1", "http://lizard.build", "https://"]
        ),
        st.text(max_size=30).map(lambda s: "https://" + s),
        st.text(max_size=30).map(lambda s: "http://" + s),
        junk,
    ),
    "project_id": st.one_of(st.just("proj_1"), st.text(max_size=10), junk),
    "template": st.one_of(st.sampled_from(["base", "interpreter"]), st.text(max_size=10), junk),
    "size": st.one_of(st.sampled_from(SIZES), st.text(max_size=6), junk),
    "lifetime_ms": st.one_of(st.integers(min_value=-10, max_value=2**33), junk),
    "region": st.one_of(st.just("us-east-1"), st.text(max_size=10), junk),
    "metadata": st.one_of(
        st.dictionaries(st.text(max_size=12), st.text(max_size=8), max_size=3), junk
    ),
    "envs": st.one_of(st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3), junk),
    "internet_access": st.one_of(st.booleans(), junk),
    "allowed_hosts": st.one_of(st.lists(st.text(max_size=12), max_size=4), junk),
    "integration": st.one_of(st.just("x-lizard"), st.text(max_size=10), junk),
    "integration_version": st.one_of(st.just("1.0"), st.text(max_size=10), junk),
}


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.fixed_dictionaries(
        {}, optional={name: strategy for name, strategy in FIELD_STRATEGIES.items()}
    )
)
def test_any_input_is_valid_or_raises_type_or_value_error(
    no_network: list[str], kwargs: dict[str, Any]
) -> None:
    try:
        config = build(**kwargs)
    except (TypeError, ValueError) as error:
        text = str(error)
        key = kwargs.get("api_key")
        if isinstance(key, str) and len(key) >= 8:
            assert key not in text
        return
    finally:
        assert no_network == []
    # Whatever was accepted satisfies every invariant the API relies on.
    assert config.api_url.startswith("https://") or config.api_url.startswith("http://")
    if config.api_url.startswith("http://"):
        host = config.api_url.split("//", 1)[1]
        assert host.lower().startswith(("127.", "localhost", "[::1]"))
    assert not config.api_url.endswith("/")
    assert config.size is None or config.size in SIZES
    assert MIN_LIFETIME_MS <= config.lifetime_ms <= MAX_LIFETIME_MS
    assert isinstance(config.internet_access, bool)
    assert config.sandbox_metadata[METADATA_INTEGRATION_KEY] == config.integration
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in config.envs.items())
    key = config.api_key.reveal()
    if len(key) >= 8:
        assert key not in repr(config)
        assert all(key not in v for v in config.envs.values())
    inspect.signature(lizard.Sandbox.create).bind(**config.create_kwargs())


def test_sandbox_options_are_the_settings_from_env_takes() -> None:
    parameters = set(inspect.signature(SandboxConfig.from_env).parameters)
    settings = parameters - {"integration", "integration_version", "environ"}
    assert set(SandboxOptions.__annotations__) == settings
    assert set(BasicSandboxOptions.__annotations__) < settings
    options: SandboxOptions = {"api_key": "k", "api_url": "http://127.0.0.1:9", "region": "eu"}
    assert SandboxConfig.from_env(**options, environ={}).region == "eu"


def test_creation_options_are_refused_by_name_when_attaching() -> None:
    from lizard_core.config import CREATION_OPTIONS, SandboxOptions, refuse_creation_options

    refuse_creation_options({"api_key": "k", "project_id": "p"})  # connection settings pass
    with pytest.raises(ValueError, match="allowed_hosts, internet_access apply only"):
        refuse_creation_options({"internet_access": False, "allowed_hosts": ["a.example"]})
    shaping = set(SandboxOptions.__annotations__) - {"api_key", "api_url", "project_id"}
    assert set(CREATION_OPTIONS) == shaping

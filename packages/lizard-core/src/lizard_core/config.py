"""Sandbox settings from arguments and ``LIZARD_*`` environment variables.

Contract:

- :meth:`SandboxConfig.from_env` takes each setting from its argument when one is given, else
  from ``LIZARD_API_KEY``, ``LIZARD_PROJECT_ID`` and ``LIZARD_API_URL``, else from a default.
  A missing API key raises :class:`ValueError` naming the variable to set.
- The project is needed only to create a sandbox, so it may be missing (``project_id`` None)
  in a configuration used to attach to or destroy an existing one. Whatever would create
  (:meth:`SandboxConfig.create_kwargs`, and a :class:`~lizard_core.session.Session` without a
  ``sandbox_id``, at construction) calls :meth:`SandboxConfig.require_project`, which raises
  :class:`ValueError` naming ``LIZARD_PROJECT_ID``, before any request. A project given but
  empty or malformed is refused at once.
- Every value is checked when the configuration is built: a wrong type raises
  :class:`TypeError`, a wrong value :class:`ValueError`. Building a configuration performs no
  I/O: no request, no DNS lookup, no project resolution. The project may be an id, a slug or a
  name; the SDK resolves it on the first create (one ``GET /api/projects`` per process, cached
  by the SDK).
- The API URL must use HTTPS, except for loopback hosts (``localhost``, ``127.0.0.0/8``,
  ``::1``), so a local emulator works over plain HTTP. Credentials, a query or a fragment in
  the URL are refused; a trailing slash is dropped (the SDK appends ``/api/...``).
- The API key is held as a :class:`~lizard_core._redact.Secret`: it never appears in ``repr``,
  ``str``, logs or exception text, and the configuration refuses ``envs`` or ``metadata`` that
  would carry it into a sandbox or onto the platform. Nothing from the host environment other
  than the three variables above is read, and nothing is copied into a sandbox unless passed
  in ``envs``.
- The metadata sent at create always carries the integration's name and version, the run that
  created the sandbox and the machine it ran on (:attr:`SandboxConfig.sandbox_metadata`,
  :mod:`lizard_core.origin`); callers cannot override those four keys.
- The configuration is immutable; :meth:`SandboxConfig.replace` returns a validated copy.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypedDict, cast, get_args
from urllib.parse import urlsplit, urlunsplit

from lizard_core._redact import Secret, register_secret
from lizard_core.checks import check_str_map, package_version
from lizard_core.origin import check_origin_id, machine_id, run_id

__all__ = [
    "CREATION_OPTIONS",
    "DEFAULT_API_URL",
    "DEFAULT_LIFETIME_MS",
    "DEFAULT_TEMPLATE",
    "LIZARD_CORE_VERSION",
    "MAX_ALLOWED_HOSTS",
    "MAX_LIFETIME_MS",
    "METADATA_INTEGRATION_KEY",
    "METADATA_MACHINE_KEY",
    "METADATA_RUN_KEY",
    "METADATA_VERSION_KEY",
    "MIN_LIFETIME_MS",
    "SIZES",
    "BasicSandboxOptions",
    "SandboxConfig",
    "SandboxOptions",
    "Size",
    "refuse_creation_options",
    "wanted_tags",
]

Size = Literal["nano", "mini", "small", "medium", "large", "big"]
"""A machine size the SDK knows (lizard-sdk 1.0.23)."""

SIZES: Final[tuple[Size, ...]] = get_args(Size)
"""Every machine size, smallest first: 0.5, 1, 2, 4, 8 and 16 vCPU."""

DEFAULT_API_URL: Final = "https://lizard.build"
"""Where the SDK sends requests when neither ``api_url`` nor ``LIZARD_API_URL`` is set."""

DEFAULT_TEMPLATE: Final = "base"
"""The template used when none is given: a shell, coreutils and ``python3``."""

DEFAULT_LIFETIME_MS: Final = 900_000
"""Sandbox lifetime when none is given: 15 minutes."""

MIN_LIFETIME_MS: Final = 1_000
"""Shortest lifetime: the platform's minimum for ``set_timeout``, which keep-alive uses."""

MAX_LIFETIME_MS: Final = 2_147_483_647
"""Longest lifetime the platform documents. ``0`` (no deadline) is refused on purpose: a sandbox
without a deadline outlives a host process that crashed before destroying it."""

MAX_ALLOWED_HOSTS: Final = 50
"""The platform's limit on ``allowed_hosts`` entries."""

METADATA_INTEGRATION_KEY: Final = "integration"
"""Metadata key that names the integration which created a sandbox (the same in every release)."""

METADATA_VERSION_KEY: Final = "integration_version"
"""Metadata key that carries the integration's version."""

METADATA_RUN_KEY: Final = "integration_run"
"""Metadata key that carries the id of the run (process) that created a sandbox."""

METADATA_MACHINE_KEY: Final = "integration_machine"
"""Metadata key that carries the id of the machine that created a sandbox."""

_RESERVED_METADATA_KEYS: Final = frozenset(
    {METADATA_INTEGRATION_KEY, METADATA_VERSION_KEY, METADATA_RUN_KEY, METADATA_MACHINE_KEY}
)
_LOOPBACK_NAMES: Final = frozenset({"localhost"})
_TEMPLATE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
_REGION: Final = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_INTEGRATION: Final = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_VERSION: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}")
_PRINTABLE_ASCII: Final = re.compile(r"[\x21-\x7e]+")
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")
_NO_PROJECT: Final = (
    "No Lizard project: pass project_id= or set LIZARD_PROJECT_ID (the project's id, slug or "
    "name); a project is needed to create a sandbox, not to attach to one"
)
# Keys shorter than this are checked against envs and metadata by equality only: a substring
# test would refuse ordinary values that merely contain a short toy key such as "test".
_KEY_SUBSTRING_MIN: Final = 8


LIZARD_CORE_VERSION: Final = package_version("lizard-core")
"""The installed version of lizard-core: the default ``integration_version``."""


class _FrozenMap(Mapping[str, str]):
    """An immutable, hashable, picklable ``str -> str`` mapping."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, str] | None = None) -> None:
        self._data: dict[str, str] = dict(data or {})

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    def __repr__(self) -> str:
        return repr(self._data)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require_str(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    return value


def _is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_api_url(value: object, source: str) -> str:
    url = _require_str(source, value)
    if not url or url != url.strip() or _CONTROL.search(url) or " " in url:
        raise ValueError(f"{source} must be an absolute URL without spaces or control characters")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"{source} must be an absolute https:// URL, e.g. {DEFAULT_API_URL}")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{source} must not contain credentials; pass the API key separately")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise ValueError(f"{source} must not have a query or fragment")
    try:
        parts.port  # noqa: B018 - parsing the port validates it
    except ValueError:
        raise ValueError(f"{source} has an invalid port") from None
    if scheme == "http" and not _is_loopback(parts.hostname):
        raise ValueError(
            f"{source} must use https:// (plain http:// is allowed only for localhost, "
            "127.0.0.0/8 and ::1)"
        )
    # The SDK builds f"{api_url}/api/...": a trailing slash would give "//api".
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def _check_str_map(name: str, value: object, *, env_names: bool) -> _FrozenMap:
    return _FrozenMap(check_str_map(value, name=name, env_names=env_names))


def _check_allowed_hosts(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence | frozenset | set):
        raise TypeError(f"allowed_hosts must be a list of host names, not {type(value).__name__}")
    hosts = tuple(cast(Sequence[object], value))
    if not hosts:
        raise ValueError("allowed_hosts must not be empty; pass None for no list")
    if len(hosts) > MAX_ALLOWED_HOSTS:
        raise ValueError(f"allowed_hosts takes at most {MAX_ALLOWED_HOSTS} entries")
    checked: list[str] = []
    for host in hosts:
        if not isinstance(host, str):
            raise TypeError(f"allowed_hosts entries must be str, not {type(host).__name__}")
        if not host or len(host) > 253 or not _PRINTABLE_ASCII.fullmatch(host):
            raise ValueError(f"allowed_hosts entry {host!r} is not a host name or address")
        checked.append(host)
    return tuple(checked)


@dataclass(frozen=True, kw_only=True, repr=False)
class SandboxConfig:
    """Everything needed to create or attach to one Lizard sandbox; validated, immutable.

    Build it with :meth:`from_env`. Constructing it directly runs the same validation but reads
    no environment variable and takes the key as a :class:`~lizard_core._redact.Secret`.
    """

    api_key: Secret
    """The API key; ``api_key.reveal()`` is the only way to read it."""

    api_url: str
    """Normalised API base URL (HTTPS, or HTTP on a loopback host), no trailing slash."""

    project_id: str | None = None
    """The project sandboxes are billed to: its id, slug or name (the SDK resolves it); None
    when this configuration only attaches to existing sandboxes (see :meth:`require_project`)."""

    template: str = DEFAULT_TEMPLATE
    """Template to create sandboxes from, e.g. ``base`` or ``interpreter``."""

    size: Size | None = None
    """Machine size, or None for the platform's default."""

    lifetime_ms: int = DEFAULT_LIFETIME_MS
    """Sandbox lifetime in milliseconds from create (or from the last keep-alive)."""

    region: str | None = None
    """Region to run in, or None for the SDK's default (``us-east-1``)."""

    metadata: Mapping[str, str] = field(default_factory=_FrozenMap, hash=False)
    """The caller's own labels; :attr:`sandbox_metadata` adds the integration tags."""

    envs: Mapping[str, str] = field(default_factory=_FrozenMap, hash=False)
    """Environment variables for every command in the sandbox; nothing else is copied in."""

    internet_access: bool = True
    """False: no internet for the sandbox's whole life. Forced False by ``allowed_hosts``."""

    allowed_hosts: tuple[str, ...] | None = None
    """With no internet, the hosts that stay reachable (at most 50)."""

    integration: str = "lizard-core"
    """Name of the integration, recorded in every sandbox's metadata."""

    integration_version: str = LIZARD_CORE_VERSION
    """Version of the integration, recorded in every sandbox's metadata."""

    run_id: str = field(default_factory=run_id)
    """The run recorded in every sandbox's metadata: this process's, unless replaced."""

    machine_id: str = field(default_factory=machine_id)
    """The machine recorded in every sandbox's metadata: this one's, unless replaced."""

    def __post_init__(self) -> None:
        if not isinstance(self.api_key, Secret):
            raise TypeError("api_key must be a Secret; use SandboxConfig.from_env(api_key=...)")
        key = self.api_key.reveal()
        if not key:
            raise ValueError("No Lizard API key: pass api_key= or set LIZARD_API_KEY")
        if len(key) > 4096 or not _PRINTABLE_ASCII.fullmatch(key):
            # Checked here, not at the first request: httpx would refuse the header later.
            raise ValueError("The Lizard API key must be printable ASCII without spaces")
        register_secret(key)

        _set = object.__setattr__  # the dataclass is frozen; normalise values in place once
        _set(self, "api_url", _check_api_url(self.api_url, "api_url"))

        if self.project_id is not None:
            project = _require_str("project_id", self.project_id)
            if not project.strip():
                raise ValueError(_NO_PROJECT)
            if project != project.strip() or _CONTROL.search(project) or len(project) > 256:
                raise ValueError(
                    "project_id must not have surrounding spaces or control characters"
                )

        template = _require_str("template", self.template)
        if not _TEMPLATE.fullmatch(template):
            raise ValueError(f"template {template!r} is not a valid template name")

        if self.size is not None:
            size = _require_str("size", self.size)
            if size not in SIZES:
                raise ValueError(f"size must be one of {', '.join(SIZES)}; got {size!r}")

        if not _is_int(self.lifetime_ms):
            raise TypeError(f"lifetime_ms must be an int, not {type(self.lifetime_ms).__name__}")
        if not MIN_LIFETIME_MS <= self.lifetime_ms <= MAX_LIFETIME_MS:
            raise ValueError(
                f"lifetime_ms must be between {MIN_LIFETIME_MS} and {MAX_LIFETIME_MS}; "
                f"got {self.lifetime_ms}"
            )

        if self.region is not None:
            region = _require_str("region", self.region)
            if not _REGION.fullmatch(region):
                raise ValueError(f"region {region!r} is not a region name such as 'us-east-1'")

        metadata = _check_str_map("metadata", self.metadata, env_names=False)
        reserved = _RESERVED_METADATA_KEYS.intersection(metadata)
        if reserved:
            raise ValueError(f"metadata keys {sorted(reserved)} are set by the integration")
        envs = _check_str_map("envs", self.envs, env_names=True)
        for name, values in (("envs", envs.values()), ("metadata", metadata.values())):
            if any(_carries_key(value, key) for value in values):
                raise ValueError(f"{name} must not carry the Lizard API key")
        _set(self, "metadata", metadata)
        _set(self, "envs", envs)

        if type(self.internet_access) is not bool:
            raise TypeError(
                f"internet_access must be a bool, not {type(self.internet_access).__name__}"
            )
        hosts = _check_allowed_hosts(self.allowed_hosts)
        _set(self, "allowed_hosts", hosts)
        if hosts is not None:
            # The SDK's rule: allowed_hosts implies no internet.
            _set(self, "internet_access", False)

        integration = _require_str("integration", self.integration)
        if not _INTEGRATION.fullmatch(integration):
            raise ValueError(f"integration {integration!r} must be a lower-case package name")
        version = _require_str("integration_version", self.integration_version)
        if not _VERSION.fullmatch(version):
            raise ValueError(f"integration_version {version!r} is not a version string")
        check_origin_id(self.run_id, name="run_id")
        check_origin_id(self.machine_id, name="machine_id")

    @classmethod
    def from_env(
        cls,
        *,
        api_key: str | None = None,
        api_url: str | None = None,
        project_id: str | None = None,
        template: str = DEFAULT_TEMPLATE,
        size: Size | None = None,
        lifetime_ms: int = DEFAULT_LIFETIME_MS,
        region: str | None = None,
        metadata: Mapping[str, str] | None = None,
        envs: Mapping[str, str] | None = None,
        internet_access: bool = True,
        allowed_hosts: Sequence[str] | None = None,
        integration: str = "lizard-core",
        integration_version: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> SandboxConfig:
        """Build a configuration from arguments, falling back to ``LIZARD_*`` variables.

        ``api_key``, ``api_url`` and ``project_id`` fall back to ``LIZARD_API_KEY``,
        ``LIZARD_API_URL`` and ``LIZARD_PROJECT_ID`` when None (an empty variable counts as
        unset). ``environ`` replaces ``os.environ`` as the source of those variables.
        ``integration_version`` defaults to lizard-core's own version. A missing project is
        allowed (``project_id`` None: enough to attach); a missing key is not. Raises
        :class:`TypeError` or :class:`ValueError` for invalid input; performs no I/O.
        """
        env = os.environ if environ is None else environ
        if not isinstance(env, Mapping):
            raise TypeError("environ must be a mapping")

        if api_key is None:
            api_key = env.get("LIZARD_API_KEY") or None
            if api_key is None:
                raise ValueError("No Lizard API key: pass api_key= or set LIZARD_API_KEY")
        if not isinstance(api_key, str):
            # The value itself is never echoed: it may be a mistyped secret.
            raise TypeError(f"api_key must be a str, not {type(api_key).__name__}")

        url_source = "api_url"
        if api_url is None:
            api_url = env.get("LIZARD_API_URL") or None
            url_source = "LIZARD_API_URL"
        if api_url is None:
            api_url, url_source = DEFAULT_API_URL, "api_url"
        else:
            api_url = _check_api_url(api_url, url_source)

        if project_id is None:
            # Still None when unset: only a create needs it (see require_project).
            project_id = env.get("LIZARD_PROJECT_ID") or None

        return cls(
            api_key=Secret(api_key),
            api_url=api_url,
            project_id=project_id,
            template=template,
            size=size,
            lifetime_ms=lifetime_ms,
            region=region,
            metadata=cast(Mapping[str, str], metadata),
            envs=cast(Mapping[str, str], envs),
            internet_access=internet_access,
            allowed_hosts=_check_allowed_hosts(allowed_hosts),
            integration=integration,
            integration_version=(
                LIZARD_CORE_VERSION if integration_version is None else integration_version
            ),
        )

    def replace(self, **changes: Any) -> SandboxConfig:
        """Return a copy with ``changes`` applied and validated again.

        ``api_key`` may be given as a str here; it is wrapped in a Secret.
        """
        if isinstance(changes.get("api_key"), str):
            changes["api_key"] = Secret(changes["api_key"])
        if changes.get("allowed_hosts") is not None:
            changes["allowed_hosts"] = _check_allowed_hosts(changes["allowed_hosts"])
        return dataclasses.replace(self, **changes)

    @property
    def sandbox_metadata(self) -> dict[str, str]:
        """The metadata sent at create: the caller's labels plus the integration tags."""
        return {
            **self.metadata,
            METADATA_INTEGRATION_KEY: self.integration,
            METADATA_VERSION_KEY: self.integration_version,
            METADATA_RUN_KEY: self.run_id,
            METADATA_MACHINE_KEY: self.machine_id,
        }

    def require_project(self) -> str:
        """The project, or :class:`ValueError` naming ``LIZARD_PROJECT_ID`` when there is none.

        Called by everything that would create a sandbox, before any request.
        """
        if self.project_id is None:
            raise ValueError(_NO_PROJECT)
        return self.project_id

    def api_kwargs(self) -> dict[str, str]:
        """``api_key`` and ``api_url`` as keyword arguments for lizard-sdk calls.

        The result holds the revealed key: pass it straight to the SDK and never log it.
        """
        return {"api_key": self.api_key.reveal(), "api_url": self.api_url}

    def create_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``lizard.Sandbox.create``, credentials included.

        The template is included as ``template``; the project is passed as ``project`` so that
        the SDK accepts an id, a slug or a name. Raises :class:`ValueError` when there is no
        project (see :meth:`require_project`). Never log the result.
        """
        kwargs: dict[str, Any] = {
            "template": self.template,
            "project": self.require_project(),
            "timeout_ms": self.lifetime_ms,
            "metadata": self.sandbox_metadata,
            "internet_access": self.internet_access,
            **self.api_kwargs(),
        }
        if self.size is not None:
            kwargs["size"] = self.size
        if self.region is not None:
            kwargs["region"] = self.region
        if self.envs:
            kwargs["envs"] = dict(self.envs)
        if self.allowed_hosts is not None:
            kwargs["allowed_hosts"] = list(self.allowed_hosts)
        return kwargs

    def __repr__(self) -> str:
        envs = ", ".join(sorted(self.envs)) if self.envs else ""
        return (
            f"SandboxConfig(api_key={self.api_key!r}, api_url={self.api_url!r}, "
            f"project_id={self.project_id!r}, template={self.template!r}, size={self.size!r}, "
            f"lifetime_ms={self.lifetime_ms!r}, region={self.region!r}, "
            f"metadata={dict(self.metadata)!r}, envs=<{len(self.envs)} set: {envs}>, "
            f"internet_access={self.internet_access!r}, allowed_hosts={self.allowed_hosts!r}, "
            f"integration={self.integration!r}, integration_version={self.integration_version!r}, "
            f"run_id={self.run_id!r}, machine_id={self.machine_id!r})"
        )

    __str__ = __repr__


def _carries_key(value: str, key: str) -> bool:
    if len(key) >= _KEY_SUBSTRING_MIN:
        return key in value
    return value == key


class BasicSandboxOptions(TypedDict, total=False):
    """The sandbox settings nearly every adapter takes as keyword arguments.

    Each is the :meth:`SandboxConfig.from_env` argument of the same name, and is checked there.
    """

    api_key: str | None
    """Lizard API key; ``LIZARD_API_KEY`` when None. It stays on the host."""
    api_url: str | None
    """Lizard API URL; ``LIZARD_API_URL``, else the cloud. HTTPS except on loopback."""
    project_id: str | None
    """Lizard project id, slug or name; ``LIZARD_PROJECT_ID`` when None."""
    template: str
    """Template of the sandbox, e.g. ``base`` (the default) or ``interpreter``."""
    size: Size | None
    """Machine size, or None for the platform's default."""
    lifetime_ms: int
    """Sandbox lifetime (default 15 minutes); when it ends, the sandbox and its files are gone."""


class SandboxOptions(BasicSandboxOptions, total=False):
    """Every sandbox setting :meth:`SandboxConfig.from_env` takes, as keyword arguments.

    An adapter takes them as ``**options: Unpack[SandboxOptions]`` and passes them on with its
    ``integration`` and ``integration_version``.
    """

    region: str | None
    """Region to run in, or None for the platform's default."""
    metadata: Mapping[str, str] | None
    """Labels of the caller's own on the sandbox; the integration tags are added."""
    envs: Mapping[str, str] | None
    """Environment variables for every command; nothing else is copied from the host."""
    internet_access: bool
    """False: the sandbox has no internet access."""
    allowed_hosts: Sequence[str] | None
    """With no internet, the hosts that stay reachable (at most 50)."""


CREATION_OPTIONS: Final = (
    "template",
    "size",
    "lifetime_ms",
    "region",
    "metadata",
    "envs",
    "internet_access",
    "allowed_hosts",
)
"""The :class:`SandboxOptions` that shape a new sandbox, which attaching to one cannot apply."""


def refuse_creation_options(options: Mapping[str, object], *, by: str = "this object") -> None:
    """Raise ValueError naming each of :data:`CREATION_OPTIONS` found in ``options``.

    For an adapter given a sandbox id: ignoring them (``internet_access=False`` above all)
    would be silent.
    """
    if given := sorted(name for name in CREATION_OPTIONS if name in options):
        raise ValueError(f"{', '.join(given)} apply only to a sandbox {by} creates")


def wanted_tags(
    pairs: Mapping[str, str] | None,
    *,
    integration: str | None,
    run_id: str | None,
    machine_id: str | None,
    name: str,
) -> dict[str, str]:
    """What a sandbox's metadata or a snapshot's tags must hold to match, checked.

    ``pairs`` plus the origin tags given; TypeError for anything but str keys and values.
    """
    wanted = dict(pairs or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in wanted.items()):
        raise TypeError(f"{name} must map str to str")
    for key, value in (
        (METADATA_INTEGRATION_KEY, integration),
        (METADATA_RUN_KEY, run_id),
        (METADATA_MACHINE_KEY, machine_id),
    ):
        if value is not None:
            if not isinstance(value, str):
                raise TypeError(f"{key} must be a str or None, not {type(value).__name__}")
            wanted[key] = value
    return wanted

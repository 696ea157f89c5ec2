"""The create of a sandbox on the session's pooled connection, as ``lizard.Sandbox.create``.

lizard-sdk sends its create with a module-level ``httpx.post``: a new SSL context (about 20 ms
of CPU) and a new connection, whose handshakes a real link charges again when the sandbox's
first exec opens the pooled one. :func:`create_sandbox` sends the same request on the
:class:`~lizard_core._transport.Transport` instead, so the first exec reuses its connection.
Contract (lizard-sdk 1.0's ``Sandbox.create``, ``lizard/sandbox/sandbox.py``, kept in step by
a test that sends both to one recording server):

- **The same request.** ``POST {api_url}/api/sandboxes`` with the SDK's headers and JSON body:
  ``template`` (``base`` when None), ``timeoutMs`` (the SDK's default when None),
  ``projectId``; then ``snapshotId``, ``size``, ``metadata`` and ``envs`` when given;
  ``region``, or ``us-east-1`` when none was named and neither a volume nor a snapshot places
  the sandbox; ``volumeName``; ``internetAccess: false`` and ``allowedHosts`` only when asked.
- **The same platform answers.** A 503 ``region_unavailable`` for the default region is asked
  once more without a region (the platform picks one; a named region is never swapped). A
  failure goes to lizard-sdk's ``handle_api_error``, so it raises the SDK's exception. A server
  that ignored ``internetAccess: false`` or ``allowedHosts`` gets its sandbox deleted (a
  failed delete ignored, as the SDK does) and :class:`lizard.errors.LizardError` is raised:
  a sandbox with internet is never handed over when none was asked for.
- **The same result.** ``lizard.Sandbox(sandbox_id, api_key=, api_url=, timeout_ms=)``, built
  from the answer's ``sandboxId`` with no request. An answer that is not a JSON object with a
  ``sandboxId`` raises ``ValueError``, ``KeyError`` or ``TypeError`` as the SDK's would, which
  the session reports as a malformed answer. Stricter than the SDK: a ``sandboxId`` that is
  not a string is ``TypeError`` too, and a number, which may still name a sandbox, is deleted
  first (quietly, like the no-internet case), so nothing is left billing.
- **Only what the session sends.** :func:`create_request` builds the request before anything
  is sent, from the keywords :meth:`lizard_core.config.SandboxConfig.create_kwargs` and the
  session produce; another raises ``TypeError`` there, never mistaken for a bad answer.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Final

from lizard import Sandbox
from lizard.config import DEFAULT_SANDBOX_REGION, DEFAULT_SANDBOX_TIMEOUT_MS
from lizard.errors import LizardError, handle_api_error

from lizard_core._transport import Transport

__all__ = ["CreateRequest", "create_request", "create_sandbox", "send_create"]

_DEFAULT_TEMPLATE: Final = "base"
_KNOWN: Final = frozenset(
    {
        "template",
        "snapshot_id",
        "size",
        "project_id",
        "api_key",
        "api_url",
        "timeout_ms",
        "metadata",
        "envs",
        "region",
        "volume_name",
        "internet_access",
        "allowed_hosts",
    }
)


@dataclass(frozen=True)
class CreateRequest:
    """A create's body and what its answer is checked against, built before anything is sent."""

    body: dict[str, Any]
    default_region: bool
    no_internet: bool
    allowed_hosts: bool
    api_key: str | None
    api_url: str | None
    timeout_ms: int | None


def create_request(**kwargs: Any) -> CreateRequest:
    """The request ``lizard.Sandbox.create(**kwargs)`` would send, checked and built unsent.

    ``TypeError`` for a keyword it does not know. ``project_id`` must be the exact id (the
    session resolves names once per process).
    """
    unknown = sorted(set(kwargs) - _KNOWN)
    if unknown:
        raise TypeError(f"create_request() got unexpected keyword arguments {unknown}")
    allowed_hosts = kwargs.get("allowed_hosts")
    snapshot_id = kwargs.get("snapshot_id")
    region = kwargs.get("region")
    timeout_ms = kwargs.get("timeout_ms")
    body: dict[str, Any] = {
        "template": kwargs.get("template") or _DEFAULT_TEMPLATE,
        "timeoutMs": timeout_ms if timeout_ms is not None else DEFAULT_SANDBOX_TIMEOUT_MS,
        "projectId": kwargs["project_id"],
    }
    for key, name in (("snapshot_id", "snapshotId"), ("size", "size")):
        if kwargs.get(key) is not None:
            body[name] = kwargs[key]
    for key in ("metadata", "envs"):
        if kwargs.get(key):
            body[key] = kwargs[key]
    default_region = not region and not kwargs.get("volume_name") and snapshot_id is None
    if region or default_region:
        body["region"] = region or DEFAULT_SANDBOX_REGION
    if kwargs.get("volume_name"):
        body["volumeName"] = kwargs["volume_name"]
    no_internet = kwargs.get("internet_access", True) is False or bool(allowed_hosts)
    if no_internet:
        body["internetAccess"] = False
    if allowed_hosts:
        body["allowedHosts"] = list(allowed_hosts)
    return CreateRequest(
        body=body,
        default_region=default_region,
        no_internet=no_internet,
        allowed_hosts=bool(allowed_hosts),
        api_key=kwargs.get("api_key"),
        api_url=kwargs.get("api_url"),
        timeout_ms=timeout_ms,
    )


def send_create(transport: Transport, request: CreateRequest) -> Sandbox:
    """Send ``request`` on ``transport``'s pool and return the SDK's ``Sandbox`` for the answer."""
    res = transport.api_request("POST", "/api/sandboxes", json_body=request.body)
    if request.default_region and res.status_code == 503 and _region_unavailable(res):
        retry = {k: v for k, v in request.body.items() if k != "region"}
        res = transport.api_request("POST", "/api/sandboxes", json_body=retry)
    if not res.is_success:
        handle_api_error(res.status_code, res.text)
    data = res.json()
    sandbox_id = data["sandboxId"]
    if not isinstance(sandbox_id, str):
        if isinstance(sandbox_id, int) and not isinstance(sandbox_id, bool):
            # Malformed, yet it may name a sandbox (the SDK would have taken it): not left billing.
            _delete_quietly(transport, str(sandbox_id))
        raise TypeError(f"the create answered a sandboxId of type {type(sandbox_id).__name__}")
    unsupported = request.allowed_hosts and not isinstance(data.get("allowedHosts"), list)
    if unsupported or (request.no_internet and data.get("internetAccess") is not False):
        _delete_quietly(transport, sandbox_id)
        raise LizardError(
            "This server does not support allowed_hosts yet; the sandbox it started was deleted"
            if unsupported
            else "This server does not support internet_access=False yet; "
            "the sandbox it started had internet and was deleted"
        )
    return Sandbox(
        sandbox_id,
        api_key=request.api_key,
        api_url=request.api_url,
        timeout_ms=request.timeout_ms,
    )


def create_sandbox(transport: Transport, **kwargs: Any) -> Sandbox:
    """Create a sandbox as ``lizard.Sandbox.create(**kwargs)`` would, on ``transport``'s pool."""
    return send_create(transport, create_request(**kwargs))


def _delete_quietly(transport: Transport, sandbox_id: str) -> None:
    # The SDK ignores a failed delete too: the error its caller raises is what must be seen.
    with contextlib.suppress(Exception):
        transport.api_request("DELETE", f"/api/sandboxes/{sandbox_id}")


def _region_unavailable(res: Any) -> bool:
    """The platform's answer for a region that takes no new sandboxes for now."""
    try:
        body = res.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("code") == "region_unavailable"

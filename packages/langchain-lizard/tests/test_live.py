"""The standard suite and a Deep Agents agent against the Lizard cloud.

Runs only with LIZARD_LIVE_TESTS=1 and LIZARD_API_KEY / LIZARD_PROJECT_ID set (``nox -s live``);
it creates short-lived billed sandboxes and destroys every one. The account comes from
lizard-local's pytest plugin (``lizard_cloud``) and is passed to each backend explicitly.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from deepagents import create_deep_agent
from deepagents.backends.protocol import SandboxBackendProtocol
from scripted_agent import SCRIPT, agent_model, tool_results
from standard_suite import LizardStandardSuite

from langchain_lizard import LizardSandbox
from lizard_local.pytest_plugin import LIVE, Cloud

pytestmark = [*LIVE, pytest.mark.enable_socket]

# Short-lived on purpose: a lost connection cannot leave a sandbox billing for long.
_LIFETIME_MS = 900_000


@pytest.fixture
def cloud_backend(lizard_cloud: Cloud) -> Iterator[LizardSandbox]:
    with LizardSandbox(lifetime_ms=_LIFETIME_MS, **lizard_cloud.connection) as backend:
        yield backend


class TestLizardCloudStandard(LizardStandardSuite):
    @pytest.fixture(scope="class")
    def sandbox(self, lizard_cloud: Cloud) -> Iterator[SandboxBackendProtocol]:
        with LizardSandbox(lifetime_ms=_LIFETIME_MS, **lizard_cloud.connection) as backend:
            yield backend


def test_a_deep_agent_works_in_a_cloud_sandbox(cloud_backend: LizardSandbox) -> None:
    agent = create_deep_agent(model=agent_model(), backend=cloud_backend)
    state = agent.invoke({"messages": [{"role": "user", "content": "Print Fibonacci numbers."}]})
    assert "0 1 1 2 3 5 8 13 21 34" in tool_results(state["messages"])["r"]
    assert cloud_backend.download_files([SCRIPT])[0].error is None


async def test_attaching_by_id_leaves_a_cloud_sandbox_running(
    cloud_backend: LizardSandbox, lizard_cloud: Cloud
) -> None:
    await cloud_backend.aupload_files([("/tmp/kept.txt", b"kept")])
    async with LizardSandbox(
        sandbox_id=cloud_backend.id, api_key=lizard_cloud.api_key, api_url=lizard_cloud.api_url
    ) as attached:
        assert (await attached.adownload_files(["/tmp/kept.txt"]))[0].content == b"kept"
    assert (await cloud_backend.aexecute("cat /tmp/kept.txt")).output == "kept"

"""Where sandboxes come from: lizard-local, and the Lizard cloud for ``-m live``.

``connection`` gives the keyword arguments for a ``lizard_adk`` object: none on lizard-local (the
plugin points ``LIZARD_*`` at it), the cloud's credentials when ``LIZARD_LIVE_TESTS=1`` and
credentials are set. Tests that need lizard-local's control API ask for ``lizard_local`` or
``lizard_counters`` themselves and run offline only.
"""

from __future__ import annotations

from typing import Any

import pytest

from lizard_local.pytest_plugin import LIVE


@pytest.fixture(params=["local", pytest.param("live", marks=LIVE)])
def connection(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "local":
        request.getfixturevalue("lizard_local")
        return {}
    return dict(request.getfixturevalue("lizard_cloud").connection)


def pytest_configure(config: pytest.Config) -> None:
    # ADK marks its environment API experimental and warns at every use; that is ADK's notice.
    config.addinivalue_line("filterwarnings", r"ignore:\[EXPERIMENTAL\]:UserWarning")

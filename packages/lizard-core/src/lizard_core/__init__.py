"""lizard_core: sandbox lifecycle, guest protocol, error mapping and configuration.

The framework-neutral core of the Lizard Sandboxes integrations. Only this package talks to
lizard-sdk; adapters build on the names exported here.
"""

from lizard_core.commands import (
    DEFAULT_OUTPUT_LIMIT,
    CommandResult,
    arun_command,
    run_command,
    stream_command,
)
from lizard_core.config import LIZARD_CORE_VERSION, SIZES, SandboxConfig, Size
from lizard_core.errors import (
    CommandTimeoutError,
    CredentialsError,
    GuestCancelledError,
    GuestNotStartedError,
    GuestProtocolError,
    KernelUnavailableError,
    LizardIntegrationError,
    OutputLimitError,
    QuotaError,
    SandboxGoneError,
    SandboxPausedError,
    SandboxStateError,
    StateWaitTimeoutError,
    TransientError,
    translate,
    translated,
)
from lizard_core.files import FileStat, SandboxFiles
from lizard_core.kernel import ExecutionError, ExecutionResult, Kernel, RichResult
from lizard_core.packages import PackageCheck, missing_requirements, requirements
from lizard_core.session import RetryPolicy, Session
from lizard_core.streaming import OutputChunk, OutputStream

__version__: str = LIZARD_CORE_VERSION
"""The installed version of lizard-core."""

__all__ = [
    "DEFAULT_OUTPUT_LIMIT",
    "SIZES",
    "CommandResult",
    "CommandTimeoutError",
    "CredentialsError",
    "ExecutionError",
    "ExecutionResult",
    "FileStat",
    "GuestCancelledError",
    "GuestNotStartedError",
    "GuestProtocolError",
    "Kernel",
    "KernelUnavailableError",
    "LizardIntegrationError",
    "OutputChunk",
    "OutputLimitError",
    "OutputStream",
    "PackageCheck",
    "QuotaError",
    "RetryPolicy",
    "RichResult",
    "SandboxConfig",
    "SandboxFiles",
    "SandboxGoneError",
    "SandboxPausedError",
    "SandboxStateError",
    "Session",
    "Size",
    "StateWaitTimeoutError",
    "TransientError",
    "__version__",
    "arun_command",
    "missing_requirements",
    "requirements",
    "run_command",
    "stream_command",
    "translate",
    "translated",
]

"""An Inspect task whose tools run in Lizard sandboxes, one sandbox per sample.

    python examples/eval.py                                   # a scripted model, offline
    inspect eval examples/eval.py --model openai/gpt-4o-mini  # a real model

With LIZARD_API_KEY and LIZARD_PROJECT_ID set it uses the Lizard cloud; without them
``python examples/eval.py`` starts lizard-local (the loopback emulator, ``pip install
lizard-local``), so it runs offline. The scripted model calls ``bash`` and then ``python``, and
answers with what they printed.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile

from inspect_ai import Task, eval, task
from inspect_ai.dataset import Sample
from inspect_ai.model import (
    ChatMessage,
    ChatMessageTool,
    GenerateConfig,
    ModelOutput,
    ModelUsage,
    get_model,
)
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import ToolChoice, ToolInfo, bash, python

from inspect_lizard import LizardSandboxConfig


@task
def lizard_arithmetic() -> Task:
    """Two questions a model answers by running code in its sandbox."""
    return Task(
        dataset=[
            Sample(input="Use bash to compute 6 * 7, then check it with Python.", target="42"),
            Sample(input="Use bash to compute 12 * 12, then check it with Python.", target="144"),
        ],
        solver=[use_tools(bash(timeout=60), python(timeout=60)), generate()],
        scorer=includes(),
        # "base" has python3; LizardSandboxConfig() alone gives 0.1.0's "interpreter".
        sandbox=("lizard", LizardSandboxConfig(template="base", lifetime_ms=600_000)),
    )


def scripted_model(
    messages: list[ChatMessage], tools: list[ToolInfo], choice: ToolChoice, config: GenerateConfig
) -> ModelOutput:
    """Stands in for a real model: bash, then python, then the answer."""
    seen = [m.text.strip() for m in messages if isinstance(m, ChatMessageTool)]
    question = next(m.text for m in messages if m.role == "user")
    numbers = re.findall(r"\d+", question)
    if not seen:
        command = f"echo $(({numbers[0]} * {numbers[1]})) | tee answer.txt; uname -sm"
        output = ModelOutput.for_tool_call("mockllm/model", "bash", {"command": command})
    elif len(seen) == 1:
        code = f"print(int(open('answer.txt').read()) == {numbers[0]} * {numbers[1]})"
        output = ModelOutput.for_tool_call("mockllm/model", "python", {"code": code})
    else:
        answer = seen[0].splitlines()[0]
        output = ModelOutput.from_content("mockllm/model", f"{answer} (python agrees: {seen[1]})")
    # Usage given, so that mockllm does not count tokens (tiktoken would fetch its tables).
    output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return output


def main() -> None:
    with contextlib.ExitStack() as stack:
        if not os.environ.get("LIZARD_API_KEY"):
            from lizard_local import LocalServer

            server = stack.enter_context(LocalServer())
            os.environ.update(server.env)
            print(f"No LIZARD_API_KEY: using lizard-local at {server.url}")
        logs = stack.enter_context(tempfile.TemporaryDirectory())
        model = get_model("mockllm/model", custom_outputs=scripted_model)
        [log] = eval(lizard_arithmetic(), model=model, log_dir=logs, display="none")
        for sample in log.samples or []:
            score = sample.scores["includes"].value if sample.scores else None
            print(f"{sample.input!r}\n  -> {sample.output.completion}  [score: {score}]")
        if log.status != "success":
            raise SystemExit(f"eval {log.status}: {log.error.message if log.error else ''}")


if __name__ == "__main__":
    main()

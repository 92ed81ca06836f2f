"""Executor: run the planned tool call in its sandbox and return a Result. Never raises for tool failures."""

from __future__ import annotations

import time

import jsonschema
from prefect import task
from prefect.cache_policies import NO_CACHE

from infra.runtime.settings import Settings
from tasks.contracts import Plan, Result, ResultStatus
from tasks.modules.tools import GeneralistTool, ToolUnavailable, get_tool


def execute(plan: Plan, settings: Settings, deadline_s: float | None = None) -> Result:
    """Refuse what the configuration does not allow; otherwise run the tool and time it."""
    if plan.tool not in settings.tools.allow:
        return Result(step_id=plan.step_id, tool=plan.tool, status=ResultStatus.denied,
                      error=f"tool {plan.tool!r} is not in the allow-list {settings.tools.allow}")
    t0 = time.perf_counter()
    try:
        tool = get_tool(plan.tool, settings)
        tool.card.validate_args(plan.args)
    except jsonschema.ValidationError as exc:
        return Result(step_id=plan.step_id, tool=plan.tool, status=ResultStatus.error,
                      error=f"invalid arguments for {plan.tool}: {exc.message}")
    except ToolUnavailable as exc:
        return Result(step_id=plan.step_id, tool=plan.tool, status=ResultStatus.denied, error=str(exc))
    try:
        if isinstance(tool, GeneralistTool):
            return tool.run(plan, deadline_s=deadline_s)
        return tool.run(plan)
    except Exception as exc:  # a broken tool is a failed step for the Verifier, not a crashed run
        return Result(step_id=plan.step_id, tool=plan.tool, status=ResultStatus.error,
                      error=f"{type(exc).__name__}: {exc}", elapsed_ms=(time.perf_counter() - t0) * 1000)


@task(name="execute_step", retries=0, cache_policy=NO_CACHE, task_run_name="execute-{task_id}-step{plan.step_id}")
def execute_step(plan: Plan, task_id: str, settings: Settings, deadline_s: float | None = None) -> Result:
    """Run one planned tool call."""
    return execute(plan, settings, deadline_s)

"""The systems an evaluation compares, by name: one Settings (same Budget, same tools), one outcome type.

A SystemFn is ``fn(question, settings, *, run_id, log=None, options=SystemOptions()) -> ResearchOutcome``.

- ``direct``: the Generator-role model answers in one call, no tools (tasks/baselines/direct.py);
- ``monolithic``: one ReAct context, the Planner's model does everything (tasks/baselines/monolithic.py);
- ``modular``: the AgentFlow loop (flows/research.py);
- ``modular-nomem``: the loop with the Planner seeing only the latest evidence (memory.planner_view="last");
- ``modular-trained``: the loop with the Planner switched to a Flow-GRPO-trained LoRA adapter
  (``SystemOptions.adapter``, CLI ``--adapter``: a checkpoint's ``adapter/`` directory) on the
  ``hf_policy`` backend; every other role keeps its configured backend. Without an adapter it
  refuses (SystemUnavailable), never running the untrained Planner under this name;
- ``modular-base``: the control for ``modular-trained``: the same ``hf_policy`` backend, sampling
  and reply template, with the adapter off (the base model). Trained minus base is the effect of
  training; trained minus ``modular`` also carries the change of backend (llama.cpp -> transformers).

The registry sits in flows/ because three of its systems are the loop (flows/research.py); the baselines are
tasks (tasks/baselines/) and return the same outcome type (tasks/outcome.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from infra.runtime.events import RunLog
from infra.runtime.settings import Settings
from tasks.baselines.direct import run_direct
from tasks.baselines.monolithic import run_monolithic
from tasks.contracts import Question


class SystemUnavailable(ValueError):
    """A system name that is unknown or cannot run as asked; the message says why."""


@dataclass(frozen=True)
class SystemOptions:
    """How a system runs (not what it is): the loop's module calls as Prefect tasks, a trained adapter."""

    prefect_tasks: bool = True
    adapter: str | None = None


SystemFn = Callable[..., "object"]  # (question, settings, *, run_id, log, options) -> tasks.outcome.ResearchOutcome


def _direct(question: Question, settings: Settings, *, run_id: str, log: RunLog | None = None,
            options: SystemOptions = SystemOptions()):
    return run_direct(question, settings, run_id=run_id, log=log)


def _monolithic(question: Question, settings: Settings, *, run_id: str, log: RunLog | None = None,
                options: SystemOptions = SystemOptions()):
    return run_monolithic(question, settings, run_id=run_id, log=log)


def _modular(question: Question, settings: Settings, *, run_id: str, log: RunLog | None = None,
             options: SystemOptions = SystemOptions()):
    from flows.research import DIRECT_STEPS, PREFECT_STEPS, research

    return research(question, settings, run_id=run_id, log=log,
                    steps=PREFECT_STEPS if options.prefect_tasks else DIRECT_STEPS)


def _modular_nomem(question: Question, settings: Settings, *, run_id: str, log: RunLog | None = None,
                   options: SystemOptions = SystemOptions()):
    return _modular(question, system_settings("modular-nomem", settings), run_id=run_id, log=log, options=options)


def _modular_trained(question: Question, settings: Settings, *, run_id: str, log: RunLog | None = None,
                     options: SystemOptions = SystemOptions()):
    check_system("modular-trained", options)
    return _modular(question, trained_settings(settings, options.adapter), run_id=run_id, log=log, options=options)


def _modular_base(question: Question, settings: Settings, *, run_id: str, log: RunLog | None = None,
                  options: SystemOptions = SystemOptions()):
    return _modular(question, base_policy_settings(settings, options.adapter), run_id=run_id, log=log, options=options)


def base_policy_settings(settings: Settings, adapter: str | None = None) -> Settings:
    """`settings` with the Planner on hf_policy without an adapter: the base model, replying in the template a
    trained adapter uses (the one saved with `adapter` when given, else train.template_fields)."""
    from infra.models.hf_policy import saved_template_fields

    fields = (list(settings.models.planner.template_fields) or (saved_template_fields(adapter) if adapter else [])
              or list(settings.train.template_fields))
    s = settings.model_copy(deep=True)
    s.models.planner = s.models.planner.model_copy(update=dict(
        backend="hf_policy", adapter=None, model_path=settings.train.base_model, template_fields=fields,
        model=f"{s.models.planner.model}+base"))
    return s


def trained_settings(settings: Settings, adapter: str) -> Settings:
    """`settings` with the Planner on the trained adapter (hf_policy; base model from train.base_model)."""
    s = settings.model_copy(deep=True)
    planner = s.models.planner
    s.models.planner = planner.model_copy(update=dict(
        backend="hf_policy", adapter=str(Path(adapter).resolve()), model_path=settings.train.base_model,
        model=f"{planner.model}+{Path(adapter).resolve().parent.name or 'adapter'}"))
    return s


SYSTEMS: dict[str, SystemFn] = {
    "direct": _direct,
    "monolithic": _monolithic,
    "modular": _modular,
    "modular-nomem": _modular_nomem,
    "modular-trained": _modular_trained,
    "modular-base": _modular_base,
}


def check_system(name: str, options: SystemOptions = SystemOptions()) -> None:
    """Raise SystemUnavailable, with the reason, for a name that cannot run as asked."""
    if name not in SYSTEMS:
        raise SystemUnavailable(f"unknown system {name!r}; known: {', '.join(SYSTEMS)}")
    if name == "modular-trained":
        if not options.adapter:
            raise SystemUnavailable("modular-trained: no trained adapter given (--adapter PATH); "
                                    "refusing to run the untrained Planner under this name")
        if not Path(options.adapter).exists():
            raise SystemUnavailable(f"modular-trained: adapter {options.adapter!r} does not exist")
        if not (Path(options.adapter) / "adapter_config.json").is_file():
            raise SystemUnavailable(f"modular-trained: {options.adapter!r} is not a trained adapter directory (no "
                                    "adapter_config.json); use <train --out>/checkpoints/step-N/adapter")


def parse_systems(text: str | list[str], options: SystemOptions = SystemOptions()) -> list[str]:
    """'a,b,c' -> ['a', 'b', 'c'], each checked (duplicates dropped, order kept)."""
    names = text.split(",") if isinstance(text, str) else list(text)
    out: list[str] = []
    for n in (x.strip() for x in names):
        if n and n not in out:
            check_system(n, options)
            out.append(n)
    if not out:
        raise SystemUnavailable(f"no system given; known: {', '.join(SYSTEMS)}")
    return out


def system_settings(name: str, settings: Settings) -> Settings:
    """The settings a system actually runs under (the memory-off ablation changes one field)."""
    if name == "modular-nomem":
        s = settings.model_copy(deep=True)
        s.memory.planner_view = "last"
        return s
    return settings

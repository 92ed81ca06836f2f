"""Tools: data in, data out, each with a card. Built from config where they run; never from text.

The allow-list, limits and costs come from the configuration only. A tool's output is data: it is
returned inside a Result and nothing in it can change which tools exist or what they may do.
"""

from __future__ import annotations

import ast
import time
from functools import lru_cache
from typing import Protocol

from infra.models import build_backend
from infra.models.base import ModelError
from infra.runtime.actors import ActorCallError
from infra.runtime.settings import Settings
from infra.tools.sandbox import Sandbox, SandboxLimits, SandboxUnavailable, make_sandbox
from infra.tools.search import cached_index
from tasks.contracts import Plan, Result, ResultStatus, Source, ToolCard

_STR = {"type": "string"}


class Tool(Protocol):
    card: ToolCard

    def run(self, plan: Plan) -> Result: ...


def _card_python(s: Settings) -> ToolCard:
    c = s.tools.python
    if c.program_call:  # tool_input is the task; tasks/modules/programs.py writes the program in a second call
        description = ("Solve a calculation with a short Python program and return what it prints. Use it for "
                       "arithmetic, counting and comparisons. Example tool_input: the total cost of 17 tickets at $23 each")
    else:
        description = ("Run a short Python 3 program and return what it prints. Use it for arithmetic, "
                       "counting and comparisons on values you already have. No network, no files outside its folder. "
                       "Example tool_input: print(17 * 23)")
    return ToolCard(
        name="python",
        description=description,
        input_schema={"type": "object", "properties": {"code": {"type": "string", "minLength": 1, "maxLength": 20000}},
                      "required": ["code"], "additionalProperties": False},
        output_schema={"type": "object", "properties": {"stdout": _STR, "stderr": _STR, "exit_code": {"type": ["integer", "null"]},
                       "truncated": {"type": "boolean"}}, "required": ["stdout", "stderr", "exit_code"]},
        primary_arg="code",
        program_call=c.program_call,
        cost=c.cost,
        timeout_s=c.timeout_s + 5.0,  # sandbox start-up and teardown on top of the program's own limit
    )


def _card_search(s: Settings) -> ToolCard:
    c = s.tools.search
    passage = {"type": "object", "properties": {"doc_id": _STR, "title": _STR, "text": _STR, "url": {"type": ["string", "null"]},
               "published_at": {"type": ["string", "null"]}, "score": {"type": "number"}},
               "required": ["doc_id", "title", "text", "score"]}
    return ToolCard(
        name="search",
        description="Search the document collection with a short keyword query; returns the best passages "
        "with their titles and dates. Example tool_input: Lake Orvanne depth",
        input_schema={"type": "object", "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 300}},
                      "required": ["query"], "additionalProperties": False},
        output_schema={"type": "object", "properties": {"passages": {"type": "array", "items": passage}}, "required": ["passages"]},
        primary_arg="query",
        cost=c.cost,
        timeout_s=c.timeout_s,
    )


def _card_generalist(s: Settings) -> ToolCard:
    c = s.tools.generalist
    return ToolCard(
        name="generalist",
        description="Ask a language model to answer a sub-question directly from its own knowledge. "
        "Its answer is an unverified estimate.",
        input_schema={"type": "object", "properties": {"prompt": {"type": "string", "minLength": 1, "maxLength": 2000}},
                      "required": ["prompt"], "additionalProperties": False},
        output_schema={"type": "object", "properties": {"text": _STR}, "required": ["text"]},
        primary_arg="prompt",
        cost=c.cost,
        timeout_s=c.timeout_s,
    )


CARD_BUILDERS = {"python": _card_python, "search": _card_search, "generalist": _card_generalist}


def tool_cards(settings: Settings) -> dict[str, ToolCard]:
    """Cards of the allowed tools, in allow-list order."""
    return {name: CARD_BUILDERS[name](settings) for name in settings.tools.allow}


class PythonTool:
    def __init__(self, settings: Settings):
        c = settings.tools.python
        self.card = _card_python(settings)
        self.limits = SandboxLimits(timeout_s=c.timeout_s, memory_mb=c.memory_mb,
                                    max_output_bytes=c.max_output_bytes, max_processes=c.max_processes)
        self.sandbox = python_sandbox(settings)

    def run(self, plan: Plan) -> Result:
        out = self.sandbox.run_python(echo_expression(plan.args["code"]), self.limits)
        status = ResultStatus(out.status)
        return Result(
            step_id=plan.step_id,
            tool="python",
            status=status,
            data={"stdout": out.stdout, "stderr": out.stderr, "exit_code": out.exit_code, "truncated": out.truncated},
            error=None if status is ResultStatus.ok else out.message,
            source=Source(uri=f"sandbox://python/{out.mechanism}/step-{plan.step_id}", title="python sandbox"),
            elapsed_ms=out.elapsed_ms,
            cost=self.card.cost,
        )


def python_sandbox(settings: Settings) -> Sandbox:
    """Where python programs run: a pool of Ray sandbox actors when settings.ray.enabled, else this process."""
    if settings.ray.enabled:
        from infra.runtime.actors import SandboxPool

        return SandboxPool.connect(settings.ray, settings.tools.python.sandbox)
    try:
        return make_sandbox(settings.tools.python.sandbox)
    except SandboxUnavailable as exc:  # the Executor turns this into a 'denied' Result with the install hint
        raise ToolUnavailable(str(exc)) from exc


def search_index(settings: Settings):
    """The corpus's index: its Ray search actor when settings.ray.enabled, else built once in this process."""
    corpus = settings.tools.search.corpus
    if settings.ray.enabled:
        from infra.runtime.actors import RemoteSearchIndex

        return RemoteSearchIndex.connect(settings.ray, corpus)
    return cached_index(corpus)


def echo_expression(code: str) -> str:
    """A program's result is printed as in a notebook cell: a single expression prints its value ('17 * 23' -> 391);
    a program that prints nothing prints its last expression, or the name its last statement assigns
    ('rolls = 3 * 24\nsold = rolls * 2 / 3' -> 48.0). A program that prints anything is run as written.

    Why: small models write correct step-by-step programs and forget the print; without this the step returns no
    evidence and is rejected for it.
    """
    try:
        ast.parse(code.strip(), mode="eval")
        return f"_value = ({code.strip()})\nif _value is not None:\n    print(_value)\n"
    except SyntaxError:
        pass
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    if not tree.body or any(isinstance(n, ast.Name) and n.id == "print" for n in ast.walk(tree)):
        return code
    last = tree.body[-1]
    if isinstance(last, ast.Expr):
        shown = last.value
        tree.body[-1] = ast.Assign(targets=[ast.Name("_value", ast.Store())], value=shown)
    elif isinstance(last, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        target = last.targets[-1] if isinstance(last, ast.Assign) else last.target
        if not isinstance(target, ast.Name):
            return code
        tree.body.append(ast.Assign(targets=[ast.Name("_value", ast.Store())], value=ast.Name(target.id, ast.Load())))
    else:
        return code
    tree.body.append(ast.parse("if _value is not None:\n    print(_value)").body[0])
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


class SearchTool:
    def __init__(self, settings: Settings):
        c = settings.tools.search
        if not c.corpus:
            raise ToolUnavailable("search needs tools.search.corpus (a JSONL file) or --corpus")
        self.card = _card_search(settings)
        self.index = search_index(settings)
        self.top_k = c.top_k
        self.max_chars = c.max_passage_chars

    def run(self, plan: Plan) -> Result:
        t0 = time.perf_counter()
        try:
            passages = self.index.search(plan.args["query"], k=self.top_k, max_chars=self.max_chars)
        except ActorCallError as exc:  # the search actor died or is restarting: a failed step, not a crash
            return Result(step_id=plan.step_id, tool="search", status=ResultStatus.error, error=str(exc),
                          elapsed_ms=(time.perf_counter() - t0) * 1000, cost=self.card.cost)
        data = {"passages": [p.__dict__ | {"score": float(p.score)} for p in passages]}
        return Result(
            step_id=plan.step_id,
            tool="search",
            status=ResultStatus.ok,
            data=data,
            source=Source.of_passage(data["passages"][0]) if passages else None,
            elapsed_ms=(time.perf_counter() - t0) * 1000,
            cost=self.card.cost,
        )


class GeneralistTool:
    def __init__(self, settings: Settings):
        self.card = _card_generalist(settings)
        self.config = settings.models.generalist
        self.backend = build_backend(self.config)

    def run(self, plan: Plan, deadline_s: float | None = None) -> Result:
        from tasks.modules.prompts import generalist_messages  # prompts live with the adapters

        t0 = time.perf_counter()
        try:
            c = self.backend.complete(generalist_messages(plan.args["prompt"]), max_tokens=self.config.max_tokens,
                                      temperature=self.config.temperature, seed=self.config.seed, deadline_s=deadline_s)
        except ModelError as exc:
            return Result(step_id=plan.step_id, tool="generalist", status=ResultStatus.error, error=str(exc),
                          elapsed_ms=(time.perf_counter() - t0) * 1000, cost=self.card.cost, model=self.config.model)
        return Result(
            step_id=plan.step_id,
            tool="generalist",
            status=ResultStatus.ok,
            data={"text": c.text.strip()},
            source=Source(uri=f"model://{c.model}", title=f"{c.model} (unverified)"),
            elapsed_ms=c.latency_ms,
            cost=self.card.cost,
            tokens_in=c.tokens_in,
            tokens_out=c.tokens_out,
            model=c.model,
        )


class ToolUnavailable(RuntimeError):
    """A configured tool that cannot be built (missing corpus, no sandbox)."""


TOOL_CLASSES = {"python": PythonTool, "search": SearchTool, "generalist": GeneralistTool}


@lru_cache(maxsize=32)
def _build_tool(name: str, settings_json: str) -> Tool:
    return TOOL_CLASSES[name](Settings.model_validate_json(settings_json))


def get_tool(name: str, settings: Settings) -> Tool:
    """The tool, built once per process and configuration (clients are built where they run)."""
    return _build_tool(name, settings.model_dump_json())

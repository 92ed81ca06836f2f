"""Checks 1-3, structure before content: the step matches its tool card (schema), the tool ran cleanly
(status), and evidence of the expected kind came back."""

from __future__ import annotations

import re

import jsonschema
from pydantic import ValidationError

from tasks.checks.context import Outcome, StepContext, derived_claim, explicit_claim, failed, passed
from tasks.checks.text import is_number, tokens
from tasks.contracts import FailureType, Plan, ResultStatus

# =============================================================================== 1. schema

def check_schema(ctx: StepContext) -> Outcome:
    """Plan args and result data match the tool card; the result answers this plan; a stated claim is well-formed."""
    name = "schema"
    plan, result, card = ctx.plan, ctx.result, ctx.card
    if card is None:
        return failed(name, f"no card for tool {plan.tool!r}", FailureType.denied,
                      f"{plan.tool!r} is not an allowed tool; use one of the listed tools")
    if result.step_id != plan.step_id or result.tool != plan.tool:
        return failed(name, f"result is for step {result.step_id} ({result.tool}), plan is step {plan.step_id} ({plan.tool})",
                      FailureType.schema, "the result does not belong to this plan; re-run the step")
    try:
        card.validate_args(plan.args)
        if result.status is ResultStatus.ok:
            card.validate_data(result.data)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        return failed(name, f"{where}: {exc.message}", FailureType.schema,
                      f"malformed {plan.tool} record at {where}: {exc.message}; correct the arguments or re-run the tool")
    try:
        claim = explicit_claim(result)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "(root)"
        return failed(name, f"claim.{loc}: {first['msg']}", FailureType.schema,
                      f"the step's claim is malformed at {loc}: {first['msg']}")
    if claim is not None:
        ctx.claim, ctx.explicit = claim, True
    elif result.status is ResultStatus.ok:
        ctx.claim = derived_claim(plan, result)
    return passed(name, "plan args and result data match the tool card" + ("; claim well-formed" if claim else ""))


# =============================================================================== 2. tool status

_STATUS_FAILURE = {ResultStatus.error: FailureType.tool_error, ResultStatus.timeout: FailureType.timeout,
                   ResultStatus.denied: FailureType.denied}
_STATUS_HINT = {
    FailureType.tool_error: "correct the arguments (for python: valid code that prints its result)",
    FailureType.timeout: "use a smaller, faster step",
    FailureType.denied: "use an allowed tool",
}


def check_tool_status(ctx: StepContext) -> Outcome:
    """The tool ran and exited cleanly."""
    result = ctx.result
    exit_code = result.data.get("exit_code") if isinstance(result.data, dict) else None
    if result.status is ResultStatus.ok and exit_code in (None, 0):
        return passed("tool_status", "ok")
    ftype = _STATUS_FAILURE.get(result.status, FailureType.tool_error)
    detail = result.error or f"exit code {exit_code}"
    if isinstance(result.data, dict) and result.data.get("stderr"):
        detail += f"; stderr tail: {str(result.data['stderr'])[-300:]}"
    return failed("tool_status", detail, ftype, f"{ctx.plan.tool} {result.status.value}: {detail[:300]}; {_STATUS_HINT[ftype]}")


# =============================================================================== 3. evidence present, of the expected type

_KIND_WORDS = [
    ("yes_no", re.compile(r"\byes(?:/| or )no\b|\bboolean\b|\btrue or false\b", re.I)),
    ("number", re.compile(r"\b(number|numeric|count|how many|how much|amount|total|sum|difference|ratio|price|cost|"
                          r"population|percent(?:age)?|quantity|integer|value in|depth|height|area|revenue|salary)\b", re.I)),
    ("year", re.compile(r"\byear\b", re.I)),
]


def expected_kind(plan: Plan) -> str | None:
    text = plan.expected_evidence
    for kind, rx in _KIND_WORDS:
        if rx.search(text):
            return kind
    return None


def _is_kind(kind: str, text: str) -> bool:
    toks = tokens(text)
    if kind == "yes_no":
        return bool({"yes", "no", "true", "false"} & set(toks))
    if kind == "year":
        return any(re.fullmatch(r"\d{4}(?:-\d{2}(?:-\d{2})?)?", t) for t in toks)
    return any(is_number(t) or re.fullmatch(r"\d{4}-\d{2}(?:-\d{2})?", t) for t in toks) or bool(
        re.search(r"\b(zero|one|two|three|four|five|six|seven|eight|nine|ten|hundred|thousand|million|billion)\b", text, re.I))


def _evidence_units(ctx: StepContext) -> tuple[int, str]:
    data = ctx.result.data if isinstance(ctx.result.data, dict) else {}
    tool = ctx.result.tool
    if tool == "search":
        texts = [str(p.get("text", "")) for p in ctx.passages if str(p.get("text", "")).strip()]
        return len(texts), "\n".join(texts)
    if tool == "python":
        out = str(data.get("stdout") or "").strip()
        return len(out), out
    if tool == "generalist":
        out = str(data.get("text") or "").strip()
        return len(out), out
    return 0, ""


def check_evidence(ctx: StepContext) -> Outcome:
    """Something came back, and it is the kind of evidence the plan expected (a number, a year, yes/no)."""
    name = "evidence_present"
    size, text = _evidence_units(ctx)
    if not size:
        hint = {"search": "no passage matched the query; use different, more specific keywords",
                "python": "the program printed nothing; print the result"}.get(ctx.result.tool, "the tool returned nothing")
        return failed(name, hint, FailureType.empty_evidence, hint)
    kind = expected_kind(ctx.plan)
    subject = ctx.claim.value if ctx.claim is not None else text
    if kind and not _is_kind(kind, subject):
        what = "the claim" if ctx.explicit else ("the program's output" if ctx.result.tool == "python" else "the result")
        return failed(name, f"expected {kind}; {what} is {subject[:80]!r}", FailureType.wrong_type,
                      f"the plan expected {kind} evidence but {what} is {subject[:80]!r}; ask for it so that the tool returns {kind}")
    return passed(name, f"{size} unit(s) of evidence" + (f" of kind {kind}" if kind else ""))

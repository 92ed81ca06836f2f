"""A scripted oracle for the synthetic research world: follows each question's gold path with the
project's own tools and answers it.

For every ``search`` step it queries :class:`infra.tools.search.SearchIndex` (the same BM25 index and
passage cut the agent's search tool uses), reads the fact with :func:`infra.data.world.extract_fact`
from every returned passage, and keeps the statement with the newest ``published_at``: older
(stale) statements lose, statements from documents of another, near-duplicate name never match,
injected instructions are text and never change the path. Two different values at the newest
date are a conflict: the oracle stops with status ``uncertain``. ``python`` steps run in the
project's sandbox (:func:`infra.tools.sandbox.make_sandbox`); ``decide`` steps compare bound values.

The result proves that each question is answerable from the non-stale documents through the
tools, and gives the research loop an upper bound. It uses only what an agent could see (the
question's gold path names queries and facts, never document ids); an answer counts as correct
only when it matches the record *and* every document it relied on is one of ``gold_doc_ids``.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from infra.data.world import extract_fact, format_number, load_world, parse_number
from infra.tools.search import SearchIndex

__all__ = ["OracleAnswer", "OracleReport", "WorldOracle", "run_oracle"]

_PLACEHOLDER = re.compile(r"^\{(\w+)\}$")


class _Stop(Exception):
    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass(frozen=True)
class OracleAnswer:
    question_id: str
    status: str  # answered | uncertain | failed
    answer: str | None  # normalised like the question record's ``answer``
    correct: bool
    used_doc_ids: tuple[str, ...]
    steps: tuple[dict, ...]
    tool_calls: Mapping[str, int]
    worst_rank: int | None  # the lowest search rank (1 = top) of a passage the answer relied on
    error: str | None = None


@dataclass
class OracleReport:
    answers: list[OracleAnswer] = field(default_factory=list)
    questions: list[dict] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.answers)

    @property
    def correct(self) -> int:
        return sum(a.correct for a in self.answers)

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0

    @property
    def failures(self) -> list[OracleAnswer]:
        return [a for a in self.answers if not a.correct]

    def by(self, key: str) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for q, a in zip(self.questions, self.answers):
            c = out.setdefault(str(q.get(key)), {"total": 0, "correct": 0})
            c["total"] += 1
            c["correct"] += int(a.correct)
        return dict(sorted(out.items()))

    def summary(self) -> dict:
        ranks = [a.worst_rank for a in self.answers if a.worst_rank is not None]
        return {
            "total": self.total,
            "correct": self.correct,
            "accuracy": round(self.accuracy, 4),
            "by_kind": self.by("kind"),
            "by_expected_status": self.by("expected_status"),
            "tool_calls": {t: sum(a.tool_calls.get(t, 0) for a in self.answers) for t in ("search", "python")},
            "gold_within_top3": round(sum(r <= 3 for r in ranks) / len(ranks), 4) if ranks else None,
            "failures": [{"id": a.question_id, "status": a.status, "answer": a.answer, "error": a.error}
                         for a in self.failures][:20],
        }


def _norm_name(s: str) -> str:
    return " ".join(str(s).casefold().split())


class WorldOracle:
    """Answers world questions by following their gold paths through search and the Python sandbox."""

    def __init__(self, index: SearchIndex, sandbox: Any = None, *, k: int = 20, max_chars: int = 600,
                 limits: Any = None):
        self.index = index
        self._sandbox = sandbox
        self.k = k
        self.max_chars = max_chars
        self._limits = limits

    @property
    def sandbox(self) -> Any:
        if self._sandbox is None:
            from infra.tools.sandbox import make_sandbox

            self._sandbox = make_sandbox("auto")
        return self._sandbox

    @property
    def limits(self) -> Any:
        if self._limits is None:
            from infra.tools.sandbox import SandboxLimits

            self._limits = SandboxLimits(timeout_s=20.0)
        return self._limits

    # ------------------------------------------------------------------ one question
    def answer(self, q: Mapping) -> OracleAnswer:
        bindings: dict[str, Any] = {}
        used: list[str] = []
        trace: list[dict] = []
        calls = {"search": 0, "python": 0}
        worst: list[int] = []
        status, value, error = "answered", None, None
        try:
            for step in q["gold_path"]:
                op = step["op"]
                if op == "search":
                    bindings[step["bind"]] = self._search(step, bindings, used, trace, worst)
                    calls["search"] += 1
                elif op == "python":
                    bindings[step["bind"]] = self._python(step, bindings, trace)
                    calls["python"] += 1
                elif op == "decide":
                    bindings[step["bind"]] = self._decide(step, bindings, trace)
                elif op == "answer":
                    value = self._resolve(step["value"], bindings)
                else:
                    raise _Stop("failed", f"unknown gold-path step {op!r}")
        except _Stop as stop:
            status, error = stop.status, stop.reason
        answer = None if status != "answered" else self._normalise(q, value)
        return OracleAnswer(
            question_id=str(q["id"]), status=status, answer=answer,
            correct=self._is_correct(q, status, answer, value, used) and (status != "failed"),
            used_doc_ids=tuple(dict.fromkeys(used)), steps=tuple(trace), tool_calls=calls,
            worst_rank=max(worst) if worst else None,
            error=error if status == "failed" else (error or self._gold_error(q, used)),
        )

    def _search(self, step: Mapping, bindings: dict, used: list, trace: list, worst: list) -> Any:
        query = self._fill(step["query"], bindings)
        entity = self._fill(step["entity"], bindings)
        passages = self.index.search(query, k=self.k, max_chars=self.max_chars)
        found = []  # (published_at, rank, doc_id, value)
        for rank, p in enumerate(passages, start=1):
            for v in extract_fact(p.text, entity, step["fact"]):
                found.append((p.published_at or "", rank, p.doc_id, v))
        record = {"op": "search", "query": query, "entity": entity, "fact": step["fact"],
                  "retrieved": [p.doc_id for p in passages]}
        trace.append(record)
        if not found:
            raise _Stop("failed", f"no passage for {query!r} states {step['fact']} of {entity!r}")
        newest = max(f[0] for f in found)
        top = [f for f in found if f[0] == newest]
        values = list(dict.fromkeys(f[3] for f in top))
        record.update(published_at=newest, doc_ids=[f[2] for f in top], values=values)
        used.extend(f[2] for f in top)
        worst.append(max(f[1] for f in top))
        if len(values) > 1:
            raise _Stop("uncertain", f"sources of {newest} disagree on {step['fact']} of {entity!r}: {values}")
        return values[0]

    def _python(self, step: Mapping, bindings: dict, trace: list) -> Any:
        code = step["code"].format_map({k: repr(v) for k, v in bindings.items()})
        out = self.sandbox.run_python(code, self.limits)
        trace.append({"op": "python", "code": code, "status": out.status, "stdout": out.stdout[:200]})
        if out.status != "ok":
            raise _Stop("failed", f"python step {out.status}: {out.message}")
        try:
            return parse_number(out.stdout.strip())
        except ValueError:
            raise _Stop("failed", f"python step printed no number: {out.stdout[:80]!r}") from None

    def _decide(self, step: Mapping, bindings: dict, trace: list) -> Any:
        left, right = self._resolve(step["left"], bindings), self._resolve(step["right"], bindings)
        rule = step["rule"]
        if rule == "gt":
            truth = left > right
        elif rule == "lt":
            truth = left < right
        elif rule == "eq":
            truth = _norm_name(left) == _norm_name(right)
        else:
            raise _Stop("failed", f"unknown decide rule {rule!r}")
        result = self._resolve(step["if_true"] if truth else step["if_false"], bindings)
        trace.append({"op": "decide", "rule": rule, "left": left, "right": right, "result": result})
        return result

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _fill(template: str, bindings: Mapping) -> str:
        try:
            return template.format_map({k: str(v) for k, v in bindings.items()})
        except KeyError as exc:
            raise _Stop("failed", f"gold path refers to an unbound value {exc}") from None

    @classmethod
    def _resolve(cls, template: Any, bindings: Mapping) -> Any:
        if isinstance(template, str):
            m = _PLACEHOLDER.match(template)
            if m:
                if m.group(1) not in bindings:
                    raise _Stop("failed", f"gold path refers to an unbound value {m.group(1)!r}")
                return bindings[m.group(1)]
            return cls._fill(template, bindings)
        return template

    @staticmethod
    def _normalise(q: Mapping, value: Any) -> str | None:
        if value is None:
            return None
        if q.get("answer_type") == "number" and isinstance(value, (int, float)):
            return format_number(value, q.get("decimals") or 0, grouping=False)
        return str(value)

    @staticmethod
    def _is_correct(q: Mapping, status: str, answer: str | None, value: Any, used: list) -> bool:
        if status != q.get("expected_status", "answered"):
            return False
        if not set(used) <= set(q.get("gold_doc_ids") or []):
            return False
        if status == "uncertain":
            return True
        if q.get("answer_type") == "number":
            d = q.get("decimals") or 0
            return isinstance(value, (int, float)) and q.get("answer_number") is not None and \
                round(float(value), d) == round(float(q["answer_number"]), d)
        return _norm_name(answer or "") == _norm_name(q.get("answer") or "")

    @staticmethod
    def _gold_error(q: Mapping, used: list) -> str | None:
        extra = sorted(set(used) - set(q.get("gold_doc_ids") or []))
        return f"relied on documents outside gold_doc_ids: {extra}" if extra else None

    # ------------------------------------------------------------------ many questions
    def run(self, questions: Iterable[Mapping], workers: int = 4) -> OracleReport:
        qs = [dict(q) for q in questions]
        if workers <= 1:
            answers = [self.answer(q) for q in qs]
        else:
            _ = self.sandbox if any(s["op"] == "python" for q in qs for s in q["gold_path"]) else None
            with ThreadPoolExecutor(max_workers=workers) as pool:
                answers = list(pool.map(self.answer, qs))
        return OracleReport(answers=answers, questions=qs)


def run_oracle(world_dir: str | Path, *, sandbox: Any = None, workers: int = 4, limit: int | None = None,
               k: int = 20, max_chars: int = 600) -> OracleReport:
    """Answer every question of a written world; see :class:`OracleReport` for accuracy and failures."""
    docs, questions, _manifest = load_world(world_dir)
    oracle = WorldOracle(SearchIndex.from_documents(docs), sandbox, k=k, max_chars=max_chars)
    return oracle.run(questions[:limit] if limit else questions, workers=workers)

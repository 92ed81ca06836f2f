"""Scorers for the synthetic world: ``yes_no`` and ``world`` (its own rule, ``uncertain`` included).

``world`` delegates to :func:`infra.data.world.check_answer` (the rule its oracle is checked with), so a
conflicting-source question expects the status ``uncertain`` rather than an answer.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from tasks.eval.scorers.base import Score, _ok

_YES = {"yes", "true", "correct"}
_NO = {"no", "false", "incorrect"}


def _yes_no(text: str) -> str | None:
    for w in re.findall(r"[a-z]+", str(text).casefold()):
        if w in _YES:
            return "yes"
        if w in _NO:
            return "no"
    return None


def yes_no_match(prediction: str, target: Any) -> bool:
    return score_yes_no(prediction, target).correct


def score_yes_no(prediction: str, target: Any) -> Score:
    """The first yes/no word of the prediction (true/false count) equals the target's."""
    gold_text = target.get("answer") if isinstance(target, Mapping) else target
    gold = _yes_no(gold_text) if not isinstance(gold_text, bool) else ("yes" if gold_text else "no")
    if gold is None:
        return _ok(False, f"target {gold_text!r} is not yes or no")
    got = _yes_no(prediction or "")
    if got is None:
        return _ok(False, "no yes/no in the prediction")
    return _ok(got == gold, f"{got} {'==' if got == gold else '!='} {gold}", extracted=got)


def score_world(prediction: str, target: Mapping, status: str = "answered") -> Score:
    """The synthetic world's own rule (:func:`infra.data.world.check_answer`): numbers, entities, yes/no, uncertain."""
    from infra.data.world import check_answer

    if not isinstance(target, Mapping):
        raise TypeError("the world scorer needs the question record as its target")
    ok = check_answer(target, prediction, status)
    expected = "uncertain" if target.get("expected_status") == "uncertain" else repr(target.get("answer"))
    return _ok(ok, f"{'matches' if ok else 'does not match'} expected {expected} ({target.get('answer_type')}, "
                   f"status {status})", extracted=prediction)


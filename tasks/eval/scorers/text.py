"""Text QA scorers (``text`` / ``entity``): SQuAD-normalised exact match and token F1.

Exact match is ``correct`` and token F1 is ``value``, best over the answer and its aliases (HotpotQA's
rule: a yes/no answer gets no partial credit).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any, Mapping

from tasks.eval.scorers.base import Score, _marked_segment, _ok

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation) | {"\u2018", "\u2019", "\u201c", "\u201d", "\u2013", "\u2014"}


def normalize_answer(s: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    s = str(s).lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(prediction: str, gold: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(gold)


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token F1; as in HotpotQA's evaluation, yes/no/noanswer get no partial credit."""
    p, g = normalize_answer(prediction), normalize_answer(gold)
    if p in ("yes", "no", "noanswer") or g in ("yes", "no", "noanswer"):
        return 1.0 if p == g else 0.0
    pt, gt = p.split(), g.split()
    common = Counter(pt) & Counter(gt)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pt), same / len(gt)
    return 2 * precision * recall / (precision + recall)


def _text_answer(prediction: str) -> str:
    seg = _marked_segment(prediction)
    text = seg if seg is not None else prediction
    text = re.sub(r"\\text\{([^{}]*)\}", r"\1", text).strip()
    if seg is not None and text:
        return text.splitlines()[0].strip()
    return " ".join(text.split())


def _golds(target: Any) -> list[str]:
    if isinstance(target, Mapping):
        golds = [target.get("answer")] + list(target.get("aliases") or target.get("answer_aliases") or [])
    elif isinstance(target, (list, tuple)):
        golds = list(target)
    else:
        golds = [target]
    out: list[str] = []
    for g in golds:
        if g is None:
            continue
        g = str(g)
        if g not in out:
            out.append(g)
    return out


def score_text(prediction: str, target: Any) -> Score:
    """Exact match (correct) and token F1 (value), best over the gold answer and its aliases."""
    golds = _golds(target)
    if not golds:
        return _ok(False, "no gold answer")
    pred = _text_answer(prediction)
    best_em, best_f1, best_g = False, 0.0, golds[0]
    for g in golds:
        em, f1 = exact_match(pred, g), token_f1(pred, g)
        if (em, f1) > (best_em, best_f1):
            best_em, best_f1, best_g = em, f1, g
    return _ok(best_em, f"{'exact match' if best_em else 'no exact match'} with {best_g!r} (F1 {best_f1:.2f})",
               extracted=pred, value=best_f1)

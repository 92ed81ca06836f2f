"""Text helpers of the Verifier checks: tokens normalised for comparison, values and numbers in them,
sentences, and dates (a source's publication date, the run's as-of date)."""

from __future__ import annotations

import re
import unicodedata
from datetime import date, datetime, timezone
from decimal import Decimal, InvalidOperation
from typing import Any

# =============================================================================== text normalisation

_PUNCT = str.maketrans({"\u2013": "-", "\u2014": "-", "\u2212": "-", "\u2019": "'", "\u2018": "'",
                        "\u201c": '"', "\u201d": '"', "\u00a0": " "})
_MONTHS = {m: i + 1 for i, m in enumerate(["january", "february", "march", "april", "may", "june", "july", "august",
                                           "september", "october", "november", "december"])}
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_MON = r"(january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)\.?"
_DATE_MDY = re.compile(rf"\b{_MON}\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{3,4}})\b")
_DATE_DMY = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MON},?\s+(\d{{3,4}})\b")
_DATE_MY = re.compile(rf"\b{_MON},?\s+(\d{{4}})\b")
_GROUPED = re.compile(r"(?<![\d.])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,]*\d)")
_TOKEN = re.compile(r"\d{4}-\d{2}(?:-\d{2})?|\d+(?:\.\d+)?|[^\W\d_]+(?:'[^\W\d_]+)*")
_SPELLING = {"meter": "metre", "kilometer": "kilometre", "centimeter": "centimetre", "millimeter": "millimetre",
             "liter": "litre", "center": "centre", "km": "kilometre", "kms": "kilometre", "mi": "mile", "ft": "foot",
             "feet": "foot", "usd": "dollar", "us$": "dollar", "eur": "euro", "sq": "square", "bn": "billion",
             "mn": "million", "kg": "kilogram", "lb": "pound", "lbs": "pound"}
_UNIT_AFTER_NUMBER = {"m": "metre", "cm": "centimetre", "mm": "millimetre", "g": "gram", "l": "litre", "h": "hour",
                      "min": "minute"}
_STOP = frozenset("a an the of in on at to for and or by with from as is was are were be been its it this that".split())


def _iso(y: str, m: int, d: int | None = None) -> str:
    return f"{int(y):04d}-{m:02d}" + (f"-{d:02d}" if d else "")


def _dates_to_iso(s: str) -> str:
    s = _DATE_MDY.sub(lambda m: _iso(m.group(3), _MONTHS[m.group(1)], int(m.group(2))), s)
    s = _DATE_DMY.sub(lambda m: _iso(m.group(3), _MONTHS[m.group(2)], int(m.group(1))), s)
    return _DATE_MY.sub(lambda m: _iso(m.group(2), _MONTHS[m.group(1)]), s)


def canonical_number(raw: str) -> str:
    """'12,400' -> '12400'; '3.50' -> '3.5'; '7.0' -> '7'."""
    try:
        d = Decimal(raw.replace(",", ""))
        if not d.is_finite():
            return raw
        if d == d.to_integral_value():
            return format(d.to_integral_value(), "f")  # quantize would overflow past 28 digits
        return format(d.normalize(), "f")
    except InvalidOperation:
        return raw


def _word(tok: str) -> str:
    if tok.endswith("'s"):  # possessive: "Acornsoft's" states "Acornsoft"
        tok = tok[:-2]
    tok = _SPELLING.get(tok, tok)
    if len(tok) > 3 and tok.endswith("s") and not tok.endswith("ss") and tok.isalpha():
        tok = _SPELLING.get(tok[:-1], tok[:-1])
    return tok


def tokens(text: Any) -> list[str]:
    """Case-, accent-, date-format-, digit-grouping- and plural-insensitive word and number tokens."""
    s = unicodedata.normalize("NFKC", str(text)).translate(_PUNCT).casefold()
    s = _dates_to_iso(s)
    s = _GROUPED.sub(lambda m: m.group(0).replace(",", ""), s)
    out: list[str] = []
    for tok in _TOKEN.findall(s):
        if tok[0].isdigit():
            out.append(tok if "-" in tok else canonical_number(tok))
        elif out and is_number(out[-1]) and tok in _UNIT_AFTER_NUMBER:
            out.append(_UNIT_AFTER_NUMBER[tok])
        else:
            out.append(_word(tok))
    return out


def content(toks: list[str]) -> list[str]:
    return [t for t in toks if t not in _STOP]


def is_number(tok: str) -> bool:
    return bool(tok) and tok[0].isdigit() and "-" not in tok


def numbers_in(toks: list[str]) -> list[Decimal]:
    return [Decimal(t) for t in toks if is_number(t)]


_YEARISH = re.compile(r"\d{4}(?:-\d{2})?")


def _tok_eq(h: str, n: str) -> bool:
    """Token equality where a year ('1989') or month ('1989-05') also matches a fuller date ('1989-05-05')."""
    return h == n or (h.startswith(n + "-") and bool(_YEARISH.fullmatch(n)))


def find_span(hay: list[str], needle: list[str]) -> int:
    """Index where `needle` occurs contiguously in `hay`, or -1."""
    n = len(needle)
    if not n:
        return -1
    for i in range(len(hay) - n + 1):
        if all(_tok_eq(hay[i + k], needle[k]) for k in range(n)):
            return i
    return -1


def value_tokens(value: str) -> list[str]:
    toks = tokens(value)
    while toks and toks[0] in ("the", "a", "an"):
        toks = toks[1:]
    return toks


def contains_value(text: str, value: str) -> bool:
    return find_span(tokens(text), value_tokens(value)) >= 0


def same_value(a: str, b: str) -> bool:
    ta, tb = value_tokens(a), value_tokens(b)
    if ta == tb:
        return True
    na, nb = numbers_in(ta), numbers_in(tb)
    return bool(na) and na == nb and content([t for t in ta if not is_number(t)]) == content([t for t in tb if not is_number(t)])


def near_number(a: Decimal, b: Decimal) -> bool:
    """A plausible slip: a few percent off, one digit changed, or two digits swapped."""
    if a == b:
        return False
    big = max(abs(a), abs(b))
    if big and abs(a - b) / big <= Decimal("0.1"):
        return True
    sa, sb = canonical_number(str(a)), canonical_number(str(b))
    if len(sa) == len(sb) and len(sa.replace(".", "").lstrip("-")) >= 3:
        diff = [i for i in range(len(sa)) if sa[i] != sb[i]]
        if len(diff) == 1 or (len(diff) == 2 and sa[diff[0]] == sb[diff[1]] and sa[diff[1]] == sb[diff[0]]):
            return True
    return False


_ABBREV = frozenset("mr mrs ms dr st jr sr prof gen col lt sgt capt rev vs no inc ltd co corp dept est fig approx".split())
_BOUNDARY = re.compile(r"[.!?]\s+(?=[A-Z0-9\"'(\[])")


def sentences(text: str) -> list[str]:
    """Sentences of `text`; an initial ('Henry J. Kaiser') or a common abbreviation does not end one."""
    text = str(text)
    out, start = [], 0
    for m in _BOUNDARY.finditer(text):
        word = re.search(r"(\w+)\W*$", text[start:m.start() + 1])
        w = word.group(1) if word else ""
        if (len(w) == 1 and w.isupper()) or w.lower() in _ABBREV:
            continue
        out.append(text[start:m.start() + 1])
        start = m.end()
    out.append(text[start:])
    return [x for x in out if x.strip()]


# =============================================================================== dates

def parse_date(value: Any) -> date | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).date()
    except ValueError:
        m = re.match(r"(\d{4})-(\d{2})-(\d{2})", str(value))
        return date(int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def _fmt(d: date | None) -> str:
    return d.isoformat() if d else "undated"


def as_of_datetime(as_of: str | datetime | date | None) -> datetime:
    if as_of is None:
        return datetime.now(timezone.utc)
    if isinstance(as_of, datetime):
        return as_of if as_of.tzinfo else as_of.replace(tzinfo=timezone.utc)
    d = parse_date(as_of)
    if d is None:
        raise ValueError(f"as_of {as_of!r} is not an ISO date")
    return datetime(d.year, d.month, d.day, 23, 59, 59, tzinfo=timezone.utc)

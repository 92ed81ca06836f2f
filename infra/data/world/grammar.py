"""The document grammar of a synthetic world: the facts, their sentences and nouns, reading them back.

Every profile sentence comes from a fact's ``doc`` templates; :func:`extract_fact` reads a fact from a passage
with the same templates. :func:`format_number` / :func:`parse_number` are the number forms of documents and
answers; :func:`eval_expression` evaluates the generator's own arithmetic expressions.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class _Fact:
    key: str  # "<type>.<name>"
    target: str | None = None  # relation: target entity type
    lo: int = 0
    hi: int = 0
    decimals: int = 0
    varying: bool = False
    year: bool = False
    doc: tuple[str, ...] = ()  # sentences with {name} and {v}
    noun: tuple[str, str] = ("", "")  # lexicon A, lexicon B; {x}
    keyword: str = ""  # words the gold-path query adds to the entity name
    cmp_noun: tuple[str, str] | None = None  # for "which has the larger ..."
    clause: tuple[str, str] | None = None  # relation check: {x} subject, {y} object

    @property
    def etype(self) -> str:
        return self.key.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.key.split(".", 1)[1]


_FACT_LIST = [
    # ---- cities
    _Fact("place.population", lo=20_000, hi=2_500_000, varying=True,
          doc=("{name} has a population of {v}.", "The population of {name} is {v}."),
          noun=("the population of {x}", "the number of people living in {x}"), keyword="population",
          cmp_noun=("population", "number of residents")),
    _Fact("place.area_km2", lo=30, hi=1_500,
          doc=("{name} covers an area of {v} square kilometres.", "The area of {name} is {v} square kilometres."),
          noun=("the area of {x} in square kilometres", "the surface area, in square kilometres, of {x}"),
          keyword="area square kilometres", cmp_noun=("area", "surface area")),
    _Fact("place.founded_year", lo=1150, hi=1900, year=True,
          doc=("{name} was founded in {v}.", "The city of {name} was founded in the year {v}."),
          noun=("the year {x} was founded", "the founding year of {x}"), keyword="founded"),
    # ---- companies
    _Fact("org.founded_year", lo=1890, hi=2015, year=True,
          doc=("{name} was founded in {v}.", "The company {name} was founded in the year {v}."),
          noun=("the year {x} was founded", "the founding year of {x}"), keyword="founded"),
    _Fact("org.employees", lo=50, hi=60_000, varying=True,
          doc=("{name} has {v} employees.", "The number of employees at {name} is {v}."),
          noun=("the number of employees of {x}", "the headcount of {x}"), keyword="employees",
          cmp_noun=("number of employees", "headcount")),
    _Fact("org.revenue_musd", lo=20, hi=80_000, decimals=1, varying=True,
          doc=("{name} reported annual revenue of {v} million dollars.", "The annual revenue of {name} is {v} million dollars."),
          noun=("the annual revenue of {x} in millions of dollars", "the yearly revenue, in millions of dollars, of {x}"),
          keyword="annual revenue million dollars", cmp_noun=("annual revenue", "yearly revenue")),
    # ---- people
    _Fact("person.birth_year", lo=1945, hi=1998, year=True,
          doc=("{name} was born in the year {v}.", "The birth year of {name} is {v}."),
          noun=("the birth year of {x}", "the year in which {x} was born"), keyword="born year"),
    # ---- products
    _Fact("product.launch_year", lo=1990, hi=2024, year=True,
          doc=("{name} was launched in {v}.", "The launch year of {name} is {v}."),
          noun=("the launch year of {x}", "the year {x} came to market"), keyword="launched launch year"),
    _Fact("product.price_usd", lo=499, hi=499_999, decimals=2, varying=True,
          doc=("{name} is priced at {v} dollars.", "The price of {name} is {v} dollars."),
          noun=("the price of {x} in dollars", "the retail price, in dollars, of {x}"), keyword="price dollars",
          cmp_noun=("price", "retail price")),
    # ---- relations
    _Fact("org.hq", target="place",
          doc=("{name} is headquartered in {v}.", "The headquarters of {name} are in {v}."),
          noun=("the city where {x} is headquartered", "the home city of {x}"), keyword="headquartered headquarters",
          clause=("{x} is headquartered in {y}", "{x} has its headquarters in {y}")),
    _Fact("org.ceo", target="person",
          doc=("The chief executive of {name} is {v}.", "{name} is led by chief executive {v}."),
          noun=("the chief executive of {x}", "the person who leads {x}"), keyword="chief executive",
          clause=("{y} is the chief executive of {x}", "{x} is led by {y}")),
    _Fact("person.born_in", target="place",
          doc=("{name} was born in the city of {v}.", "The birthplace of {name} is {v}."),
          noun=("the birthplace of {x}", "the city in which {x} was born"), keyword="born city birthplace",
          clause=("{x} was born in {y}", "{x} is a native of {y}")),
    _Fact("person.employer", target="org",
          doc=("{name} works for {v}.", "{name} is employed by {v}."),
          noun=("the employer of {x}", "the organisation that employs {x}"), keyword="works for employed",
          clause=("{x} works for {y}", "{x} is employed by {y}")),
    _Fact("product.maker", target="org",
          doc=("{name} is made by {v}.", "The maker of {name} is {v}."),
          noun=("the maker of {x}", "the company that produces {x}"), keyword="made by maker",
          clause=("{x} is made by {y}", "{x} is produced by {y}")),
]
FACTS: dict[str, _Fact] = {f.key: f for f in _FACT_LIST}
_TYPES = ("place", "org", "person", "product")
_RELS_FROM = {t: [f.name for f in _FACT_LIST if f.etype == t and f.target] for t in _TYPES}
_ATTRS_OF = {t: [f.name for f in _FACT_LIST if f.etype == t and not f.target] for t in _TYPES}
_NO_FOLLOW = {"ceo": "employer", "employer": "ceo"}  # org->ceo->employer returns to the org

_NUM_RE = r"(?P<v>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
_NAME_RE = r"(?P<v>[A-Z][A-Za-z'\-]*(?: [A-Z][A-Za-z'\-]*)*)"


def format_number(v: int | float, decimals: int, grouping: bool = True) -> str:
    if decimals == 0:
        return f"{int(v):,}" if grouping else str(int(v))
    return f"{v:,.{decimals}f}" if grouping else f"{v:.{decimals}f}"


def parse_number(s: str) -> int | float:
    s = s.replace(",", "").strip()
    return float(s) if "." in s else int(s)


def _fmt_value(fact: _Fact, v: Any) -> str:
    if fact.target:
        return str(v)
    return format_number(v, fact.decimals, grouping=not fact.year)


@functools.lru_cache(maxsize=8192)
def _fact_patterns(fact_key: str, entity: str) -> tuple[re.Pattern, ...]:
    fact = FACTS[fact_key]
    pats = []
    for tmpl in fact.doc:
        rx = re.escape(tmpl)
        rx = rx.replace(re.escape("{name}"), r"(?<![\w-])" + re.escape(entity).replace(r"\ ", r"\s+"))
        rx = rx.replace(re.escape("{v}"), _NAME_RE if fact.target else _NUM_RE)
        rx = rx.replace(r"\ ", r"\s+")
        pats.append(re.compile(rx))
    return tuple(pats)


def extract_fact(text: str, entity: str, fact_key: str) -> list[int | float | str]:
    """Every value the text states for ``fact_key`` (e.g. ``"org.employees"``) of ``entity``, in order."""
    if fact_key not in FACTS:
        raise KeyError(f"unknown fact {fact_key!r}")
    found: list[tuple[int, Any]] = []
    for pat in _fact_patterns(fact_key, entity):
        for m in pat.finditer(text):
            raw = m.group("v")
            found.append((m.start(), raw if FACTS[fact_key].target else parse_number(raw)))
    found.sort(key=lambda t: t[0])
    return [v for _, v in found]


def eval_expression(expr: str, bindings: Mapping[str, Any]) -> Any:
    """Evaluate one of the generator's own arithmetic expressions (never user input)."""
    code = expr.format_map({k: repr(v) for k, v in bindings.items()})
    return eval(code, {"__builtins__": {}}, {"round": round, "abs": abs})  # noqa: S307 - generator-made text only

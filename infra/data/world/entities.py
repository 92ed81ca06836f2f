"""Entities of a synthetic world: fictional names, and the cities, companies, people and products they name.

``_EntityBuilder`` is the generator's part (mixed into :class:`infra.data.world.generate._Builder`) that draws
unused names, near-duplicates of them, the entities with their attributes and relations, and their profiles.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infra.data.world.grammar import _ATTRS_OF, _TYPES, FACTS, _Fact
from infra.data.world.spec import _PROFILE_HI, _PROFILE_LO, WorldError
from infra.tools.search import tokenize

_ONSETS = ["b", "br", "c", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "pr", "qu", "r", "s",
           "st", "t", "tr", "v", "z", "th", "sh", "j", "w"]
_NUCLEI = ["a", "e", "i", "o", "u", "a", "e", "o", "ai", "ia", "ou", "y"]
_CODAS = ["", "", "", "n", "r", "l", "s", "m", "th", "x", "nd", "rk"]
_ORG_SUFFIX = ["Dynamics", "Holdings", "Laboratories", "Systems", "Works", "Industries", "Collective",
               "Foundry", "Partners", "Logistics", "Textiles", "Instruments"]
_PRODUCT_NOUN = ["Glider", "Lantern", "Beacon", "Harvester", "Kettle", "Compass", "Loom", "Drone", "Press",
                 "Monitor", "Scanner", "Filter", "Router", "Blender"]
_PROFESSIONS = ["engineer", "economist", "architect", "chemist", "historian", "surveyor", "designer", "geologist",
                "agronomist", "lawyer"]
_SECTORS = ["shipping", "software", "textile", "mining", "aerospace", "publishing", "food", "energy", "optics"]
_CATEGORIES = ["kitchen appliance", "handheld scanner", "folding bicycle", "desk lamp", "water filter",
               "field camera", "weather station", "sewing machine"]
_VOWELS = "aeiou"


@dataclass
class _Entity:
    key: str
    type: str
    name: str
    attrs: dict[str, Any] = field(default_factory=dict)
    rels: dict[str, str] = field(default_factory=dict)
    profile_date: int = 0
    doc_key: int = -1
    flavour: str = ""



class _EntityBuilder:
    """Names and entities (state lives on :class:`infra.data.world.generate._Builder`)."""

    # ------------------------------------------------------------------ names
    def _root(self, syllables: tuple[int, int] = (2, 3)) -> str:
        rng = self.rng
        for _ in range(1000):
            n = rng.randint(*syllables)
            parts = []
            for i in range(n):
                parts.append(rng.choice(_ONSETS) + rng.choice(_NUCLEI))
                if i == n - 1 or rng.random() < 0.2:
                    parts.append(rng.choice(_CODAS))
            root = "".join(parts)
            if not 5 <= len(root) <= 10:
                continue
            toks = tokenize(root)
            if len(toks) != 1 or toks[0] in self.used_tokens:
                continue
            self.used_tokens.add(toks[0])
            return root.capitalize()
        raise WorldError("ran out of fictional names")  # pragma: no cover

    def _mutate(self, root: str) -> str | None:
        """A near-duplicate of ``root`` (one letter changed) that is not used yet."""
        rng = self.rng
        low = root.lower()
        for _ in range(60):
            i = rng.randrange(1, len(low))
            c = low[i]
            if c in _VOWELS:
                new = rng.choice([v for v in _VOWELS if v != c])
            else:
                new = rng.choice([x for x in "bdklmnrstvz" if x != c])
            cand = (low[:i] + new + low[i + 1:])
            toks = tokenize(cand)
            if len(toks) == 1 and toks[0] not in self.used_tokens:
                self.used_tokens.add(toks[0])
                return cand.capitalize()
        return None

    def _near_duplicate(self, e: _Entity) -> str | None:
        words = e.name.split(" ")
        idx = 1 if e.type == "person" else 0
        new = self._mutate(words[idx])
        if new is None:
            return None
        words[idx] = new
        name = " ".join(words)
        if name in self.used_names:
            return None
        self.used_names.add(name)
        return name

    # ------------------------------------------------------------------ entities
    def _add(self, etype: str, name: str) -> _Entity:
        key = f"{etype}:{len(self.by_type[etype])}"
        e = _Entity(key=key, type=etype, name=name)
        self.entities[key] = e
        self.by_type[etype].append(e)
        self.used_names.add(name)
        return e

    def _random_value(self, fact: _Fact) -> Any:
        v = self.rng.randint(fact.lo, fact.hi)
        return v / (10 ** fact.decimals) if fact.decimals else v

    def build_entities(self) -> None:
        rng, n = self.rng, self.n
        n_place, n_org, n_product = max(8, n // 4), max(8, n // 4), max(8, n // 4)
        n_person = max(n_org + 4, n // 3 + n_org)
        first_pool = [self._root((2, 2)) for _ in range(max(6, n_person // 4))]
        for _ in range(n_place):
            self._add("place", self._root())
        for _ in range(n_org):
            self._add("org", f"{self._root()} {rng.choice(_ORG_SUFFIX)}")
        for _ in range(n_person):
            while True:
                name = f"{rng.choice(first_pool)} {self._root()}"
                if name not in self.used_names:
                    break
            self._add("person", name)
        for _ in range(n_product):
            self._add("product", f"{self._root()} {rng.choice(_PRODUCT_NOUN)}")
        places, orgs, people, products = (self.by_type[t] for t in _TYPES)
        regions = [self._root() for _ in range(5)]
        for e in places:
            e.flavour = rng.choice(regions)
            for a in _ATTRS_OF["place"]:
                e.attrs[a] = self._random_value(FACTS[f"place.{a}"])
        for i, e in enumerate(orgs):
            e.flavour = rng.choice(_SECTORS)
            for a in _ATTRS_OF["org"]:
                e.attrs[a] = self._random_value(FACTS[f"org.{a}"])
            e.rels["hq"] = rng.choice(places).key
            e.rels["ceo"] = people[i].key
        for i, e in enumerate(people):
            e.flavour = rng.choice(_PROFESSIONS)
            e.attrs["birth_year"] = self._random_value(FACTS["person.birth_year"])
            e.rels["born_in"] = rng.choice(places).key
            e.rels["employer"] = orgs[i].key if i < len(orgs) else rng.choice(orgs).key
        for e in products:
            e.flavour = rng.choice(_CATEGORIES)
            maker = rng.choice(orgs)
            e.rels["maker"] = maker.key
            e.attrs["launch_year"] = rng.randint(max(1990, maker.attrs["founded_year"] + 1), 2024)
            e.attrs["price_usd"] = self._random_value(FACTS["product.price_usd"])
        for t in _TYPES:
            for e in self.by_type[t]:
                e.profile_date = rng.randint(_PROFILE_LO, _PROFILE_HI)
                e.doc_key = self._profile_doc(e.type, e.name, e.attrs, {r: self.entities[k].name for r, k in e.rels.items()},
                                              e.flavour, e.profile_date, role="profile", entity=e.key)

"""Questions of a synthetic world: relation paths, the question kinds, their gold paths and answers.

``_QuestionBuilder`` is the generator's part (mixed into :class:`infra.data.world.generate._Builder`) that walks
relation chains, words questions by family, and commits each with its stale, conflict, distractor and
injection material (the documents themselves come from :mod:`infra.data.world.documents`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from infra.data.world.entities import _Entity
from infra.data.world.grammar import _ATTRS_OF, _NO_FOLLOW, _RELS_FROM, _TYPES, FACTS, eval_expression, format_number
from infra.data.world.spec import _STALE_LO, WorldError
from infra.data.world.wording import _CALC, _CMP_CLAUSE, _FRAMES, _OPS, FAMILIES, _topic


@dataclass
class _Path:
    keys: list[str]  # entity keys, start first
    rels: list[str]


@dataclass
class _Q:
    kind: str
    text: str
    hops: int
    needs: str
    answer_type: str
    gold_path: list[dict]
    facts: list[tuple[str, str]]  # (entity key, fact key) of the numeric values fed to fn, in order
    fn: Callable[[list], Any]
    decimals: int | None
    read: list[str]  # entity keys whose profiles the gold path reads
    named: list[str]  # entity names in the question text
    path_entities: list[str]
    topic: str
    options: list[str] | None = None


class _QuestionBuilder:
    """Paths, question kinds and committed questions (state lives on :class:`infra.data.world.generate._Builder`)."""

    # ------------------------------------------------------------------ paths and wording
    def _walk(self, r: int, end_ok: Callable[[_Entity], bool] | None = None,
              start_types: Iterable[str] | None = None) -> _Path | None:
        rng = self.rng
        types = list(start_types) if start_types else (list(_TYPES) if r == 0 else ["org", "person", "product"])
        for _ in range(60):
            cur = rng.choice(self.by_type[rng.choice(types)])
            keys, rels = [cur.key], []
            for _j in range(r):
                options = [x for x in _RELS_FROM[cur.type] if not rels or _NO_FOLLOW.get(rels[-1]) != x]
                if not options:
                    break
                rel = rng.choice(options)
                nxt = self.entities[cur.rels[rel]]
                if nxt.key in keys:
                    break
                keys.append(nxt.key)
                rels.append(rel)
                cur = nxt
            if len(rels) == r and (end_ok is None or end_ok(cur)):
                return _Path(keys, rels)
        return None

    def _np(self, path: _Path, lex: int) -> str:
        x = self.entities[path.keys[0]].name
        for i, rel in enumerate(path.rels):
            x = FACTS[f"{self.entities[path.keys[i]].type}.{rel}"].noun[lex].format(x=x)
        return x

    def _path_steps(self, path: _Path, prefix: str) -> tuple[list[dict], str]:
        """Search steps that resolve the path's relations; returns (steps, reference to the end entity)."""
        steps, subj = [], self.entities[path.keys[0]].name
        for i, rel in enumerate(path.rels):
            fact = FACTS[f"{self.entities[path.keys[i]].type}.{rel}"]
            bind = f"{prefix}{i + 1}"
            steps.append({"op": "search", "query": f"{subj} {fact.keyword}", "entity": subj, "fact": fact.key,
                          "bind": bind})
            subj = "{" + bind + "}"
        return steps, subj

    def _attr_step(self, path: _Path, subj: str, attr: str, bind: str) -> dict:
        fact = FACTS[f"{self.entities[path.keys[-1]].type}.{attr}"]
        return {"op": "search", "query": f"{subj} {fact.keyword}", "entity": subj, "fact": fact.key, "bind": bind}

    def _val(self, key: str, attr: str) -> Any:
        return self.entities[key].attrs[attr]

    def _hops(self) -> int:
        w = list(self.knobs.hop_weights[: self.knobs.max_hops])
        return self.rng.choices(range(1, len(w) + 1), weights=w)[0]

    # ------------------------------------------------------------------ question kinds
    def q_lookup(self, family: str, lex: int, h: int, varying: bool) -> _Q | None:
        def ok(e: _Entity) -> bool:
            return any(FACTS[f"{e.type}.{a}"].varying or not varying for a in _ATTRS_OF[e.type])

        path = self._walk(h - 1, ok)
        if path is None:
            return None
        end = self.entities[path.keys[-1]]
        attr = self.rng.choice([a for a in _ATTRS_OF[end.type] if FACTS[f"{end.type}.{a}"].varying or not varying])
        fact = FACTS[f"{end.type}.{attr}"]
        np = fact.noun[lex].format(x=self._np(path, lex))
        steps, subj = self._path_steps(path, "e")
        steps.append(self._attr_step(path, subj, attr, "v"))
        steps.append({"op": "answer", "value": "{v}"})
        return _Q("lookup", _FRAMES[family]["what"].format(np=np), h, "search", "number", steps,
                  [(end.key, fact.key)], lambda v: v[0], fact.decimals, list(path.keys),
                  [self.entities[path.keys[0]].name], list(path.keys), _topic(fact, lex))

    def q_relation(self, family: str, lex: int, h: int, varying: bool) -> _Q | None:
        if varying:
            return None
        path = self._walk(h)
        if path is None:
            return None
        end = self.entities[path.keys[-1]]
        steps, ref = self._path_steps(path, "e")
        steps.append({"op": "answer", "value": ref})
        frame = _FRAMES[family]["who" if end.type == "person" else "what"]
        last_fact = FACTS[f"{self.entities[path.keys[-2]].type}.{path.rels[-1]}"]
        return _Q("relation", frame.format(np=self._np(path, lex)), h, "search", "entity", steps, [],
                  lambda v, name=end.name: name, None, list(path.keys[:-1]), [self.entities[path.keys[0]].name],
                  list(path.keys), _topic(last_fact, lex))

    def _two_paths(self, h: int, end_ok: Callable[[_Entity], bool], end_ok2: Callable[[_Entity], bool] | None = None
                   ) -> tuple[_Path, _Path] | None:
        p1 = self._walk(h - 1, end_ok)
        if p1 is None:
            return None
        for _ in range(20):
            p2 = self._walk(self.rng.randint(0, h - 1), end_ok2 or end_ok)
            if p2 is not None and p2.keys[-1] != p1.keys[-1] and p2.keys[0] != p1.keys[0]:
                return (p1, p2) if self.rng.random() < 0.5 or len(p1.rels) == len(p2.rels) else (p2, p1)
        return None

    def _binary_steps(self, p1: _Path, p2: _Path, attr1: str, attr2: str) -> tuple[list[dict], str, str]:
        s1, r1 = self._path_steps(p1, "a")
        s2, r2 = self._path_steps(p2, "b")
        steps = s1 + [self._attr_step(p1, r1, attr1, "va")] + s2 + [self._attr_step(p2, r2, attr2, "vb")]
        return steps, r1, r2

    def q_arithmetic(self, family: str, lex: int, h: int, varying: bool) -> _Q | None:
        rng = self.rng
        ops = ["sum", "diff", "ratio", "density", "per_employee"] + ([] if varying else ["years_between"])
        op = rng.choice(ops)
        frame = _FRAMES[family]["what"]
        if op in ("density", "per_employee"):
            etype, a1, a2 = ("place", "population", "area_km2") if op == "density" else ("org", "revenue_musd", "employees")
            path = self._walk(h - 1, lambda e: e.type == etype)
            if path is None:
                return None
            end = self.entities[path.keys[-1]]
            steps, subj = self._path_steps(path, "e")
            steps += [self._attr_step(path, subj, a1, "va"), self._attr_step(path, subj, a2, "vb")]
            expr, dec = ("round({va} / {vb}, 1)", 1) if op == "density" else ("round({va} * 1000000 / {vb})", 0)
            np = _OPS[op][lex].format(x=self._np(path, lex))
            facts = [(end.key, f"{etype}.{a1}"), (end.key, f"{etype}.{a2}")]
            read, named, ents = list(path.keys), [self.entities[path.keys[0]].name], list(path.keys)
            topic = _topic(FACTS[f"{etype}.{a1}"], lex)
        else:
            if op == "years_between":
                years = [k for k, f in FACTS.items() if f.year]
                f1, f2 = FACTS[rng.choice(years)], FACTS[rng.choice(years)]
            else:
                cands = [k for k, f in FACTS.items() if not f.target and not f.year and (f.varying or not varying)]
                f1 = f2 = FACTS[rng.choice(cands)]
            pair = self._two_paths(h, lambda e: e.type == f1.etype, lambda e: e.type == f2.etype)
            if pair is None:
                return None
            p1, p2 = pair
            if self.entities[p1.keys[-1]].type != f1.etype:
                f1, f2 = f2, f1
            v1, v2 = self._val(p1.keys[-1], f1.name), self._val(p2.keys[-1], f2.name)
            if v1 == v2:
                return None
            if op == "ratio" and v1 < v2:  # larger over smaller: never a degenerate 0.00
                p1, p2 = p2, p1
            steps, _, _ = self._binary_steps(p1, p2, f1.name, f2.name)
            d = f1.decimals
            expr = {"sum": f"round({{va}} + {{vb}}, {d})" if d else "{va} + {vb}",
                    "diff": f"round(abs({{va}} - {{vb}}), {d})" if d else "abs({va} - {vb})",
                    "ratio": "round({va} / {vb}, 2)",
                    "years_between": "abs({va} - {vb})"}[op]
            dec = {"sum": d, "diff": d, "ratio": 2, "years_between": 0}[op]
            np = _OPS[op][lex].format(a=f1.noun[lex].format(x=self._np(p1, lex)), b=f2.noun[lex].format(x=self._np(p2, lex)))
            facts = [(p1.keys[-1], f1.key), (p2.keys[-1], f2.key)]
            read, ents = p1.keys + p2.keys, p1.keys + p2.keys
            named = [self.entities[p1.keys[0]].name, self.entities[p2.keys[0]].name]
            topic = _topic(f1, lex)
        steps += [{"op": "python", "code": f"print({expr})", "bind": "result"}, {"op": "answer", "value": "{result}"}]

        def fn(vals: list, expr: str = expr) -> Any:
            return eval_expression(expr, {"va": vals[0], "vb": vals[1]})

        return _Q("arithmetic", frame.format(np=np), h, "both", "number", steps, facts, fn, dec, read, named, ents, topic)

    def q_yes_no(self, family: str, lex: int, h: int, varying: bool) -> _Q | None:
        rng = self.rng
        frame = _FRAMES[family]["yes_no"]
        if varying or rng.random() < 0.5:  # compare two retrieved values
            if not varying and rng.random() < 0.3:
                years = [k for k, f in FACTS.items() if f.year]
                f1, f2, rule = FACTS[rng.choice(years)], FACTS[rng.choice(years)], "lt"
            else:
                cands = [k for k, f in FACTS.items() if not f.target and not f.year and (f.varying or not varying)]
                f1 = f2 = FACTS[rng.choice(cands)]
                rule = "gt"
            pair = self._two_paths(h, lambda e: e.type == f1.etype, lambda e: e.type == f2.etype)
            if pair is None:
                return None
            p1, p2 = pair
            if self.entities[p1.keys[-1]].type != f1.etype:
                f1, f2 = f2, f1
            if self._val(p1.keys[-1], f1.name) == self._val(p2.keys[-1], f2.name):
                return None
            steps, _, _ = self._binary_steps(p1, p2, f1.name, f2.name)
            clause = _CMP_CLAUSE[rule][lex].format(a=f1.noun[lex].format(x=self._np(p1, lex)),
                                                   b=f2.noun[lex].format(x=self._np(p2, lex)))
            steps += [{"op": "decide", "rule": rule, "left": "{va}", "right": "{vb}", "if_true": "yes",
                       "if_false": "no", "bind": "result"}, {"op": "answer", "value": "{result}"}]

            def fn(vals: list, rule: str = rule) -> str:
                return "yes" if (vals[0] > vals[1] if rule == "gt" else vals[0] < vals[1]) else "no"

            return _Q("yes_no", frame.format(clause=clause), h, "search", "yes_no", steps,
                      [(p1.keys[-1], f1.key), (p2.keys[-1], f2.key)], fn, None, p1.keys + p2.keys,
                      [self.entities[p1.keys[0]].name, self.entities[p2.keys[0]].name], p1.keys + p2.keys, _topic(f1, lex))
        # relation check
        path = self._walk(h - 1, lambda e: bool(_RELS_FROM[e.type]))
        if path is None:
            return None
        subj = self.entities[path.keys[-1]]
        rel = rng.choice(_RELS_FROM[subj.type])
        fact = FACTS[f"{subj.type}.{rel}"]
        true_obj = self.entities[subj.rels[rel]]
        if rng.random() < 0.5:
            y, answer = true_obj.name, "yes"
        else:
            y = self._near_duplicate(true_obj) if rng.random() < 0.3 else None
            if y is None:
                others = [e for e in self.by_type[fact.target] if e.key != true_obj.key]
                y = rng.choice(others).name
            answer = "no"
        steps, ref = self._path_steps(path, "e")
        steps += [{"op": "search", "query": f"{ref} {fact.keyword}", "entity": ref, "fact": fact.key, "bind": "o"},
                  {"op": "decide", "rule": "eq", "left": "{o}", "right": y, "if_true": "yes", "if_false": "no",
                   "bind": "result"}, {"op": "answer", "value": "{result}"}]
        clause = fact.clause[lex].format(x=self._np(path, lex), y=y)
        return _Q("yes_no", frame.format(clause=clause), h, "search", "yes_no", steps, [],
                  lambda v, a=answer: a, None, list(path.keys), [self.entities[path.keys[0]].name, y],
                  list(path.keys), _topic(fact, lex))

    def q_comparison(self, family: str, lex: int, h: int, varying: bool) -> _Q | None:
        cands = [k for k, f in FACTS.items() if f.cmp_noun and (f.varying or not varying)]
        fact = FACTS[self.rng.choice(cands)]
        pair = self._two_paths(h, lambda e: e.type == fact.etype)
        if pair is None:
            return None
        p1, p2 = pair
        e1, e2 = self.entities[p1.keys[-1]], self.entities[p2.keys[-1]]
        if e1.attrs[fact.name] == e2.attrs[fact.name]:
            return None
        steps, r1, r2 = self._binary_steps(p1, p2, fact.name, fact.name)
        steps += [{"op": "decide", "rule": "gt", "left": "{va}", "right": "{vb}", "if_true": r1, "if_false": r2,
                   "bind": "result"}, {"op": "answer", "value": "{result}"}]
        text = _FRAMES[family]["which"].format(noun=fact.cmp_noun[lex], x=self._np(p1, lex), y=self._np(p2, lex))

        def fn(vals: list, a: str = e1.name, b: str = e2.name) -> str:
            return a if vals[0] > vals[1] else b

        return _Q("comparison", text, h, "search", "entity", steps, [(e1.key, fact.key), (e2.key, fact.key)], fn,
                  None, p1.keys + p2.keys, [self.entities[p1.keys[0]].name, self.entities[p2.keys[0]].name],
                  p1.keys + p2.keys, _topic(fact, lex), options=[e1.name, e2.name])

    def q_calc(self, family: str, lex: int) -> _Q:
        rng = self.rng
        op = rng.choice(sorted(_CALC))
        nouns, expr, dec = _CALC[op]
        if op == "crates":
            vals = {"a": rng.randint(12, 480), "b": rng.randint(6, 250)}
        elif op == "growth":
            vals = {"a": rng.randint(2_000, 90_000), "r": rng.randint(1, 9), "n": rng.randint(2, 12)}
        elif op == "mean":
            vals = {"a": rng.randint(10, 9_999), "b": rng.randint(10, 9_999), "c": rng.randint(10, 9_999)}
        else:
            vals = {"a": rng.randint(13, 999), "b": rng.randint(13, 999), "c": rng.randint(100, 9_999)}
        shown = {k: str(v) for k, v in vals.items()}  # no thousands separators: "4260, 1702 and 258"
        code_expr = expr.format_map({k: str(v) for k, v in vals.items()})
        answer = eval_expression(code_expr, {})
        steps = [{"op": "python", "code": f"print({code_expr})", "bind": "result"}, {"op": "answer", "value": "{result}"}]
        return _Q("calc", _FRAMES[family]["what"].format(np=nouns[lex].format_map(shown)), 0, "python", "number",
                  steps, [], lambda v, a=answer: a, dec, [], [], [], "")

    # ------------------------------------------------------------------ questions
    def build_questions(self) -> list[dict]:
        rng, knobs = self.rng, self.knobs
        kinds = [k for k, w in knobs.kind_weights if w > 0]
        weights = [w for k, w in knobs.kind_weights if w > 0]
        out = []
        for i in range(self.n):
            for _attempt in range(400):
                family = rng.choice(self.lex_families)
                lex = FAMILIES[family][1]
                kind = rng.choices(kinds, weights=weights)[0]
                stale = rng.random() < knobs.stale_rate
                conflict = rng.random() < knobs.conflict_rate
                distract = rng.random() < knobs.distractor_rate
                inject = rng.random() < knobs.injection_rate
                if kind == "calc":
                    q = self.q_calc(family, lex)
                else:
                    if kind == "relation":
                        stale = conflict = False
                    h = self._hops()
                    q = getattr(self, f"q_{kind}")(family, lex, h, stale or conflict)
                if q is None or q.text in self.texts:
                    continue
                if any(f in self.conflicted for f in q.facts):
                    continue
                conflict_idx = None
                if conflict:
                    free = [j for j, f in enumerate(q.facts) if FACTS[f[1]].varying and self.fact_uses.get(f, 0) == 0]
                    if not free:
                        continue
                    conflict_idx = rng.choice(free)
                out.append(self._commit(i, q, family, stale, conflict_idx, distract, inject))
                break
            else:
                raise WorldError(f"could not generate question {i + 1}: the world is too small for these knobs")
        return out

    def _commit(self, i: int, q: _Q, family: str, stale: bool, conflict_idx: int | None, distract: bool,
                inject: bool) -> dict:
        rng = self.rng
        self.texts.add(q.text)
        vals = [self._val(k, FACTS[f].name) for k, f in q.facts]
        answer = q.fn(vals)
        for f in q.facts:
            self.fact_uses[f] = self.fact_uses.get(f, 0) + 1
        gold = [self.entities[k].doc_key for k in dict.fromkeys(q.read)]
        rec: dict[str, Any] = {"stale": [], "distractors": [], "conflict": None, "injection": None}
        expected = "answered"
        if conflict_idx is not None:
            alt = self._alt_value(q, conflict_idx, vals, answer)
            if alt is not None:
                ekey, fkey = q.facts[conflict_idx]
                self.conflicted.add((ekey, fkey))
                e = self.entities[ekey]
                dkey = self._fact_doc(ekey, fkey, alt[0], e.profile_date, "conflict")
                gold.append(dkey)
                rec["conflict"] = {"entity": e.name, "fact": fkey, "doc_ids": [e.doc_key, dkey],
                                   "values": [vals[conflict_idx], alt[0]], "answers": [answer, alt[1]]}
                expected = "uncertain"
        if stale:
            idx = [j for j, f in enumerate(q.facts) if FACTS[f[1]].varying]
            if idx:
                j = rng.choice(idx)
                alt = self._alt_value(q, j, vals, answer)
                if alt is not None:
                    ekey, fkey = q.facts[j]
                    e = self.entities[ekey]
                    published = rng.randint(_STALE_LO, e.profile_date - 300)
                    dkey = self._fact_doc(ekey, fkey, alt[0], published, "stale")
                    rec["stale"].append({"doc_id": dkey, "entity": e.name, "fact": fkey, "value": alt[0],
                                         "current_value": vals[j], "answer_if_used": alt[1]})
        if distract and q.path_entities:
            target = q.path_entities[0] if rng.random() < 0.7 else rng.choice(q.path_entities)
            d = self._distractor(target)
            if d is not None:
                rec["distractors"].append({"doc_id": d[0], **d[1]})
        if inject and q.needs != "python":
            shown = answer if expected == "answered" else rec["conflict"]["answers"][0]
            key, info = self._injection(q, self._wrong_answer(q, shown))
            rec["injection"] = {"doc_id": key, **info}
        if q.answer_type == "number":
            num = answer
            text = format_number(answer, q.decimals or 0, grouping=False)
        else:
            num, text = None, answer
        return {
            "id": f"{self.split}-{i + 1:05d}",
            "question": q.text,
            "answer": text if expected == "answered" else None,
            "answer_number": num if expected == "answered" else None,
            "decimals": q.decimals if q.answer_type == "number" else None,
            "answer_type": q.answer_type,
            "expected_status": expected,
            "gold_doc_ids": gold,
            "hops": q.hops,
            "needs": q.needs,
            "family": family,
            "kind": q.kind,
            "split": self.split,
            "gold_path": q.gold_path,
            "options": q.options,
            **rec,
        }

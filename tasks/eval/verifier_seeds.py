"""Seeds for the labeled verification set: correct steps read from benchmark files and the synthetic world.

The records a case is made of (plans, tool results, claims, memory items), correct search steps from HotpotQA and
MuSiQue paragraphs, correct python steps from GSM8K worked solutions, and the world's facts (infra.data.world) with
its stale, conflicting and injected documents. tasks.eval.verifier_cases perturbs them into labeled cases.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

CATEGORIES = ("correct", "subtly_wrong", "stale_source", "schema_error", "prompt_injection", "unsupported_claim",
              "conflicting")
LABELS = ("accept", "reject")
DATASETS_ENV = "AGENTFLOW_DATASETS"
AS_OF = "2025-01-01"


class BuildError(ValueError):
    """No usable benchmark files, or a labeled file that cannot be read."""


# =============================================================================== records

def plan_record(step_id: int, sub_goal: str, tool: str, args: dict, expected: str = "", criterion: str = "") -> dict:
    return {"step_id": step_id, "sub_goal": sub_goal[:400], "tool": tool, "args": args, "expected_evidence": expected,
            "success_criterion": criterion, "max_cost": 1.0, "justification": "gather the evidence for this sub-goal"}


def passage(doc_id: str, title: str, text: str, published_at: str | None, score: float = 10.0) -> dict:
    return {"doc_id": doc_id, "title": title, "text": text, "url": None, "published_at": published_at, "score": round(score, 3)}


def search_result(step_id: int, passages: list[dict], claim: dict | None, retrieved: str = AS_OF) -> dict:
    data: dict[str, Any] = {"passages": passages}
    if claim is not None:
        data["claim"] = claim
    top = passages[0] if passages else None
    source = {"uri": f"corpus://{top['doc_id']}", "title": top["title"], "retrieved_at": f"{retrieved}T12:00:00Z",
              "published_at": top["published_at"]} if top else None
    return {"step_id": step_id, "tool": "search", "status": "ok", "data": data, "error": None, "source": source,
            "elapsed_ms": 4.0, "cost": 1.0}


def python_result(step_id: int, stdout: str, claim: dict | None = None, exit_code: int = 0) -> dict:
    data: dict[str, Any] = {"stdout": stdout, "stderr": "", "exit_code": exit_code, "truncated": False}
    if claim is not None:
        data["claim"] = claim
    return {"step_id": step_id, "tool": "python", "status": "ok", "data": data, "error": None,
            "source": {"uri": f"sandbox://python/bwrap/step-{step_id}", "title": "python sandbox",
                       "retrieved_at": f"{AS_OF}T12:00:00Z", "published_at": None},
            "elapsed_ms": 60.0, "cost": 1.0}


def generalist_result(step_id: int, text: str) -> dict:
    return {"step_id": step_id, "tool": "generalist", "status": "ok", "data": {"text": text}, "error": None,
            "source": {"uri": "model://SmolLM2-135M-Instruct", "title": "SmolLM2-135M-Instruct (unverified)",
                       "retrieved_at": f"{AS_OF}T12:00:00Z", "published_at": None},
            "elapsed_ms": 900.0, "cost": 2.0, "tokens_in": 40, "tokens_out": 12, "model": "SmolLM2-135M-Instruct"}


def claim_record(subject: str, value: str, cites: list[str], attribute: str = "") -> dict:
    return {"subject": subject[:300], "attribute": attribute[:200], "value": value[:300], "cites": cites}


def memory_record(step_id: int, tool: str, data: dict, sub_goal: str, published: str | None, as_of: str = AS_OF) -> dict:
    """An accepted memory item as the research loop stores it (content = the result's data)."""
    top = (data.get("passages") or [None])[0]
    source = {"uri": f"corpus://{top['doc_id']}", "title": top["title"], "retrieved_at": f"{as_of}T10:00:00Z",
              "published_at": published} if top else None
    return {"id": f"step-{step_id}", "step_id": step_id, "status": "accepted",
            "provenance": {"tool": tool, "source": source, "step_id": step_id, "model": None},
            "created_at": f"{as_of}T10:00:00Z", "expires_at": None, "supersedes": None, "superseded_by": None,
            "sub_goal": sub_goal[:400], "content": data, "failure_type": None, "reason": "passed"}


# =============================================================================== seeds: correct steps from real files


@dataclass
class Seed:
    """A correct search step: a claim about `subject` whose `value` the `cited` passage states verbatim."""

    source: str
    key: str
    question: str
    subject: str
    attribute: str
    value: str
    cited: dict
    others: list[dict]
    query: str

    def claim(self, value: str | None = None, cites: list[str] | None = None, subject: str | None = None) -> dict:
        return claim_record(subject or self.subject, value if value is not None else self.value,
                            cites if cites is not None else [self.cited["doc_id"]], self.attribute)


@dataclass
class ArithSeed:
    """A correct python step: a program over given values and what it prints."""

    source: str
    key: str
    question: str
    sub_goal: str
    code: str
    stdout: str
    literals: list[str]  # operand literals as written in the code
    memory: list[dict] = field(default_factory=list)
    cites: list[str] = field(default_factory=list)


_YESNO = {"yes", "no"}


def _dated(rng: random.Random, lo: str = "2019-01-01", hi: str = "2024-10-31") -> str:
    a, b = date.fromisoformat(lo).toordinal(), date.fromisoformat(hi).toordinal()
    return date.fromordinal(rng.randint(a, b)).isoformat()


def _query(text: str) -> str:
    words = re.findall(r"[A-Za-z0-9']+", text)
    return " ".join(w for w in words if len(w) > 3)[:200] or text[:200]


def hotpot_seeds(path: Path, rng: random.Random, limit: int) -> list[Seed]:
    seeds = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if len(seeds) >= limit:
                break
            r = json.loads(line)
            answers = [s for a in r.get("answers_objects", []) for s in a.get("spans", []) if s]
            if not answers or answers[0].strip().lower() in _YESNO:
                continue
            value = answers[0].strip()
            if len(value) > 60 or len(value.split()) > 8:  # a sentence, not a value: no claim a step would state
                continue
            ctxs = r["contexts"]
            gold = next((c for c in ctxs if c.get("is_supporting") and value in c["paragraph_text"]), None)
            if gold is None or gold["title"].strip().lower() == value.lower():
                continue
            qid = r["question_id"][:10]
            pid = lambda c: f"hp-{qid}-{c['id']}"  # noqa: E731
            others = [c for c in ctxs if c is not gold and value.lower() not in c["paragraph_text"].lower()]
            rng.shuffle(others)
            seeds.append(Seed("hotpotqa", r["question_id"], r["question_text"], gold["title"], r["question_text"][:200], value,
                              passage(pid(gold), gold["title"], gold["paragraph_text"], None, 14.2),
                              [passage(pid(c), c["title"], c["paragraph_text"], None, 9.0 - i) for i, c in enumerate(others[:2])],
                              _query(r["question_text"])))
    return seeds


def musique_seeds(paths: list[Path], rng: random.Random, limit: int) -> list[Seed]:
    seeds = []
    for path in paths:
        for r in json.loads(path.read_text(encoding="utf-8")):
            answers: list[str] = []
            for k, step in enumerate(r.get("question_decomposition", [])):
                q = step["question"]
                for j, prev in enumerate(answers):
                    q = q.replace(f"#{j + 1}", prev)
                answers.append(step["answer"])
                idx = step.get("paragraph_support_idx")
                if idx is None or len(seeds) >= limit:
                    continue
                para = next((p for p in r["paragraphs"] if p["idx"] == idx), None)
                value = step["answer"].strip()
                usable = para is not None and len(value) <= 60 and len(value.split()) <= 8 and value.lower() not in _YESNO \
                    and value in para["paragraph_text"] and para["title"].strip().lower() != value.lower() and "#" not in q
                if not usable:
                    continue
                others = [p for p in r["paragraphs"] if p is not para and value.lower() not in p["paragraph_text"].lower()]
                rng.shuffle(others)
                rid = f"mq-{r['id'][-12:]}"
                seeds.append(Seed("musique", f"{r['id']}#{k + 1}", q[0].upper() + q[1:] + "?", para["title"], q[:200], value,
                                  passage(f"{rid}-{para['idx']}", para["title"], para["paragraph_text"], _dated(rng), 13.0),
                                  [passage(f"{rid}-{p['idx']}", p["title"], p["paragraph_text"], _dated(rng), 8.5 - i)
                                   for i, p in enumerate(others[:2])], _query(q)))
    return seeds


_CALC = re.compile(r"<<([^=<>]+)=([^<>]+)>>")
_SAFE_EXPR = re.compile(r"^[\d.+\-*/() ]+$")
_NUM_LIT = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")


def _py_value(expr: str, env: dict) -> Any:
    return eval(expr, {"__builtins__": {}}, dict(env))  # noqa: S307 - arithmetic from the regex above, variables ours


def gsm8k_seeds(path: Path, limit: int) -> list[ArithSeed]:
    seeds = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            if len(seeds) >= limit:
                break
            r = json.loads(line)
            final = r["answer"].rsplit("####", 1)[-1].strip().replace(",", "")
            calcs = _CALC.findall(r["answer"])
            if not calcs or not all(_SAFE_EXPR.match(e.strip()) for e, _ in calcs):
                continue
            env: dict[str, Any] = {}
            names: dict[str, str] = {}
            lines, literals = [], []
            try:
                for i, (expr, res) in enumerate(calcs):
                    expr = expr.strip()
                    code_expr = _NUM_LIT.sub(lambda m: names.get(m.group(0), m.group(0)), expr)
                    name = f"v{i + 1}"
                    env[name] = _py_value(code_expr, env)
                    literals += [m for m in _NUM_LIT.findall(code_expr)]
                    lines.append(f"{name} = {code_expr}")
                    names.setdefault(res.strip().replace(",", ""), name)
                value = env[f"v{len(calcs)}"]
                if abs(float(value) - float(final)) > 1e-6:
                    continue
            except (SyntaxError, ZeroDivisionError, ValueError, TypeError):
                continue
            code = "\n".join(lines + [f"print(v{len(calcs)})"])
            seeds.append(ArithSeed("gsm8k", f"gsm8k-{n}", r["question"], "Compute the answer: " + r["question"], code,
                                   f"{value}\n", literals))
    return seeds


# =============================================================================== seeds: the synthetic world

_WORLD_ATTR = {"place.population": ("population", ""), "place.area_km2": ("area", " square kilometres"),
               "place.founded_year": ("founded", ""), "org.founded_year": ("founded", ""), "org.employees": ("employees", ""),
               "org.revenue_musd": ("annual revenue", " million dollars"), "person.birth_year": ("birth year", ""),
               "product.launch_year": ("launch year", ""), "product.price_usd": ("price", " dollars"),
               "org.hq": ("headquarters", ""), "org.ceo": ("chief executive", ""), "person.born_in": ("birthplace", ""),
               "person.employer": ("employer", ""), "product.maker": ("maker", "")}
_UNIT_SWAP = {" square kilometres": " square miles", " million dollars": " billion dollars", " dollars": " euros"}


@dataclass
class WorldFacts:
    seeds: list[Seed]
    by_key: dict[tuple[str, str], Seed]
    stale: list[dict]
    conflict: list[dict]
    injection: list[dict]
    docs: dict[str, Any]
    names: dict[str, list[str]]


def _world_value(fact_key: str, v: Any) -> str:
    from infra.data.world import FACTS, format_number

    f = FACTS[fact_key]
    if f.target:
        return str(v)
    return format_number(v, f.decimals, grouping=not f.year)


def world_facts(seed: int, n_questions: int, rng: random.Random) -> WorldFacts:
    from infra.data.world import FACTS, WorldKnobs, extract_fact, generate_world

    world = generate_world(seed, n_questions, "train", WorldKnobs(stale_rate=0.6, conflict_rate=0.3, injection_rate=0.35))
    docs = {d.id: d for d in world.documents}
    pool = [d for d in world.documents if re.match(r"https://atlas\.example/(place|org|person|product)/", d.url or "")]
    profiles = {d.title: d for d in pool}
    seeds, by_key, names = [], {}, defaultdict(list)
    for d in profiles.values():
        etype = d.url.split("atlas.example/")[1].split("/")[0]
        names[etype].append(d.title)
        for key in FACTS:
            if not key.startswith(etype + ".") or key not in _WORLD_ATTR:
                continue
            vals = extract_fact(d.text, d.title, key)
            if len(vals) != 1:
                continue
            attr, unit = _WORLD_ATTR[key]
            value = _world_value(key, vals[0]) + unit
            if value not in d.text:
                value = _world_value(key, vals[0])
            others = rng.sample([o for o in pool if o.title != d.title], 2)
            s = Seed("world", f"{d.id}:{key}", f"What is the {attr} of {d.title}?", d.title, attr, value,
                     passage(d.id, d.title, d.text, d.published_at, 15.0),
                     [passage(o.id, o.title, o.text, o.published_at, 6.0 - i) for i, o in enumerate(others)],
                     f"{d.title} {attr}")
            seeds.append(s)
            by_key[(d.title, key)] = s
    stale, conflict, injection = [], [], []
    seen: set[str] = set()
    for q in world.questions:
        for st in q["stale"]:
            if st["doc_id"] not in seen and (st["entity"], st["fact"]) in by_key:
                seen.add(st["doc_id"])
                stale.append({**st, "question": q["question"], "doc": docs[st["doc_id"]], "seed": by_key[(st["entity"], st["fact"])]})
        c = q["conflict"]
        if c and (c["entity"], c["fact"]) in by_key:
            conflict.append({**c, "question": q["question"], "doc": docs[c["doc_ids"][1]], "seed": by_key[(c["entity"], c["fact"])]})
        inj = q["injection"]
        if inj:
            related = [s for (name, _), s in by_key.items() if name in q["question"]]
            if related:
                injection.append({**inj, "question": q["question"], "doc": docs[inj["doc_id"]], "seed": rng.choice(related)})
    return WorldFacts(seeds, by_key, stale, conflict, injection, docs, dict(names))


def world_arith_seeds(wf: WorldFacts, rng: random.Random, limit: int) -> list[ArithSeed]:
    numeric = [s for s in wf.seeds if s.key.split(":")[1] in ("place.population", "org.employees", "org.revenue_musd",
                                                               "product.price_usd", "place.area_km2")]
    by_fact = defaultdict(list)
    for s in numeric:
        by_fact[s.key.split(":")[1]].append(s)
    out = []
    facts = sorted(by_fact)
    for i in range(limit):
        f = facts[i % len(facts)]
        if len(by_fact[f]) < 2:
            continue
        a, b = rng.sample(by_fact[f], 2)
        va = re.sub(r"[^\d.]", "", a.value.split(" ")[0])
        vb = re.sub(r"[^\d.]", "", b.value.split(" ")[0])
        op = rng.choice(["sum", "diff", "ratio"])
        expr = {"sum": f"round({va} + {vb}, 2)", "diff": f"round(abs({va} - {vb}), 2)", "ratio": f"round({va} / {vb}, 2)"}[op]
        stdout = _run_locally(f"print({expr})")
        if stdout is None:
            continue
        mem = [memory_record(1, "search", {"passages": [a.cited], "claim": a.claim()}, f"find the {a.attribute} of {a.subject}",
                             a.cited["published_at"]),
               memory_record(2, "search", {"passages": [b.cited], "claim": b.claim()}, f"find the {b.attribute} of {b.subject}",
                             b.cited["published_at"])]
        q = f"What is the {op} of the {a.attribute} of {a.subject} and of {b.subject}?"
        out.append(ArithSeed("world", f"arith-{a.key}-{b.key}-{op}", q, f"compute the {op} of the two {a.attribute} values",
                             f"print({expr})", stdout, [va, vb], mem, ["step-1", "step-2"]))
    return out


def _run_locally(code: str) -> str | None:
    """What print() would write for our own generated arithmetic programs (no sandbox needed: no builtins)."""
    env: dict[str, Any] = {"round": round, "abs": abs}
    out = []
    try:
        for line in code.splitlines():
            if line.startswith("print(") and line.endswith(")"):
                out.append(str(eval(line[6:-1], {"__builtins__": {}}, env)))  # noqa: S307
            else:
                name, expr = line.split(" = ", 1)
                env[name] = eval(expr, {"__builtins__": {}}, env)  # noqa: S307
    except Exception:
        return None
    return "".join(x + "\n" for x in out)


# =============================================================================== benchmark files

def default_datasets_dir() -> Path:
    env = os.environ.get(DATASETS_ENV)
    if env:
        return Path(env)
    here = Path.cwd() / ".." / "shared" / "datasets"
    return here if here.is_dir() else Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets"


def _benchmark_files(dirs: list[Path]) -> dict[str, list[Path]]:
    """hotpotqa / musique / gsm8k files under each DIR (a datasets root or one benchmark's folder)."""
    want = {"hotpotqa": ["dev_subsampled.jsonl"], "musique": ["musique_qa_100.json", "musique_train.json"],
            "gsm8k": ["test.jsonl"]}
    found: dict[str, list[Path]] = defaultdict(list)
    for d in dirs:
        d = Path(d)
        if not d.is_dir():
            raise BuildError(f"{d} is not a directory")
        for bench, files in want.items():
            for base in (d / bench, d) if d.name != bench else (d,):
                for f in files:
                    if (base / f).is_file() and (base / f) not in found[bench]:
                        found[bench].append(base / f)
    return dict(found)

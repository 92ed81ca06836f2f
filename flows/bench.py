"""`make bench`: side-by-side measurements written as JSON (ratios from one run, not absolute claims).

- orchestration: the same scripted batch with module calls as Prefect tasks vs plain calls;
- embedded model: one Planner call's latency and output tokens per second;
- sandbox: one Python call under each available isolation mechanism;
- search: query latency over a generated corpus.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import typer

bench_app = typer.Typer(add_completion=False)


def _timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _summary(samples: list[float]) -> dict:
    return {"median_s": statistics.median(samples), "min_s": min(samples), "n": len(samples)}


def bench_orchestration(work: Path, n_questions: int) -> dict:
    from flows.batch import InputReport, batch_research, run_batch
    from flows.research import DIRECT_STEPS
    from infra.models import clear_backend_cache
    from infra.settings import ModelConfig, load_settings
    from tasks.contracts import Question

    corpus = work / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "d1", "title": "Lake Orvanne", "text": "Lake Orvanne is 212 metres deep."}) + "\n")
    qfile = work / "q.jsonl"
    qs = [Question(id=f"q{i}", question="How deep is Lake Orvanne?") for i in range(n_questions)]
    qfile.write_text("".join(q.model_dump_json() + "\n" for q in qs))
    plan = lambda tool, arg="": json.dumps({"sub_goal": "s", "tool": tool, "tool_input": arg, "justification": "j"})
    settings = load_settings(None, None, **{
        "models.planner": ModelConfig(backend="scripted", script=[plan("search", "Lake Orvanne"), plan("answer")]).model_dump(),
        "models.generator": ModelConfig(backend="scripted", script=['{"answer": "212", "claims": [{"claim": "212", "step_id": 1}]}']).model_dump(),
        "tools.search.corpus": str(corpus), "tools.allow": ["search"], "storage.out": str(work / "out"),
    })
    clear_backend_cache()
    t0 = time.perf_counter()
    run_batch(InputReport(questions=qs), settings, "direct", log_dir=str(work / "logs"), progress=False, steps=DIRECT_STEPS)
    direct = time.perf_counter() - t0
    clear_backend_cache()
    t0 = time.perf_counter()
    batch_research(str(qfile), settings, "warmup", limit=1, log_dir=str(work / "logs"), progress=False)
    warm = time.perf_counter() - t0  # includes the temporary Prefect server's start
    clear_backend_cache()
    t0 = time.perf_counter()
    batch_research(str(qfile), settings, "prefect", log_dir=str(work / "logs"), progress=False)
    prefect = time.perf_counter() - t0
    calls = n_questions * 5
    return {"questions": n_questions, "module_calls": calls, "direct_s": direct, "prefect_s": prefect,
            "prefect_first_flow_s": warm, "prefect_over_direct": prefect / direct,
            "prefect_overhead_per_module_call_ms": (prefect - direct) / calls * 1000}


def bench_embedded(repeat: int) -> dict:
    from infra.models import build_backend
    from infra.settings import ModelConfig
    from tasks.contracts import plan_draft_schema

    cfg = ModelConfig(max_tokens=96)
    t0 = time.perf_counter()
    backend = build_backend(cfg)
    load_s = time.perf_counter() - t0
    messages = [{"role": "system", "content": "You plan research steps. Reply with JSON."},
                {"role": "user", "content": "Question: How deep is Lake Orvanne? Next step as JSON:"}]
    schema = plan_draft_schema(["search", "python", "answer"])
    rows = []
    for _ in range(repeat):
        c = backend.complete(messages, json_schema=schema, max_tokens=96, temperature=0.7)
        rows.append((c.latency_ms / 1000, c.tokens_out))
    return {"load_s": load_s, "planner_call_median_s": statistics.median(r[0] for r in rows),
            "tokens_out_per_s": sum(r[1] for r in rows) / sum(r[0] for r in rows), "n": repeat}


def bench_sandbox(repeat: int) -> dict:
    from infra.sandbox import SandboxLimits, available_mechanisms, make_sandbox

    out = {}
    for mech in available_mechanisms():
        box = make_sandbox(mech)
        out[mech] = _summary(_timed(lambda: box.run_python("print(17 * 23)", SandboxLimits()), repeat))
    if "bwrap" in out and "process" in out:
        out["bwrap_over_process"] = out["bwrap"]["median_s"] / out["process"]["median_s"]
    return out


def bench_search(work: Path, repeat: int) -> dict:
    from infra.search import SearchIndex
    from infra.world import generate_world, write_world

    world = generate_world(seed=0, n_questions=200, split="train")
    write_world(world, work / "world")
    t0 = time.perf_counter()
    index = SearchIndex.from_jsonl(work / "world" / "corpus.jsonl")
    build = time.perf_counter() - t0
    questions = [json.loads(l)["question"] for l in (work / "world" / "questions.jsonl").read_text().splitlines()][:repeat]
    samples = _timed(lambda it=iter(questions * 2): index.search(next(it), k=3), len(questions))
    return {"documents": len(index), "index_build_s": build, "query": _summary(samples)}


@bench_app.command()
def main(out: Path = typer.Option(Path("bench-results/bench.json")), questions: int = 20, repeat: int = 5) -> None:
    """Run every benchmark and write one JSON file."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    result = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with tempfile.TemporaryDirectory(prefix="agentflow-bench-") as tmp:
        work = Path(tmp)
        for name, fn in [("orchestration", lambda: bench_orchestration(work, questions)),
                         ("embedded_model", lambda: bench_embedded(repeat)),
                         ("sandbox", lambda: bench_sandbox(repeat)),
                         ("search", lambda: bench_search(work, 50))]:
            typer.echo(f"bench: {name} ...", err=True)
            try:
                result[name] = fn()
            except Exception as exc:  # one broken benchmark must not hide the others
                result[name] = {"error": f"{type(exc).__name__}: {exc}"}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    typer.echo(json.dumps(result, indent=2))


if __name__ == "__main__":
    bench_app()

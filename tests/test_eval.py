"""The evaluation harness: systems, seeds, the evaluate flow (Prefect test harness, scripted models), the CLI."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import typer
from typer.testing import CliRunner

from flows.cli.eval import eval_command
from flows.evaluate import EvalError, evaluate, run_unit, seeded
from flows.systems import SYSTEMS, SystemOptions, SystemUnavailable, check_system, parse_systems, system_settings
from infra.models import build_backend, clear_backend_cache
from tasks.baselines.direct import run_direct
from tasks.contracts import AnswerStatus, BudgetLimit, Question, Role, StopReason
from tests.conftest import MECHANICS_MODEL, MECHANICS_SETS
from tests.scripted import answer, plan, scripted_settings

Q = Question(id="q1", question="What is 6 times 7?", answer="42")


@pytest.fixture(autouse=True)
def _fresh_backends():
    clear_backend_cache()
    yield


def _gsm8k_raw(tmp_path: Path) -> Path:
    """A raw GSM8K-layout datasets directory with two questions (gold 42 and 43)."""
    d = tmp_path / "datasets" / "gsm8k"
    d.mkdir(parents=True)
    rows = [{"question": "What is 6 times 7?", "answer": "6*7=42\n#### 42"},
            {"question": "What is 6 times 7, plus one?", "answer": "6*7+1=43\n#### 43"}]
    (d / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path / "datasets"


# --------------------------------------------------------------------------- systems


def test_registry_names_every_system():
    assert list(SYSTEMS) == ["direct", "monolithic", "modular", "modular-nomem", "modular-trained", "modular-base"]
    assert parse_systems("direct, modular,direct") == ["direct", "modular"]
    with pytest.raises(SystemUnavailable, match="unknown system 'modulr'"):
        parse_systems("modulr")


def test_direct_answers_in_one_generator_call_without_tools():
    s = scripted_settings([plan("answer")], ["Six sevens. Answer: 42"])
    out = run_direct(Q, s, run_id="d")
    a = out.answer
    assert a.status is AnswerStatus.answered and a.stop_reason is StopReason.answered
    assert a.text == "Six sevens. Answer: 42" and a.iterations == 0 and not a.citations
    assert list(a.cost) == [Role.generator] and a.cost[Role.generator].calls == 1
    assert [r.role for r in out.records] == [Role.generator]
    backend = build_backend(s.models.generator)
    assert backend.calls == 1 and backend.requests[0]["json_schema"] is None  # free text, no tool schema


def test_direct_is_admitted_by_the_same_budget():
    s = scripted_settings([plan("answer")], ["Answer: 42"], budget={"max_tokens": 100})
    out = run_direct(Q, s, run_id="d")
    assert out.answer.status is AnswerStatus.budget_exhausted and out.answer.budget_limit is BudgetLimit.tokens
    assert build_backend(s.models.generator).calls == 0  # refused before the call, not after


def test_direct_model_failure_is_a_failed_answer():
    s = scripted_settings([plan("answer")], ["x" * 10000], **{"models.generator.max_input_tokens": 16})
    s.models.generator.max_input_tokens = 16
    out = run_direct(Q, s, run_id="d")
    assert out.answer.status is AnswerStatus.failed and out.answer.stop_reason is StopReason.error
    assert out.records[0].failure_type.value == "model_error"


def test_modular_trained_refuses_clearly(tmp_path):
    with pytest.raises(SystemUnavailable, match="no trained adapter given"):
        check_system("modular-trained")
    with pytest.raises(SystemUnavailable, match="does not exist"):
        check_system("modular-trained", SystemOptions(adapter=str(tmp_path / "missing")))
    (tmp_path / "adapter").mkdir()
    with pytest.raises(SystemUnavailable, match="not a trained adapter directory"):
        check_system("modular-trained", SystemOptions(adapter=str(tmp_path / "adapter")))
    with pytest.raises(SystemUnavailable, match="no trained adapter given"):  # never runs the untrained Planner
        SYSTEMS["modular-trained"](Q, scripted_settings([plan("answer")]), run_id="t")


def test_seeds_change_every_model_config_and_nomem_changes_only_the_planner_view():
    s = scripted_settings([plan("answer")])
    s7 = seeded(s, 7)
    assert s7.seed == 7 and {s7.models.planner.seed, s7.models.generator.seed, s7.models.generalist.seed} == {7}
    assert s.models.planner.seed is None  # the input is not modified
    nomem = system_settings("modular-nomem", s7)
    assert nomem.memory.planner_view == "last" and s7.memory.planner_view == "all"
    assert system_settings("modular", s7) is s7


def test_nomem_planner_sees_only_the_latest_evidence(corpus_file):
    script = [plan("search", "Lake Orvanne depth"), plan("search", "Mount Kelbra height"), plan("answer")]
    s = scripted_settings(script, [answer("212 metres", 1)], corpus=corpus_file)
    SYSTEMS["modular-nomem"](Q, s, run_id="n", options=SystemOptions(prefect_tasks=False))
    nomem = system_settings("modular-nomem", s)
    third = build_backend(nomem.models.planner).requests[2]["messages"][-1]["content"]
    assert 'step="2"' in third and 'step="1"' not in third
    clear_backend_cache()
    SYSTEMS["modular"](Q, s, run_id="m", options=SystemOptions(prefect_tasks=False))
    third = build_backend(s.models.planner).requests[2]["messages"][-1]["content"]
    assert 'step="1"' in third and 'step="2"' in third


def test_a_system_that_raises_fails_its_question_only(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("backend went away")

    monkeypatch.setitem(SYSTEMS, "direct", boom)
    rec = {"id": "g-1", "question": "What is 6 times 7?", "answer": "42", "benchmark": "gsm8k", "answer_type": "number"}
    u = run_unit("direct", 0, rec, scripted_settings([plan("answer")]), run_id="r", log=None, options=SystemOptions())
    assert u.row["status"] == "failed" and u.row["error"] == "RuntimeError: backend went away"
    assert (u.row["attribution_module"], u.row["attribution_cause"]) == ("system", "run_error")


# --------------------------------------------------------------------------- the flow


def test_evaluate_flow_writes_results_summary_report_and_resumes(prefect_harness, tmp_path):
    from prefect.client.orchestration import get_client

    raw = _gsm8k_raw(tmp_path)
    out = tmp_path / "eval"
    s = scripted_settings([plan("python", "6*7"), plan("answer", "42")], [answer("42", 1)])
    systems = ["direct", "monolithic", "modular", "modular-nomem"]
    got = evaluate("gsm8k", str(raw), systems, 2, str(out), s, progress=False)
    assert got.done == 16 and got.skipped_existing == 0 and got.seeds == [0, 1]
    assert (out / "data" / "questions.jsonl").is_file()  # prepared on the fly from the raw layout

    rows = pq.read_table(out / "results.parquet").to_pylist()
    assert len(rows) == 16
    assert {(r["system"], r["seed"], r["question_id"]) for r in rows} == {
        (n, k, q) for n in systems for k in (0, 1) for q in ("gsm8k-0001", "gsm8k-0002")}
    by = {(r["system"], r["seed"], r["question_id"]): r for r in rows}
    mod = by[("modular", 0, "gsm8k-0001")]
    assert mod["correct"] and mod["status"] == "answered" and mod["tokens_planner"] > 0 and mod["tokens_total"] > 0
    assert mod["tool_calls"] == 1 and mod["verifier_calls"] == 1 and mod["missing_evidence"] == 0
    wrong = by[("modular", 0, "gsm8k-0002")]  # python printed 42, accepted, answer 42; gold 43
    assert not wrong["correct"] and (wrong["attribution_module"], wrong["attribution_cause"]) == ("verifier", "false_accept")
    mono = by[("monolithic", 1, "gsm8k-0001")]
    assert mono["correct"] and mono["missing_evidence"] == 1  # an answer with no accepted citation
    direct = by[("direct", 0, "gsm8k-0001")]
    assert direct["tool_calls"] == 0 and direct["tokens_generator"] == direct["tokens_total"] > 0
    assert all(r["trace"] and (out / r["trace"]).is_file() for r in rows)

    steps = pq.read_table(out / "steps.parquet").to_pylist()
    mod_steps = [x for x in steps if (x["system"], x["seed"], x["question_id"]) == ("modular", 0, "gsm8k-0001")]
    assert [x["role"] for x in mod_steps] == ["planner", "executor", "verifier", "planner", "generator"]
    ev = pq.read_table(out / "evidence.parquet").to_pylist()
    assert any(e["system"] == "modular" and e["status"] == "accepted" and "42" in e["text"] for e in ev)
    judged = pq.read_table(out / "judged.parquet").to_pylist()  # every step a Verifier judged, whole, for harvesting
    assert {j["system"] for j in judged} == {"modular", "modular-nomem"}  # the baselines have no Verifier
    one = next(j for j in judged if (j["system"], j["seed"], j["question_id"]) == ("modular", 0, "gsm8k-0001"))
    step = json.loads(one["step"])
    assert one["accepted"] and step["plan"]["tool"] == "python" and step["result"]["data"]["stdout"].strip() == "42"
    assert json.loads(one["question"])["answer"] == "42"

    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["systems"]) == systems
    assert summary["systems"]["modular"]["accuracy"]["mean"] == 0.5
    assert summary["systems"]["direct"]["accuracy"]["mean"] == 0.0  # its JSON-looking reply ends in step_id 1
    assert summary["run"]["seeds"] == [0, 1] and summary["run"]["questions"] == 2
    assert len(summary["paired_differences"]) == 6
    for name in systems:
        for k in (0, 1):
            text = (out / "settings" / f"{name}.seed{k}.yaml").read_text()
            assert f"seed: {k}" in text
    assert "planner_view: last" in (out / "settings" / "modular-nomem.seed0.yaml").read_text()
    assert (out / "report.html").stat().st_size > 10000

    import anyio

    async def names():
        async with get_client() as client:
            return {r.name for r in await client.read_task_runs()}

    async def artifacts():
        async with get_client() as client:
            return {a.key for a in await client.read_artifacts()}

    runs = anyio.run(names)
    assert {"eval-modular-s0-gsm8k-0001", "eval-direct-s1-gsm8k-0002", "plan-gsm8k-0001-step1"} <= runs
    assert "evaluate-gsm8k" in anyio.run(artifacts)

    # Re-run: every unit is found, nothing is run again or duplicated.
    again = evaluate("gsm8k", str(out / "data"), systems, 2, str(out), s, progress=False)
    assert again.done == 0 and again.skipped_existing == 16
    assert pq.read_table(out / "results.parquet").num_rows == 16
    # ... and an --out that holds a different evaluation is refused, not mixed into
    other = scripted_settings([plan("python", "6*7"), plan("answer", "42")], [answer("42", 1)], budget={"max_steps": 2})
    with pytest.raises(EvalError, match="different settings_sha256"):
        evaluate("gsm8k", str(out / "data"), systems, 1, str(out), other, progress=False)


def test_evaluate_refuses_before_running_anything(prefect_harness, tmp_path):
    raw = _gsm8k_raw(tmp_path)
    s = scripted_settings([plan("answer")])
    with pytest.raises(SystemUnavailable, match="no trained adapter given"):
        evaluate("gsm8k", str(raw), ["modular", "modular-trained"], 1, str(tmp_path / "out"), s, progress=False)
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- CLI


def _app():
    app = typer.Typer()
    app.command("eval")(eval_command)  # how flows/cli/app.py registers it
    app.command("noop")(lambda: None)
    return app


def test_cli_refuses_untrained_modular_and_bamboogle(tmp_path):
    runner = CliRunner()
    raw = _gsm8k_raw(tmp_path)
    r = runner.invoke(_app(), ["eval", "--benchmark", "gsm8k", "--data", str(raw), "--systems", "modular-trained",
                               "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "no trained adapter given" in r.output
    bam = tmp_path / "bamboogle"
    bam.mkdir()
    (bam / "bamboogle.jsonl").write_text(json.dumps({"idx": 1, "question": "Who?", "answer": "Ann"}) + "\n")
    r = runner.invoke(_app(), ["eval", "--benchmark", "bamboogle", "--data", str(tmp_path), "--systems", "direct",
                               "--out", str(tmp_path / "o2")])
    assert r.exit_code == 2 and "web-search backend" in r.output


def test_cli_runs_an_evaluation_and_prints_the_table(prefect_harness, tmp_path):
    from infra.runtime.settings import dump_settings

    raw = _gsm8k_raw(tmp_path)
    config = tmp_path / "scripted.yaml"
    config.write_text(dump_settings(scripted_settings([plan("answer")], ["Answer: 42"])))
    out = tmp_path / "o"
    r = CliRunner().invoke(_app(), ["eval", "--benchmark", "gsm8k", "--data", str(raw), "--systems", "direct",
                                    "--seeds", "1", "--limit", "1", "--out", str(out), "--config", str(config),
                                    "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "1 run now, 0 done earlier" in r.output and "direct: stops answered 1; failed in none" in r.output
    assert pq.read_table(out / "results.parquet").to_pylist()[0]["correct"] is True


@pytest.mark.slow
def test_evaluate_with_the_real_embedded_model(prefect_harness, tmp_path):
    """Small on purpose: one question, direct and modular, one seed, three planner turns at most."""
    from infra.runtime.settings import load_settings

    raw = _gsm8k_raw(tmp_path)
    s = load_settings(None, ["budget.max_steps=3", *MECHANICS_SETS])
    out = tmp_path / "eval"
    got = evaluate("gsm8k", str(raw), ["direct", "modular"], 1, str(out), s, limit=1, progress=False)
    assert got.done == 2
    rows = {r["system"]: r for r in pq.read_table(out / "results.parquet").to_pylist()}
    assert rows["direct"]["tokens_generator"] > 0 and rows["direct"]["status"] in {"answered", "failed"}
    assert rows["modular"]["tokens_planner"] > 0 and rows["modular"]["iterations"] >= 1
    assert rows["modular"]["error"] is None
    for r in rows.values():
        assert r["correct"] or r["attribution_module"] in {"planner", "executor", "verifier", "generator", "budget", "system"}
    steps = pq.read_table(out / "steps.parquet").to_pylist()
    assert {x["model"] for x in steps if x["role"] == "planner"} == {MECHANICS_MODEL}
    assert (out / "report.html").is_file() and json.loads((out / "summary.json").read_text())["rows"] == 2

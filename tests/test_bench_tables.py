"""The headline tables: records from evaluation directories, merging, pooling, refusals, the doc section, `run`."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from flows.bench import tables
from flows.bench.tables import BEGIN, END, TablesError, deal, pool, pool_benchmark, record_run, render, write_doc
from tests.scripted import answer, plan

SYSTEMS = tables.SYSTEMS


def _record(system: str, seed: int, outcomes: dict[str, bool], settings_sha: str = "s", questions_sha: str = "q",
            code_sha: str = "c"):
    rows = [{"question_id": q, "correct": c, "score": float(c), "tokens_total": 100, "latency_s": 1.0,
             "stop_reason": "answered", "status": "answered", "iterations": 1, "verifier_calls": 1,
             "verifier_rejections": 0, "attribution_module": None if c else "planner", "attribution_cause": None}
            for q, c in outcomes.items()]
    return {"benchmark": "gsm8k", "system": system, "seed": seed, "commits": ["abc"], "rows": rows,
            "fingerprint": {"benchmark": "gsm8k", "questions_sha256": questions_sha, "settings_sha256": settings_sha,
                            "code_sha256": code_sha, "models": {"planner": "qwen2.5-coder-0.5b"}}}


def _write(root: Path, record: dict) -> Path:
    path = root / record["benchmark"] / f"{record['system']}.seed{record['seed']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


def test_deal_balances_expected_time_and_keeps_every_job():
    jobs = [(s, n) for s in (0, 1) for n in SYSTEMS]
    shares = deal(jobs, 2)
    assert sorted(j for share in shares for j in share) == sorted(jobs)
    loads = [sum(tables.COST[n] for _, n in share) for share in shares]
    assert max(loads) - min(loads) <= tables.COST["direct"] * 2  # two seeds split evenly
    assert deal(jobs[:1], 4) == [[jobs[0]]]  # never an empty share


def test_pool_counts_only_units_every_system_finished(tmp_path):
    root = tmp_path / "records"
    all_right = {"q1": True, "q2": True, "q3": False}
    for n in SYSTEMS:
        _write(root, _record(n, 0, all_right if n == "modular" else {"q1": False, "q2": False, "q3": False}))
    _write(root, _record("modular", 1, {"q1": True}))  # seed 1: only modular has started
    summary = pool(root, None)["gsm8k"]
    assert summary["pooled"]["questions_per_seed"] == {0: 3}
    assert summary["pooled"]["recorded_per_system_seed"]["modular.seed1"] == 1
    assert summary["systems"]["modular"]["accuracy"]["mean"] == pytest.approx(2 / 3)
    assert summary["systems"]["direct"]["accuracy"]["mean"] == 0.0
    diff = next(d for d in summary["paired_differences"] if (d["a"], d["b"]) == ("monolithic", "modular"))
    assert diff["mean_diff"] == pytest.approx(-2 / 3) and diff["b_better"] == 2 and diff["ties"] == 1
    assert json.loads((root / "summary.json").read_text())["gsm8k"]["rows"] == 12


def test_a_variant_measured_beside_the_tables_pools_over_its_own_systems(tmp_path):
    root = tmp_path / "variant"
    _write(root, _record("modular", 2, {"q1": True, "q2": False}))
    _write(root, _record("monolithic", 2, {"q1": True, "q2": True}))
    summary = pool(root, None)["gsm8k"]
    assert list(summary["systems"]) == ["monolithic", "modular"] and summary["pooled"]["questions_per_seed"] == {2: 2}
    assert tables.main(["run", "--benchmark", "gsm8k", "--systems", "modular,planner", "--records", str(root)]) == 2


def test_pool_refuses_records_that_measure_different_things(tmp_path):
    root = tmp_path / "records"
    _write(root, _record("direct", 0, {"q1": True}))
    _write(root, _record("direct", 1, {"q1": True}, settings_sha="other"))
    with pytest.raises(TablesError, match="direct: seeds recorded under different settings"):
        pool(root, None)
    _write(root, _record("direct", 1, {"q1": True}))
    _write(root, _record("modular", 0, {"q1": True}, questions_sha="other"))
    with pytest.raises(TablesError, match="different question files"):
        pool(root, None)
    _write(root, _record("modular", 0, {"q1": True}, code_sha="edited"))
    with pytest.raises(TablesError, match="different code"):
        pool(root, None)
    (root / "gsm8k" / "modular.seed0.json").write_text("{not json")
    with pytest.raises(TablesError, match="not a table record"):
        pool(root, None)


def test_render_marks_an_interval_that_excludes_zero():
    recs = [_record(n, 0, {f"q{i}": n == "modular" for i in range(30)}) for n in SYSTEMS]
    text = render({"gsm8k": pool_benchmark(recs)})
    assert "| modular | 100.0 | [100.0, 100.0] |" in text
    assert "| direct - modular | -100.0 | [-100.0, -100.0] **(excludes 0)** |" in text
    assert "| direct - monolithic | 0.0 | [0.0, 0.0] | 0 / 0 / 30 |" in text
    assert "failures attributed to" in text and "planner 30" in text
    assert "mean F1" not in text  # exact match is the whole score here
    for r in recs[0]["rows"]:
        r["score"] = 0.5  # direct's wrong answers hold half the gold's tokens
    text = render({"gsm8k": pool_benchmark(recs)})
    assert "| system | accuracy % | 95% CI | std over seeds | mean F1 % |" in text and "| direct | 0.0 | [0.0, 0.0] | 0.0 | 50.0 |" in text


def test_write_doc_replaces_only_the_marked_section(tmp_path):
    doc = tmp_path / "results.md"
    doc.write_text(f"# Results\n\nprose\n\n{BEGIN}\nold\n{END}\n\nmore prose\n")
    write_doc(doc, "new table")
    assert doc.read_text() == f"# Results\n\nprose\n\n{BEGIN}\nnew table\n{END}\n\nmore prose\n"
    doc.write_text("no markers")
    with pytest.raises(TablesError, match="markers"):
        write_doc(doc, "x")
    assert doc.read_text() == "no markers"  # nothing lost


def test_code_hash_covers_the_behaviour_code_only(tmp_path):
    for rel in ("tasks/modules/planner.py", "infra/runtime/settings.py", "flows/research.py", "flows/bench/suite.py",
                "infra/runtime/events.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    for d in ("infra/models", "infra/tools", "infra/data"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
    (tmp_path / "flows/systems.py").write_text("")
    (tmp_path / "flows/evaluate.py").write_text("")
    before = tables.code_sha256(tmp_path)
    (tmp_path / "flows/bench/suite.py").write_text("x = 2\n")  # a benchmark script: not behaviour
    (tmp_path / "infra/runtime/events.py").write_text("x = 2\n")  # logging: not behaviour
    (tmp_path / "tasks/eval").mkdir()
    (tmp_path / "tasks/eval/harvest.py").write_text("x = 2\n")  # the Verifier's case harvest: no system runs it
    assert tables.code_sha256(tmp_path) == before
    (tmp_path / "tasks/modules/planner.py").write_text("x = 2\n")
    assert tables.code_sha256(tmp_path) != before
    assert len(tables.code_sha256()) == 64  # the project's own tree


def test_record_refuses_what_is_not_an_evaluation(tmp_path):
    with pytest.raises(TablesError, match="not an evaluation directory"):
        record_run(tmp_path, tmp_path / "records")
    assert tables.main(["record", str(tmp_path), "--records", str(tmp_path / "r")]) == 2
    assert tables.main(["pool", "--records", str(tmp_path / "missing")]) == 2


def _scripted_config(tmp_path: Path) -> Path:
    """Every role scripted: the Planner answers at once; mechanics only."""
    step = {"backend": "scripted", "model": "scripted"}
    cfg = {"models": {"planner": {**step, "script": [plan("answer")]},
                      "generator": {**step, "script": [answer("uncertain")]},
                      "generalist": {**step, "script": ["uncertain"]}},
           "tools": {"python": {"sandbox": "auto"}}}
    path = tmp_path / "scripted.yaml"
    path.write_text(json.dumps(cfg))
    return path


def test_run_records_pools_and_resumes_in_two_worker_processes(tmp_path, monkeypatch):
    """The real path: spawned workers run the evaluate flow (scripted models), records are written, then pooled;
    the same command again finds every unit done and changes no record."""
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    out, records, doc = tmp_path / "runs", tmp_path / "records", tmp_path / "results.md"
    args = ["run", "--benchmark", "world", "--seeds", "0", "--questions", "2", "--workers", "2", "--out", str(out),
            "--records", str(records), "--doc", str(doc), "--config", str(_scripted_config(tmp_path))]
    assert tables.main(args) == 0
    files = sorted(p.name for p in (records / "world").glob("*.json"))
    assert files == sorted(f"{n}.seed0.json" for n in SYSTEMS)
    rec = json.loads((records / "world" / "modular.seed0.json").read_text())
    assert [r["question_id"] for r in rec["rows"]] == ["world-test-00001", "world-test-00002"]
    assert set(rec["rows"][0]) == {*tables.RECORD_FIELDS, "commit"}
    assert rec["fingerprint"]["code_sha256"] == tables.code_sha256()
    assert "question" not in rec["rows"][0] and "gold" not in rec["rows"][0]  # no dataset text
    assert BEGIN in doc.read_text() and "Synthetic world" in doc.read_text()
    # each worker merged only its own systems; the run's top-level tables hold all four (harvest reads them)
    merged = pq.read_table(out / "world" / "seed0" / "results.parquet")
    assert sorted(set(merged["system"].to_pylist())) == sorted(SYSTEMS) and merged.num_rows == 2 * len(SYSTEMS)
    before = {p.name: json.loads(p.read_text())["rows"] for p in (records / "world").glob("*.json")}
    assert tables.main(args) == 0
    assert {p.name: json.loads(p.read_text())["rows"] for p in (records / "world").glob("*.json")} == before
    # the same records under another configuration are refused, and the old record stays as it was
    other = [*args, "--set", "budget.max_steps=2"]
    assert tables.main(other) == 2
    assert json.loads((records / "world" / "modular.seed0.json").read_text())["rows"] == rec["rows"]


def test_pool_writes_the_readme_headline_between_its_markers_and_keeps_the_rest(tmp_path):
    records = tmp_path / "records"
    for system in SYSTEMS:
        _write(records, _record(system, 0, {"q1": system != "direct", "q2": False}))
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nprose before\n\n{tables.HEADLINE_BEGIN}\nold\n{tables.HEADLINE_END}\n\nprose after\n")
    pool(records, None, readme)
    text = readme.read_text()
    assert text.startswith("# Title\n\nprose before") and text.rstrip().endswith("prose after") and "old" not in text
    assert "| system | GSM8K |" in text and "| direct | 0.0 % [0.0, 0.0] |" in text and "| modular | 50.0 % [" in text
    assert "GSM8K: seeds 0" in text
    bare = tmp_path / "BARE.md"
    bare.write_text("no markers\n")
    with pytest.raises(TablesError, match="markers"):
        pool(records, None, bare)
    assert bare.read_text() == "no markers\n"


def test_a_variant_pools_beside_the_table_paired_with_every_system(tmp_path):
    table, variant = tmp_path / "records", tmp_path / "variant"
    for n in SYSTEMS:
        _write(table, _record(n, 0, {f"q{i}": n == "modular" for i in range(30)}))
    _write(table, _record("modular", 1, {"q0": True}))  # a seed the variant has not run: the table keeps its own units
    _write(variant, _record("direct", 0, {f"q{i}": i < 20 for i in range(30)}, settings_sha="no-example"))
    readme = tmp_path / "README.md"
    readme.write_text(f"{tables.HEADLINE_BEGIN}\n{tables.HEADLINE_END}\n")
    summary = pool(table, tmp_path / "results.md", readme, [f"direct-no-example={variant}"])["gsm8k"]
    assert summary["systems"]["modular"]["accuracy"]["mean"] == 1.0  # the table itself is unchanged by the variant
    v = summary["beside"]["direct-no-example"]
    assert v["system"]["accuracy"]["mean"] == pytest.approx(2 / 3) and v["questions_per_seed"] == {0: 30}
    vs = {d["b"]: d for d in v["paired_differences"]}
    assert sorted(vs) == sorted(SYSTEMS) and vs["modular"]["mean_diff"] == pytest.approx(-1 / 3)
    assert vs["direct"]["a_better"] == 20 and vs["direct"]["b_better"] == 0
    text = (tmp_path / "results.md").read_text()
    assert "| direct-no-example | 30 | 66.7 |" in text and "**+66.7 [" in text and "(20 / 0)**" in text
    assert "| direct-no-example (beside) | 66.7 % [" in readme.read_text()


def test_a_variant_must_be_one_system_of_the_same_code_and_questions(tmp_path):
    table, variant = tmp_path / "records", tmp_path / "variant"
    for n in SYSTEMS:
        _write(table, _record(n, 0, {"q1": True}))
    with pytest.raises(TablesError, match="already a system of the table"):
        pool(table, None, beside=[f"direct={variant}"])
    with pytest.raises(TablesError, match="NAME=DIR"):
        pool(table, None, beside=[str(variant)])
    _write(variant, _record("direct", 0, {"q1": True}, code_sha="other"))
    with pytest.raises(TablesError, match="other code"):
        pool(table, None, beside=[f"v={variant}"])
    _write(variant, _record("direct", 0, {"q1": True}))
    _write(variant, _record("modular", 0, {"q1": True}))
    with pytest.raises(TablesError, match="one system"):
        pool(table, None, beside=[f"v={variant}"])
    # the CLI refuses a bad --beside before anything runs
    assert tables.main(["run", "--benchmark", "gsm8k", "--beside", "modular=x", "--records", str(table)]) == 2

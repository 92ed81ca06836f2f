"""make bench-train's seed records: one seed can run in one place, be recorded, and be pooled with others."""

from __future__ import annotations

import json

import pytest

from flows.bench import train as bt
from flows.evaluate import UNIT_TABLES, unit_key, unit_system


def _args(**over):
    args = {"seeds": 3, "steps": 20, "questions_per_step": 2, "group_size": 4, "train_questions": 40,
            "test_questions": 30, "max_steps": 3, "overrides": [], "only_seeds": None, "records": None,
            "models": {"planner_base": "qwen2.5-coder-0.5b", "generator": "qwen2.5-coder-0.5b", "judge": "qwen2.5-coder-0.5b"},
            "training": bt.resolved_training([])}
    return args | over


def _results(correct: dict[str, list[int]]) -> list[dict]:
    return [{"system": system, "question_id": f"q{i}", "correct": bool(c), "seed": 0, "tokens_total": 5}
            for system, values in correct.items() for i, c in enumerate(values)]


def _seed_report():
    return {"accuracy": {}, "train_s": 10.0, "step_s": [5.0, 5.0], "mean_reward": [0.1, 0.2],
            "zero_signal_groups": [1, 0], "rss_mb": 900.0}


def _record(seed: int, trained: list[int], modular: list[int], **over) -> dict:
    results = _results({"modular-trained": trained, "modular-base": modular, "modular": modular,
                        "monolithic": [0] * len(modular), "direct": [1] * len(modular)})
    return bt.seed_record(seed, _args(**over), _seed_report(), results, commit="c0ffee")


def test_a_seed_record_keeps_only_the_compared_systems_and_the_comparable_configuration():
    record = _record(0, [1, 0, 1], [0, 0, 1])
    assert {o["system"] for o in record["outcomes"]} == set(bt.SYSTEMS)  # not "direct"
    assert len(record["outcomes"]) == 4 * 3 and record["seed"] == 0
    assert set(record["config"]) == set(bt.COMPARABLE) and "only_seeds" not in record["config"]
    assert record["step_s"] == [5.0, 5.0] and record["zero_signal_groups"] == [1, 0]
    assert record["commit"] == "c0ffee"  # the commit the run started at, not the one current when written


def test_records_written_apart_pool_into_one_measurement(tmp_path):
    own, earlier = tmp_path / "out" / "records", tmp_path / "committed"
    bt.write_record(earlier, _record(0, [1, 1, 1, 1], [0, 0, 0, 1]))
    bt.write_record(earlier, _record(1, [1, 1, 1, 0], [0, 0, 0, 0]))
    bt.write_record(own, _record(2, [1, 1, 0, 1], [0, 1, 0, 0]))
    records = bt.load_records(own, earlier, _args())
    assert [r["seed"] for r in records] == [0, 1, 2]
    pooled = bt.pool(records, 3)
    trained = pooled["accuracy"]["modular-trained"]
    assert trained["per_seed"] == {"0": 1.0, "1": 0.75, "2": 0.75} and trained["n_seeds"] == 3
    claim = pooled["paired"]["modular-trained - modular"]
    # per question, mean over seeds: trained (1, 1, 2/3, 2/3), modular (0, 1/3, 0, 1/3)
    assert claim["mean_diff"] == pytest.approx((1 + 2 / 3 + 2 / 3 + 1 / 3) / 4)
    assert claim["a_better"] == 4 and pooled["target"]["seeds_pooled"] == 3 and pooled["target"]["met"]
    assert pooled["pooled_seeds"] == [0, 1, 2]


def test_the_target_is_not_met_until_every_seed_is_pooled(tmp_path):
    bt.write_record(tmp_path, _record(0, [1, 1, 1, 1], [0, 0, 0, 0]))
    pooled = bt.pool(bt.load_records(tmp_path, None, _args()), 3)
    assert pooled["paired"]["modular-trained - modular"]["mean_diff"] == 1.0
    assert pooled["target"]["seeds_pooled"] == 1 and not pooled["target"]["met"]


def test_the_target_needs_the_interval_above_zero(tmp_path):
    for seed in range(3):
        bt.write_record(tmp_path, _record(seed, [1, 0, 0, 0], [0, 0, 0, 0]))
    pooled = bt.pool(bt.load_records(tmp_path, None, _args()), 3)
    claim = pooled["paired"]["modular-trained - modular"]
    assert claim["mean_diff"] == 0.25 and claim["ci95"][0] == 0.0 and not pooled["target"]["met"]


def test_records_of_another_configuration_are_refused(tmp_path):
    bt.write_record(tmp_path, _record(0, [1], [0], steps=10))
    with pytest.raises(SystemExit, match="another configuration.*steps"):
        bt.load_records(tmp_path / "none", tmp_path, _args())


def test_a_seed_recorded_twice_with_different_outcomes_is_refused(tmp_path):
    bt.write_record(tmp_path / "a", _record(1, [1, 0], [0, 0]))
    bt.write_record(tmp_path / "b", _record(1, [0, 0], [0, 0]))
    with pytest.raises(SystemExit, match="seed 1 is recorded twice"):
        bt.load_records(tmp_path / "a", tmp_path / "b", _args())
    bt.write_record(tmp_path / "c", _record(1, [1, 0], [0, 0]))  # the same record copied: fine
    assert len(bt.load_records(tmp_path / "a", tmp_path / "c", _args())) == 1


def test_a_broken_record_is_named(tmp_path):
    (tmp_path / "seed0.json").write_text(json.dumps({"seed": 0}))
    with pytest.raises(SystemExit, match="seed0.json: not a seed record"):
        bt.load_records(tmp_path, None, _args())


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "3", "--only-seeds", "3"], "must be in 0..2"),
    (["--seeds", "3", "--only-seeds", "one"], "comma-separated integers"),
    (["--records", "/nonexistent/records"], "not a directory of seed records"),
])
def test_bad_arguments_stop_before_any_work(tmp_path, argv, message):
    with pytest.raises(SystemExit, match=message):
        bt.main(["--out", str(tmp_path / "out"), *argv])
    assert not (tmp_path / "out" / "world-train").exists()


def test_a_mismatched_record_stops_the_run_before_training(tmp_path):
    bt.write_record(tmp_path / "committed", _record(0, [1], [0], group_size=8))
    with pytest.raises(SystemExit, match="group_size"):
        bt.main(["--out", str(tmp_path / "out"), "--records", str(tmp_path / "committed")])
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- the evaluation in two processes


def _gsm8k_raw(tmp_path):
    d = tmp_path / "datasets" / "gsm8k"
    d.mkdir(parents=True)
    rows = [{"question": "What is 6 times 7?", "answer": "6*7=42\n#### 42"},
            {"question": "What is 6 times 7, plus one?", "answer": "6*7+1=43\n#### 43"}]
    (d / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path / "datasets"


def _outcomes(directory):
    import pyarrow.parquet as pq

    keep = ("system", "seed", "question_id", "correct", "prediction", "status", "stop_reason", "tokens_total")
    return sorted(tuple(r[k] for k in keep) for r in pq.read_table(directory / "results.parquet").to_pylist())


def test_an_evaluation_split_over_two_processes_equals_the_serial_one(prefect_harness, tmp_path):
    from flows.evaluate import evaluate
    from tests.scripted import answer, plan, scripted_settings

    raw = _gsm8k_raw(tmp_path)
    s = scripted_settings([plan("answer")], [answer("42", 1)])
    systems = ["direct", "monolithic", "modular"]
    serial = evaluate("gsm8k", str(raw), systems, 1, str(tmp_path / "serial"), s, progress=False, prefect_tasks=False)
    split = bt.evaluate_split("gsm8k", str(raw), systems, str(tmp_path / "split"), s, adapter=None, workers=2)
    assert split.done == 0 and split.skipped_existing == 6  # the last pass only gathers what the shares wrote
    assert _outcomes(tmp_path / "split") == _outcomes(tmp_path / "serial") and len(_outcomes(tmp_path / "serial")) == 6
    assert split.summary["run"]["systems"] == systems == serial.summary["run"]["systems"]
    assert (tmp_path / "split" / "logs" / "monolithic.s0.jsonl").exists()  # the second process's share


def test_a_failed_share_is_an_error_and_the_other_share_is_kept(prefect_harness, tmp_path):
    from tests.scripted import answer, plan, scripted_settings

    raw = _gsm8k_raw(tmp_path)
    s = scripted_settings([plan("answer")], [answer("42", 1)])
    # the second process's share, modular-trained without an adapter, is refused there
    with pytest.raises(RuntimeError, match=r"share modular-trained \(exit 1\) failed.*run the same command again"):
        bt.evaluate_split("gsm8k", str(raw), ["direct", "modular-trained"], str(tmp_path / "out"), s, adapter=None,
                          workers=2)
    assert len(list((tmp_path / "out" / "parts" / "results").rglob("*.parquet"))) == 2  # direct's units


def test_eval_workers_must_be_positive(tmp_path):
    with pytest.raises(SystemExit, match="at least 1"):
        bt.main(["--out", str(tmp_path / "out"), "--eval-workers", "0"])
    assert not (tmp_path / "out").exists()


def test_records_of_other_models_do_not_pool(tmp_path):
    """The claim recorded with SmolLM2-135M (bench/train-claim) is not pooled with seeds of the new default base."""
    from pathlib import Path

    committed = Path(__file__).resolve().parents[1] / "bench" / "train-claim"
    assert bt.resolved_models([])["planner_base"] == "qwen2.5-coder-0.5b"
    assert bt.resolved_models(["train.base_model=smollm2-135m"])["planner_base"] == "smollm2-135m"
    with pytest.raises(SystemExit, match="another configuration.*models"):
        bt.load_records(tmp_path, committed, _args())


def _eval_dir(root, name, fingerprint, systems, questions=("world-test-00001", "world-test-00002")):
    """An evaluation directory as `evaluate` leaves it: every table's part per unit, results last."""
    import pyarrow as pa

    from infra.runtime.storage import ResultStore

    store = ResultStore(str(root / name))
    schema = pa.schema([("unit", pa.string())])
    for system in systems:
        for qid in questions:
            unit = f"{system}.s0.{qid}"
            for table in UNIT_TABLES:
                store.write_part(table, unit, [{"unit": unit}], schema)
    (root / name / "reuse.json").write_text(json.dumps(fingerprint))
    return store


def test_the_untrained_systems_run_once_and_their_units_are_copied_to_the_next_seed(tmp_path):
    from infra.runtime.storage import ResultStore

    mine = {"settings_sha256": "a", "questions_sha256": "q", "code_sha256": "c"}
    _eval_dir(tmp_path, "eval-seed0", mine, bt.SYSTEMS)
    target = tmp_path / "eval-seed1"
    assert bt.reuse_untrained(tmp_path, target, mine) == "eval-seed0"
    store = ResultStore(str(target))
    for system in bt.SYSTEMS:  # evaluate skips a unit whose results part exists: the trained one still runs
        assert store.has_part("parts/results", f"{system}.s0.world-test-00002") == (system in bt.UNTRAINED)
    assert all(store.has_part(t, "modular.s0.world-test-00001") for t in UNIT_TABLES)
    assert json.loads((target / "reuse.json").read_text()) == mine


@pytest.mark.parametrize("differs", ["settings_sha256", "code_sha256"])
def test_units_of_other_settings_or_code_are_not_reused(tmp_path, differs):
    from infra.runtime.storage import ResultStore

    mine = {"settings_sha256": "a", "questions_sha256": "q", "code_sha256": "c"}
    _eval_dir(tmp_path, "eval-seed0", mine | {differs: "other"}, bt.SYSTEMS)
    assert bt.reuse_untrained(tmp_path, tmp_path / "eval-seed1", mine) is None
    assert not ResultStore(str(tmp_path / "eval-seed1")).has_part("parts/results", "modular.s0.world-test-00001")


def test_an_evaluation_begun_under_other_code_takes_nothing_in(tmp_path):
    mine = {"settings_sha256": "a", "questions_sha256": "q", "code_sha256": "c"}
    _eval_dir(tmp_path, "eval-seed0", mine, bt.SYSTEMS)
    _eval_dir(tmp_path, "eval-seed1", mine | {"code_sha256": "old"}, ["modular-trained"])
    assert bt.reuse_untrained(tmp_path, tmp_path / "eval-seed1", mine) is None
    assert not (tmp_path / "eval-seed1" / "parts/results" / "part-modular.s0.world-test-00001.parquet").exists()


def test_the_fingerprint_is_the_evaluations_own_plus_the_code(tmp_path):
    from flows.bench.tables import code_sha256
    from flows.evaluate import fingerprint, load_questions, with_data
    from infra.data.benchmarks import prepare
    from infra.data.world import generate_world, write_world
    from infra.runtime.settings import load_settings

    write_world(generate_world(seed=1, n_questions=3, split="test"), tmp_path / "raw")
    data = prepare("world", tmp_path / "raw", tmp_path / "prepared")
    settings = load_settings(None, [])
    fp = bt.fingerprint_of(str(data), settings)
    assert fp == fingerprint(load_questions(data, None), with_data(settings, data)) | {"code_sha256": code_sha256()}
    assert bt.fingerprint_of(str(data), load_settings(None, ["budget.max_steps=2"]))["settings_sha256"] != fp[
        "settings_sha256"]


def test_records_trained_with_another_reward_are_refused(tmp_path):
    """A changed default is caught too: the comparable configuration holds the resolved learning settings."""
    old_rule = bt.resolved_training(["train.reward.safe_stop_when=evidence_missing"])
    assert old_rule["reward"]["safe_stop_when"] == "evidence_missing" and "workers" not in old_rule
    bt.write_record(tmp_path, _record(0, [1], [0], training=old_rule))
    with pytest.raises(SystemExit, match="another configuration.*training"):
        bt.load_records(tmp_path / "none", tmp_path, _args())


@pytest.mark.parametrize("system", ["modular-trained", "modular-base", "modular", "monolithic", "modular-nomem",
                                    "modular.persistent.a2", "direct.run.a1"])
def test_unit_system_reads_back_the_system_a_part_was_named_for(system):
    assert unit_system(f"part-{unit_key(system, 12, 'world-test-00003.s1.x')}.parquet") == system


def test_unit_system_refuses_a_name_that_is_not_a_unit():
    with pytest.raises(ValueError, match="not a unit's part name"):
        unit_system("part-results.parquet")

"""The Flow-GRPO pilot sweep: the grid, one short real training run per configuration (tiny policy), the curve with
the reward's parts, the choice by the train split only, resuming, the doc section, bad input."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from flows.bench import sweep as sw  # noqa: E402
from infra.models import clear_backend_cache  # noqa: E402
from infra.runtime.settings import ModelConfig  # noqa: E402
from tests.scripted import answer  # noqa: E402
from tests.tiny_policy import write_tiny_model  # noqa: E402


def test_grid_is_the_product_and_bad_axes_are_refused():
    got = sw.parse_grid(["train.learning_rate=1e-5,3e-4", "train.lora.r=8"])
    assert got == [{"train.learning_rate": 1e-5, "train.lora.r": 8}, {"train.learning_rate": 3e-4, "train.lora.r": 8}]
    assert [sw.slug(c) for c in got] == ["learning_rate=1e-05,r=8", "learning_rate=0.0003,r=8"]
    assert sw.parse_grid([]) == [{}] and sw.slug({}) == "base"
    with pytest.raises(sw.SweepError, match="section.key=value1,value2"):
        sw.parse_grid(["train.learning_rate"])


def test_vary_changes_one_key_at_a_time_around_the_first_grid_configuration():
    got = sw.parse_grid(["train.learning_rate=1e-4,3e-4"], ["train.questions_per_step=4",
                                                            "train.lora.target_modules=[q_proj,v_proj],[o_proj]"])
    centre = {"train.learning_rate": 1e-4}
    assert got == [centre, {"train.learning_rate": 3e-4}, {**centre, "train.questions_per_step": 4},
                   {**centre, "train.lora.target_modules": ["q_proj", "v_proj"]},
                   {**centre, "train.lora.target_modules": ["o_proj"]}]
    assert sw.slug(got[3]) == "learning_rate=0.0001,target_modules=q_proj+v_proj"
    with pytest.raises(sw.SweepError, match="on the grid already"):
        sw.parse_grid(["train.lora.r=8,16"], ["train.lora.r=32"])
    with pytest.raises(sw.SweepError, match="unbalanced"):
        sw.parse_grid([], ["train.lora.target_modules=[q_proj"])


def _row(step, reward, zero=0, groups=2):
    return {"step": step, "mean_reward": reward, "signal_share": 1 - zero / groups}


def test_choice_uses_the_second_half_of_the_train_curve_only():
    a = sw.summarize_run("a", {}, [{**_row(1, 0.9), "kl": 0, "val_accuracy": 1.0, "wall_s": 1, "update_tokens": 1,
                                    "rss_mb": 1}, {**_row(2, 0.1), "kl": 0, "val_accuracy": None, "wall_s": 1,
                                                   "update_tokens": 1, "rss_mb": 1}])
    b = sw.summarize_run("b", {}, [{**_row(1, 0.0), "kl": 0, "val_accuracy": 0.0, "wall_s": 1, "update_tokens": 1,
                                    "rss_mb": 1}, {**_row(2, 0.5), "kl": 0, "val_accuracy": None, "wall_s": 1,
                                                   "update_tokens": 1, "rss_mb": 1}])
    assert sw.choose([a, b]) == "b"  # a's better start and better held-out accuracy do not count
    tie = sw.summarize_run("c", {}, [{**_row(1, 0.0, zero=2), "kl": 0, "val_accuracy": None, "wall_s": 1,
                                      "update_tokens": 1, "rss_mb": 1},
                                     {**_row(2, 0.5, zero=2), "kl": 0, "val_accuracy": None, "wall_s": 1,
                                      "update_tokens": 1, "rss_mb": 1}])
    assert sw.choose([tie, b]) == "b"  # same reward, more groups with signal
    assert sw.choose([]) is None
    assert sw.choose([tie, b], steps=2) == "b" and sw.choose([tie, b], steps=3) is None  # none reached 3 steps


def test_a_sweep_trains_each_configuration_reports_and_resumes(tmp_path):
    tiny = write_tiny_model(tmp_path / "tiny")
    base = [f"train.base_model={tiny}", "train.workers=0", "train.questions_per_step=1", "train.group_size=2",
            "train.eval_every=1", "train.eval_questions=1", "train.checkpoint_every=1", "budget.max_steps=2",
            "models.planner.max_input_tokens=8192", "models.planner.max_tokens=16", "tools.allow=[python,search]",
            "tools.python.sandbox=process"]
    generator = ModelConfig(backend="scripted", model="g", script=[answer("42", 1)]).model_dump()
    cfg = tmp_path / "base.json"
    cfg.write_text(json.dumps({"models": {"generator": generator}}))
    doc = tmp_path / "training.md"
    doc.write_text(f"# Training\n\n{sw.BEGIN}\n{sw.END}\n\nafter\n")
    clear_backend_cache()
    report = sw.sweep(tmp_path / "sweep", ["train.learning_rate=1e-4,3e-4"], base, 2, train_questions=3,
                      val_questions=2, config=str(cfg), doc=doc)
    assert [r["name"] for r in report["runs"]] == ["learning_rate=0.0001", "learning_rate=0.0003"]
    run = report["runs"][0]
    assert run["steps"] == 2 and [r["step"] for r in run["curve"]] == [1, 2]
    first = run["curve"][0]
    assert set(first["reward_parts"]) == set(sw.PARTS) and first["signal_share"] is not None
    assert first["val_accuracy"] is not None and run["s_per_step"] > 0 and run["peak_rss_mb"] > 0
    assert report["chosen"] in {"learning_rate=0.0001", "learning_rate=0.0003"}
    text = doc.read_text()
    assert "**(chosen)**" in text and text.endswith("\n\nafter\n") and "Chosen by the train-split curve only" in text
    assert "`learning_rate=0.0003` per step:" in text and text.count("| safe stop |") == 2  # one curve per configuration
    assert isinstance(first["tool_choices"], dict) and sum(first["tool_choices"].values()) > 0
    assert sum(n for _, n in first["right_by_question"].values()) == 2  # 1 question x 2 rollouts, tallied per question
    assert (tmp_path / "sweep" / "sweep.png").stat().st_size > 0
    assert json.loads((tmp_path / "sweep" / "sweep.json").read_text())["chosen"] == report["chosen"]
    # again: every configuration is done, nothing trains, the same curves come back
    before = (tmp_path / "sweep" / "learning_rate=0.0001" / "checkpoints" / "latest.json").stat().st_mtime
    again = sw.sweep(tmp_path / "sweep", ["train.learning_rate=1e-4,3e-4"], base, 2, train_questions=3,
                     val_questions=2, config=str(cfg))
    assert [r["curve"] for r in again["runs"]] == [r["curve"] for r in report["runs"]]
    assert (tmp_path / "sweep" / "learning_rate=0.0001" / "checkpoints" / "latest.json").stat().st_mtime == before
    # records without checkpoints (as committed): --no-train reports the recorded steps of a longer sweep, trains none
    for run in ("learning_rate=0.0001", "learning_rate=0.0003"):
        shutil.rmtree(tmp_path / "sweep" / run / "checkpoints")
    # a second pilot's table goes between its own named markers; the first pilot's section is left as it was
    begin2, end2 = sw.markers("pilot-2")
    doc.write_text(f"{sw.BEGIN}\nfirst pilot\n{sw.END}\n\n{begin2}\n{end2}\n")
    assert sw.main(["--out", str(tmp_path / "sweep"), "--grid", "train.learning_rate=1e-4,3e-4", "--steps", "4",
                    "--train-questions", "3", "--val-questions", "2", "--no-train", *(f"--set={o}" for o in base),
                    "--config", str(cfg), "--doc", str(doc), "--section", "pilot-2"]) == 0
    first_pilot, second_pilot = doc.read_text().split(begin2)
    assert "\nfirst pilot\n" in first_pilot and "per step:" not in first_pilot
    assert "`learning_rate=0.0003` per step:" in second_pilot
    assert not (tmp_path / "sweep" / "learning_rate=0.0001" / "checkpoints").exists()
    assert [r["steps"] for r in json.loads((tmp_path / "sweep" / "sweep.json").read_text())["runs"]] == [2, 2]


def test_bad_configuration_is_refused_before_anything_trains(tmp_path):
    rc = sw.main(["--out", str(tmp_path / "s"), "--grid", "train.learning_rate=-1", "--steps", "1"])
    assert rc == 2
    assert not list((tmp_path / "s").glob("learning_rate*"))
    assert sw.main(["--out", str(tmp_path / "s"), "--steps", "0"]) == 2
    assert sw.main(["--out", str(tmp_path / "s"), "--steps", "1", "--section", "two words"]) == 2


def test_train_ids_keep_a_fixed_few_questions_with_the_whole_corpus(tmp_path):
    from infra.data.world import generate_world
    from infra.data.world.generate import world_files

    full = generate_world(seed=0, n_questions=6, split="train")
    ids = [full.questions[4]["id"], full.questions[1]["id"]]
    train, _ = sw.world_splits(tmp_path / "s", 6, 2, ids)
    kept = [json.loads(line) for line in (train / "questions.jsonl").read_text().splitlines()]
    assert sorted(q["id"] for q in kept) == sorted(ids)
    assert (train / "corpus.jsonl").read_bytes() == world_files(full)["corpus.jsonl"]  # the same documents to search
    assert json.loads((train / "manifest.json").read_text())["question_subset"] == {"of": 6, "ids": sorted(ids)}
    assert sw.world_splits(tmp_path / "s", 6, 2, list(reversed(ids)))[0] == train  # the same few: reused
    for other in ([ids[0]], None):  # another subset, or the whole split, in the same --out is refused
        with pytest.raises(sw.SweepError, match="use another --out"):
            sw.world_splits(tmp_path / "s", 6, 2, other)
    with pytest.raises(sw.SweepError, match="not in the train split"):
        sw.world_splits(tmp_path / "t", 6, 2, ["train-99999"])
    assert not (tmp_path / "t" / "world-train").exists()
    assert sw.main(["--out", str(tmp_path / "u"), "--steps", "1", "--train-questions", "6", "--train-ids",
                    "nope"]) == 2
    row = {**_row(1, 0.5), "kl": 0.0, "val_accuracy": None, "wall_s": 1, "rollout_s": 1, "update_s": 0,
           "update_tokens": 1, "rss_mb": 1, "tool_choices": {}, "reward_parts": {},
           "right_by_question": {ids[0]: [3, 4]}}
    run = sw.summarize_run("lr", {}, [row, {**row, "step": 2, "right_by_question": {ids[0]: [4, 4], ids[1]: [1, 4]}}])
    text = sw.render({"base": [], "train_questions": 6, "val_questions": 2, "train_ids": sorted(ids), "runs": [run],
                      "chosen": "lr"})
    assert f"2 questions of the world train split of 6 (seed 0): {', '.join(sorted(ids))}" in text
    assert f"| {ids[0]} | 3/4 | 4/4 |" in text and f"| {ids[1]} | - | 1/4 |" in text  # each question's curve
    assert "per question" not in sw.render({"base": [], "train_questions": 6, "val_questions": 2, "runs": [run],
                                            "chosen": "lr"})  # the whole split: no such table

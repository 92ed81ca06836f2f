"""The Flow-GRPO pilot (#22): short training runs over a grid, to see whether the policy moves before a claim is spent.

Every configuration of the grid (the product of the ``--grid KEY=V1,V2`` options over the base ``--set`` options, then
each ``--vary KEY=V1,V2`` value alone on the grid's first configuration: one factor at a time around it)
trains the Planner for ``--steps`` steps on the world's train split (generated, seed 0), validating on the
test split (seed 1) every ``train.eval_every`` steps. Each run keeps its own directory ``<out>/<slug>``, so a
re-run resumes from the last checkpoint and a finished configuration is not trained again.

Per configuration and step the sweep reports what says whether learning happens: mean reward, the share of
groups with signal (not all rewards equal), KL to the reference, the reward's parts (correct, safe stop, tool
cost, malformed plans: evaluator overfitting shows as parts that move without `correct`), the Planner's tool
choices (how its plans move), held-out accuracy, seconds, tokens and peak RSS. The chosen configuration is picked
by the **train-split curve only** (mean reward over the second half of the steps; ties: more groups with signal);
held-out accuracy is reported, never used to choose. ``<out>/sweep.json`` holds it all, ``<out>/sweep.png`` plots
reward and KL per step; the summary table and each configuration's per-step table go between the markers of
``--doc``. ``--no-train`` reports the recorded steps without training (committed records have no checkpoints).
``--train-ids`` trains on a fixed few of the train split's questions (every step draws from them) and reports how
many rollouts of each were right per step: whether the policy learns the questions it trains on at all.

    python -m flows.bench.sweep --out bench-sweep --steps 8 \\
        --grid train.learning_rate=1e-5,1e-4,3e-4 --grid train.lora.r=8,16
    python -m flows.bench.sweep --out bench-sweep --steps 5 --grid train.learning_rate=1e-4 \\
        --vary train.questions_per_step=4 --vary "train.lora.target_modules=[q_proj,k_proj,v_proj,o_proj,up_proj]"
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

PARTS = ("correct", "safe_stop", "tool_cost", "malformed_plan")  # tasks/learn/reward.py RewardBreakdown


class SweepError(ValueError):
    """A sweep that cannot run as asked; the message says why."""


def markers(section: str = "") -> tuple[str, str]:
    """The doc markers of a named section (one per pilot in one document); "" is the first pilot's unnamed pair."""
    if section and not re.fullmatch(r"[\w.-]+", section):
        raise SweepError(f"--section {section!r}: use letters, digits, '.', '_' or '-'")
    name = f" {section}" if section else ""
    return f"<!-- sweep:begin{name} (written by python -m flows.bench.sweep) -->", f"<!-- sweep:end{name} -->"


BEGIN, END = markers()


def _axes(options: list[str], flag: str) -> list[list[tuple[str, Any]]]:
    """['a=1,2', 'm=[x,y],[x]'] -> [[('a', 1), ('a', 2)], [('m', ['x', 'y']), ('m', ['x'])]]: values split at the commas
    outside brackets, each read as a number, else a YAML scalar or list."""
    axes = []
    for opt in options:
        key, sep, values = opt.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise SweepError(f"{flag} {opt!r}: write it as section.key=value1,value2")
        parts, depth, cur = [], 0, ""
        for ch in values:
            depth += (ch == "[") - (ch == "]")
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        if depth != 0:
            raise SweepError(f"{flag} {opt!r}: unbalanced brackets")
        axes.append([(key.strip(), _scalar(v)) for v in parts if v.strip()])
    return axes


def parse_grid(options: list[str], vary: list[str] | None = None) -> list[dict[str, Any]]:
    """The configurations: the product of the `--grid` axes (['a=1,2', 'b=x'] -> [{'a': 1, 'b': 'x'}, {'a': 2, 'b': 'x'}]),
    then for each `--vary` axis each of its values alone on the first of them (one factor at a time around that
    centre: a product of five axes is more training than a pilot can afford)."""
    axes = _axes(options, "--grid")
    configs = [dict(combo) for combo in itertools.product(*axes)] if axes else [{}]
    centre = configs[0]
    for axis in _axes(vary or [], "--vary"):
        for key, value in axis:
            if key in centre:
                raise SweepError(f"--vary {key}: the key is on the grid already; vary it there or here")
            configs.append({**centre, key: value})
    return configs


def _scalar(text: str) -> Any:
    """'1e-5' -> 1e-05 (YAML 1.1 reads it as a string), '8' -> 8, 'true' -> True, else the YAML scalar."""
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return yaml.safe_load(text)


def slug(config: dict[str, Any]) -> str:
    """A directory name for one configuration: 'learning_rate=0.0001,r=8', a list as 'q_proj+v_proj'; 'base' for the
    empty grid."""
    return ",".join(f"{k.rsplit('.', 1)[-1]}={'+'.join(map(str, v)) if isinstance(v, list) else v}"
                    for k, v in config.items()) or "base"


def _read(folder: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return [r for f in sorted(folder.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def curve(run_dir: Path) -> list[dict[str, Any]]:
    """One row per step of a finished or interrupted training run: the metrics and the reward's mean parts."""
    parts: dict[int, dict[str, list[float]]] = {}
    right: dict[int, dict[str, list[int]]] = {}  # step -> question -> [right, rollouts]
    for r in _read(run_dir / "rollouts"):
        terms = json.loads(r.get("reward_terms") or "{}")
        for name in PARTS:
            parts.setdefault(int(r["step"]), {p: [] for p in PARTS})[name].append(float(terms.get(name) or 0.0))
        tally = right.setdefault(int(r["step"]), {}).setdefault(str(r["question_id"]), [0, 0])
        tally[0] += bool(r["correct"])
        tally[1] += 1
    rows = []
    for m in sorted(_read(run_dir / "metrics"), key=lambda r: r["step"]):
        step = int(m["step"])
        groups = int(m.get("groups") or 0)
        p = parts.get(step) or {}
        rows.append({"step": step, "mean_reward": m["mean_reward"], "accuracy": m["accuracy"],
                     "signal_share": (1 - int(m.get("zero_signal_groups") or 0) / groups) if groups else None,
                     "kl": m["kl"], "val_accuracy": m.get("val_accuracy"), "wall_s": m["wall_s"],
                     "rollout_s": m["rollout_s"], "update_s": m["update_s"], "update_tokens": m["update_tokens"],
                     "rss_mb": m["rss_mb"], "tool_choices": _counts(m.get("tool_choices")),
                     "reward_parts": {k: (sum(v) / len(v) if v else None) for k, v in p.items()},
                     "right_by_question": dict(sorted((right.get(step) or {}).items()))})
    return rows


def _counts(raw: Any) -> dict[str, int]:
    """The step's tool choices ({"python": 5, ...}; stored as JSON text): how the policy's plans move."""
    try:
        data = json.loads(raw) if isinstance(raw, str) else (raw or {})
    except ValueError:
        return {}
    return {str(k): int(v) for k, v in sorted(data.items())} if isinstance(data, dict) else {}


def train_score(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """How a configuration is chosen, from the train split only: mean reward over the second half of its steps,
    then the share of groups with signal over the same steps."""
    tail = rows[len(rows) // 2:] or rows
    if not tail:
        return float("-inf"), float("-inf")
    signal = [r["signal_share"] for r in tail if r["signal_share"] is not None]
    return (sum(r["mean_reward"] for r in tail) / len(tail), sum(signal) / len(signal) if signal else 0.0)


def summarize_run(name: str, config: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    vals = [r["val_accuracy"] for r in rows if r["val_accuracy"] is not None]
    n = len(rows)
    return {"name": name, "config": config, "steps": n, "curve": rows,
            "train_score": list(train_score(rows)),
            "first_reward": rows[0]["mean_reward"] if rows else None,
            "last_reward": rows[-1]["mean_reward"] if rows else None,
            "max_kl": max((r["kl"] or 0.0) for r in rows) if rows else None,
            "val_accuracy": vals,
            "s_per_step": sum(r["wall_s"] for r in rows) / n if n else None,
            "tokens_per_step": sum(r["update_tokens"] for r in rows) / n if n else None,
            "peak_rss_mb": max(r["rss_mb"] for r in rows) if rows else None}


def choose(runs: list[dict[str, Any]], steps: int | None = None) -> str | None:
    """The best train score among the configurations that reached `steps` (all that have any, when None): a run
    cut short is scored over other steps (its second half is earlier in training), so it is not compared."""
    finished = [r for r in runs if r["steps"] and (steps is None or r["steps"] >= steps)]
    return max(finished, key=lambda r: tuple(r["train_score"]))["name"] if finished else None


def _num(v: float | None, places: int = 3) -> str:
    """A table cell: the number to `places` decimals, '-' when it was not measured."""
    return "-" if v is None else f"{v:.{places}f}"


def render(report: dict[str, Any]) -> str:
    head = ("| configuration | steps | reward first -> last | train score (2nd half) | groups with signal | max KL | "
            "held-out accuracy | s/step | tokens/step | peak RSS MB |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in report["runs"]:
        mark = " **(chosen)**" if r["name"] == report["chosen"] else ""
        val = ", ".join(f"{v:.2f}" for v in r["val_accuracy"]) or "-"
        lines.append(f"| `{r['name']}`{mark} | {r['steps']} | {_num(r['first_reward'])} -> {_num(r['last_reward'])} | "
                     f"{_num(r['train_score'][0])} | {_num(r['train_score'][1], 2)} | {_num(r['max_kl'], 5)} | {val} | "
                     f"{_num(r['s_per_step'], 0)} | {_num(r['tokens_per_step'], 0)} | {_num(r['peak_rss_mb'], 0)} |")
    ids = report.get("train_ids") or []
    train = (f"{len(ids)} questions of the world train split of {report['train_questions']} (seed 0): {', '.join(ids)}"
             if ids else f"world train split {report['train_questions']} questions (seed 0)")
    lines.append(f"\nBase: {', '.join(report['base']) or 'the defaults'}; {train}, "
                 f"held-out test split {report['val_questions']} (seed 1). "
                 "Chosen by the train-split curve only.")
    lines += [_curves(r) for r in report["runs"] if r["curve"]]
    if ids:  # the same few questions every step: each one's rollouts right, step by step, say whether it is learned
        lines += [_by_question(r, ids) for r in report["runs"] if r["curve"]]
    return "\n".join(lines)


def _by_question(run: dict[str, Any], ids: list[str]) -> str:
    steps = [r["step"] for r in run["curve"]]
    out = [f"\n`{run['name']}`, rollouts right per question and step:\n",
           "| question | " + " | ".join(str(s) for s in steps) + " |", "|---" * (len(steps) + 1) + "|"]
    for q in ids:
        cells = [(r.get("right_by_question") or {}).get(q) for r in run["curve"]]
        out.append(f"| {q} | " + " | ".join(f"{c[0]}/{c[1]}" if c else "-" for c in cells) + " |")
    return "\n".join(out)


def _curves(run: dict[str, Any]) -> str:
    """One configuration's steps: the reward and its parts (a part that moves while `correct` does not is the evaluator
    being gamed), groups with signal, KL, the Planner's tool choices (the policy moving), held-out accuracy, time."""
    out = [f"\n`{run['name']}` per step:\n",
           "| step | mean reward | correct | safe stop | tool cost | malformed | groups with signal | KL | tool choices | "
           "held-out accuracy | s (rollout + update) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in run["curve"]:
        p = r["reward_parts"]
        tools = ", ".join(f"{k} {v}" for k, v in (r.get("tool_choices") or {}).items()) or "-"
        out.append(f"| {r['step']} | {_num(r['mean_reward'])} | {_num(p.get('correct'))} | "
                   f"{_num(p.get('safe_stop'))} | {_num(p.get('tool_cost'))} | {_num(p.get('malformed_plan'))} | "
                   f"{_num(r['signal_share'], 2)} | {_num(r['kl'], 5)} | {tools} | {_num(r['val_accuracy'], 2)} | "
                   f"{_num(r['wall_s'], 0)} ({_num(r['rollout_s'], 0)} + {_num(r['update_s'], 0)}) |")
    return "\n".join(out)


def plot(report: dict[str, Any], path: Path) -> None:
    """Mean reward and KL per step, one line per configuration (`<out>/sweep.png`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_r, ax_k) = plt.subplots(1, 2, figsize=(10, 3.5))
    for r in report["runs"]:
        steps = [c["step"] for c in r["curve"]]
        ax_r.plot(steps, [c["mean_reward"] for c in r["curve"]], marker="o", label=r["name"])
        ax_k.plot(steps, [c["kl"] or 0.0 for c in r["curve"]], marker="o", label=r["name"])
    ax_r.set(xlabel="step", ylabel="mean reward (train split)", title="reward")
    ax_k.set(xlabel="step", ylabel="KL to the reference", title="KL")
    ax_r.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_doc(doc: Path, text: str, section: str = "") -> None:
    """Replace the marked section of `doc`; without the markers nothing is written."""
    from flows.bench.marked import MarkersMissing, write_marked

    try:
        write_marked(doc, *markers(section), text)
    except MarkersMissing as exc:
        raise SweepError(str(exc)) from None


def world_splits(out: Path, train_questions: int, val_questions: int,
                 train_ids: list[str] | None = None) -> tuple[Path, Path]:
    """The train split (seed 0) and held-out test split (seed 1) under `out`, written once. `train_ids` keeps only those
    questions of the train split (its whole corpus stays: the same documents to search, distractors included), so
    every step draws from a fixed few: whether the policy learns the questions it trains on."""
    import dataclasses

    from infra.data.world import generate_world, write_world

    wanted = sorted(set(train_ids or []))
    train, val = out / "world-train", out / "world-test"
    if not (train / "questions.jsonl").is_file():
        world = generate_world(seed=0, n_questions=train_questions, split="train")
        if wanted:
            unknown = sorted(set(wanted) - {q["id"] for q in world.questions})
            if unknown:
                raise SweepError(f"--train-ids: {', '.join(unknown)} not in the train split of {train_questions} "
                                 "questions")
            kept = [q for q in world.questions if q["id"] in wanted]
            world = dataclasses.replace(world, questions=kept, n_questions=len(kept),
                                        manifest={**world.manifest,
                                                  "question_subset": {"of": train_questions, "ids": wanted}})
        write_world(world, train)
    subset = json.loads((train / "manifest.json").read_text()).get("question_subset", {}).get("ids") or []
    if subset != wanted:
        raise SweepError(f"{train} was written for --train-ids {','.join(subset) or '(none)'}; "
                         "use another --out")
    if not (val / "questions.jsonl").is_file():
        write_world(generate_world(seed=1, n_questions=val_questions, split="test"), val)
    return train, val


def sweep(out: str | Path, grid: list[str], base: list[str], steps: int, *, train_questions: int = 40,
          val_questions: int = 16, config: str | None = None, doc: str | Path | None = None,
          train: bool = True, vary: list[str] | None = None, section: str = "",
          train_ids: list[str] | None = None) -> dict[str, Any]:
    from flows.train import run_training
    from infra.runtime.settings import ConfigError, load_settings

    markers(section)  # a bad name is refused before anything trains
    root = Path(out)
    train_ids = sorted(set(train_ids or []))
    configs = parse_grid(grid, vary)
    root.mkdir(parents=True, exist_ok=True)
    train_dir, val_dir = world_splits(root, train_questions, val_questions, train_ids)
    fixed = [f"train.train_questions={train_dir}", f"train.val_questions={val_dir}", f"train.steps={steps}"]
    settings_of = {}
    for cfg in configs:  # every configuration is checked before the first one trains
        try:
            settings_of[slug(cfg)] = load_settings(config, [*base, *fixed, *(f"{k}={v}" for k, v in cfg.items())])
        except ConfigError as exc:
            raise SweepError(f"{slug(cfg)}: {exc}") from None
    runs = []
    for cfg in configs:
        name = slug(cfg)
        run_dir = root / name
        done = len(_read(run_dir / "metrics")) if run_dir.is_dir() else 0
        if train and done < steps:
            run_training(settings_of[name], str(run_dir), resume=(run_dir / "checkpoints" / "latest.json").is_file(),
                         log_dir=str(root / "logs"))
        runs.append(summarize_run(name, cfg, curve(run_dir)))
    report = {"base": base, "grid": grid, "vary": list(vary or []), "steps": steps, "train_questions": train_questions,
              "val_questions": val_questions, "train_ids": train_ids, "runs": runs,
              "chosen": choose(runs, steps),
              "chosen_by": "train split: mean reward over the second half of the steps, then groups with signal"}
    (root / "sweep.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    plot(report, root / "sweep.png")
    if doc is not None:
        write_doc(Path(doc), render(report), section)
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m flows.bench.sweep", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="bench-sweep")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--grid", action="append", default=[], help="section.key=v1,v2 (repeatable: the product)")
    p.add_argument("--vary", action="append", default=[], help="section.key=v1,v2 (repeatable): each value alone on "
                   "the first grid configuration")
    p.add_argument("--set", dest="base", action="append", default=[], help="a fixed override for every run")
    p.add_argument("--config", default=None, help="a base configuration file (YAML/JSON)")
    p.add_argument("--train-questions", type=int, default=40)
    p.add_argument("--val-questions", type=int, default=16)
    p.add_argument("--train-ids", default="", help="comma-separated question ids: train on these questions of the "
                   "train split only (every step draws from them), to see whether the policy learns what it trains on")
    p.add_argument("--doc", default=None, help="write the table between the sweep markers of this file")
    p.add_argument("--section", default="", help="the doc's named marker pair <!-- sweep:begin NAME ... --> for "
                   "this sweep (default: the unnamed pair), so several pilots' tables can share one document")
    p.add_argument("--no-train", action="store_true", help="report the recorded steps only (records without their "
                   "checkpoints, e.g. bench/sweep): nothing trains")
    a = p.parse_args(argv)
    if a.steps < 1 or a.train_questions < 1 or a.val_questions < 1:
        print("error: --steps, --train-questions and --val-questions must be at least 1", file=sys.stderr)
        return 2
    try:
        report = sweep(a.out, a.grid, a.base, a.steps, train_questions=a.train_questions,
                       val_questions=a.val_questions, config=a.config, doc=a.doc, train=not a.no_train,
                       vary=a.vary, section=a.section, train_ids=[i.strip() for i in a.train_ids.split(",") if i.strip()])
    except SweepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render(report))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

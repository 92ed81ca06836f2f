"""The evaluation report: one self-contained report.html (figures as base64 PNG, inline CSS, no scripts)
plus one traces/<unit>.html per question x system x seed, linked from the report's outcome table.

Figures are drawn with matplotlib's object API on the Agg canvas (no pyplot, no display), from the
summary (summary.json) and the result rows; nothing is fetched when the page is opened.
"""

from __future__ import annotations

import base64
import html
import io
from collections import defaultdict
from typing import Any, Iterable, Mapping, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tasks.eval.metrics import MODULES, ROLES, pareto_front

COLORS = {"planner": "#4c72b0", "executor": "#dd8452", "verifier": "#55a868", "generator": "#c44e52",
          "budget": "#8172b3", "system": "#937860"}
_PALETTE = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}h3{font-size:14px;margin:12px 0 4px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}th,td{border:1px solid #ccc;padding:3px 6px;vertical-align:top}
th{background:#f2f2f2;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#1a7f37;font-weight:bold}.bad{color:#b42318;font-weight:bold}
.figs{display:flex;flex-wrap:wrap;gap:16px}.figs figure{margin:0}figcaption{font-size:12px;color:#555}
pre{white-space:pre-wrap;background:#f7f7f7;border:1px solid #e3e3e3;padding:6px;font-size:12px;max-height:320px;overflow:auto}
.meta{font-size:13px;color:#444}.clip{max-width:380px;overflow-wrap:anywhere}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _clip(value: Any, n: int = 160) -> str:
    s = "" if value is None else str(value)
    return s if len(s) <= n else s[: n - 1] + "…"


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _png(fig: Figure) -> str:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(width: float = 5.2, height: float = 3.4) -> tuple[Figure, Any]:
    fig = Figure(figsize=(width, height))
    return fig, fig.add_subplot(1, 1, 1)


# --------------------------------------------------------------------------- figures


def accuracy_figure(summary: Mapping) -> str:
    """Accuracy per system: mean over seeds, 95% bootstrap interval as error bars, each seed as a dot."""
    fig, ax = _figure()
    names = list(summary["systems"])
    for i, name in enumerate(names):
        a = summary["systems"][name]["accuracy"]
        mean = a["mean"] or 0.0
        lo, hi = a["ci95"] or (mean, mean)
        ax.bar(i, mean, color=_PALETTE[i % len(_PALETTE)], alpha=0.8)
        ax.errorbar(i, mean, yerr=[[max(0.0, mean - lo)], [max(0.0, hi - mean)]], color="black", capsize=6)
        seeds = list(a["per_seed"].values())
        ax.scatter([i + 0.18] * len(seeds), seeds, color="black", s=12, zorder=3)
    ax.set_xticks(range(len(names)), names, rotation=15)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("accuracy")
    ax.set_title("Accuracy (bars: mean over seeds; 95% bootstrap CI; dots: seeds)", fontsize=9)
    return _png(fig)


def frontier_figure(summary: Mapping) -> str:
    """Mean tokens per question against accuracy; the line joins the cost-accuracy frontier."""
    fig, ax = _figure()
    points = []
    for i, (name, m) in enumerate(summary["systems"].items()):
        cost, acc = m["tokens"]["per_question"] or 0.0, m["accuracy"]["mean"] or 0.0
        points.append((name, cost, acc))
        ax.scatter(cost, acc, color=_PALETTE[i % len(_PALETTE)], s=50, zorder=3)
        ax.annotate(name, (cost, acc), textcoords="offset points", xytext=(5, 6 if i % 2 == 0 else -13), fontsize=8)
    front = {n: (c, a) for n, c, a in points}
    line = [front[n] for n in pareto_front(points)]
    if len(line) > 1:
        ax.plot([c for c, _ in line], [a for _, a in line], "--", color="#888")
    ax.set_xlabel("tokens per question (mean, all roles)")
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("Cost vs accuracy (dashed: frontier)", fontsize=9)
    return _png(fig)


def tokens_figure(summary: Mapping) -> str:
    """Mean tokens per question, stacked by role."""
    fig, ax = _figure()
    names = list(summary["systems"])
    bottom = [0.0] * len(names)
    for role in ROLES:
        vals = [summary["systems"][n]["tokens"]["by_role_per_question"][role] or 0.0 for n in names]
        ax.bar(range(len(names)), vals, bottom=bottom, label=role, color=COLORS[role])
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(names)), names, rotation=15)
    ax.set_ylabel("tokens per question")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title("Tokens per role (mean per question)", fontsize=9)
    return _png(fig)


def stops_figure(summary: Mapping) -> str:
    """Share of runs ending with each stop reason."""
    fig, ax = _figure()
    names = list(summary["systems"])
    reasons = sorted({r for m in summary["systems"].values() for r in m["stop_reasons"]})
    bottom = [0.0] * len(names)
    for j, reason in enumerate(reasons):
        vals = [summary["systems"][n]["stop_reasons"].get(reason, 0) / max(1, summary["systems"][n]["rows"]) for n in names]
        ax.bar(range(len(names)), vals, bottom=bottom, label=reason, color=_PALETTE[j % len(_PALETTE)])
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(names)), names, rotation=15)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of runs")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title("Stop reasons", fontsize=9)
    return _png(fig)


def attribution_figure(summary: Mapping) -> str:
    """Failed (wrong or unanswered) runs per module they were attributed to, per system."""
    fig, ax = _figure()
    names = list(summary["systems"])
    width = 0.8 / max(1, len(MODULES))
    for j, module in enumerate(MODULES):
        vals = [summary["systems"][n]["failure_attribution"].get(module, 0) for n in names]
        ax.bar([i + (j - (len(MODULES) - 1) / 2) * width for i in range(len(names))], vals, width=width,
               label=module, color=COLORS[module])
    ax.set_xticks(range(len(names)), names, rotation=15)
    ax.set_ylabel("failed runs")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title("Failure attribution per module", fontsize=9)
    return _png(fig)


FIGURES = (("accuracy", "Accuracy per system", accuracy_figure),
           ("frontier", "Cost vs accuracy", frontier_figure),
           ("tokens", "Tokens per role", tokens_figure),
           ("stops", "Stop reasons", stops_figure),
           ("attribution", "Failure attribution", attribution_figure))


# --------------------------------------------------------------------------- tables


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "", numeric: Sequence[int] = ()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def systems_table(summary: Mapping) -> str:
    headers = ["system", "runs", "accuracy mean", "std over seeds", "95% CI", "mean score", "answered", "tokens/question",
               "tokens/correct", "latency p50 s", "latency p95 s", "mean iterations", "wrong tool calls",
               "missing evidence", "verifier rejection rate", "stop reasons", "failures by module"]
    rows = []
    for name, m in summary["systems"].items():
        a = m["accuracy"]
        ci = a["ci95"]
        rows.append([
            _e(name), str(m["rows"]), _fmt(a["mean"]), _fmt(a["std"]),
            f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-", _fmt(m["mean_score"]), _fmt(m["answered_rate"], 2),
            _fmt(m["tokens"]["per_question"], 0), _fmt(m["tokens_per_correct"], 0),
            _fmt(m["latency_s"]["p50"], 2), _fmt(m["latency_s"]["p95"], 2), _fmt(m["mean_iterations"], 2),
            str(m["wrong_tool_calls"]), str(m["missing_evidence"]), _fmt(m["verifier_rejection_rate"], 2),
            _e(", ".join(f"{k}: {v}" for k, v in m["stop_reasons"].items())),
            _e(", ".join(f"{k}: {v}" for k, v in m["failure_attribution"].items() if v)) or "-",
        ])
    return _table(headers, rows, "systems", numeric=range(1, 15))


def roles_table(summary: Mapping) -> str:
    rows = []
    for name, m in summary["systems"].items():
        rows.append([_e(name), *(_fmt(m["tokens"]["by_role_per_question"][r], 1) for r in ROLES),
                     _fmt(m["tokens"]["per_question"], 1), str(m["tokens"]["total"])])
    return _table(["system", *ROLES, "all roles", "total tokens"], rows, "roles", numeric=range(1, 7))


def paired_table(summary: Mapping) -> str:
    rows = []
    for p in summary["paired_differences"]:
        ci = p["ci95"]
        rows.append([_e(p["a"]), _e(p["b"]), _fmt(p["mean_diff"]), f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-",
                     str(p["n_questions"]), str(p["a_better"]), str(p["b_better"]), str(p["ties"])])
    return _table(["a", "b", "accuracy a − b", "95% CI", "questions", "a better", "b better", "ties"], rows, "paired",
                  numeric=range(2, 8))


def outcomes_table(rows: Sequence[Mapping]) -> str:
    """One line per question x system x seed, grouped by question, each linking to its trace."""
    out = []
    for r in sorted(rows, key=lambda r: (str(r["question_id"]), str(r["system"]), int(r["seed"]))):
        mark = '<span class="ok">✓</span>' if r["correct"] else '<span class="bad">✗</span>'
        who = f"{r['attribution_module']}/{r['attribution_cause']}" if r.get("attribution_module") else ""
        out.append([
            f'<a id="u-{_e(r["unit"])}"></a>{_e(r["question_id"])}', _e(r["system"]), str(r["seed"]), mark,
            f'<div class="clip">{_e(_clip(r["prediction"]))}</div>', _e(_clip(r.get("gold"), 80)), _e(r["status"]),
            _e(r["stop_reason"]), _e(who), str(r["iterations"]), str(r["tokens_total"]), f"{float(r['latency_s']):.2f}",
            f'<a href="{_e(r["trace"])}">trace</a>',
        ])
    return _table(["question", "system", "seed", "right", "prediction", "gold", "status", "stop", "failed in",
                   "iters", "tokens", "latency s", "trace"], out, "outcomes", numeric=(9, 10, 11))


# --------------------------------------------------------------------------- pages


def render_report(rows: Sequence[Mapping], summary: Mapping) -> str:
    """report.html as one string: run facts, metric tables, figures, outcomes with links to traces."""
    run = summary.get("run", {})
    title = f"AgentFlow evaluation: {run.get('benchmark', '')}"
    figs = "".join(f'<figure id="fig-{key}"><img alt="{_e(cap)}" src="data:image/png;base64,{fn(summary)}">'
                   f"<figcaption>{_e(cap)}</figcaption></figure>" for key, cap, fn in FIGURES) if summary["systems"] else ""
    boot = summary.get("bootstrap", {})
    meta = (f"{_e(run.get('questions'))} questions × {len(run.get('seeds', []))} seeds {(_e(run.get('seeds')))} × systems "
            f"{_e(', '.join(run.get('systems', [])))}; {_e(run.get('units'))} runs; data {_e(run.get('data'))}; "
            f"sum of run wall times {_e(run.get('wall_s_of_runs'))} s; written {_e(run.get('written_at'))}. "
            f"Intervals: {boot.get('resamples')} bootstrap resamples over questions (rng seed {boot.get('rng_seed')}).")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title><style>{CSS}</style></head>
<body>
<h1>{_e(title)}</h1>
<p class="meta">{meta}</p>
<h2>Systems</h2>
{systems_table(summary)}
<h2>Figures</h2>
<div class="figs">{figs}</div>
<h2>Tokens per role (mean per question)</h2>
{roles_table(summary)}
<h2>Paired differences (same questions)</h2>
{paired_table(summary)}
<h2>Per-question outcomes</h2>
{outcomes_table(rows)}
</body></html>
"""


def render_trace(row: Mapping, steps: Sequence[Mapping], evidence: Sequence[Mapping]) -> str:
    """One run's trace page: the outcome, its attribution, every module call and every evidence item."""
    step_rows = [[str(s["step_id"]), _e(s["role"]), _e(s.get("model")), _e(s.get("tool")), str(s["tokens_in"]),
                  str(s["tokens_out"]), f"{float(s['latency_ms']):.0f}", _e(s.get("accepted")), _e(s.get("failure_type")),
                  f'<div class="clip">{_e(s.get("detail"))}</div>'] for s in steps]
    ev = "".join(f"<h3>step {_e(e['step_id'])} · {_e(e['tool'])} · {_e(e['status'])}"
                 + (f" · {_e(e['failure_type'])}: {_e(e['reason'])}" if e.get("failure_type") else "")
                 + f"</h3><pre>{_e(_clip(e['text'], 4000))}</pre>" for e in evidence) or "<p>(no evidence items)</p>"
    facts = [("system", row["system"]), ("seed", row["seed"]), ("question", row["question"]), ("gold", row.get("gold")),
             ("prediction", row["prediction"]), ("scored", f"{'right' if row['correct'] else 'wrong'}: {row['score_detail']}"),
             ("status", row["status"]), ("stop reason", row["stop_reason"]), ("budget limit", row.get("budget_limit")),
             ("failed in", f"{row['attribution_module']}/{row['attribution_cause']} (step {row.get('attribution_step')}): "
                           f"{row.get('attribution_detail')}" if row.get("attribution_module") else "-"),
             ("tokens", row["tokens_total"]), ("latency s", f"{float(row['latency_s']):.2f}"), ("error", row.get("error"))]
    facts_html = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in facts)
    title = f"{row['question_id']} · {row['system']} · seed {row['seed']}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title><style>{CSS}</style></head>
<body>
<p><a href="../report.html#u-{_e(row['unit'])}">← report</a></p>
<h1>{_e(title)}</h1>
<table class="facts">{facts_html}</table>
<h2>Module calls</h2>
{_table(["step", "role", "model", "tool", "tokens in", "tokens out", "latency ms", "accepted", "failure", "detail"], step_rows,
        "steps", numeric=(0, 4, 5, 6))}
<h2>Evidence</h2>
{ev}
</body></html>
"""


def write_report(store: Any, rows: Sequence[Mapping], steps: Sequence[Mapping], evidence: Sequence[Mapping],
                 summary: Mapping) -> str:
    """Write report.html and traces/<unit>.html into the result store; returns the report's location."""
    from infra.runtime.storage import safe_key

    by_unit_steps: dict[tuple, list] = defaultdict(list)
    for s in steps:
        by_unit_steps[(s["system"], int(s["seed"]), str(s["question_id"]))].append(s)
    by_unit_ev: dict[tuple, list] = defaultdict(list)
    for e in evidence:
        by_unit_ev[(e["system"], int(e["seed"]), str(e["question_id"]))].append(e)
    for r in rows:
        key = (r["system"], int(r["seed"]), str(r["question_id"]))
        page = render_trace(r, sorted(by_unit_steps[key], key=lambda s: (s["step_id"], str(s.get("ts")))),
                            sorted(by_unit_ev[key], key=lambda e: e["step_id"]))
        store.write_text(f"traces/{safe_key(r['unit'])}.html", page)
    store.write_text("report.html", render_report(rows, summary))
    return store.location("report.html")

"""Which llama.cpp build is fastest on this CPU: builds side by side in one run, prompt and generation tokens/s.

    python -m flows.bench.llama --variant portable=DIR --variant native=DIR [--model qwen2.5-coder-0.5b] --out FILE

Each DIR is a `pip install --target` of one llama-cpp-python wheel (scripts/bootstrap.sh builds them; see
`LLAMA_VARIANTS` there). Every (build, extra buffer types on/off, threads) configuration runs in its own child
process, round-robin over `--rounds` so that a change in the machine's load hits all of them alike. A child loads
the model, warms up, then times
- prompt: distinct prompts of about 300 tokens with max_tokens=1 (no shared prefix beyond the chat template's
  first tokens), tokens/s = prompt tokens / wall;
- generation: a short prompt and `--gen-tokens` greedy tokens, tokens/s = generated tokens / wall.
A child that crashes (the AMX extra buffer type on some CPUs) is reported with its exit signal, not hidden.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

FILLER = ("The committee reviewed the quarterly figures for the northern district, noting that shipments rose "
          "while returns fell, and asked the analysts to explain each change in plain words. ")


def _worker(model: str, extra_bufts: bool, threads: int, prompts: int, gen_tokens: int) -> dict:
    """Runs in the child: one configuration's measurements (stdout: one JSON line)."""
    os.environ["AGENTFLOW_LLAMA_EXTRA_BUFTS"] = "1" if extra_bufts else "0"
    from infra.models.embedded import _construct_llama, llama_system_info

    info = llama_system_info()
    t0 = time.perf_counter()
    llama = _construct_llama(Path(model), 2048, threads)
    load_s = time.perf_counter() - t0
    llama.create_completion("Warm up.", max_tokens=4, temperature=0.0)
    prompt_tokens, prompt_wall = 0, 0.0
    for i in range(prompts):
        text = f"Report {i}: " + FILLER * 9 + f"\nSummarise report {i} in one word:"
        tokens = llama.tokenize(text.encode())
        llama.reset()  # no prefix reuse between prompts
        t0 = time.perf_counter()
        llama.create_completion(tokens, max_tokens=1, temperature=0.0)
        prompt_wall += time.perf_counter() - t0
        prompt_tokens += len(tokens)
    gen_out, gen_wall = 0, 0.0
    for i in range(2):
        llama.reset()
        t0 = time.perf_counter()
        out = llama.create_completion(f"Write a long story about a lighthouse keeper, part {i}:", max_tokens=gen_tokens,
                                      temperature=0.0)
        gen_wall += time.perf_counter() - t0
        gen_out += out["usage"]["completion_tokens"]
    llama.close()
    return {"system_info": info, "load_s": round(load_s, 3),
            "prompt_tokens_per_s": round(prompt_tokens / prompt_wall, 2), "prompt_tokens": prompt_tokens,
            "gen_tokens_per_s": round(gen_out / gen_wall, 2), "gen_tokens": gen_out}


def _cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return sorted(f for f in line.split(":", 1)[1].split() if f.startswith(("avx", "amx", "fma", "f16c")))
    except OSError:
        pass
    return []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", action="append", required=True, metavar="NAME=DIR")
    ap.add_argument("--model", default=None, help="A registered embedded model or a GGUF path (default: the registry's).")
    ap.add_argument("--threads", default="1,2", help="Comma-separated n_threads values.")
    ap.add_argument("--extra-bufts", default="on,off", help="Comma-separated: on, off.")
    ap.add_argument("--wait-policy", default="", help="Comma-separated OMP_WAIT_POLICY values to compare (active, passive); "
                    "empty: the environment's.")
    ap.add_argument("--busy", type=int, default=0, help="Busy-loop processes running beside each measurement (contention).")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--_worker", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._worker:
        model, bufts, threads, prompts, gen = args._worker
        print(json.dumps(_worker(model, bufts == "on", int(threads), int(prompts), int(gen))))
        return 0

    from infra.models import registry

    model = args.model or registry.DEFAULT_EMBEDDED
    model_path = str(registry.locate(model)) if registry.is_registered(model) else model
    variants = {}
    for spec in args.variant:
        name, sep, where = spec.partition("=")
        if not sep or not Path(where, "llama_cpp").is_dir():
            ap.error(f"--variant {spec!r}: want NAME=DIR where DIR/llama_cpp is an installed llama-cpp-python")
        variants[name] = str(Path(where).resolve())
    policies = [p for p in args.wait_policy.split(",") if p] or [""]
    configs = [(v, b, int(t), w) for v in variants for b in args.extra_bufts.split(",") for t in args.threads.split(",")
               for w in policies]

    def name(v: str, b: str, t: int, w: str) -> str:
        return f"{v}/bufts-{b}/t{t}" + (f"/omp-{w}" if w else "")

    samples: dict[str, list[dict]] = {name(*c): [] for c in configs}
    repo = str(Path(__file__).resolve().parents[2])
    for _ in range(args.rounds):
        for v, b, t, w in configs:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([variants[v], repo])}
            if w:
                env["OMP_WAIT_POLICY"] = w
            busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
            try:
                done = subprocess.run([sys.executable, "-m", "flows.bench.llama", "--variant", "x=.", "--out", "-",
                                       "--_worker", model_path, b, str(t), str(args.prompts), str(args.gen_tokens)],
                                      capture_output=True, text=True, env=env, cwd=repo)
            finally:
                for proc in busy:
                    proc.kill()
                    proc.wait()
            key = name(v, b, t, w)
            if done.returncode != 0:
                samples[key].append({"error": f"exit {done.returncode}", "stderr_tail": done.stderr[-400:]})
            else:
                samples[key].append(json.loads(done.stdout.strip().splitlines()[-1]))
    summary = {}
    for key, runs in samples.items():
        ok = [r for r in runs if "error" not in r]
        summary[key] = {"runs": len(runs), "failed": len(runs) - len(ok),
                        "errors": [r for r in runs if "error" in r][:1],
                        "system_info": ok[0]["system_info"] if ok else None}
        if ok:
            for field in ("prompt_tokens_per_s", "gen_tokens_per_s", "load_s"):
                summary[key][field + "_median"] = statistics.median(r[field] for r in ok)
                summary[key][field + "_all"] = [r[field] for r in ok]
    base = next(iter(summary))
    for key, row in summary.items():
        if "prompt_tokens_per_s_median" in row and "prompt_tokens_per_s_median" in summary[base]:
            row["prompt_ratio_vs_" + base] = round(row["prompt_tokens_per_s_median"] / summary[base]["prompt_tokens_per_s_median"], 3)
            row["gen_ratio_vs_" + base] = round(row["gen_tokens_per_s_median"] / summary[base]["gen_tokens_per_s_median"], 3)
    report = {"model": model, "model_path": model_path, "cpu": platform.processor() or platform.machine(),
              "cpu_flags": _cpu_flags(), "nproc": os.cpu_count(), "rounds": args.rounds, "prompts": args.prompts,
              "gen_tokens": args.gen_tokens, "busy_processes": args.busy, "variants": variants, "results": summary,
              "note": "medians over rounds; each configuration in its own process, configurations interleaved"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: {f: v for f, v in r.items() if f.endswith("_median") or "ratio" in f or f == "failed"}
                      for k, r in summary.items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

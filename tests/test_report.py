"""report.html: self-contained (no network, no scripts), and it renders in headless Chromium."""

import base64
import re
import shutil
import subprocess

import pytest

from flows.evaluate import run_unit, seeded
from flows.report import FIGURES, write_report
from flows.systems import SystemOptions
from infra.models import clear_backend_cache
from infra.runtime.storage import ResultStore
from tasks.eval.metrics import summarize
from tests.scripted import answer, plan, scripted_settings

SYSTEMS = ["direct", "monolithic", "modular", "modular-nomem"]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    """A report over 4 systems x 2 seeds x 2 questions, from scripted runs (module calls without Prefect)."""
    clear_backend_cache()
    out = tmp_path_factory.mktemp("report")
    s = scripted_settings([plan("python", "6*7"), plan("answer", "42")], [answer("42", 1)])
    records = [{"id": f"gsm8k-{i}", "question": "What is 6 times 7?", "answer": str(42 + i % 2), "benchmark": "gsm8k",
                "answer_type": "number"} for i in range(2)]
    rows, steps, evidence = [], [], []
    for seed in (0, 1):
        for name in SYSTEMS:
            for rec in records:
                u = run_unit(name, seed, rec, seeded(s, seed), run_id=f"{name}-s{seed}", log=None,
                             options=SystemOptions(prefect_tasks=False))
                rows.append(u.row)
                steps += u.steps
                evidence += u.evidence
    summary = summarize(rows, SYSTEMS)
    summary["run"] = {"benchmark": "gsm8k", "questions": 3, "seeds": [0, 1], "systems": SYSTEMS, "units": len(rows)}
    write_report(ResultStore(str(out)), rows, steps, evidence, summary)
    return out


def test_report_is_self_contained_and_links_every_trace(report_dir):
    page = (report_dir / "report.html").read_text()
    assert "<script" not in page.lower()
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page)  # nothing fetched from anywhere
    assert "<link" not in page.lower()
    imgs = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)"', page)
    assert [alt for alt, _ in imgs] == [cap for _, cap, _ in FIGURES]
    for _, data in imgs:
        png = base64.b64decode(data)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    links = re.findall(r'href="(traces/[^"]+)"', page)
    assert len(links) == 16 and all((report_dir / link).is_file() for link in links)
    trace = (report_dir / "traces" / "modular.s0.gsm8k-1.html").read_text()
    assert "verifier/false_accept" in trace and 'href="../report.html#u-modular.s0.gsm8k-1"' in trace
    assert 'id="u-modular.s0.gsm8k-1"' in page


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def chromium():
    path = _chromium()
    if path is None:
        pytest.skip("chromium is not installed (Debian package 'chromium': apt-get install -y chromium); "
                    "the report's rendering check needs it")
    return path


def _run(chromium, tmp_path, *args, timeout=90):
    cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_report_renders_in_headless_chromium(chromium, report_dir, tmp_path):
    url = (report_dir / "report.html").as_uri()
    dom = _run(chromium, tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    for cls in ("systems", "roles", "paired", "outcomes"):
        assert f'<table class="{cls}">' in html
    assert html.count("<tr>") > 20  # the outcome rows are there
    srcs = re.findall(r'<img[^>]*src="data:image/png;base64,([^"]*)"', html)
    assert len(srcs) == len(FIGURES) and all(len(s) > 1000 for s in srcs)

    shot = tmp_path / "report.png"
    r = _run(chromium, tmp_path, f"--screenshot={shot}", "--window-size=1400,1800", "--hide-scrollbars", url)
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    from PIL import Image

    img = Image.open(shot).convert("RGB")
    assert img.size == (1400, 1800)
    colors = img.getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 50  # text, tables and plots, not a blank page
    # the figures' bar colours (matplotlib default blue of the planner, etc.) are on screen
    pixels = set(img.getdata())
    assert any(abs(r - 0x4C) < 12 and abs(g - 0x72) < 12 and abs(b - 0xB0) < 12 for r, g, b in pixels)


def test_trace_page_renders_in_headless_chromium(chromium, report_dir, tmp_path):
    dom = _run(chromium, tmp_path, "--dump-dom", (report_dir / "traces" / "modular.s0.gsm8k-0.html").as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert '<table class="steps">' in dom.stdout and "step 1 · python · accepted" in dom.stdout

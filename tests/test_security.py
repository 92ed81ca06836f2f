"""Secrets never leak (logs, Parquet, config, CLI output, error messages) and bad input fails cleanly.

The secret tests plant a key, point the openai backend at a local server that echoes the
Authorization header back in its error body (as some proxies do), and grep everything written.
"""

from __future__ import annotations

import io
import json
import threading
import traceback
import uuid
from http.server import ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import structlog
from typer.testing import CliRunner

from flows.batch import InputReport, run_batch
from flows.cli.app import app
from flows.research import DIRECT_STEPS
from infra.models import build_backend, clear_backend_cache
from infra.models.base import ModelError
from infra.models.openai_compat import OpenAIBackend
from infra.runtime import events
from infra.runtime.events import REDACTED, RunLog, configure_process_logging, redact, register_secret
from infra.runtime.model_server import JsonHandler
from infra.runtime.settings import ModelConfig
from infra.runtime.storage import ResultStore
from tasks.contracts import Question
from tests.scripted import answer, plan, scripted_settings


@pytest.fixture(autouse=True)
def _fresh_backends():
    clear_backend_cache()
    yield
    clear_backend_cache()


class EchoServer:
    """OpenAI-compatible on 127.0.0.1: /models answers, every chat call fails with 401 echoing the auth header."""

    def __init__(self):
        self.seen: list[str] = []
        server = self

        class Handler(JsonHandler):
            def do_GET(self):
                self._send(200, {"object": "list", "data": [{"id": "echo-model", "object": "model"}]})

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                auth = self.headers.get("Authorization", "")
                server.seen.append(auth)
                self._send(401, {"error": {"message": f"invalid credentials: {auth}", "type": "invalid_request_error",
                                           "code": "invalid_api_key"}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def echo():
    s = EchoServer()
    yield s
    s.close()


def _openai(base_url: str, **kw) -> ModelConfig:
    return ModelConfig(**{"backend": "openai", "model": "echo-model", "base_url": base_url, "api_key_env": "AGENTFLOW_PLANTED_KEY",
                          "max_tokens": 32, "timeout_s": 10.0, "max_transport_retries": 0, **kw})


def _everything_under(root: Path) -> str:
    """All text written under root; Parquet decoded (it compresses strings) as well as raw."""
    parts = []
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        raw = p.read_bytes()
        parts.append(raw.decode("utf-8", "replace"))
        if p.suffix == ".parquet":
            parts.append(json.dumps(pq.read_table(p).to_pylist(), default=str))
    return "\n".join(parts)


# ------------------------------------------------------------------------------- redaction


def test_run_log_scrubs_every_kind_of_planted_secret(tmp_path, monkeypatch, capsys):
    named = f"cred-{uuid.uuid4().hex}"  # in a variable named by api_key_env, shape unknown
    guessed = f"tok{uuid.uuid4().hex}"  # in a variable *named* like a key
    registered = f"reg-{uuid.uuid4().hex}"  # read by a backend (e.g. from a Prefect Secret block)
    shaped = f"sk-proj-{uuid.uuid4().hex}"  # looks like an OpenAI key wherever it came from
    monkeypatch.setenv("MY_SERVICE_CRED", named)
    monkeypatch.setenv("ACME_API_KEY", guessed)
    register_secret(registered)
    log = RunLog(tmp_path / "run.jsonl", run_id="r", console=True, secret_env=["MY_SERVICE_CRED"])
    log.bind(task_id="t").event("model_call", detail=f"HTTP 401: bad key {named}",
                                nested={"headers": [f"Bearer {guessed}", {"x": registered}], "n": 3},
                                error=ValueError(f"echo {shaped}"), obj=Path(f"/tmp/{registered}"))
    log.warning("retry", reason=(f"key={shaped}", 1))
    log.close()
    text = (tmp_path / "run.jsonl").read_text()
    console = capsys.readouterr().err
    for secret in (named, guessed, registered, shaped):
        assert secret not in text and secret not in console
    assert text.count(REDACTED) >= 6
    first = json.loads(text.splitlines()[0])
    assert first["nested"]["n"] == 3 and first["task_id"] == "t"  # everything else is kept as it was
    configure_process_logging("warning")  # library events (stderr) go through the same processor
    structlog.get_logger("test").warning("model_transport_retry", reason=f"echo {guessed} {registered} {shaped}")
    err = capsys.readouterr().err
    assert "model_transport_retry" in err and all(x not in err for x in (guessed, registered, shaped))
    assert redact("a b c") == "a b c"
    events._SECRETS.discard(registered)


def test_model_error_never_contains_the_key(echo, monkeypatch):
    key = f"sk-agentflow-{uuid.uuid4().hex}"
    monkeypatch.setenv("AGENTFLOW_PLANTED_KEY", key)
    backend = build_backend(_openai(echo.base_url))
    with pytest.raises(ModelError) as info:
        backend.complete([{"role": "user", "content": "hi"}], json_schema={"type": "object"})
    assert echo.seen and echo.seen[-1] == f"Bearer {key}"  # the key was sent, and echoed back
    message = str(info.value)
    assert "HTTP 401" in message and REDACTED in message and key not in message
    assert key not in "".join(traceback.format_exception(info.value))  # no chained exception shows it either


# ------------------------------------------------------------------------------- a whole batch


def test_batch_with_a_planted_key_leaves_it_nowhere(prefect_harness, echo, tmp_path, monkeypatch):
    key = f"sk-agentflow-{uuid.uuid4().hex}"
    monkeypatch.setenv("AGENTFLOW_PLANTED_KEY", key)
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "q1", "question": "How deep is Lake Orvanne?"}) + "\n")
    sets = []
    for role in ("planner", "generator"):
        sets += ["--set", f"models.{role}.backend=openai", "--set", f"models.{role}.base_url={echo.base_url}",
                 "--set", f"models.{role}.api_key_env=AGENTFLOW_PLANTED_KEY", "--set", f"models.{role}.max_transport_retries=0"]
    res = CliRunner().invoke(app, ["batch", str(questions), "--out", str(tmp_path / "out"), "--log-dir", str(tmp_path / "logs"),
                                   "--run-id", "leak", "--set", "tools.allow=[python]", "--set", "logging.console=true", *sets])
    assert res.exit_code == 0, res.output
    assert echo.seen and all(h == f"Bearer {key}" for h in echo.seen)  # the server got (and echoed) the key
    written = _everything_under(tmp_path)
    assert "invalid credentials" in written  # the server's error did reach logs and Parquet...
    assert key not in written and key not in res.output  # ...without the key
    assert "AGENTFLOW_PLANTED_KEY" in (tmp_path / "out" / "leak" / "config.yaml").read_text()  # the name, never the value
    steps = ResultStore(str(tmp_path / "out" / "leak")).read_table("steps").to_pylist()
    assert any(r["failure_type"] == "model_error" and REDACTED in r["detail"] for r in steps)


def test_api_key_from_a_prefect_secret_block(prefect_harness, echo, tmp_path):
    from prefect.blocks.system import Secret

    key = f"sk-block-{uuid.uuid4().hex}"
    name = f"agentflow-test-{uuid.uuid4().hex[:8]}"
    Secret(value=key).save(name, overwrite=True)
    backend = OpenAIBackend(_openai(echo.base_url, api_key_secret_block=name, api_key_env="AGENTFLOW_UNSET_VAR"))
    with pytest.raises(ModelError) as info:
        backend.complete([{"role": "user", "content": "hi"}])
    assert echo.seen[-1] == f"Bearer {key}" and key not in str(info.value)
    assert not backend.api_key_from_env
    with pytest.raises(ModelError, match="Prefect Secret block 'no-such-block'") as missing:
        OpenAIBackend(_openai(echo.base_url, api_key_secret_block="no-such-block"), probe=False)
    assert "\n" not in str(missing.value)
    res = CliRunner().invoke(app, ["run", "x", "--set", "tools.allow=[python]", "--set", "models.planner.backend=openai",
                                   "--set", f"models.planner.base_url={echo.base_url}",
                                   "--set", "models.planner.api_key_secret_block=no-such-block"])
    assert res.exit_code == 2 and "no-such-block" in res.output and len(res.output.strip().splitlines()) == 1


# ------------------------------------------------------------------------------- bad input


def test_missing_model_file_is_one_line_and_exit_2():
    res = CliRunner().invoke(app, ["run", "x", "--set", "tools.allow=[python]",
                                   "--set", "models.planner.model_path=/nonexistent.gguf"])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "planner model" in lines[0] and "/nonexistent.gguf" in lines[0]
    assert "Traceback" not in res.output


def test_config_that_is_not_yaml_is_one_clear_error(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("budget: [unclosed\n  max_steps: 3\n")
    res = CliRunner().invoke(app, ["run", "x", "--config", str(cfg)])
    assert res.exit_code == 2 and "not valid YAML" in res.output and "Traceback" not in res.output
    cfg.write_text("- just\n- a list\n")
    res = CliRunner().invoke(app, ["run", "x", "--config", str(cfg)])
    assert res.exit_code == 2 and "mapping" in res.output
    cfg.write_text("tools:\n  allow: [search, shell]\n")  # the allow-list cannot name unknown tools
    res = CliRunner().invoke(app, ["run", "x", "--config", str(cfg)])
    assert res.exit_code == 2 and "tools.allow" in res.output and "shell" in res.output
    cfg.write_text("verifier:\n  mode: llm\n")  # an LLM-only verifier without a judge model
    res = CliRunner().invoke(app, ["run", "x", "--config", str(cfg)])
    assert res.exit_code == 2 and "models.verifier" in res.output and "Traceback" not in res.output


SCHEMA = pa.schema([("task_id", pa.string()), ("value", pa.int64())])


class Crash(RuntimeError):
    """Stands in for the process dying at that instant."""


def test_a_crash_inside_write_part_leaves_no_visible_partial_file(tmp_path, monkeypatch):
    store = ResultStore(str(tmp_path / "run"))
    store.write_part("answers", "q0", [{"task_id": "q0", "value": 0}], SCHEMA)
    # 1. dies after the temporary file is complete, before the rename
    monkeypatch.setattr(store.fs, "mv", lambda *a, **k: (_ for _ in ()).throw(Crash("killed before rename")))
    with pytest.raises(Crash):
        store.write_part("answers", "q1", [{"task_id": "q1", "value": 1}], SCHEMA)
    monkeypatch.undo()
    # 2. dies half-way through writing the temporary file
    real_open = store.fs.open

    def dying_open(path, mode="rb", **kw):
        fh = real_open(path, mode, **kw)
        if "w" not in mode:
            return fh

        class Half(io.RawIOBase):
            def write(self, data):
                fh.write(bytes(data[: len(data) // 2]))
                fh.flush()
                raise Crash("killed mid-write")

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                fh.close()
        return Half()

    monkeypatch.setattr(store.fs, "open", dying_open)
    with pytest.raises(Crash):
        store.write_part("answers", "q2", [{"task_id": "q2", "value": 2}], SCHEMA)
    monkeypatch.undo()
    folder = tmp_path / "run" / "answers"
    leftovers = sorted(p.name for p in folder.iterdir() if p.name.startswith(".tmp-"))
    assert len(leftovers) == 2  # the debris exists on disk...
    assert sorted(p.name for p in folder.glob("part-*")) == ["part-q0.parquet"]  # ...but is never a part
    assert store.read_table("answers").to_pylist() == [{"task_id": "q0", "value": 0}]
    assert not store.has_part("answers", "q1") and not store.has_part("answers", "q2")
    for name in leftovers:  # and it is not Parquet a careless reader could mistake for a result
        assert not name.endswith(".parquet")
    store.write_part("answers", "q1", [{"task_id": "q1", "value": 1}], SCHEMA)  # the retry just works
    assert sorted(r["task_id"] for r in store.read_table("answers").to_pylist()) == ["q0", "q1"]


def test_a_batch_killed_mid_write_resumes_without_loss_or_duplicates(corpus_file, tmp_path, monkeypatch):
    s = scripted_settings([plan("search", "Lake Orvanne depth"), plan("answer")], [answer("212 metres", 1)],
                          corpus=corpus_file, **{"storage.out": str(tmp_path / "out")})
    report = InputReport(questions=[Question(id=f"q{i}", question="How deep is Lake Orvanne?") for i in range(3)])
    real = ResultStore.write_part
    calls = []

    def crash_on_second_answer(self, table, task_id, rows, schema):
        calls.append((table, task_id))
        if (table, task_id) == ("answers", "q1"):
            raise Crash("killed while writing q1's answer")
        return real(self, table, task_id, rows, schema)

    monkeypatch.setattr(ResultStore, "write_part", crash_on_second_answer)
    with pytest.raises(Crash):
        run_batch(report, s, "crash", log_dir=str(tmp_path / "logs"), progress=False, steps=DIRECT_STEPS)
    monkeypatch.undo()
    store = ResultStore(str(tmp_path / "out" / "crash"))
    assert [r["task_id"] for r in store.read_table("answers").to_pylist()] == ["q0"]  # finished work kept
    clear_backend_cache()
    again = run_batch(report, s, "crash", log_dir=str(tmp_path / "logs"), progress=False, steps=DIRECT_STEPS)
    assert again.done == 2 and again.skipped_existing == 1
    answers = store.read_table("answers").to_pylist()
    assert sorted(r["task_id"] for r in answers) == ["q0", "q1", "q2"]
    steps = store.read_table("steps").to_pylist()
    per_task = {t: sum(1 for r in steps if r["task_id"] == t) for t in ("q0", "q1", "q2")}
    assert len(set(per_task.values())) == 1  # q1's steps were replaced on resume, not appended twice


# ------------------------------------------------------------------------------- properties the other files leave open

from hypothesis import HealthCheck, given  # noqa: E402
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tasks.contracts import AnswerDraft, PlanDraft  # noqa: E402
from tasks.contracts import Role as _Role
from tasks.modules.prompts import ParseError, parse_json_reply  # noqa: E402

_json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=12),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(
        st.sampled_from(["sub_goal", "tool", "tool_input", "justification", "answer", "claims", "claim", "step_id", "x"]),
        c, max_size=5),
    max_leaves=10)
_replies = st.one_of(st.text(max_size=300), _json_like.map(json.dumps),
                     _json_like.map(lambda v: f"Sure! ```json\n{json.dumps(v)}\n``` hope that helps"))


@hsettings(max_examples=300, deadline=None)
@given(reply=_replies, draft=st.sampled_from([PlanDraft, AnswerDraft]))
def test_any_model_reply_parses_to_a_draft_or_a_clean_parse_error(reply, draft):
    """Whatever a model emits becomes a valid draft or a ParseError with a message; nothing else escapes."""
    try:
        parsed = parse_json_reply(reply, draft)
    except ParseError as exc:
        assert str(exc)
        return
    assert isinstance(parsed, draft) and draft.model_validate(parsed.model_dump()) == parsed


_ADVERSARIAL = st.sampled_from([
    plan("search", "Lake Orvanne depth"), plan("search", "Mount Kelbra"), plan("python", "print(1)"),
    plan("python", "while True: pass"), plan("generalist", "guess"), plan("shell", "ls"), plan("answer", "212"),
    "garbage", '{"sub_goal": "x", "tool": "search", "tool_input": ""}', plan("search", "x" * 590),
])


@hsettings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(_ADVERSARIAL, min_size=1, max_size=10), max_tokens=st.integers(1200, 12000),
       max_calls=st.integers(2, 12), max_cost=st.floats(0, 5), max_steps=st.integers(1, 7))
def test_the_monolithic_baseline_never_exceeds_its_budget_either(corpus_file, script, max_tokens, max_calls, max_cost,
                                                                 max_steps):
    """tests/test_loop.py checks the modular loop; the baseline runs under the same Budget and must hold it too."""
    from tasks.baselines.monolithic import run_monolithic

    clear_backend_cache()
    s = scripted_settings(script, [answer("a", 1)], corpus=corpus_file,
                          budget={"max_tokens": max_tokens, "max_model_calls": max_calls, "max_tool_cost": max_cost,
                                  "max_steps": max_steps, "max_wall_s": 60, "answer_reserve_s": 5},
                          **{"tools.python.timeout_s": 1.0})
    from flows.injection_eval import EventCapture

    log = EventCapture()
    out = run_monolithic(Question(id="m", question="How deep is Lake Orvanne?"), s, run_id="prop", log=log)
    recs, b = out.records, s.budget
    assert sum(r.tokens_in + r.tokens_out for r in recs) <= b.max_tokens
    assert sum(1 for r in recs if r.model is not None) <= b.max_model_calls
    assert sum(1 for r in recs if r.role is _Role.planner) <= b.max_steps
    assert sum(e["cost"] for e in log.events if e["event"] == "tool_call") <= b.max_tool_cost + 1e-9

"""Model backends: the scripted double, the embedded llama.cpp model (real GGUF), and the
OpenAI-compatible client against real HTTP servers on 127.0.0.1 (a stdlib stub, and the real
llama.cpp server in the slow test). Nothing here contacts any address but 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jsonschema
import pytest
import structlog

from infra.models import (
    Completion,
    ModelBackend,
    ModelError,
    PromptTooLong,
    build_backend,
    clear_backend_cache,
    locate_embedded_model,
)
from infra.models.embedded import default_threads
from infra.models.scripted import ScriptedBackend
from infra.runtime.settings import ModelConfig
from tests.conftest import MECHANICS_MODEL

os.environ.setdefault("no_proxy", "127.0.0.1,localhost")

PLAN_SCHEMA = {
    "type": "object",
    "properties": {
        "tool": {"type": "string", "enum": ["search", "python", "answer"]},
        "query": {"type": "string", "minLength": 1, "maxLength": 100},
    },
    "required": ["tool", "query"],
    "additionalProperties": False,
}
SYSTEM = (
    "You plan one research step. Tools: search (look up facts), python (compute), answer (reply). "
    'Reply only with JSON like {"tool": "search", "query": "..."}.'
)
QUESTIONS = [
    "How deep is Lake Orvanne?",
    "What is 17 * 23?",
    "Who founded Velt Corporation?",
    "What is the capital of France?",
    "How tall is Mount Kelbra?",
]


@pytest.fixture(autouse=True)
def _fresh_backends():
    clear_backend_cache()
    yield
    clear_backend_cache()


def _msgs(text: str, system: str | None = None) -> list[dict[str, str]]:
    out = [{"role": "system", "content": system}] if system else []
    return out + [{"role": "user", "content": text}]


# =========================================================================== scripted


def test_scripted_replies_in_order_and_cycle():
    b = ScriptedBackend(ModelConfig(backend="scripted", model="s", script=["a", "b", "c"]))
    assert isinstance(b, ModelBackend)
    texts = [b.complete(_msgs("hi")).text for _ in range(7)]
    assert texts == ["a", "b", "c", "a", "b", "c", "a"]
    assert b.calls == 7
    assert b.requests[0]["messages"] == _msgs("hi")


def test_scripted_token_counts_and_cap():
    b = ScriptedBackend(["x" * 40], max_tokens=5)
    c = b.complete([{"role": "system", "content": "abcd" * 3}, {"role": "user", "content": "12345678"}])
    assert c.tokens_in == (12 + 8) // 4 + 1
    assert c.tokens_out == 5  # min(40 // 4 + 1, 5)
    assert c.finish_reason == "length"
    c = b.complete(_msgs("q"), max_tokens=100)
    assert c.tokens_out == 11 and c.finish_reason == "stop"
    assert isinstance(c, Completion) and c.latency_ms >= 0


def test_scripted_callable_sees_messages():
    b = ScriptedBackend(lambda messages: messages[-1]["content"].upper())
    assert b.complete(_msgs("hello")).text == "HELLO"
    assert b.calls == 1


def test_scripted_prompt_too_long_before_reply():
    b = ScriptedBackend(["a", "b"], max_input_tokens=16)
    with pytest.raises(PromptTooLong) as info:
        b.complete(_msgs("x" * 400))
    assert info.value.tokens == 101 and info.value.limit == 16
    assert b.calls == 0
    assert b.complete(_msgs("short")).text == "a"  # the refused call used no reply


def test_scripted_needs_replies():
    with pytest.raises(ModelError):
        ScriptedBackend(ModelConfig(backend="scripted"))


def test_scripted_thread_safe_counter():
    replies = [str(i) for i in range(50)]
    b = ScriptedBackend(replies)
    seen: list[str] = []
    lock = threading.Lock()

    def worker():
        for _ in range(25):
            t = b.complete(_msgs("q")).text
            with lock:
                seen.append(t)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert b.calls == 200
    assert sorted(seen, key=int) == sorted(replies * 4, key=int)  # every reply exactly 4 times


def test_build_backend_caches_per_config_and_keeps_script_position():
    cfg = ModelConfig(backend="scripted", script=["one", "two"])
    b1 = build_backend(cfg)
    assert b1.complete(_msgs("q")).text == "one"
    b2 = build_backend(ModelConfig(backend="scripted", script=["one", "two"]))
    assert b2 is b1
    assert b2.complete(_msgs("q")).text == "two"
    assert build_backend(cfg.model_copy(update={"model": "other"})) is not b1
    clear_backend_cache()
    assert build_backend(cfg).complete(_msgs("q")).text == "one"


# =========================================================================== embedded


def _embedded_available() -> bool:
    try:
        import llama_cpp  # noqa: F401

        locate_embedded_model(MECHANICS_MODEL)
        return True
    except (ImportError, ModelError):
        return False


needs_model = pytest.mark.skipif(
    not _embedded_available(), reason="llama-cpp-python or the smollm2-135m GGUF (agentflow models fetch) is not available"
)


@pytest.fixture(scope="module")
def embedded():
    from infra.models.embedded import EmbeddedBackend

    return EmbeddedBackend(ModelConfig(model=MECHANICS_MODEL, max_tokens=64, seed=0))


@needs_model
def test_locate_embedded_model():
    path = locate_embedded_model(MECHANICS_MODEL)
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    assert path.stat().st_size > 50_000_000


def test_missing_model_path_is_a_clear_model_error(tmp_path):
    with pytest.raises(ModelError, match="model_path") as info:
        build_backend(ModelConfig(model_path=str(tmp_path / "nope.gguf")))
    assert "models.<role>.model" in str(info.value)


@needs_model
def test_embedded_plain_chat(embedded):
    c = embedded.complete(_msgs("Name one colour."), max_tokens=24)
    assert c.text.strip()
    assert c.tokens_in > 5 and 0 < c.tokens_out <= 24
    assert c.model == MECHANICS_MODEL
    assert c.finish_reason in {"stop", "length"}


@needs_model
def test_embedded_json_schema_constrained(embedded):
    valid = 0
    for q in QUESTIONS:
        # max_tokens above maxLength: a string of digits costs one token per character
        c = embedded.complete(_msgs(q, SYSTEM), json_schema=PLAN_SCHEMA, max_tokens=160, temperature=0.7)
        data = json.loads(c.text)
        jsonschema.validate(data, PLAN_SCHEMA)
        valid += 1
    assert valid == len(QUESTIONS)


@needs_model
def test_embedded_answer_is_one_of_the_spans_and_grammars_stay_bounded(embedded):
    """Span mode: the grammar forces one of the given values; per-question schemas do not pile up."""
    from infra.models.embedded import GRAMMAR_CACHE
    from tasks.contracts import answer_draft_schema

    spans = ["Quaquux Troudyl", "1,796.7", "1984", "yes", "no"]
    msgs = _msgs("Evidence (step 1): Shequipar Foundry was founded in 1984. Its revenue is 1,796.7 million dollars.\n"
                 "Question: When was Shequipar Foundry founded? Reply with JSON {answer, claims}.")
    c = embedded.complete(msgs, json_schema=answer_draft_schema([1], spans), max_tokens=48)
    assert re.match(r'\{\s*"answer"\s*:\s*"([^"]*)"', c.text).group(1) in spans  # the answer comes first

    def key(value):
        return json.dumps(answer_draft_schema([1], [value]), sort_keys=True)

    embedded._loaded.grammars.clear()
    embedded._grammar(answer_draft_schema([1], ["v-first"]))
    for i in range(GRAMMAR_CACHE - 2):
        embedded._grammar(answer_draft_schema([1], [f"v{i}"]))
    embedded._grammar(answer_draft_schema([1], ["v-first"]))  # used again: now the most recent
    for i in range(GRAMMAR_CACHE - 2, GRAMMAR_CACHE + 1):
        embedded._grammar(answer_draft_schema([1], [f"v{i}"]))
    assert len(embedded._loaded.grammars) == GRAMMAR_CACHE
    assert key("v-first") in embedded._loaded.grammars and key(f"v{GRAMMAR_CACHE}") in embedded._loaded.grammars
    assert key("v0") not in embedded._loaded.grammars and key("v1") not in embedded._loaded.grammars  # least recently used


@needs_model
def test_embedded_prompt_too_long_generates_nothing(embedded):
    llama = embedded._loaded.llama
    before = llama.n_tokens
    started = time.perf_counter()
    with pytest.raises(PromptTooLong) as info:
        embedded.complete(_msgs("lake " * 3000), max_tokens=8)
    assert time.perf_counter() - started < 2.0
    assert info.value.tokens > embedded.config.max_input_tokens
    assert info.value.limit == embedded.config.max_input_tokens
    assert llama.n_tokens == before  # nothing was evaluated


_ROLE_TEXT = " ".join(["Lake Orvanne is 212 metres deep; the Elmsby Society surveyed it in 1998."] * 12)


def _role_msgs(role: str, question: str) -> list[dict[str, str]]:
    return _msgs(f"Question: {question}", f"You are the {role}. {_ROLE_TEXT}")


@needs_model
def test_embedded_prompt_cache_keeps_each_roles_prefix_in_its_own_context(embedded):
    """Alternating roles do not evict each other's prefix: each call goes to the context that read its prefix."""
    from infra.models.embedded import SHARED_PREFIX_MIN

    backend = build_backend(ModelConfig(model=MECHANICS_MODEL, max_tokens=6, temperature=0.0, prompt_cache_slots=3))
    loaded = backend._loaded
    for ctx in loaded.contexts:  # start from empty contexts (the module's other tests used the first one)
        ctx.reset()
    backend.complete(_role_msgs("planner", "How deep is Lake Orvanne?"))
    planner_ctx = loaded.contexts[loaded.last_used.index(loaded.calls)]
    backend.complete(_role_msgs("generator", "How deep is Lake Orvanne?"))
    generator_ctx = loaded.contexts[loaded.last_used.index(loaded.calls)]
    assert planner_ctx is not generator_ctx and len(loaded.contexts) >= 2
    later, _ = backend.render_prompt(_role_msgs("planner", "Who surveyed Lake Orvanne?"))
    with loaded.lock:
        chosen = loaded.context_for(later, 3)
    assert chosen is planner_ctx  # the planner's system prompt is still there, read once
    shared = 0
    while later[shared] == int(planner_ctx.input_ids[shared]):
        shared += 1
    assert shared >= SHARED_PREFIX_MIN and planner_ctx.n_tokens > shared


@needs_model
def test_embedded_prompt_cache_gives_the_replies_of_a_single_context(embedded):
    """Greedy replies are the same whether the prefix was read now or reused from a cached context."""
    calls = [("planner", "How deep is Lake Orvanne?"), ("verifier", "How deep is Lake Orvanne?"),
             ("planner", "Who surveyed Lake Orvanne?"), ("verifier", "When was Lake Orvanne surveyed?")]

    def replies(slots: int) -> list[str]:
        backend = build_backend(ModelConfig(model=MECHANICS_MODEL, max_tokens=12, temperature=0.0, prompt_cache_slots=slots))
        return [backend.complete(_role_msgs(role, q)).text for role, q in calls]

    single = replies(1)
    assert replies(3) == single and all(single)


@needs_model
def test_embedded_prompt_count_is_exact_chat_template(embedded):
    msgs = _msgs("How deep is Lake Orvanne?", SYSTEM)
    n = embedded.count_prompt_tokens(msgs)
    c = embedded.complete(msgs, max_tokens=4)
    assert c.tokens_in == n


@needs_model
def test_embedded_deadline_is_respected(embedded):
    started = time.perf_counter()
    c = embedded.complete(
        _msgs("Write a very long essay about the history of every European country."),
        max_tokens=2000,
        temperature=0.8,
        deadline_s=0.5,
    )
    elapsed = time.perf_counter() - started
    assert elapsed < 2.0, elapsed
    assert c.finish_reason == "deadline"
    assert c.tokens_out < 2000


@needs_model
def test_embedded_model_loads_once_per_process(embedded):
    import infra.models.embedded as emb

    loads = emb.LOAD_COUNT
    a = build_backend(ModelConfig(model=MECHANICS_MODEL, max_tokens=64, seed=0))
    b = build_backend(ModelConfig(model=MECHANICS_MODEL, max_tokens=32, temperature=0.9))
    assert a is not b
    assert a._loaded is b._loaded is embedded._loaded  # one Llama, one lock
    assert emb.LOAD_COUNT == loads
    assert build_backend(ModelConfig(model=MECHANICS_MODEL, max_tokens=64, seed=0)) is a


@needs_model
def test_embedded_concurrent_calls_are_serialised(embedded):
    results: list[Completion] = []

    def call():
        results.append(embedded.complete(_msgs("Say hi."), max_tokens=8))

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and all(r.tokens_out > 0 for r in results)


# =========================================================================== openai-compatible


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _chat_body(text: str, usage: dict | None = None) -> dict:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "served-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


class StubServer:
    """An OpenAI-compatible stub on 127.0.0.1: replies from a queue of (status, body, delay_s),
    the last one repeating; records every request (path, headers, JSON body)."""

    def __init__(self):
        self.replies: list[tuple[int, dict, float]] = []
        self.requests: list[dict] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, body: dict, delay: float = 0.0):
                if delay:
                    time.sleep(delay)
                raw = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self):
                if self.path.endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": "served-model", "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                stub.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
                status, reply, delay = stub.replies.pop(0) if len(stub.replies) > 1 else stub.replies[0]
                self._send(status, reply, delay)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub():
    s = StubServer()
    yield s
    s.close()


def _openai_cfg(base_url: str, **kw) -> ModelConfig:
    values = dict(backend="openai", model="test-model", base_url=base_url, api_key_env="AGENTFLOW_TEST_KEY",
                  max_tokens=50, timeout_s=10.0)
    values.update(kw)
    return ModelConfig(**values)


def test_openai_request_body_usage_and_api_key(stub, monkeypatch):
    monkeypatch.setenv("AGENTFLOW_TEST_KEY", "sk-test-123")
    stub.replies = [(200, _chat_body('{"tool": "search", "query": "lake"}',
                                     {"prompt_tokens": 21, "completion_tokens": 9, "total_tokens": 30}), 0)]
    b = build_backend(_openai_cfg(stub.base_url, temperature=0.3, seed=7))
    assert isinstance(b, ModelBackend) and b.name == "openai:test-model"
    msgs = _msgs("How deep is Lake Orvanne?", SYSTEM)
    c = b.complete(msgs, json_schema=PLAN_SCHEMA, max_tokens=40)
    assert c.text == '{"tool": "search", "query": "lake"}'
    assert (c.tokens_in, c.tokens_out) == (21, 9)
    assert c.model == "test-model" and c.finish_reason == "stop"
    req = stub.requests[-1]
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["authorization"] == "Bearer sk-test-123"
    body = req["body"]
    assert body["model"] == "test-model"
    assert body["messages"] == msgs
    assert body["max_tokens"] == 40 and body["temperature"] == 0.3 and body["seed"] == 7
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": PLAN_SCHEMA, "strict": True},
    }
    assert b.last_retries == 0


def test_openai_extra_body_fields_are_sent_as_they_are(stub):
    stub.replies = [(200, _chat_body("hello"), 0), (200, _chat_body("hello"), 0)]
    build_backend(_openai_cfg(stub.base_url, extra_body={"repeat_penalty": 1.0, "top_k": 40})).complete(_msgs("hi"))
    body = stub.requests[-1]["body"]
    assert body["repeat_penalty"] == 1.0 and body["top_k"] == 40
    build_backend(_openai_cfg(stub.base_url)).complete(_msgs("hi"))
    assert "repeat_penalty" not in stub.requests[-1]["body"]  # nothing a hosted API would refuse unless asked


def test_openai_placeholder_key_when_env_unset(stub, monkeypatch):
    monkeypatch.delenv("AGENTFLOW_TEST_KEY", raising=False)
    stub.replies = [(200, _chat_body("hello"), 0)]
    c = build_backend(_openai_cfg(stub.base_url)).complete(_msgs("hi"))
    assert c.text == "hello"
    assert stub.requests[-1]["headers"]["authorization"] == "Bearer not-needed"
    assert "response_format" not in stub.requests[-1]["body"]


def test_openai_tokens_estimated_without_usage(stub):
    stub.replies = [(200, _chat_body("x" * 40), 0)]
    c = build_backend(_openai_cfg(stub.base_url)).complete(_msgs("y" * 80))
    assert c.tokens_out == 10 and c.tokens_in == 21


def test_openai_retries_503_then_succeeds_and_logs(stub, monkeypatch):
    monkeypatch.setenv("AGENTFLOW_TEST_KEY", "sk-secret-never-logged")
    stub.replies = [(503, {"error": {"message": "overloaded"}}, 0),
                    (200, _chat_body("ok", {"prompt_tokens": 3, "completion_tokens": 1}), 0)]
    b = build_backend(_openai_cfg(stub.base_url, max_transport_retries=2))
    with structlog.testing.capture_logs() as logs:
        c = b.complete(_msgs("hi"))
    assert c.text == "ok"
    assert len(stub.requests) == 2
    assert b.last_retries == 1
    retries = [e for e in logs if e["event"] == "model_transport_retry"]
    assert len(retries) == 1
    assert retries[0]["status"] == 503 and retries[0]["attempt"] == 1
    assert "sk-secret" not in json.dumps(logs, default=str)


def test_openai_retries_are_bounded(stub):
    stub.replies = [(503, {"error": {"message": "down"}}, 0)]
    b = build_backend(_openai_cfg(stub.base_url, max_transport_retries=1))
    with structlog.testing.capture_logs() as logs:
        with pytest.raises(ModelError, match="503"):
            b.complete(_msgs("hi"))
    assert len(stub.requests) == 2  # one try + one retry
    assert b.last_retries == 1
    assert sum(e["event"] == "model_transport_retry" for e in logs) == 1


def test_openai_429_retried_but_400_not(stub):
    stub.replies = [(429, {"error": {"message": "slow down"}}, 0), (200, _chat_body("fine"), 0)]
    b = build_backend(_openai_cfg(stub.base_url, max_transport_retries=1))
    assert b.complete(_msgs("hi")).text == "fine"
    stub.requests.clear()
    stub.replies = [(400, {"error": {"message": "bad request"}}, 0)]
    with pytest.raises(ModelError, match="400"):
        b.complete(_msgs("hi"))
    assert len(stub.requests) == 1


def test_openai_json_schema_fallback_to_json_object(stub):
    stub.replies = [(400, {"error": {"message": "response_format json_schema not supported"}}, 0),
                    (200, _chat_body('{"tool": "python", "query": "17*23"}'), 0)]
    b = build_backend(_openai_cfg(stub.base_url))
    c = b.complete(_msgs("What is 17*23?"), json_schema=PLAN_SCHEMA)
    assert json.loads(c.text)["tool"] == "python"
    formats = [r["body"]["response_format"] for r in stub.requests]
    assert formats[0]["type"] == "json_schema"
    assert formats[1] == {"type": "json_object", "schema": PLAN_SCHEMA}
    # remembered: the next call goes straight to the accepted form
    b.complete(_msgs("again"), json_schema=PLAN_SCHEMA)
    assert stub.requests[-1]["body"]["response_format"] == {"type": "json_object", "schema": PLAN_SCHEMA}
    assert len(stub.requests) == 3


def test_openai_llama_cpp_python_style_500_rejection_falls_back_without_retry(stub):
    # llama-cpp-python's server answers an unknown response_format type with HTTP 500
    stub.replies = [(500, {"error": {"message": "validation error: ('body', 'response_format', 'type')"}}, 0),
                    (200, _chat_body('{"tool": "answer", "query": "x"}'), 0)]
    b = build_backend(_openai_cfg(stub.base_url, max_transport_retries=2))
    with structlog.testing.capture_logs() as logs:
        c = b.complete(_msgs("q"), json_schema=PLAN_SCHEMA)
    assert json.loads(c.text)["tool"] == "answer"
    assert len(stub.requests) == 2 and b.last_retries == 0
    assert [e["event"] for e in logs] == ["model_response_format_fallback"]


def test_openai_prompt_too_long_sends_nothing(stub):
    stub.replies = [(200, _chat_body("never"), 0)]
    b = build_backend(_openai_cfg(stub.base_url, max_input_tokens=100))
    with pytest.raises(PromptTooLong):
        b.complete(_msgs("z" * 300))  # 300 chars / 3 = 100 tokens + framing > 100
    assert stub.requests == []


def test_openai_deadline_bounds_the_call(stub):
    stub.replies = [(200, _chat_body("late"), 3.0)]
    b = build_backend(_openai_cfg(stub.base_url, max_transport_retries=3))
    started = time.perf_counter()
    with pytest.raises(ModelError, match="did not answer"):
        b.complete(_msgs("hi"), deadline_s=0.5)
    assert time.perf_counter() - started < 2.0
    assert len(stub.requests) == 1  # a timeout is not retried past the deadline


def test_openai_connection_refused_is_one_line_model_error():
    base_url = f"http://127.0.0.1:{_free_port()}/v1"  # nothing listens there
    started = time.perf_counter()
    with pytest.raises(ModelError) as info:
        build_backend(_openai_cfg(base_url))
    msg = str(info.value)
    assert base_url in msg and "unreachable" in msg and "\n" not in msg
    from infra.models.openai_compat import OpenAIBackend

    b = OpenAIBackend(_openai_cfg(base_url, max_transport_retries=1), probe=False)
    with structlog.testing.capture_logs():
        with pytest.raises(ModelError) as info:
            b.complete(_msgs("hi"))
    assert base_url in str(info.value) and "\n" not in str(info.value)
    assert b.last_retries == 1
    assert time.perf_counter() - started < 5.0


def test_openai_needs_base_url():
    with pytest.raises(ModelError, match="base_url"):
        build_backend(ModelConfig(backend="openai"))


# =========================================================================== real llama.cpp server


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    if not _embedded_available():
        pytest.skip("llama-cpp-python or the smollm2-135m GGUF (agentflow models fetch) is not available")
    for mod in ("uvicorn", "fastapi", "sse_starlette", "starlette_context"):
        pytest.importorskip(mod, reason="llama_cpp.server needs llama-cpp-python[server] packages")
    port = _free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(locate_embedded_model(MECHANICS_MODEL)),
           "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--model_alias", "smollm2",
           "--n_threads", str(default_threads())]
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    log_file = open(log_path, "w")  # not a pipe: the server's verbose output would fill it and block
    proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + 120
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited: {log_path.read_text()[-2000:]}")
            try:
                with opener.open(f"{base_url}/models", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("llama_cpp.server did not become ready within 120 s")
            time.sleep(0.5)
        yield base_url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log_file.close()


@pytest.mark.slow
def test_openai_backend_against_real_llama_cpp_server(llama_server):
    b = build_backend(_openai_cfg(llama_server, model="smollm2", timeout_s=120.0, max_tokens=48))
    c = b.complete(_msgs("Name one colour."), max_tokens=16)
    assert c.text and c.tokens_in > 5 and 0 < c.tokens_out <= 16
    for q in QUESTIONS[:3]:
        c = b.complete(_msgs(q, SYSTEM), json_schema=PLAN_SCHEMA, max_tokens=160)
        jsonschema.validate(json.loads(c.text), PLAN_SCHEMA)
    # llama-cpp-python's server rejects type=json_schema (422) and takes json_object + schema
    assert b._format_kind == "json_object_schema"

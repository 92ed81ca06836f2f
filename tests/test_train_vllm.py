"""The GPU path (vllm_policy) against a fake vLLM server on 127.0.0.1: token ids and logprobs from the server,
the adapter reloaded after an update. Not a real vLLM: the request/response shapes follow vLLM's OpenAI server."""

from __future__ import annotations

import itertools
import json
import threading
from http.server import ThreadingHTTPServer

import pytest

from infra.models.base import ModelError
from infra.runtime.model_server import JsonHandler
from infra.runtime.settings import ModelConfig
from tests.scripted import answer, plan


class FakeVLLM:
    """/v1/chat/completions with logprobs as 'token_id:N', prompt_token_ids, /tokenize, LoRA load/unload."""

    def __init__(self, replies, *, prompt_ids_in_response: bool = True, vocab: int = 200):
        self.replies = itertools.cycle(replies)
        self.prompt_ids_in_response = prompt_ids_in_response
        self.vocab = vocab
        self.requests: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(JsonHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                with fake.lock:
                    fake.requests.append((self.path, body))
                if self.path == "/v1/chat/completions":
                    self._send(200, fake.chat(body))
                elif self.path == "/tokenize":
                    self._send(200, {"tokens": fake.prompt_ids(body["messages"]), "count": 3})
                elif self.path == "/v1/load_lora_adapter":
                    ok = str(body.get("lora_path", "")).strip() != "/missing"
                    self._send(200 if ok else 400, {"status": "ok"} if ok else {"error": "no such adapter"})
                elif self.path == "/v1/unload_lora_adapter":
                    self._send(200, {"status": "ok"})
                else:
                    self._send(404, {"error": "not found"})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def prompt_ids(self, messages) -> list[int]:
        text = "".join(m["content"] for m in messages)
        return [3 + (ord(c) % (self.vocab - 3)) for c in text[:40]]

    def chat(self, body) -> dict:
        text = next(self.replies)
        ids = [3 + (ord(c) % (self.vocab - 3)) for c in text][: body.get("max_tokens", 256)]
        entries = [{"token": f"token_id:{i}", "logprob": -0.5 - 0.01 * k, "bytes": None} for k, i in enumerate(ids)]
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                  "logprobs": {"content": entries}, "token_ids": ids}
        out = {"id": "x", "object": "chat.completion", "model": body["model"], "choices": [choice],
               "usage": {"prompt_tokens": 3, "completion_tokens": len(ids)}}
        if self.prompt_ids_in_response:
            out["prompt_token_ids"] = self.prompt_ids(body["messages"])
        return out

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _backend(url: str):
    from infra.models.vllm_policy import VLLMPolicyBackend

    backend = VLLMPolicyBackend(ModelConfig(backend="vllm_policy", base_url=url, model="agentflow-planner",
                                            max_tokens=64, temperature=1.0))
    backend.recording = True  # as a rollout worker does
    return backend


MSGS = [{"role": "system", "content": "plan"}, {"role": "user", "content": "What is 17 * 23?"}]


def test_turn_ids_and_logprobs_come_from_the_server():
    with FakeVLLM([plan("python", "print(17 * 23)")]) as server:
        backend = _backend(server.base_url)
        c = backend.complete(MSGS, json_schema={"type": "object", "properties": {}}, max_tokens=32, seed=7)
        (turn,) = backend.drain_turns()
        path, req = server.requests[0]
    assert path == "/v1/chat/completions" and req["model"] == "agentflow-planner"
    assert req["logprobs"] is True and req["return_tokens_as_token_ids"] is True and req["return_token_ids"] is True
    assert req["response_format"]["type"] == "json_schema" and req["seed"] == 7 and req["max_tokens"] == 32
    assert turn.prompt_ids == server.prompt_ids(MSGS)
    assert len(turn.completion_ids) == len(turn.logprobs) == c.tokens_out == 32
    assert turn.logprobs[:2] == pytest.approx([-0.5, -0.51]) and turn.temperature == 1.0
    assert c.text == turn.text and backend.drain_turns() == []


def test_prompt_ids_from_the_tokenize_endpoint_when_the_reply_lacks_them():
    with FakeVLLM([plan("answer")], prompt_ids_in_response=False) as server:
        backend = _backend(server.base_url)
        backend.complete(MSGS)
        (turn,) = backend.drain_turns()
        paths = [p for p, _ in server.requests]
    assert paths == ["/v1/chat/completions", "/tokenize"] and turn.prompt_ids == server.prompt_ids(MSGS)


def test_reload_adapter_unloads_then_loads_and_reports_failure():
    from infra.models.vllm_policy import reload_adapter

    with FakeVLLM([plan("answer")]) as server:
        reload_adapter(server.base_url, "agentflow-planner", "/adapters/v000001")
        assert [(p, b.get("lora_path")) for p, b in server.requests] == [
            ("/v1/unload_lora_adapter", None), ("/v1/load_lora_adapter", "/adapters/v000001")]
        with pytest.raises(ModelError, match="HTTP 400"):
            reload_adapter(server.base_url, "agentflow-planner", "/missing")


def test_unreachable_server_is_a_model_error():
    from infra.models.vllm_policy import VLLMPolicyBackend

    with FakeVLLM([plan("answer")]) as server:
        url = server.base_url
    with pytest.raises(ModelError, match="unreachable"):
        VLLMPolicyBackend(ModelConfig(backend="vllm_policy", base_url=url, timeout_s=2)).complete(MSGS)


def test_training_step_on_the_server_path_reloads_the_adapter(tmp_path, corpus_file):
    """The same Trainer as the CPU path: rollouts sample on the server, the learner updates, the server reloads."""
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from flows.train import run_training
    from infra.models import clear_backend_cache
    from infra.runtime.settings import load_settings
    from tests.tiny_policy import write_tiny_model

    base = write_tiny_model(tmp_path / "tiny")
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "q1", "question": "What is 17 * 23?", "answer": "391",
                                     "answer_type": "number"}) + "\n")
    # group of 2: one trajectory answers at once (no evidence, wrong), one computes first (evidence, right)
    replies = [plan("answer"), plan("python", "print(17 * 23)"), plan("answer")]
    with FakeVLLM(replies, vocab=250) as server:
        settings = load_settings(None, None, **{
            "models.generator": ModelConfig(backend="scripted", model="g", script=[answer("391", 1)]).model_dump(),
            "tools.allow": ["python"], "tools.python.sandbox": "process",
            "train.train_questions": str(questions), "train.base_model": str(base), "train.steps": 1,
            "train.questions_per_step": 1, "train.group_size": 2, "train.workers": 0, "train.eval_every": 0,
            "train.policy_server": server.base_url, "train.policy_server_adapter_dir": str(tmp_path / "served"),
        })
        clear_backend_cache()
        summary = run_training(settings, str(tmp_path / "out"), log_dir=str(tmp_path / "logs"))
        loads = [b["lora_path"] for p, b in server.requests if p == "/v1/load_lora_adapter"]
    row = summary.metrics[0]
    assert row["trajectories"] == 2 and row["zero_signal_groups"] == 0 and row["updated"]
    assert loads == [str(tmp_path / "served" / "v000000"), str(tmp_path / "served" / "v000001")]
    assert (tmp_path / "served" / "v000001" / "adapter_config.json").is_file()

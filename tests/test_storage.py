"""Parquet results on a local path and on a real S3 endpoint (moto's server on loopback)."""

import socket
import urllib.request

import pyarrow as pa
import pytest

from flows.batch import InputReport, run_batch
from flows.research import DIRECT_STEPS
from infra.models import clear_backend_cache
from infra.runtime.storage import ResultStore, StorageError
from tasks.contracts import Question
from tests.scripted import answer, plan, scripted_settings

SCHEMA = pa.schema([("task_id", pa.string()), ("value", pa.int64())])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint():
    from moto.server import ThreadedMotoServer

    mp = pytest.MonkeyPatch()
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "eu-west-1", "AWS_REGION": "eu-west-1"}.items():
        mp.setenv(key, value)
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    # moto's backends are process-global: another module's server left its buckets; start empty
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"), timeout=10).close()
    import s3fs

    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": url, "region_name": "eu-west-1"})
    fs.mkdir("agentflow-test")
    yield url
    server.stop()
    mp.undo()


def _roundtrip(store: ResultStore):
    store.write_part("answers", "q/1", [{"task_id": "q/1", "value": 1}], SCHEMA)
    store.write_part("answers", "q2", [{"task_id": "q2", "value": 2}], SCHEMA)
    store.write_part("answers", "q2", [{"task_id": "q2", "value": 3}], SCHEMA)  # a re-run replaces, never duplicates
    table = store.read_table("answers").sort_by("task_id").to_pylist()
    assert table == [{"task_id": "q/1", "value": 1}, {"task_id": "q2", "value": 3}]
    assert store.has_part("answers", "q/1") and not store.has_part("answers", "q3")
    store.write_text("config.yaml", "a: 1\n")
    assert store.read_text("config.yaml") == "a: 1\n"


def test_local_store_is_atomic_and_idempotent(tmp_path):
    store = ResultStore(str(tmp_path / "run"))
    _roundtrip(store)
    leftovers = [p.name for p in (tmp_path / "run" / "answers").iterdir() if p.name.startswith(".tmp")]
    assert leftovers == []
    assert store.read_table("missing").num_rows == 0


def test_s3_store_against_a_real_endpoint(s3_endpoint):
    _roundtrip(ResultStore("s3://agentflow-test/prefix/run1", s3_endpoint_url=s3_endpoint))


def test_batch_writes_to_s3_and_resumes(s3_endpoint, corpus_file, tmp_path):
    clear_backend_cache()
    s = scripted_settings([plan("search", "Lake Orvanne depth"), plan("answer")], [answer("212 metres", 1)],
                          corpus=corpus_file, **{"storage.out": "s3://agentflow-test/batches",
                                                 "storage.s3_endpoint_url": s3_endpoint})
    qs = InputReport(questions=[Question(id=f"q{i}", question="How deep is Lake Orvanne?") for i in range(2)])
    first = run_batch(qs, s, "s3run", log_dir=str(tmp_path), progress=False, steps=DIRECT_STEPS)
    assert first.done == 2 and first.out == "s3://agentflow-test/batches/s3run"
    store = ResultStore(first.out, s3_endpoint_url=s3_endpoint)
    assert store.read_table("answers").num_rows == 2
    assert store.read_table("steps").num_rows >= 8
    assert "s3run" in store.read_text("logs/s3run.jsonl")
    again = run_batch(qs, s, "s3run", log_dir=str(tmp_path), progress=False, steps=DIRECT_STEPS)
    assert again.done == 0 and again.skipped_existing == 2


def test_unusable_location_gives_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StorageError, match="cannot create result location"):
        ResultStore(str(blocker / "sub"))
    with pytest.raises(StorageError, match="cannot open result location"):
        ResultStore("nosuchproto://x/y")

"""Ray: tool actors and model-server actors on a simulated two-node cluster (ray.cluster_utils.Cluster) on
127.0.0.1, joined through its address exactly as a real cluster (settings.ray.address / RAY_ADDRESS).

Each node has its own custom resource so actors can be pinned one per node. Every test shares the
module's cluster (one start, about 10 s). Nothing here sends traffic to any address but loopback; the
last test checks the sockets of every process of this test run.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from flows.bench.suite import scripted_server_config
from infra.models import clear_backend_cache
from infra.runtime.actors import RemoteSearchIndex, SandboxPool
from infra.runtime.cluster import LOOPBACK_ENV, _dead_proxy, _with_loopback, ensure_ray
from infra.runtime.model_server import ModelServerError, _healthy, forget_model_servers, start_model_servers
from infra.runtime.services import shutdown_ray
from infra.runtime.settings import RayConfig, Settings
from infra.runtime.storage import ResultStore
from infra.tools.sandbox import SandboxLimits
from tasks.contracts import Plan, Question, ResultStatus

ROOT = Path(__file__).resolve().parents[1]
RAY_TMP = "/tmp/af-ray-test"


@pytest.fixture(scope="module")
def cluster():
    for key, value in LOOPBACK_ENV.items():
        os.environ.setdefault(key, value)
    os.environ["no_proxy"] = os.environ["NO_PROXY"] = _with_loopback(os.environ.get("no_proxy"))
    import ray._private.utils as ray_utils
    from ray.cluster_utils import Cluster

    # Cluster records its address under the default temp dir whatever temp_dir says; that folder must exist
    Path(ray_utils.get_ray_address_file(None)).parent.mkdir(parents=True, exist_ok=True)
    node = dict(node_ip_address="127.0.0.1", object_store_memory=96 * 1024 * 1024, num_cpus=2)
    with _dead_proxy():  # the cluster's processes inherit a dead proxy: no metadata probes
        c = Cluster(initialize_head=True, head_node_args=dict(
            **node, include_dashboard=False, temp_dir=RAY_TMP,
            resources={"node_a": 1, "sandbox_slot": 1, "model_slot": 1}))
        c.add_node(**node, resources={"node_b": 1, "sandbox_slot": 1, "model_slot": 1})
    c.wait_for_nodes()
    ensure_ray(RayConfig(address=c.address))
    yield c
    shutdown_ray()
    c.shutdown()


@pytest.fixture(autouse=True)
def _fresh_backends():
    clear_backend_cache()
    yield


def _settings(cluster, corpus=None, **ray) -> Settings:
    ray_cfg = {"enabled": True, "address": cluster.address, "sandbox": {"actors": 2, "resources": {"sandbox_slot": 1}},
               "search": {"resources": {"node_b": 0.5}}, **ray}
    tree = {"ray": ray_cfg, "verifier": {"recompute": False},
            "tools": {"allow": ["search", "python"] if corpus else ["python"], "search": {"corpus": str(corpus) if corpus else None}}}
    return Settings.model_validate(tree)


@contextlib.contextmanager
def _servers(ray_cfg: RayConfig):
    """Model servers for one test; their actors are gone afterwards (their custom resources freed)."""
    import ray

    routers = start_model_servers(ray_cfg)
    try:
        yield routers
    finally:
        for router in routers.values():
            for replica in router.replicas:
                ray.kill(replica, no_restart=True)
        forget_model_servers()


def _wait(predicate, timeout_s: float = 60.0, every_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"condition not met within {timeout_s}s")


def _kill_for_good(handle) -> None:
    """ray.kill only asks for the kill: a call sent right after it can still reach the live actor, so wait
    until the actor answers no more (the system under test sees a dead actor, not a race)."""
    import ray

    ray.kill(handle, no_restart=True)

    def gone() -> bool:
        try:
            ray.get(handle.__ray_ready__.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return True
        except ray.exceptions.GetTimeoutError:
            pass
        return False

    _wait(gone)


def _until_ok(call, timeout_s: float = 60.0):
    """The first ok Result of repeated calls (the test waits for a restart; the system itself never retries)."""
    return _wait(lambda: (lambda r: r if r.status is ResultStatus.ok else None)(call()), timeout_s, 0.5)


def _questions(n: int) -> list[Question]:
    return [Question(id=f"q{i:02d}", question=f"Run: print({i} * {i})" if i % 2 else "How deep is Lake Orvanne?",
                     answer=str(i * i) if i % 2 else "212 metres") for i in range(n)]


def _node_ids(cluster) -> set[str]:
    import ray

    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


# ------------------------------------------------------------------------------------------------ cluster


def test_actors_spread_over_both_nodes_and_a_batch_completes(cluster, prefect_harness, corpus_file, tmp_path):
    import ray

    from flows.batch import batch_research

    server = scripted_server_config(20, replicas=2, resources={"model_slot": 1})
    s = _settings(cluster, corpus_file, model_servers={"scripted": server})
    s = Settings.model_validate(s.model_dump() | {"storage": {"out": str(tmp_path / "out")}, "batch": {"concurrency": 3}})
    qfile = tmp_path / "q.jsonl"
    qs = _questions(6)
    qfile.write_text("".join(q.model_dump_json() + "\n" for q in qs))
    with _servers(s.ray) as routers:
        summary = batch_research(str(qfile), s, "cluster", log_dir=str(tmp_path / "logs"), progress=False)
        router = routers["scripted"]
        servers = router.status()
        assert sum(router.leases) == 6 and all(router.leases)  # every question leased a replica; both used
    assert (summary.done, summary.failed) == (6, 0)
    answers = ResultStore(summary.out).read_table("answers").to_pylist()
    assert sorted(a["task_id"] for a in answers) == [q.id for q in qs]
    assert all(a["status"] == "answered" for a in answers)

    nodes = _node_ids(cluster)
    assert len(nodes) == 2
    pool = SandboxPool.connect(s.ray, "auto")
    assert {i["node_id"] for i in pool.info()} == nodes  # one sandbox actor per node
    assert {srv["node_id"] for srv in servers} == nodes  # one model server per node
    search = RemoteSearchIndex.connect(s.ray, corpus_file).info()
    worker_node = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and "node_b" in n["Resources"])
    assert search["node_id"] == worker_node and search["documents"] == 3


# ------------------------------------------------------------------------------------------------ tools


def test_a_sandbox_actor_killed_mid_call_is_an_error_result_and_restarts(cluster):
    import ray

    from tasks.modules.executor import execute
    from tasks.modules.tools import get_tool

    s = _settings(cluster)
    tool = get_tool("python", s)
    assert isinstance(tool.sandbox, SandboxPool)
    ok = tool.run(Plan(step_id=1, sub_goal="x", tool="python", args={"code": "print(6 * 7)"}))
    assert ok.status is ResultStatus.ok and ok.data["stdout"].strip() == "42"
    pids = {i["pid"] for i in tool.sandbox.info()}

    out = {}
    slow = Plan(step_id=2, sub_goal="x", tool="python", args={"code": "import time; time.sleep(20); print(1)"})
    runner = threading.Thread(target=lambda: out.setdefault("result", execute(slow, s)))
    runner.start()
    time.sleep(2.0)
    for handle in tool.sandbox.handles:  # whichever actor runs it dies (and restarts)
        ray.kill(handle, no_restart=False)
    runner.join(60)
    result = out["result"]
    assert result.status is ResultStatus.error and "sandbox actor" in result.error
    # no hidden retry: the program was not run again; the restarted actors take the next calls
    again = _until_ok(lambda: tool.run(Plan(step_id=3, sub_goal="x", tool="python", args={"code": "print(6 * 7)"})))
    assert again.data["stdout"].strip() == "42"
    # every actor comes back as a new process (ray.kill is asynchronous: one may still answer for a moment)
    _wait(lambda: (info := _try(lambda: tool.sandbox.info(timeout_s=5))) and not pids & {i["pid"] for i in info}, 120, 0.5)


def test_a_sandbox_actor_dead_for_good_is_replaced(cluster):
    import ray

    s = _settings(cluster)
    pool = SandboxPool(s.ray, "auto")  # its own queue: slot 0 is taken first
    _kill_for_good(pool.slots[0].handle)
    out = pool.run_python("print(1)", SandboxLimits())
    assert out.status == "error" and out.mechanism == "ray" and "sandbox actor agentflow-sandbox-auto-0" in out.message
    assert pool.run_python("print(1)", SandboxLimits()).stdout == "1\n"  # slot 1
    assert _wait(lambda: pool.run_python("print(2)", SandboxLimits()).stdout == "2\n")  # slot 0, a new actor


def test_the_search_actor_loads_once_and_a_dead_one_is_an_error_result(cluster, corpus_file):
    import ray

    from tasks.modules.executor import execute
    from tasks.modules.tools import get_tool

    s = _settings(cluster, corpus_file)
    tool = get_tool("search", s)
    assert isinstance(tool.index, RemoteSearchIndex)
    plan = Plan(step_id=1, sub_goal="x", tool="search", args={"query": "Lake Orvanne depth"})
    first = execute(plan, s)
    assert first.status is ResultStatus.ok and first.source.uri == "corpus://d1"
    info = tool.index.info()
    assert execute(plan, s).status is ResultStatus.ok
    assert tool.index.info()["pid"] == info["pid"]  # the corpus was loaded once, by one actor

    _kill_for_good(tool.index.handle)
    dead = execute(plan, s)
    assert dead.status is ResultStatus.error and "search actor" in dead.error
    back = _until_ok(lambda: execute(plan, s))  # replaced for later calls
    assert back.source.uri == "corpus://d1" and tool.index.info()["pid"] != info["pid"]


# ------------------------------------------------------------------------------------------------ model servers


def test_model_servers_restart_crashed_servers_and_the_router_balances(cluster):
    import ray

    cfg = RayConfig(address=cluster.address, model_servers={"m": scripted_server_config(10, replicas=2)})
    with _servers(cfg) as routers:
        router = routers["m"]
        urls = []
        for _ in range(4):
            with router.lease() as url:
                urls.append(url)
        assert urls[0] != urls[1] and urls[:2] == urls[2:]  # round-robin when idle
        with router.lease() as a, router.lease() as b:
            assert a != b  # least loaded
        before = router.status()

        killed_pid = ray.get(router.replicas[0].kill_server.remote())
        assert killed_pid == before[0]["pid"]
        st = _wait(lambda: (x := ray.get(router.replicas[0].status.remote()))["restarts"] == 1 and x["healthy"] and x)
        assert st["url"] == before[0]["url"] and st["pid"] != killed_pid  # same port, new process

        ray.kill(router.replicas[1], no_restart=False)  # the actor itself dies and restarts
        old_server = before[1]["pid"]
        _wait(lambda: not Path(f"/proc/{old_server}").exists() or "Z" in Path(f"/proc/{old_server}/stat").read_text().split()[2])
        fresh = _wait(lambda: _try(lambda: ray.get(router.replicas[1].status.remote(), timeout=5)))
        assert fresh["healthy"] and fresh["actor_pid"] != before[1]["actor_pid"]
        for _ in range(4):
            with router.lease() as url:
                assert _healthy(url)


class _FakeReplica:
    """Stands in for a model-server actor handle: counts how often the router asks for its url."""

    def __init__(self, url: str, asked: list[str]):
        import ray

        replica = self

        class _BaseUrl:
            def remote(self):
                asked.append(url)
                if replica.dead:
                    from ray.exceptions import RayActorError

                    raise RayActorError()
                return ray.put(url)

        self.dead = False
        self.base_url = _BaseUrl()


def test_the_router_asks_a_replica_for_its_url_once_per_ttl_not_once_per_lease(cluster):
    from infra.runtime.model_server import ModelRouter

    asked: list[str] = []
    a, b = _FakeReplica("http://a/v1", asked), _FakeReplica("http://b/v1", asked)
    router = ModelRouter("m", [a, b], url_ttl_s=0.5)
    urls = []
    for _ in range(6):
        with router.lease() as url:
            urls.append(url)
    assert sorted(set(urls)) == ["http://a/v1", "http://b/v1"] and len(asked) == 2  # one Ray round trip per replica
    time.sleep(0.6)
    b.dead = True  # found out at the next check, after the ttl
    for _ in range(4):
        with router.lease() as url:
            assert url == "http://a/v1"
    assert router.leases == [7, 3]  # after the check b is no longer handed out
    a.dead = True
    time.sleep(0.6)
    with pytest.raises(ModelServerError, match="no replica"):
        with router.lease():
            pass


def test_a_question_s_settings_are_derived_once_per_replica_and_base_settings(cluster, tmp_path):
    from infra.runtime.services import RayRuntime

    class _Router:
        @contextlib.contextmanager
        def lease(self):
            yield "http://127.0.0.1:9/v1"

    base = _settings(cluster, model_servers={"m": scripted_server_config(10)})
    runtime = RayRuntime({"m": _Router()})
    with runtime.question_settings(base) as one, runtime.question_settings(base) as two:
        assert one is two and one.models.planner.base_url == "http://127.0.0.1:9/v1"
    other = base.model_copy(deep=True)
    other.budget.max_steps = base.budget.max_steps + 1
    with runtime.question_settings(other) as three:
        assert three is not one and three.budget.max_steps == base.budget.max_steps + 1


def _try(fn):
    try:
        return fn()
    except Exception:
        return None


def test_a_server_that_cannot_start_is_a_clear_error(cluster):
    cfg = RayConfig(address=cluster.address, max_restarts=0, model_servers={"bad": {
        "engine": "command", "command": ["{python}", "-c", "import sys; print('no model here'); sys.exit(3)"],
        "num_cpus": 0, "startup_timeout_s": 20}})
    with pytest.raises(ModelServerError, match="bad"):
        with _servers(cfg):
            pass


def test_killing_sandbox_and_model_actors_mid_batch_then_resuming_yields_every_question_once(cluster, tmp_path):
    import ray

    from flows.batch import InputReport, run_batch
    from flows.research import DIRECT_STEPS

    server = scripted_server_config(150, replicas=2)
    s = _settings(cluster, model_servers={"scripted": server})
    s = Settings.model_validate(s.model_dump() | {"storage": {"out": str(tmp_path / "out")}, "batch": {"concurrency": 2}})
    qs = _questions(12)
    qs = [q if q.question.startswith("Run:") else q.model_copy(update={"question": f"Run: print({i} + 1)"})
          for i, q in enumerate(qs)]
    report = InputReport(questions=qs)
    answers_dir = tmp_path / "out" / "chaos" / "answers"
    killed = []

    def chaos():
        _wait(lambda: answers_dir.is_dir() and len(list(answers_dir.glob("part-*"))) >= 2, 120, 0.05)
        router = routers["scripted"]
        ray.kill(router.replicas[0], no_restart=False)  # a model actor
        killed.append("model-actor")
        ray.get(router.replicas[1].kill_server.remote())  # a model server process
        killed.append("model-server")
        for handle in SandboxPool.connect(s.ray, "auto").handles:  # the sandbox actors
            ray.kill(handle, no_restart=False)
        killed.append("sandboxes")

    with _servers(s.ray) as routers:
        t = threading.Thread(target=chaos)
        t.start()
        first = run_batch(report, s, "chaos", log_dir=str(tmp_path / "logs"), progress=False, steps=DIRECT_STEPS)
        t.join(60)
        assert killed == ["model-actor", "model-server", "sandboxes"]
        assert first.done + first.failed == 12
        # The restarts take seconds (longer on a loaded machine): the resume starts once the actors serve again,
        # so the questions the kills cost are re-run, not lost to a restart still under way.
        def serving() -> bool:
            models = [_try(lambda r=r: ray.get(r.status.remote(), timeout=5)) for r in routers["scripted"].replicas]
            sandboxes = [_try(lambda h=h: ray.get(h.info.remote(), timeout=5)) for h in SandboxPool.connect(s.ray, "auto").handles]
            return all(m and m["healthy"] for m in models) and all(sandboxes)

        _wait(serving, 120, 0.5)
        clear_backend_cache()
        again = run_batch(report, s, "chaos", log_dir=str(tmp_path / "logs"), progress=False, steps=DIRECT_STEPS)
        # How many questions the kills cost depends on how long the restarts take (load); what must hold is
        # that the restarted actors serve the questions that come after them.
        late = [Question(id=f"late{i}", question=f"Run: print({i} + 100)", answer=str(i + 100)) for i in range(3)]
        after = run_batch(InputReport(questions=late), s, "after-chaos", log_dir=str(tmp_path / "logs"),
                          progress=False, steps=DIRECT_STEPS)
    assert again.skipped_existing == first.done and again.done == 12 - first.done
    answers = ResultStore(str(tmp_path / "out" / "chaos")).read_table("answers").to_pylist()
    assert sorted(a["task_id"] for a in answers) == [q.id for q in qs]  # every question exactly once
    assert sum(a["status"] == "answered" for a in answers) >= 2  # answered before the kills, kept
    assert after.done == 3
    late_answers = ResultStore(str(tmp_path / "out" / "after-chaos")).read_table("answers").to_pylist()
    assert sorted(a["status"] for a in late_answers) == ["answered"] * 3, late_answers


# ------------------------------------------------------------------------------------------------ engines


def _embedded_available() -> bool:
    try:
        import llama_cpp  # noqa: F401

        from infra.models import locate_embedded_model

        locate_embedded_model("smollm2-135m")
        return True
    except Exception:
        return False


@pytest.mark.skipif(not _embedded_available(), reason="llama-cpp-python or the smollm2-135m GGUF (agentflow models fetch) is not available")
def test_a_llama_cpp_server_actor_serves_the_embedded_model_to_the_openai_backend(cluster):
    from infra.models import build_backend
    from infra.runtime.settings import ModelConfig

    cfg = RayConfig(address=cluster.address, model_servers={"llama": {"engine": "llama_cpp", "model": "smollm2",
                                                                       "num_cpus": 0, "n_threads": 1}})
    with _servers(cfg) as routers, routers["llama"].lease() as url:
        backend = build_backend(ModelConfig(backend="openai", base_url=url, model="smollm2", timeout_s=120))
        c = backend.complete([{"role": "user", "content": "Name one colour."}], max_tokens=12, temperature=0.0)
        assert c.text and c.tokens_out > 0 and c.model == "smollm2"


def test_the_vllm_engine_is_the_same_actor_with_another_command():
    from infra.runtime.model_server import server_command
    from infra.runtime.settings import ModelServerConfig

    argv = server_command(ModelServerConfig(engine="vllm", model="qwen", model_path="Qwen/Qwen2.5-0.5B-Instruct",
                                            num_gpus=1, extra_args=["--gpu-memory-utilization", "0.5"]), "127.0.0.1", 9000)
    assert argv[1:] == ["serve", "Qwen/Qwen2.5-0.5B-Instruct", "--host", "127.0.0.1", "--port", "9000",
                        "--served-model-name", "qwen", "--max-model-len", "2048", "--gpu-memory-utilization", "0.5"]


def test_settings_refuse_a_role_served_twice():
    with pytest.raises(Exception, match="served by both"):
        RayConfig(model_servers={"a": {"roles": ["planner"]}, "b": {"roles": ["planner", "generator"]}})


# ------------------------------------------------------------------------------------------------ loopback


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def _is_loopback(addr: str, wildcard_ok: bool) -> bool:
    host = addr.rsplit(":", 1)[0].strip("[]")
    if host in ("*", "0.0.0.0", "::"):
        return wildcard_ok
    return host in ("::1", "::ffff:127.0.0.1") or host.startswith("127.")


def non_loopback_sockets(root: int) -> list[str]:
    """TCP sockets of `root`'s process tree bound to, listening on, or connected to anything but loopback."""
    pids = _descendants(root)
    lines = subprocess.run(["ss", "-tnpa"], capture_output=True, text=True, check=True).stdout.splitlines()[1:]
    bad = []
    for line in lines:
        owners = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        parts = line.split()
        if owners & pids and len(parts) >= 5 and not (_is_loopback(parts[3], False) and _is_loopback(parts[4], True)):
            bad.append(line)
    return bad


def test_a_local_instance_and_the_cluster_stay_on_loopback(cluster, tmp_path):
    """The cluster of this module, and a fresh local instance in a child process, talk to loopback only."""
    assert non_loopback_sockets(os.getpid()) == []
    script = (
        "import os, subprocess, sys, time\n"
        "from infra.runtime.cluster import ensure_ray\nfrom infra.runtime.services import shutdown_ray\n"
        "from infra.runtime.actors import SandboxPool\n"
        "from infra.tools.sandbox import SandboxLimits\n"
        "from infra.runtime.settings import RayConfig\n"
        "cfg = RayConfig(enabled=True, temp_dir='RAY_TMP', num_cpus=1)\n"
        "ensure_ray(cfg)\n"
        "assert SandboxPool.connect(cfg).run_python('print(5)', SandboxLimits()).stdout == '5\\n'\n"
        "time.sleep(2)\n"
        "from tests.test_ray import non_loopback_sockets\n"
        "print('BAD', non_loopback_sockets(os.getpid()))\n"
        "import ray; print('NODE', ray.nodes()[0]['NodeManagerAddress'])\n"
        "shutdown_ray()\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",) and not k.lower().endswith("_proxy")}
    with tempfile.TemporaryDirectory(prefix="afr-", dir="/tmp") as ray_tmp:  # a short path: unix sockets live there
        res = subprocess.run([sys.executable, "-c", script.replace("RAY_TMP", ray_tmp)], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "BAD []" in res.stdout and "NODE 127.0.0.1" in res.stdout, res.stdout
    assert not Path.home().joinpath(".ray", "auth_token").exists()


def test_roles_served_by_a_llama_cpp_server_sample_as_the_embedded_backend():
    import contextlib

    from infra.runtime.services import RayRuntime
    from infra.runtime.settings import load_settings

    class Router:
        @contextlib.contextmanager
        def lease(self):
            yield "http://127.0.0.1:9/v1"

    settings = load_settings(None, **{"ray.enabled": True, "ray.model_servers": {
        "llama": {"engine": "llama_cpp", "roles": ["planner"]}, "big": {"engine": "vllm", "roles": ["generator"]}}})
    with RayRuntime({"llama": Router(), "big": Router()}).question_settings(settings) as s:
        assert s.models.planner.backend == "openai" and s.models.planner.base_url == "http://127.0.0.1:9/v1"
        assert s.models.planner.extra_body == {"repeat_penalty": 1.0}  # llama.cpp's server would use 1.1
        assert s.models.generator.backend == "openai" and s.models.generator.extra_body == {}

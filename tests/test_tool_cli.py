"""`agentflow tool python --file`: hostile programs through the CLI, i.e. through the Executor's own path.

Every hostile program ends with status timeout, error or denied, a clear message, a non-zero exit,
and leaves nothing behind outside the sandbox. Isolation properties the process fallback does not
provide (see infra/tools/sandbox/) are skipped, with the reason, where bubblewrap cannot run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from flows.cli.tool import tool_app
from infra.tools import sandbox as sbx

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--set", "tools.python.timeout_s=2", "--set", "tools.python.memory_mb=128",
         "--set", "tools.python.max_output_bytes=10000", "--set", "tools.python.max_processes=16"]
BWRAP, BWRAP_WHY = sbx._probe("bwrap")
needs_bwrap = pytest.mark.skipif(not BWRAP, reason=f"bubblewrap cannot run here ({BWRAP_WHY}); the process fallback "
                                 "documents that it does not hide host files, network or processes")

_cli = typer.Typer()
_cli.add_typer(tool_app, name="tool")  # mounted as the lead mounts it: `agentflow tool ...`


def tool(tmp_path: Path, code: str, *extra: str, name: str = "prog.py") -> tuple[int, dict | None, str]:
    """Run `agentflow tool python --file <code> --json`; (exit code, Result as dict or None, output)."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    res = CliRunner().invoke(_cli, ["tool", "python", "--file", str(path), "--json", *SMALL, *extra])
    try:
        record = json.loads(res.stdout)
    except ValueError:
        record = None
    return res.exit_code, record, res.output


def hostile(tmp_path: Path, code: str, *extra: str, statuses=("timeout", "error", "denied")) -> dict:
    code_, r, output = tool(tmp_path, code, *extra)
    assert r is not None, output
    assert r["status"] in statuses, r
    assert code_ == 1, output
    assert r["error"] and len(r["error"]) < 400, r  # one clear sentence, not a dump
    return r


def _live_pids_with(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(name))
        except (OSError, IndexError):
            continue
    return found


# ------------------------------------------------------------------------------- the command itself


def test_ok_program_prints_its_result_and_exits_zero(tmp_path):
    code, r, _ = tool(tmp_path, "import sys\nprint(17 * 23)\nprint('note', file=sys.stderr)\n")
    assert code == 0 and r["status"] == "ok" and r["tool"] == "python"
    assert r["data"] == {"stdout": "391\n", "stderr": "note\n", "exit_code": 0, "truncated": False}
    assert r["source"]["uri"].startswith("sandbox://python/")
    path = tmp_path / "expr.py"
    path.write_text("17 * 23\n")  # a bare expression prints its value, as in a research run
    res = CliRunner().invoke(_cli, ["tool", "python", "--file", str(path)])
    assert res.exit_code == 0 and "391" in res.stdout and "ok" in res.stdout


def test_usage_errors_are_one_line_and_exit_2(tmp_path):
    runner = CliRunner()
    res = runner.invoke(_cli, ["tool", "python", "--file", str(tmp_path / "missing.py")])
    assert res.exit_code == 2 and "does not exist" in res.output and "Traceback" not in res.output
    res = runner.invoke(_cli, ["tool", "python", "--file", str(tmp_path)])
    assert res.exit_code == 2 and "not a regular file" in res.output
    (tmp_path / "latin1.py").write_bytes(b"print('caf\xe9')\n")
    res = runner.invoke(_cli, ["tool", "python", "--file", str(tmp_path / "latin1.py")])
    assert res.exit_code == 2 and "not UTF-8" in res.output
    (tmp_path / "ok.py").write_text("print(1)\n")
    res = runner.invoke(_cli, ["tool", "python", "--file", str(tmp_path / "ok.py"), "--set", "tools.python.timeout_s=-1"])
    assert res.exit_code == 2 and "tools.python.timeout_s" in res.output
    res = runner.invoke(_cli, ["tool", "python", "--file", str(tmp_path / "ok.py"), "--config", str(tmp_path / "no.yaml")])
    assert res.exit_code == 2 and "does not exist" in res.output


def test_config_decides_and_the_executor_refuses(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tools:\n  allow: [search]\n")
    code, r, _ = tool(tmp_path, "print('never runs')", "--config", str(cfg))
    assert code == 1 and r["status"] == "denied" and "allow-list" in r["error"]
    assert r["data"] is None
    code, r, _ = tool(tmp_path, "   \n\t\n")  # whitespace only: refused by the sandbox, nothing runs
    assert code == 1 and r["status"] == "denied"
    code, r, _ = tool(tmp_path, "x = 1\n" * 4000)  # longer than the tool card allows
    assert code == 1 and r["status"] == "error" and "invalid arguments" in r["error"]


# ------------------------------------------------------------------------------- resources


def test_infinite_loop_times_out(tmp_path):
    t0 = time.monotonic()
    r = hostile(tmp_path, "print('spinning', flush=True)\nwhile True:\n    pass\n", statuses=("timeout",))
    assert "2.0 s time limit" in r["error"] and r["data"]["stdout"] == "spinning\n"
    assert time.monotonic() - t0 < 6


def test_fork_bomb_is_contained(tmp_path):
    marker = f"forkbomb-{uuid.uuid4().hex}"
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    t0 = time.monotonic()
    hostile(tmp_path, f"import os, sys\nos.execv(sys.executable, [sys.executable, '-c', {bomb!r}, {marker!r}])\n",
            statuses=("timeout", "error"))
    assert time.monotonic() - t0 < 8
    time.sleep(0.2)
    assert _live_pids_with(marker) == []
    assert subprocess.run(["true"]).returncode == 0  # the host can still fork


def test_memory_bomb_is_an_error(tmp_path):
    r = hostile(tmp_path, "blocks = []\nwhile True:\n    blocks.append(bytearray(16 * 1024 * 1024))\n", statuses=("error",))
    assert "memory" in r["error"] and "MemoryError" in r["data"]["stderr"]


def test_gigabytes_of_output_are_cut_off(tmp_path):
    t0 = time.monotonic()
    r = hostile(tmp_path, "import sys\nline = 'y' * 1023 + '\\n'\nwhile True:\n    sys.stdout.write(line)\n",
                statuses=("error",))
    assert r["data"]["truncated"] and len(r["data"]["stdout"].encode()) == 10000
    assert "stdout" in r["error"]
    assert time.monotonic() - t0 < 8


# ------------------------------------------------------------------------------- filesystem


@needs_bwrap
@pytest.mark.parametrize("where", ["project", "home", "host_tmp", "etc"])
def test_writes_outside_the_working_dir_fail_and_leave_nothing(tmp_path, where):
    name = f"agentflow-escape-{uuid.uuid4().hex}"
    target = {"project": PROJECT_ROOT / name, "home": Path.home() / name, "host_tmp": tmp_path / name,
              "etc": Path("/etc") / name}[where]
    r = hostile(tmp_path, f"open({str(target)!r}, 'w').write('escaped')\n", statuses=("error",))
    assert "Error" in r["error"]  # the exception is named: FileNotFoundError, PermissionError, OSError
    assert not target.exists()


@needs_bwrap
def test_a_write_to_the_private_tmp_never_reaches_the_host(tmp_path):
    name = f"agentflow-escape-{uuid.uuid4().hex}"
    code, r, _ = tool(tmp_path, f"open('/tmp/{name}', 'w').write('x')\nopen('/tmp/{name}').read()\nraise SystemExit(5)\n")
    assert code == 1 and r["status"] == "error" and r["data"]["exit_code"] == 5
    assert not Path(f"/tmp/{name}").exists()


@needs_bwrap
def test_cannot_read_project_config_home_or_shadow(tmp_path):
    marker = f"planted-{uuid.uuid4().hex}"
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"# {marker}\ntools:\n  python:\n    timeout_s: 2\n")
    with tempfile.NamedTemporaryFile("w", dir=Path.home(), prefix=".agentflow-tool-test-", suffix=".txt") as home_file:
        home_file.write(marker)
        home_file.flush()
        for path in (cfg, PROJECT_ROOT / "pyproject.toml", Path(home_file.name), Path("/etc/shadow")):
            r = hostile(tmp_path, f"print(open({str(path)!r}).read())\n", "--config", str(cfg), statuses=("error",))
            assert marker not in json.dumps(r) and "[project]" not in r["data"]["stdout"] and "root:" not in r["data"]["stdout"]
            assert "FileNotFoundError" in r["error"] or "PermissionError" in r["error"]
        r = hostile(tmp_path, f"import os\nprint(os.listdir({str(PROJECT_ROOT)!r}))\n", statuses=("error",))


# ------------------------------------------------------------------------------- environment, processes


@needs_bwrap
def test_parent_environment_and_other_processes_are_invisible(tmp_path, monkeypatch):
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    monkeypatch.setenv("AGENTFLOW_PLANTED_SECRET", secret)
    r = hostile(tmp_path, "import os\nprint(os.environ['AGENTFLOW_PLANTED_SECRET'])\n", statuses=("error",))
    assert "KeyError" in r["error"]
    r = hostile(tmp_path, f"print(open('/proc/{os.getpid()}/environ', 'rb').read())\n", statuses=("error",))
    assert secret not in json.dumps(r)
    scan = """
    import os
    leaks = []
    for pid in os.listdir('/proc'):
        if pid.isdigit():
            try:
                if b's3cr3t' in open(f'/proc/{pid}/environ', 'rb').read():
                    leaks.append(pid)
            except OSError:
                pass
    pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
    raise SystemExit(f'leaks={leaks} pids={pids}')
    """
    r = hostile(tmp_path, scan, statuses=("error",))
    assert "leaks=[]" in r["data"]["stderr"] and secret not in json.dumps(r)
    pids = json.loads(r["data"]["stderr"].split("pids=")[1].strip())
    assert os.getpid() not in pids and max(pids) < 100  # its own small PID namespace, not the host's


@needs_bwrap
def test_no_network_not_even_a_listener_on_loopback(tmp_path):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    port = listener.getsockname()[1]
    try:
        r = hostile(tmp_path, f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'hi')\n",
                    statuses=("error",))
        assert "ConnectionRefusedError" in r["error"] or "OSError" in r["error"]
        r = hostile(tmp_path, "import socket\nsocket.create_connection(('203.0.113.7', 80), timeout=1)\n",
                    statuses=("error",))
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


@needs_bwrap
def test_background_process_does_not_outlive_the_call(tmp_path):
    marker = f"daemon-{uuid.uuid4().hex}"
    sleeper = "import time\ntime.sleep(30)\n"
    daemon = f"""
    import os, subprocess, sys, time
    subprocess.Popen([sys.executable, '-c', {sleeper!r}, {marker!r}], start_new_session=True)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, '-c', {sleeper!r}, {marker!r}])
        os._exit(0)
    """
    hostile(tmp_path, daemon + "time.sleep(60)\n", statuses=("timeout",))
    time.sleep(0.3)
    assert _live_pids_with(marker) == []
    # the same daemons from a program that exits at once: the call returns, the daemons die with it
    code, r, _ = tool(tmp_path, daemon + "print('spawned')\n")
    assert r["data"]["stdout"] == "spawned\n" and r["elapsed_ms"] < 4000
    time.sleep(0.3)
    assert _live_pids_with(marker) == []


def test_signals_to_other_processes_are_refused(tmp_path):
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    received: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda n, _f: received.append(n))
    try:
        code = f"""
        import os, signal
        os.kill({victim.pid}, signal.SIGKILL)
        os.kill({os.getpid()}, signal.SIGTERM)
        """
        r = hostile(tmp_path, code, statuses=("error",))
        assert "ProcessLookupError" in r["error"] or "PermissionError" in r["error"]
        # kill(-1): every process the program may signal; only the sandbox's own die (it included)
        r = hostile(tmp_path, "import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('survived')\n", statuses=("error",))
        time.sleep(0.2)
        assert victim.poll() is None and received == []
    finally:
        signal.signal(signal.SIGTERM, previous)
        victim.kill()
        victim.wait()

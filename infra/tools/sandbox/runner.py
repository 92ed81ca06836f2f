"""The host side of one run: per-call uids, starting and killing the child, capped output capture, outcomes.

Shared by both mechanisms: :func:`_execute` starts the argv in its own session, reads stdout and stderr
incrementally up to the caps, enforces the wall clock and cleans up; :func:`_outcome` turns what it saw
into a :class:`~infra.tools.sandbox.limits.SandboxOutcome`.
"""

from __future__ import annotations

import math
import os
import random
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass

import structlog

from infra.tools.sandbox.limits import _SETUP_EXIT, _SETUP_MARK, SandboxLimits, SandboxOutcome, Status

log = structlog.get_logger("infra.tools.sandbox")

# --------------------------------------------------------------------------------------------
# Shared runner
# --------------------------------------------------------------------------------------------


_UIDS_IN_USE: set[int] = set()
_UIDS_LOCK = threading.Lock()


def _pick_uid(uid_range: tuple[int, int]) -> int:
    """A uid no live process has and no concurrent call of this process holds; release it after."""
    lo, hi = uid_range
    for _ in range(64):
        uid = random.randrange(lo, hi)
        with _UIDS_LOCK:
            if uid in _UIDS_IN_USE:
                continue
            _UIDS_IN_USE.add(uid)
        if not _pids_of_uid(uid):
            return uid
        _release_uid(uid)
    raise RuntimeError("no free sandbox uid found")  # pragma: no cover


def _release_uid(uid: int | None) -> None:
    if uid is not None:
        with _UIDS_LOCK:
            _UIDS_IN_USE.discard(uid)


def _pids_of_uid(uid: int) -> list[int]:
    """Live (non-zombie) processes whose real or effective uid is ``uid`` (host view of /proc)."""
    pids = []
    try:
        entries = os.listdir("/proc")
    except OSError:  # pragma: no cover
        return pids
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"State:") and line.split()[1:2] in ([b"Z"], [b"X"]):
                        break  # a zombie: already dead, waiting to be reaped
                    if line.startswith(b"Uid:"):
                        ids = line.split()[1:3]
                        if str(uid).encode() in ids:
                            pids.append(int(name))
                        break
        except OSError:
            continue
    return pids


def _kill_uid(uid: int, rounds: int = 50) -> None:
    """SIGKILL every process of a per-call uid until none is left."""
    for _ in range(rounds):
        pids = _pids_of_uid(uid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)
    log.warning("sandbox_uid_survivors", uid=uid, pids=_pids_of_uid(uid))


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        proc.kill()
    except OSError:
        pass


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def _last_error_line(stderr: str) -> str:
    for line in reversed(stderr.strip().splitlines()):
        line = line.strip()
        if line:
            return line[:200]
    return ""


def _flood_threshold(cap: int) -> int:
    """Bytes on one stream after which a program is killed rather than merely truncated."""
    return max(4 * cap, cap + (1 << 20))


@dataclass
class _Run:
    returncode: int | None
    stdout: bytes
    stderr: bytes
    elapsed_ms: float
    truncated: bool
    timed_out: bool
    flooded: str | None  # which stream flooded


def _execute(
    argv: list[str],
    env: dict[str, str],
    limits: SandboxLimits,
    pass_fds: tuple[int, ...] = (),
    uid: int | None = None,
    cwd: str | None = None,
) -> _Run:
    """Start argv in its own session; collect capped output; enforce the wall clock; clean up."""
    cap = limits.max_output_bytes
    flood_at = _flood_threshold(cap)
    start = time.monotonic()
    deadline = start + limits.timeout_s
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        close_fds=True,
        pass_fds=pass_fds,
        start_new_session=True,
    )
    bufs = {"stdout": bytearray(), "stderr": bytearray()}
    totals = {"stdout": 0, "stderr": 0}
    timed_out = False
    flooded: str | None = None
    exited_at: float | None = None
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None
    for name, stream in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        os.set_blocking(stream.fileno(), False)
        sel.register(stream, selectors.EVENT_READ, name)
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 0.5:
                break  # the program exited; something it left behind holds the pipes: kill below
            wait = min(deadline - now, 0.1 if exited_at is not None else 0.25)
            for key, _ in sel.select(timeout=wait):
                name = key.data
                try:
                    chunk = os.read(key.fd, 1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                totals[name] += len(chunk)
                room = cap - len(bufs[name])
                if room > 0:
                    bufs[name] += chunk[:room]
                if totals[name] > flood_at and flooded is None:
                    flooded = name
            if flooded:
                break
        if timed_out or flooded or sel.get_map():
            _kill_group(proc)
        remaining = max(0.0, deadline - time.monotonic())
        try:
            proc.wait(timeout=remaining if not (timed_out or flooded) else 5)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            proc.wait(timeout=5)
    finally:
        sel.close()
        if proc.poll() is None:  # only on an unexpected exception
            _kill_group(proc)
            proc.wait(timeout=5)
        for stream in (proc.stdout, proc.stderr):
            stream.close()
        if uid is not None:
            _kill_uid(uid)
            _release_uid(uid)
    elapsed_ms = (time.monotonic() - start) * 1000.0
    rc = proc.returncode
    if rc is not None and rc < 0:
        rc = 128 - rc  # shell convention: 128 + signal
    return _Run(
        returncode=rc,
        stdout=bytes(bufs["stdout"]),
        stderr=bytes(bufs["stderr"]),
        elapsed_ms=elapsed_ms,
        truncated=totals["stdout"] > cap or totals["stderr"] > cap,
        timed_out=timed_out,
        flooded=flooded,
    )


def _outcome(run: _Run, limits: SandboxLimits, mechanism: str) -> SandboxOutcome:
    out = run.stdout.decode("utf-8", "replace")
    err = run.stderr.decode("utf-8", "replace")
    trunc = f"; output truncated to {limits.max_output_bytes} bytes per stream" if run.truncated else ""

    def make(status: Status, code: int | None, message: str) -> SandboxOutcome:
        return SandboxOutcome(status, code, out, err, round(run.elapsed_ms, 3), run.truncated, message, mechanism)

    if run.timed_out:
        return make("timeout", None, f"killed after {limits.timeout_s:.1f} s time limit{trunc}")
    if run.flooded:
        return make(
            "error",
            None,
            f"killed for writing more than {_flood_threshold(limits.max_output_bytes)} bytes to {run.flooded}; "
            f"output truncated to {limits.max_output_bytes} bytes per stream",
        )
    rc = run.returncode
    if rc == _SETUP_EXIT and _SETUP_MARK in err:
        line = next((ln for ln in err.splitlines() if _SETUP_MARK in ln), err)
        return make("error", None, f"the sandbox could not be set up ({line.split(_SETUP_MARK, 1)[1].strip()})")
    if rc == 0:
        return make("ok", 0, f"exited normally with code 0{trunc}")
    assert rc is not None
    if rc == 128 + signal.SIGXCPU:
        cpu_s = int(math.ceil(limits.timeout_s)) + 2
        return make("timeout", rc, f"killed after exceeding the CPU time limit ({cpu_s} s){trunc}")
    last = _last_error_line(err)
    if "MemoryError" in last or ("MemoryError" in err and rc == 1):
        return make("error", rc, f"ran out of memory (limit {limits.memory_mb} MB) and exited with code {rc}{trunc}")
    if rc > 128:
        return make("error", rc, f"killed by {_signal_name(rc - 128)} (exit code {rc}){trunc}")
    detail = f": {last}" if last else ""
    return make("error", rc, f"exited with code {rc}{detail}{trunc}")


def _denied(message: str, mechanism: str) -> SandboxOutcome:
    return SandboxOutcome("denied", None, "", "", 0.0, False, message, mechanism)


class _PerCallDir:
    """A fresh host directory holding the program (and generated /etc files); removed afterwards."""

    def __init__(self) -> None:
        self.path = tempfile.mkdtemp(prefix="agentflow-sbx-")
        os.chmod(self.path, 0o755)

    def write(self, name: str, data: bytes, mode: int = 0o644) -> str:
        p = os.path.join(self.path, name)
        os.makedirs(os.path.dirname(p), mode=0o755, exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
        os.chmod(p, mode)
        return p

    def __enter__(self) -> _PerCallDir:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

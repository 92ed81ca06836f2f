"""The plain-process fallback (``"process"``): limits, seccomp and whatever namespaces the kernel allows.

It probes, once per interpreter and privilege, the strongest isolation level that works here; the probe's
lock, program and limits are shared with the mechanism probes in :mod:`infra.tools.sandbox.factory`.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass

import structlog

from infra.tools.sandbox.child import _BOOTSTRAP, _base_python, _python_prefixes, _seccomp_filter, _under
from infra.tools.sandbox.limits import (
    DEFAULT_MAX_CODE_BYTES,
    DEFAULT_UID_RANGE,
    SandboxLimits,
    SandboxOutcome,
    SandboxUnavailable,
    _check_code,
    _rlimits,
    _sandbox_env,
)
from infra.tools.sandbox.runner import (
    _denied,
    _execute,
    _last_error_line,
    _outcome,
    _PerCallDir,
    _pick_uid,
    _pids_of_uid,
)

log = structlog.get_logger("infra.tools.sandbox")

# --------------------------------------------------------------------------------------------
# plain process fallback
# --------------------------------------------------------------------------------------------

_CLONE_NEWNS, _CLONE_NEWUTS, _CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
_CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000


@dataclass(frozen=True)
class _ProcessLevel:
    name: str
    unshare: int
    mounts: bool
    drop: bool
    seccomp: bool


class ProcessSandbox:
    """Fallback sandbox: a child process with limits, weaker than bubblewrap.

    What it does, at the strongest level the machine allows (``self.level`` says which one the
    probe chose; ``self.isolation`` lists the features in force):

    * always: the base interpreter in isolated mode (``-I -B``), a scrubbed environment, its own
      session and process group (killed as a whole on timeout), a fresh working directory that is
      removed afterwards, the same rlimits as bwrap (memory, CPU, file size, processes, files),
      output caps, and the seccomp filter (x86-64);
    * as root: a drop to a fresh unused uid/gid per call (so RLIMIT_NPROC works, the program cannot
      signal host processes, read root-only files such as ``/etc/shadow`` or write outside
      world-writable places), new network/PID/IPC/UTS/mount namespaces (no network; processes die
      with the call; a fresh ``/proc``), private size-capped tmpfs over ``/tmp``, ``/var/tmp`` and
      ``/dev/shm``, and tmpfs over ``/root`` and ``/home`` (the interpreter's prefix is bound back
      read-only where it lives there);
    * not root: new user/network/PID/IPC/UTS namespaces when unprivileged user namespaces are
      allowed, nothing more.

    What it does NOT isolate (use bwrap for these):

    * filesystem reads: the program can read every world-readable file of the host, including the
      project's own source and configuration (e.g. ``pyproject.toml`` by absolute path), ``/etc``,
      other users' world-readable files;
    * when the service is NOT root there is no privilege drop: the program runs as the service user
      and can read and WRITE everything that user can (its home, the project, ``/tmp``), read the
      service's ``/proc/<pid>/environ`` (secrets in the environment!) and, without the PID
      namespace, signal the service's processes and leave background processes behind;
    * without namespaces (kernel or container refuses them): the network is reachable and
      background processes that leave the process group may outlive the call (as root, every
      process of the per-call uid is still killed at the end);
    * the total memory of all its processes (RLIMIT_AS is per process) and host information in
      ``/proc``.
    """

    mechanism = "process"

    def __init__(
        self,
        *,
        python: str | None = None,
        tmp_mb: int = 64,
        max_file_mb: int = 64,
        max_code_bytes: int = DEFAULT_MAX_CODE_BYTES,
        uid_range: tuple[int, int] = DEFAULT_UID_RANGE,
        level: str | None = None,
    ) -> None:
        self.python = python or _base_python()
        self.prefixes = _python_prefixes(self.python)
        self.tmp_bytes = tmp_mb * 1024 * 1024
        self.max_file_bytes = max_file_mb * 1024 * 1024
        self.max_code_bytes = max_code_bytes
        self.uid_range = uid_range
        self.as_root = os.geteuid() == 0
        self._seccomp = _seccomp_filter()
        if level is None:
            chosen = _probe_process_level(self)
        else:
            chosen = next((lv for lv in self.levels() if lv.name == level), None)
            if chosen is None:
                raise ValueError(f"unknown level {level!r}; known: {[lv.name for lv in self.levels()]}")
        self.level: _ProcessLevel = chosen
        feats = []
        if chosen.unshare & _CLONE_NEWNET:
            feats.append("network")
        if chosen.unshare & _CLONE_NEWPID:
            feats.append("pid")
        if chosen.mounts:
            feats.append("private-tmp")
        if chosen.drop:
            feats.append("uid-drop")
        if chosen.seccomp and self._seccomp is not None:
            feats.append("seccomp")
        self.isolation: tuple[str, ...] = tuple(feats)

    def levels(self) -> list[_ProcessLevel]:
        """Configurations from strongest to weakest; the probe takes the first that works."""
        base_ns = _CLONE_NEWNET | _CLONE_NEWPID | _CLONE_NEWIPC | _CLONE_NEWUTS
        if self.as_root:
            return [
                _ProcessLevel("root-namespaces", base_ns | _CLONE_NEWNS, True, True, True),
                _ProcessLevel("root-netns", base_ns, False, True, True),
                _ProcessLevel("root-drop", 0, False, True, True),
                _ProcessLevel("root-plain", 0, False, False, True),
                _ProcessLevel("root-bare", 0, False, False, False),
            ]
        return [
            _ProcessLevel("user-namespaces", base_ns | _CLONE_NEWUSER, False, False, True),
            _ProcessLevel("user-plain", 0, False, False, True),
            _ProcessLevel("user-bare", 0, False, False, False),
        ]

    def _mounts(self) -> list[list]:
        m: list[list] = []
        for d in ("/tmp", "/var/tmp", "/dev/shm"):
            m.append(["tmpfs", d, "1777", self.tmp_bytes])
        hidden = [h for h in ("/root", "/home") if os.path.isdir(h) and not os.path.islink(h)]
        for h in hidden:
            m.append(["tmpfs", h, "0755", 1 << 20])
        for prefix in self.prefixes:
            if any(_under(prefix, h) for h in hidden):
                m.append(["rbind", prefix])
        for h in hidden:
            m.append(["ro", h])
        m.append(["proc", "/proc"])
        return m

    def run_python(self, code: str, limits: SandboxLimits) -> SandboxOutcome:
        data, why = _check_code(code, self.max_code_bytes)
        if data is None:
            return _denied(why, self.mechanism)
        return self._run(data, limits, self.level)

    def _run(self, data: bytes, limits: SandboxLimits, level: _ProcessLevel) -> SandboxOutcome:
        uid = _pick_uid(self.uid_range) if (self.as_root and level.drop) else None
        nproc = limits.max_processes
        if not self.as_root and not (level.unshare & _CLONE_NEWUSER):
            # RLIMIT_NPROC counts all the service user's processes here: best effort
            nproc = len(_pids_of_uid(os.getuid())) + limits.max_processes
        with _PerCallDir() as call_dir:
            program = call_dir.write("program.py", data)
            if level.mounts:
                # the bootstrap copies the program into the private /tmp before hiding the host's
                workdir, home, target = "/tmp/work", "/tmp/work", "/tmp/.sandbox/program.py"
                make_wd = True
            else:
                workdir = os.path.join(call_dir.path, "work")
                os.mkdir(workdir, 0o700)
                home, target, make_wd = workdir, None, False
            cfg = {
                "program": program,
                "copy_program_to": target,
                "workdir": workdir,
                "make_workdir": make_wd,
                "uid": uid,
                "chown_workdir": uid is not None,
                "unshare": level.unshare,
                "mounts": self._mounts() if level.mounts else [],
                "pdeathsig": True,
                "python": self.python,
                "env": _sandbox_env(home),
                "rlimits": _rlimits(limits, self.max_file_bytes, nproc),
                "seccomp": self._seccomp.hex() if (level.seccomp and self._seccomp) else None,
            }
            argv = [self.python, "-I", "-S", "-c", _BOOTSTRAP, json.dumps(cfg)]
            run = _execute(argv, _sandbox_env(home), limits, uid=uid, cwd=call_dir.path)
        return _outcome(run, limits, self.mechanism)


# --------------------------------------------------------------------------------------------
# probing the process level
# --------------------------------------------------------------------------------------------

_PROBE_LOCK = threading.Lock()
_PROCESS_LEVEL: dict[tuple, _ProcessLevel] = {}
_PROBE_CODE = "import os, sys\nprint('sandbox-probe', sys.version_info[0], os.getuid())\n"
_PROBE_LIMITS = SandboxLimits(timeout_s=15.0, memory_mb=256, max_output_bytes=4096, max_processes=8)


def _probe_process_level(sb: ProcessSandbox) -> _ProcessLevel:
    key = (sb.python, sb.as_root)
    with _PROBE_LOCK:
        if key in _PROCESS_LEVEL:
            return _PROCESS_LEVEL[key]
    last = ""
    for level in sb.levels():
        out = sb._run(_PROBE_CODE.encode(), _PROBE_LIMITS, level)
        dropped = out.stdout.split()[-1:] != ["0"]
        if out.status == "ok" and "sandbox-probe" in out.stdout and (dropped or not level.drop):
            if level != sb.levels()[0]:
                log.warning("sandbox_process_weaker_level", level=level.name, reason=last)
            with _PROBE_LOCK:
                _PROCESS_LEVEL[key] = level
            return level
        last = f"{level.name}: {_last_error_line(out.stderr) or out.message}"
    raise SandboxUnavailable(f"even a plain subprocess sandbox cannot start here ({last})")

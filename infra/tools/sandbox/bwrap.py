"""The bubblewrap mechanism (``"bwrap"``): a filesystem built from nothing and fresh namespaces.

See the package's :mod:`infra.tools.sandbox.factory` docstring for exactly what is exposed inside.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import structlog

from infra.tools.sandbox.child import _BOOTSTRAP, _base_python, _python_prefixes, _seccomp_filter
from infra.tools.sandbox.limits import (
    _INSTALL_HINT,
    DEFAULT_MAX_CODE_BYTES,
    DEFAULT_UID_RANGE,
    SandboxLimits,
    SandboxOutcome,
    SandboxUnavailable,
    _check_code,
    _rlimits,
    _sandbox_env,
)
from infra.tools.sandbox.runner import _denied, _execute, _last_error_line, _outcome, _PerCallDir, _pick_uid

log = structlog.get_logger("infra.tools.sandbox")

# --------------------------------------------------------------------------------------------
# bubblewrap
# --------------------------------------------------------------------------------------------


class BubblewrapSandbox:
    """Full isolation with bubblewrap; see the module docstring for exactly what is exposed.

    Does not isolate: CPU time beyond the limits (no CPU share), the total memory of all the
    program's processes (RLIMIT_AS is per process; tmpfs/pipes/memfd kernel memory is bounded only
    by the tmpfs sizes and file-size limit, not by a cgroup), host-wide information in
    ``/proc`` (cpuinfo, meminfo, uptime, kernel version), and kernel vulnerabilities reachable
    through the allowed syscalls.
    """

    mechanism = "bwrap"

    def __init__(
        self,
        *,
        bwrap_path: str | None = None,
        python: str | None = None,
        work_dir_mb: int = 64,
        tmp_mb: int = 64,
        max_file_mb: int = 64,
        max_code_bytes: int = DEFAULT_MAX_CODE_BYTES,
        uid_range: tuple[int, int] = DEFAULT_UID_RANGE,
    ) -> None:
        found = bwrap_path or shutil.which("bwrap") or ("/usr/bin/bwrap" if os.path.exists("/usr/bin/bwrap") else None)
        if not found or not os.access(found, os.X_OK):
            raise SandboxUnavailable(f"bubblewrap (bwrap) is not installed: {_INSTALL_HINT}")
        self.bwrap = found
        self.python = python or _base_python()
        self.prefixes = _python_prefixes(self.python)
        self.work_dir_bytes = work_dir_mb * 1024 * 1024
        self.tmp_bytes = tmp_mb * 1024 * 1024
        self.max_file_bytes = max_file_mb * 1024 * 1024
        self.max_code_bytes = max_code_bytes
        self.uid_range = uid_range
        self.as_root = os.geteuid() == 0
        self._seccomp = _seccomp_filter()

    # -- argv -----------------------------------------------------------------------------
    def _argv(
        self, call_dir: _PerCallDir, uid: int | None, seccomp_fd: int | None, cfg: dict, info_fd: int | None = None
    ) -> list[str]:
        a: list[str] = [self.bwrap]
        if self.as_root:
            # No user namespace: the program must run as a real unprivileged uid so RLIMIT_NPROC
            # counts; the bootstrap keeps only setuid/setgid to get there.
            a += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
            a += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            a += ["--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534"]
        a += ["--hostname", "sandbox", "--die-with-parent", "--new-session", "--clearenv"]
        for k, v in _sandbox_env("/work").items():
            a += ["--setenv", k, v]
        a += ["--ro-bind", "/usr", "/usr"]
        for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(d):
                a += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                a += ["--ro-bind", d, d]
        for prefix in self.prefixes:
            parts = Path(prefix).parts[1:]
            for i in range(1, len(parts)):
                a += ["--perms", "0755", "--dir", "/" + "/".join(parts[:i])]
            a += ["--ro-bind", prefix, prefix]
        a += ["--perms", "0755", "--dir", "/etc"]
        a += ["--ro-bind", os.path.join(call_dir.path, "etc/passwd"), "/etc/passwd"]
        a += ["--ro-bind", os.path.join(call_dir.path, "etc/group"), "/etc/group"]
        a += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
        a += ["--ro-bind-try", "/etc/localtime", "/etc/localtime"]
        a += ["--perms", "0755", "--dir", "/sandbox"]
        a += ["--ro-bind", os.path.join(call_dir.path, "program.py"), "/sandbox/program.py"]
        a += ["--proc", "/proc", "--dev", "/dev"]
        a += ["--perms", "1777", "--size", str(self.tmp_bytes), "--tmpfs", "/dev/shm"]
        a += ["--perms", "1777", "--size", str(self.tmp_bytes), "--tmpfs", "/tmp"]
        a += ["--perms", "1777", "--size", str(self.work_dir_bytes), "--tmpfs", "/work"]
        a += ["--remount-ro", "/", "--chdir", "/work"]
        if seccomp_fd is not None:
            a += ["--seccomp", str(seccomp_fd)]
        if info_fd is not None:
            a += ["--info-fd", str(info_fd)]
        a += ["--", self.python, "-I", "-S", "-c", _BOOTSTRAP, json.dumps(cfg)]
        return a

    def run_python(self, code: str, limits: SandboxLimits) -> SandboxOutcome:
        data, why = _check_code(code, self.max_code_bytes)
        if data is None:
            return _denied(why, self.mechanism)
        uid = _pick_uid(self.uid_range) if self.as_root else None
        cfg = {
            "program": "/sandbox/program.py",
            "workdir": "/work",
            "uid": uid,
            "chown_workdir": False,  # /work is a 1777 tmpfs; the bootstrap holds no CAP_CHOWN
            "python": self.python,
            "env": _sandbox_env("/work"),
            "rlimits": _rlimits(limits, self.max_file_bytes, limits.max_processes),
        }
        shown_uid = uid if uid is not None else 65534
        passwd = (
            "root:x:0:0:root:/:/usr/sbin/nologin\n"
            f"sandbox:x:{shown_uid}:{shown_uid}:sandbox:/work:/usr/sbin/nologin\n"
        )
        group = f"root:x:0:\nsandbox:x:{shown_uid}:\n"
        with _PerCallDir() as call_dir:
            call_dir.write("program.py", data)
            call_dir.write("etc/passwd", passwd.encode())
            call_dir.write("etc/group", group.encode())
            fds: list[int] = []
            try:
                rfd = None
                if self._seccomp is not None:
                    rfd, wfd = os.pipe()
                    fds.append(rfd)
                    os.write(wfd, self._seccomp)
                    os.close(wfd)
                info_r, info_w = os.pipe()
                started_r, started_w = os.pipe()
                fds += [info_r, info_w, started_r, started_w]
                cfg["started_fd"] = started_w
                argv = self._argv(call_dir, uid, rfd, cfg, info_w)
                run = _execute(
                    argv,
                    {"PATH": "/usr/bin:/bin"},
                    limits,
                    pass_fds=tuple(fd for fd in (rfd, info_w, started_w) if fd is not None),
                    uid=uid,
                    cwd="/",
                )
                _await_namespace_end(info_r)
                os.set_blocking(started_r, False)
                try:
                    started = os.read(started_r, 1) == b"1"
                except BlockingIOError:
                    started = False
            finally:
                for fd in fds:
                    os.close(fd)
        if not started and not run.timed_out:
            err = run.stderr.decode("utf-8", "replace")
            detail = _last_error_line(err) or f"bwrap exited with code {run.returncode}"
            return SandboxOutcome(
                "error", None, "", err, round(run.elapsed_ms, 3), False,
                f"the sandbox could not be set up ({detail})", self.mechanism,
            )
        return _outcome(run, limits, self.mechanism)


def _await_namespace_end(info_r: int, timeout_s: float = 5.0) -> bool:
    """Wait until the sandbox's PID 1 is gone, i.e. the kernel has killed every process in it.

    bwrap reports the host pid of the namespace's init on --info-fd. Once that process is gone
    or a zombie, zap_pid_ns_processes() has finished: nothing of the call is left running.
    Returns False when bwrap never reported a child (it failed before starting anything).
    """
    os.set_blocking(info_r, False)
    try:
        raw = os.read(info_r, 1 << 16)
        child = int(json.loads(raw.decode())["child-pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False  # bwrap never got that far (setup error): nothing was started
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            with open(f"/proc/{child}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in (b"Z", b"X"):
            return True
        time.sleep(0.005)
    log.warning("sandbox_namespace_slow_to_end", child_pid=child)
    return True

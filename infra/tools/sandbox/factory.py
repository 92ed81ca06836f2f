"""Sandboxes for the Executor's ``python`` tool: run untrusted Python source, return data.

Two mechanisms, one interface (:class:`Sandbox`):

``BubblewrapSandbox`` (mechanism ``"bwrap"``, preferred)
    The program runs under ``bwrap`` (bubblewrap) with the base interpreter in isolated mode
    (``python3 -I -B``) and sees a filesystem built from nothing: read-only binds of ``/usr``, the
    ``/bin``-``/lib*`` links and the interpreter's own install prefix (only that prefix, e.g.
    ``/root/.pyenv/versions/3.11.7``, not the home around it), a generated ``/etc/passwd`` and
    ``/etc/group``, ``/etc/ld.so.cache``, a fresh ``/proc`` and a minimal ``/dev``. The only writable
    places are size-capped tmpfs mounts: ``/work`` (cwd and ``HOME``), ``/tmp`` and ``/dev/shm``;
    the root is remounted read-only. The project, the service user's home, ``/etc/shadow`` and
    the rest of the host filesystem do not exist inside. New IPC, PID, network, UTS (and cgroup)
    namespaces: no network at all (only a private loopback), no view of or signals to host
    processes, and every process of the program dies with the sandbox's PID 1 when the program
    exits or is killed. The environment is cleared (PATH, HOME, LANG, LC_ALL, PYTHONDONTWRITEBYTECODE,
    MALLOC_ARENA_MAX only). A seccomp filter (x86-64) refuses namespace, mount, ptrace, keyring,
    bpf, perf, userfaultfd, io_uring and module syscalls.

    Privileges: when the service runs as root, bwrap runs without a user namespace (so the kernel
    counts the program's processes against a real unprivileged uid) and keeps only CAP_SETUID and
    CAP_SETGID for a tiny bootstrap, which sets the resource limits and drops to a fresh,
    otherwise unused uid/gid (one per call, from a high range) before the program's interpreter is
    started: the program never runs with any capability, and ``RLIMIT_NPROC`` is effective. When
    the service is not root, bwrap creates a user namespace and the program runs as uid 65534
    inside it.

``ProcessSandbox`` (mechanism ``"process"``, fallback when bwrap is missing or does not work)
    A plain child process with the same resource limits, a scrubbed environment, a fresh working
    directory, its own session, the same seccomp filter (x86-64) and, where the kernel lets it,
    namespaces set up through ``unshare(2)`` by a small bootstrap. See its docstring for what it
    does NOT isolate (notably: reads of world-readable files such as the project's source, and,
    when the service is not root, everything the service user can read or write).

Resource limits (both mechanisms; set by the bootstrap inside the sandbox, never by a
``preexec_fn``): ``RLIMIT_AS`` = ``memory_mb`` (per process: an allocation past it raises
``MemoryError``), ``RLIMIT_CPU`` a second or two above the timeout, ``RLIMIT_FSIZE`` (each file),
``RLIMIT_NPROC`` = ``max_processes`` (fork bombs get ``EAGAIN``), ``RLIMIT_NOFILE``, ``RLIMIT_CORE`` = 0.
The wall-clock timeout kills the whole sandbox (process group, PID namespace, and every process of
the per-call uid). stdout and stderr are read incrementally; at most ``max_output_bytes`` of each
are kept (``truncated=True`` when more came), and a program that keeps writing far past the cap
is killed.

Outcome statuses:
  ``ok``      the program exited with code 0.
  ``error``   it exited non-zero, was killed by a signal, by its memory limit, or for flooding
              its output, or the sandbox could not be set up (``exit_code`` None then).
  ``timeout`` it was killed at the wall-clock limit or by its CPU-time limit.
  ``denied``  the sandbox refused to run it at all: empty/whitespace-only code, code larger than
              ``max_code_bytes`` (256 KiB by default), code containing NUL bytes or text that
              cannot be encoded as UTF-8. Nothing was executed.

``exit_code`` follows the shell convention: 0-255, and 128+N when the program died of signal N.
"""

from __future__ import annotations

from typing import Literal

import structlog

from infra.tools.sandbox.bwrap import BubblewrapSandbox
from infra.tools.sandbox.limits import _INSTALL_HINT, Sandbox, SandboxUnavailable
from infra.tools.sandbox.process import _PROBE_CODE, _PROBE_LIMITS, _PROBE_LOCK, ProcessSandbox
from infra.tools.sandbox.runner import _last_error_line

log = structlog.get_logger("infra.tools.sandbox")

# --------------------------------------------------------------------------------------------
# probing and selection
# --------------------------------------------------------------------------------------------

_PROBES: dict[str, tuple[bool, str]] = {}


def _probe_bwrap() -> tuple[bool, str]:
    try:
        sb = BubblewrapSandbox()
    except SandboxUnavailable as e:
        return False, str(e)
    out = sb.run_python(_PROBE_CODE, _PROBE_LIMITS)
    if out.status == "ok" and "sandbox-probe" in out.stdout:
        return True, "ok"
    detail = _last_error_line(out.stderr) or out.message
    return False, f"bubblewrap is installed but cannot start a sandbox here ({detail}); {_INSTALL_HINT}"


def _probe(kind: str) -> tuple[bool, str]:
    with _PROBE_LOCK:
        if kind in _PROBES:
            return _PROBES[kind]
    if kind == "bwrap":
        result = _probe_bwrap()
    else:
        try:
            ProcessSandbox()
            result = (True, "ok")
        except SandboxUnavailable as e:
            result = (False, str(e))
    with _PROBE_LOCK:
        _PROBES[kind] = result
    return result


def available_mechanisms() -> list[str]:
    """Mechanisms that work on this machine, strongest first (probed once per process, cached)."""
    return [k for k in ("bwrap", "process") if _probe(k)[0]]


def make_sandbox(kind: Literal["auto", "bwrap", "process"] = "auto") -> Sandbox:
    """A sandbox of the requested kind.

    ``auto``: bubblewrap when it works here, else the process fallback (with a logged warning).
    ``bwrap``: raises :class:`SandboxUnavailable` (with install instructions) when it does not work.
    """
    if kind not in ("auto", "bwrap", "process"):
        raise ValueError(f"unknown sandbox kind {kind!r}; use 'auto', 'bwrap' or 'process'")
    if kind in ("auto", "bwrap"):
        ok, why = _probe("bwrap")
        if ok:
            return BubblewrapSandbox()
        if kind == "bwrap":
            raise SandboxUnavailable(why)
        log.warning(
            "sandbox_fallback",
            mechanism="process",
            reason=why,
            detail="python tool runs without filesystem isolation; see ProcessSandbox docstring",
        )
    ok, why = _probe("process")
    if not ok:
        raise SandboxUnavailable(why)
    return ProcessSandbox()

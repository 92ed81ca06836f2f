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

import errno
import json
import math
import os
import random
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import structlog

__all__ = [
    "BubblewrapSandbox",
    "ProcessSandbox",
    "Sandbox",
    "SandboxLimits",
    "SandboxOutcome",
    "SandboxUnavailable",
    "available_mechanisms",
    "make_sandbox",
]

log = structlog.get_logger("infra.sandbox")

Status = Literal["ok", "error", "timeout", "denied"]

#: Code larger than this is refused (``denied``) unless a sandbox is built with another value.
DEFAULT_MAX_CODE_BYTES = 256 * 1024
#: The per-call uids used when the service is root: fresh, high, and never a real account.
DEFAULT_UID_RANGE = (1_500_000_000, 1_500_000_000 + (1 << 24))
#: Exit code the bootstrap uses when it cannot set the sandbox up (with a marked stderr line).
_SETUP_EXIT = 125
_SETUP_MARK = "agentflow-sandbox: setup failed: "
_INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`, Fedora: `dnf install bubblewrap`) "
    "and make sure user namespaces are allowed when not running as root "
    "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0)"
)


class SandboxUnavailable(RuntimeError):
    """The requested sandbox mechanism cannot run on this machine; the message says how to fix it."""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits for one run. Validated on construction (a nonsensical limit raises ValueError)."""

    timeout_s: float = 10.0
    memory_mb: int = 512
    max_output_bytes: int = 65536  # stdout and stderr each capped; excess dropped, truncated=True
    max_processes: int = 16  # fork-bomb cap (RLIMIT_NPROC, threads count too)

    def __post_init__(self) -> None:
        if not (isinstance(self.timeout_s, (int, float)) and 0 < self.timeout_s <= 24 * 3600):
            raise ValueError(f"timeout_s must be in (0, 86400], got {self.timeout_s!r}")
        if not (isinstance(self.memory_mb, int) and 32 <= self.memory_mb <= 1 << 20):
            raise ValueError(f"memory_mb must be an int >= 32 (Python needs ~30 MB to start), got {self.memory_mb!r}")
        if not (isinstance(self.max_output_bytes, int) and self.max_output_bytes >= 0):
            raise ValueError(f"max_output_bytes must be an int >= 0, got {self.max_output_bytes!r}")
        if not (isinstance(self.max_processes, int) and 1 <= self.max_processes <= 4096):
            raise ValueError(f"max_processes must be an int in [1, 4096], got {self.max_processes!r}")


@dataclass(frozen=True)
class SandboxOutcome:
    status: Status  # ok = exit code 0
    exit_code: int | None
    stdout: str
    stderr: str
    elapsed_ms: float
    truncated: bool
    message: str  # one clear human sentence, e.g. "killed after 10.0 s time limit"
    mechanism: str  # "bwrap" or "process"


@runtime_checkable
class Sandbox(Protocol):
    mechanism: str

    def run_python(self, code: str, limits: SandboxLimits) -> SandboxOutcome: ...


# --------------------------------------------------------------------------------------------
# Interpreter discovery
# --------------------------------------------------------------------------------------------


def _base_python() -> str:
    """The base interpreter (not a venv's wrapper), as a real path."""
    ver = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    candidates = [
        getattr(sys, "_base_executable", None),
        os.path.join(sys.base_exec_prefix, "bin", ver),
        os.path.join(sys.base_prefix, "bin", ver),
        os.path.join(sys.base_prefix, "bin", "python3"),
    ]
    for cand in candidates:
        if cand:
            real = os.path.realpath(cand)
            if os.path.isfile(real) and os.access(real, os.X_OK):
                return real
    raise SandboxUnavailable(f"cannot find the base Python interpreter under {sys.base_prefix!r}")


def _python_prefixes(python: str) -> list[str]:
    """Directories the interpreter needs beyond /usr and /lib*: its install prefix(es)."""
    found: list[str] = []
    for p in (sys.base_prefix, sys.base_exec_prefix, os.path.dirname(os.path.dirname(python))):
        real = os.path.realpath(p)
        if real in ("/", "") or _under(real, "/usr"):
            continue
        if real not in found:
            found.append(real)
    # a prefix inside another prefix needs no bind of its own
    return [p for p in found if not any(q != p and _under(p, q) for q in found)]


def _under(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root + "/")


# --------------------------------------------------------------------------------------------
# seccomp: a classic-BPF filter, x86-64 only (other architectures run without it)
# --------------------------------------------------------------------------------------------

_AUDIT_ARCH_X86_64 = 0xC000003E
_X86_64_DENY = {  # syscall numbers from asm/unistd_64.h
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
    "add_key": 248, "request_key": 249, "keyctl": 250,
    "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
    "delete_module": 176, "open_by_handle_at": 304,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "mount_setattr": 442,
}
_X86_64_CLONE, _X86_64_CLONE3 = 56, 435
# CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET (NEWTIME=0x80 is the exit-signal byte for clone)
_CLONE_NS_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000


def _seccomp_filter() -> bytes | None:
    """The BPF program (struct sock_filter[]), or None where the architecture is not supported."""
    if os.uname().machine not in ("x86_64", "amd64"):
        return None
    ld_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow = 0x7FFF0000
    eperm = 0x00050000 | errno.EPERM
    enosys = 0x00050000 | errno.ENOSYS
    prog: list[tuple[int, int, int, int]] = [
        (ld_abs, 0, 0, 4),  # seccomp_data.arch
        (jeq, 1, 0, _AUDIT_ARCH_X86_64),
        (ret, 0, 0, eperm),  # any other ABI (i386 int 0x80): refuse everything
        (ld_abs, 0, 0, 0),  # seccomp_data.nr
        (jge, 0, 1, 0x40000000),
        (ret, 0, 0, eperm),  # x32 ABI
    ]
    for nr in sorted(_X86_64_DENY.values()):
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, eperm)]
    prog += [(jeq, 0, 1, _X86_64_CLONE3), (ret, 0, 0, enosys)]  # libc falls back to clone()
    prog += [
        (jeq, 0, 3, _X86_64_CLONE),
        (ld_abs, 0, 0, 16),  # low 32 bits of args[0] (flags)
        (jset, 0, 1, _CLONE_NS_FLAGS),
        (ret, 0, 0, eperm),
        (ret, 0, 0, allow),
    ]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


# --------------------------------------------------------------------------------------------
# The bootstrap: runs first inside the sandbox (python -I -S -c), configured by one JSON arg.
# It sets up namespaces (process mechanism), limits, drops privileges, then execs the program.
# --------------------------------------------------------------------------------------------

_BOOTSTRAP = r'''
import json, os, sys, resource, signal
cfg = json.loads(sys.argv[1])
if cfg.get("started_fd") is not None:  # tell the host the sandbox itself is up
    try:
        os.write(cfg["started_fd"], b"1")
        os.close(cfg["started_fd"])
    except OSError:
        pass
def die(what, exc=None):
    msg = __SETUP_MARK__ + what + (": " + str(exc) if exc else "") + "\n"
    os.write(2, msg.encode("utf-8", "replace")); os._exit(__SETUP_EXIT__)
def libc():
    import ctypes
    return ctypes, ctypes.CDLL(None, use_errno=True)
def check(rc, what):
    if rc != 0:
        import ctypes
        e = ctypes.get_errno(); die(what, OSError(e, os.strerror(e)))
def mount(src, dst, fstype, flags, data):
    ct, lc = libc()
    enc = lambda s: s.encode() if s is not None else None
    check(lc.mount(enc(src), enc(dst), enc(fstype), ct.c_ulong(flags), enc(data)), "mount " + dst)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
program = cfg["program"]
source = None
if cfg.get("copy_program_to"):
    with open(program, "rb") as f:
        source = f.read()
uid = cfg.get("uid")
ns = cfg.get("unshare", 0)
if ns:
    ct, lc = libc()
    check(lc.unshare(ct.c_int(ns)), "unshare")
    if ns & 0x10000000:  # CLONE_NEWUSER: identity map of the service user
        try:
            with open("/proc/self/setgroups", "w") as f: f.write("deny")
            with open("/proc/self/uid_map", "w") as f: f.write("%d %d 1" % (os.getuid(), os.getuid()))
            with open("/proc/self/gid_map", "w") as f: f.write("%d %d 1" % (os.getgid(), os.getgid()))
        except OSError as e:
            die("user namespace map", e)
    if ns & 0x00020000:
        mount(None, "/", None, MS_REC | MS_PRIVATE, None)
if ns & 0x20000000:  # CLONE_NEWPID: the next child is PID 1; all others die with it
    pid = os.fork()
    if pid:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(s, lambda n, f: os.kill(pid, signal.SIGKILL))
        while True:
            try:
                _, st = os.waitpid(pid, 0)
                break
            except ChildProcessError:
                os._exit(__SETUP_EXIT__)
            except InterruptedError:
                continue
        os._exit(os.WEXITSTATUS(st) if os.WIFEXITED(st) else 128 + os.WTERMSIG(st))
if cfg.get("mounts"):
    if not ns & 0x00020000:
        die("mounts requested without a private mount namespace")  # never touch the host's mounts
    os.umask(0o022)
    # open what will be bound back BEFORE anything hides it; bind from /proc/self/fd/N afterwards
    keep = {}
    for spec in cfg["mounts"]:
        if spec[0] == "rbind":
            try:
                keep[spec[1]] = os.open(spec[1], os.O_PATH | os.O_DIRECTORY)
            except OSError as e:
                die("open " + spec[1], e)
    for spec in cfg["mounts"]:
        kind, dst = spec[0], spec[1]
        if kind == "tmpfs":
            if os.path.isdir(dst) and not os.path.islink(dst):
                mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NODEV, "mode=%s,size=%d" % (spec[2], spec[3]))
        elif kind == "rbind":
            try:
                os.makedirs(dst, mode=0o755, exist_ok=True)
            except OSError as e:
                die("mkdir " + dst, e)
            mount("/proc/self/fd/%d" % keep[dst], dst, None, MS_BIND | MS_REC, None)
            mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
        elif kind == "ro":
            mount(None, dst, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
        elif kind == "proc":
            mount("proc", dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    for fd in keep.values():
        os.close(fd)
wd = cfg["workdir"]
try:
    if cfg.get("make_workdir"):
        os.makedirs(wd, mode=0o700, exist_ok=True)
    if source is not None:
        d = os.path.dirname(cfg["copy_program_to"])
        os.makedirs(d, mode=0o755, exist_ok=True)
        with open(cfg["copy_program_to"], "wb") as f:
            f.write(source)
        os.chmod(cfg["copy_program_to"], 0o444)
        program = cfg["copy_program_to"]
    if uid is not None and cfg.get("chown_workdir"):
        os.chown(wd, uid, uid)
        os.chmod(wd, 0o700)
except OSError as e:
    die("working directory", e)
for name, value in cfg["rlimits"]:
    res = getattr(resource, name)
    soft, hard = resource.getrlimit(res)
    v = value if hard == resource.RLIM_INFINITY else min(value, hard)
    try:
        resource.setrlimit(res, (v, v))
    except (OSError, ValueError) as e:
        die("setrlimit " + name, e)
if uid is not None:
    try:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    except OSError as e:
        die("privilege drop", e)
    if os.getuid() != uid or os.geteuid() != uid:
        die("privilege drop", "uid still %d" % os.geteuid())
if ns & 0x20000000 or cfg.get("pdeathsig"):
    ct, lc = libc()
    lc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG (after the uid change, which clears it)
flt = cfg.get("seccomp")
if flt:
    ct, lc = libc()
    raw = bytes.fromhex(flt)
    buf = ct.create_string_buffer(raw, len(raw))
    class FProg(ct.Structure):
        _fields_ = [("len", ct.c_ushort), ("filter", ct.c_void_p)]
    fprog = FProg(len(raw) // 8, ct.addressof(buf))
    check(lc.prctl(38, 1, 0, 0, 0), "no_new_privs")
    check(lc.prctl(22, 2, ct.byref(fprog), 0, 0), "seccomp")
try:
    os.chdir(wd)
except OSError as e:
    die("chdir", e)
for fd in range(3, 256):
    try:
        os.close(fd)
    except OSError:
        pass
py = cfg["python"]
try:
    os.execve(py, [py, "-I", "-B", "-X", "utf8", program], cfg["env"])
except OSError as e:
    die("exec " + py, e)
'''.replace("__SETUP_MARK__", repr(_SETUP_MARK)).replace("__SETUP_EXIT__", str(_SETUP_EXIT))


# --------------------------------------------------------------------------------------------
# Shared runner
# --------------------------------------------------------------------------------------------


def _check_code(code: str, max_code_bytes: int) -> tuple[bytes | None, str]:
    if not isinstance(code, str):
        return None, f"refused: code must be a string, got {type(code).__name__}"
    if not code.strip():
        return None, "refused: the program is empty"
    if "\x00" in code:
        return None, "refused: the program contains NUL bytes"
    try:
        data = code.encode("utf-8")
    except UnicodeEncodeError:
        return None, "refused: the program is not encodable as UTF-8"
    if len(data) > max_code_bytes:
        return None, f"refused: the program is {len(data)} bytes, more than the {max_code_bytes}-byte limit"
    return data, ""


def _rlimits(limits: SandboxLimits, max_file_bytes: int, nproc: int) -> list[tuple[str, int]]:
    cpu = int(math.ceil(limits.timeout_s)) + 2
    return [
        ("RLIMIT_AS", limits.memory_mb * 1024 * 1024),
        ("RLIMIT_CPU", cpu),
        ("RLIMIT_FSIZE", max_file_bytes),
        ("RLIMIT_NOFILE", 256),
        ("RLIMIT_CORE", 0),
        ("RLIMIT_NPROC", nproc),
    ]


def _sandbox_env(home: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",  # informative: -I ignores PYTHON*, -B does the work
        "MALLOC_ARENA_MAX": "2",  # glibc arenas reserve 64 MB of address space per thread otherwise
    }


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
# probing and selection
# --------------------------------------------------------------------------------------------

_PROBE_LOCK = threading.Lock()
_PROBES: dict[str, tuple[bool, str]] = {}
_PROCESS_LEVEL: dict[tuple, _ProcessLevel] = {}
_PROBE_CODE = "import os, sys\nprint('sandbox-probe', sys.version_info[0], os.getuid())\n"
_PROBE_LIMITS = SandboxLimits(timeout_s=15.0, memory_mb=256, max_output_bytes=4096, max_processes=8)


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

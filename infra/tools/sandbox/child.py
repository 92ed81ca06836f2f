"""What runs inside the sandbox: the base interpreter and its prefixes, the seccomp filter, the bootstrap.

The bootstrap is run as ``python -I -S -c`` source (it imports nothing of this package): it sets up
namespaces and mounts (process mechanism), the rlimits, drops privileges, installs the seccomp filter
and execs the program.
"""

from __future__ import annotations

import errno
import os
import struct
import sys

from infra.tools.sandbox.limits import _SETUP_EXIT, _SETUP_MARK, SandboxUnavailable

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

"""What a run may do and what it returns: limits, outcomes, the Sandbox protocol, the code check.

Also the configuration every mechanism hands its bootstrap: the rlimits derived from the limits and the
scrubbed environment of the program.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

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
# Code check and per-run configuration
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

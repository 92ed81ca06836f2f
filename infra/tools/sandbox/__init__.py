"""The sandbox that runs the Executor's untrusted Python: bubblewrap, else a plain-process fallback.
Layers: limits (limits/outcomes), child (bootstrap, seccomp), runner (run/capture), bwrap, process, factory."""

from infra.tools.sandbox.bwrap import BubblewrapSandbox  # noqa: F401
from infra.tools.sandbox.child import _seccomp_filter  # noqa: F401
from infra.tools.sandbox.factory import _PROBES, _probe, available_mechanisms, make_sandbox  # noqa: F401
from infra.tools.sandbox.limits import Sandbox, SandboxLimits, SandboxOutcome, SandboxUnavailable  # noqa: F401
from infra.tools.sandbox.process import ProcessSandbox  # noqa: F401

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

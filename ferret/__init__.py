"""Ferret: LLM agents write GPU kernels; an independent, hash-locked gate judges them.

The public API is small on purpose:

    from ferret import load_contract, build_gate, verify_gate, check, Dispatcher

Names are imported lazily, so that the candidate's process (which imports `ferret.sandbox.runner`)
loads none of the gate's code.
"""

from importlib import import_module

_EXPORTS = {
    "Contract": "ferret.contract.model",
    "ContractError": "ferret.contract.load",
    "load_contract": "ferret.contract.load",
    "build_gate": "ferret.gate.build",
    "check": "ferret.gate.judge",
    "GateTampered": "ferret.gate.lock",
    "verify_gate": "ferret.gate.lock",
    "GateManifest": "ferret.gate.models",
    "Report": "ferret.gate.models",
    "Verdict": "ferret.gate.models",
    "ReportEntry": "ferret.gate.models",
    "read_report": "ferret.gate.report",
    "read_verdicts": "ferret.gate.report",
    "Dispatcher": "ferret.dispatch.dispatcher",
    "RunLog": "ferret.dispatch.runlog",
    "UsageError": "ferret.errors",
}

__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ferret' has no attribute {name!r}")

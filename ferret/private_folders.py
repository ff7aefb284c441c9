"""Folders of the judge's that no untrusted process may read: where the trust registry of gate digests is kept.

The gate (ferret.gate.trust, ferret.gate.isolation) keeps its registry there and hides the folder from candidate
processes; a model backend that runs an agent in a process of its own (ferret.models.claude_cli) denies it the
same folder. A leaf (the standard library only), so that both can import it.
"""

from __future__ import annotations

import os
from pathlib import Path


def trust_dir() -> Path:
    """`FERRET_TRUST_DIR` where set, else `$XDG_STATE_HOME/ferret` (`~/.local/state/ferret`): outside the
    repository and outside any candidate's reach."""
    configured = os.environ.get("FERRET_TRUST_DIR")
    if configured:
        return Path(configured)
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "ferret"

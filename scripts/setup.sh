#!/usr/bin/env bash
# Set-up shared by the README's commands: a virtual environment in .venv with Ferret and its tools.
# Idempotent: a second run only checks. Source it (`. scripts/setup.sh`) to get the venv activated.
# Needs no root and installs nothing outside the venv. The browser the report's browser test drives is
# separate and opt-in (scripts/install_browser.sh); without it that test skips.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${FERRET_VENV:-$repo/.venv}"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv" >&2
  "$python" -m venv "$venv"
fi
stamp="$venv/.ferret-installed"
if [ ! -f "$stamp" ] || [ "$repo/pyproject.toml" -nt "$stamp" ]; then
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    # No GPU: the CPU build of torch (a plain `torch` would pull a multi-GB CUDA build).
    "$venv/bin/python" -m pip install -q "torch==2.13.0" >&2
  fi
  "$venv/bin/python" -m pip install -q -e "$repo[dev,cuda,ray]" >&2
  touch "$stamp"
fi
export PATH="$venv/bin:$PATH"

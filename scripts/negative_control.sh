#!/usr/bin/env bash
# The demo's negative control: one plausible simplification of the MLA Triton candidate
# (tasks/mla_attention/simplifications.py) must be rejected by the gate, and at the first stage where its
# math departs from the contract's, not merely somewhere.
#
#   bash scripts/negative_control.sh [NAME [ferret check options...]]    NAME: scale (default), theta,
#                                                                        no_kv_norm or head_sum
#
# Exit 0 only when `ferret check --json` exits 1 (rejected) and the verdict's first_failing_stage is the one
# the simplification names; otherwise a line saying what happened, and exit 1. Needs `ferret` and `python`
# on the PATH (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
name="${1:-scale}"
[ "$#" -gt 0 ] && shift
expected="$(python -m tasks.mla_attention.simplifications --expected-stage "$name")"
folder="$(mktemp -d)"
trap 'rm -rf "$folder"' EXIT
variant="$(python -m tasks.mla_attention.simplifications "$name" "$folder/mla_$name.py")"
if [ ! -s "$variant" ]; then
  echo "negative control: the $name variant was not written" >&2; exit 1
fi
code=0
verdict="$(ferret check contracts/mla_attention.yaml "$variant" --json "$@")" || code=$?
if [ "$code" -eq 0 ]; then
  echo "negative control: the $name simplification PASSED the gate: the gate is broken" >&2; exit 1
fi
if [ "$code" -ne 1 ]; then
  echo "negative control: the check of the $name simplification reached no verdict (ferret check exit $code)" >&2
  exit 1
fi
stage="$(python -c 'import json, sys; print(json.loads(sys.stdin.read())["first_failing_stage"])' <<<"$verdict")" ||
  stage="(none: stdout held no verdict)"
if [ "$stage" != "$expected" ]; then
  echo "negative control: the $name simplification was rejected at stage $stage, expected at $expected" >&2
  exit 1
fi
echo "negative control: the $name simplification was rejected at stage $stage, as expected" >&2

#!/usr/bin/env bash
# The main job, offline (no API key needed): the dispatcher runs the loop on rmsnorm with the
# template-search optimizer and the static reviewer; then every honest Triton candidate is judged by its
# gate and one simplified MLA candidate must be rejected at the stage where it departs from the contract
# (scripts/negative_control.sh); the demo fails otherwise. CPU profile under the Triton interpreter when
# no GPU is present; production shapes, timings and stress on a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
status=0
echo "== ferret dispatch contracts/rmsnorm.yaml" >&2
# The roles are named: with an API key or `claude` on the PATH the defaults would be LLM roles.
ferret dispatch contracts/rmsnorm.yaml --optimizer template-search --reviewer static --test-writer contract-cases || status=$?
for op in rmsnorm softmax rope mla_attention; do
  for candidate in tasks/$op/candidates/triton_*.py; do
    echo "== ferret check contracts/$op.yaml $candidate" >&2
    ferret check "contracts/$op.yaml" "$candidate" >/dev/null || status=$?
  done
done
echo "== a simplified MLA candidate (softmax scale 1/sqrt(576)): the gate must reject it at stage scores" >&2
if ! bash scripts/negative_control.sh scale; then
  echo "demo: FAILED: the simplified MLA candidate was not rejected where its math departs; see above" >&2
  exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "demo: FAILED (exit $status): the dispatch or an honest candidate did not pass; see above" >&2
  exit "$status"
fi
echo "demo: the loop ran to a verdict, every honest candidate passed and the simplified one was rejected" >&2
echo "demo: reports in gates/*/report.json, the run log in runs/*/run.json" >&2
exit 0

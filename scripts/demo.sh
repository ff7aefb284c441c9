#!/usr/bin/env bash
# The main job, offline: build the locked gates and judge the honest Triton candidates and one
# simplified MLA candidate (which must fail). CPU profile under the Triton interpreter when no GPU is
# present; production shapes and timings on a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
status=0
for op in rmsnorm softmax rope mla_attention; do
  for candidate in tasks/$op/candidates/triton_*.py; do
    echo "== ferret check contracts/$op.yaml $candidate" >&2
    ferret check "contracts/$op.yaml" "$candidate" >/dev/null || status=$?
  done
done
echo "== a simplified MLA candidate (softmax scale 1/sqrt(576)): the gate must reject it" >&2
variant="$(mktemp -d)/mla_wrong_scale.py"
python -m tasks.mla_attention.simplifications scale "$variant"
if ferret check contracts/mla_attention.yaml "$variant" >/dev/null; then
  echo "demo: the simplified candidate passed: the gate is broken" >&2; exit 1
fi
echo "demo: every honest candidate passed and the simplified one was rejected (reports in gates/*/report.json)" >&2
exit $status

# Session 32, call 3: the GPU tests of the committed wgmma candidate after it became the run's best point (wgmma +
# pdl_all): kernel 3 alone against a float64 reference (the serial start's and the candidate's, launched
# programmatically), the whole step against the Triton candidate, then the gate at production shapes on the candidate.
# Needs .whl/ (scripts/device_wheels.sh), carried.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $OUT/call3-gpu.txt 2>&1
cat $OUT/call3-gpu.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_wgmma_attention_gpu.py -rA > $OUT/call3-wgmma-tests.log 2>&1
echo "pytest rc=$?" >> $OUT/call3-wgmma-tests.log
grep -E "FAILED|ERROR|passed|failed|rc=" $OUT/call3-wgmma-tests.log | tail -6 | cut -c1-240
timeout ${GATE_TIMEOUT_S:-330} python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_gpu_gates.py -k "mla_attention_wgmma" -rA > $OUT/call3-gate-test.log 2>&1
echo "pytest rc=$?" >> $OUT/call3-gate-test.log
grep -E "FAILED|ERROR|passed|failed|rc=|speed full|geomean" $OUT/call3-gate-test.log | tail -14 | cut -c1-240

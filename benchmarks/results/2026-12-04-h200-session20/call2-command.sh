# call 2 (session 20): the chunked kernel (tiles after the first loaded and announced chunk by chunk) beside the whole-tile one,
# and kernel 3's own o_latent at one split: their GPU tests, the probe's checks and timings, and the per-head form of
# kernel 2 (q_prepare, its JIT function now defined once) timed beside the template's
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch, triton, cupy; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__)"; } > $OUT/call2-gpu.txt 2>&1
start=$(date +%s)
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_wgmma_attention_gpu.py tests/backends -rA > $OUT/call2-kernel-tests.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call2-kernel-tests.log
start=$(date +%s)
timeout 170 python3 -W ignore benchmarks/mla_wgmma_probe.py --out /tmp/probe > $OUT/call2-probe.log 2>&1
echo "probe rc=$? $(( $(date +%s) - start ))s" >> $OUT/call2-probe.log
cp /tmp/probe/wgmma-probe.jsonl $OUT/call2-probe.jsonl
start=$(date +%s)
timeout 150 python3 -W ignore benchmarks/q_prepare_probe.py --out /tmp/qp --heads-form --shapes 1:128,8:128,64:128,128:128 > $OUT/call2-qprepare.log 2>&1
echo "q_prepare probe rc=$? $(( $(date +%s) - start ))s" >> $OUT/call2-qprepare.log
cp /tmp/qp/q-prepare-probe.jsonl $OUT/call2-q-prepare-probe.jsonl
grep -h "rc=\|passed\|failed\|PASSED\|FAILED\|Error" $OUT/call2-kernel-tests.log | cut -c1-250 | tail -40
tail -14 $OUT/call2-probe.log
grep -h "per_head\|streamed\", \"block_b\": null, \"block_c\": 256\|bmm" $OUT/call2-qprepare.log | cut -c1-250
tail -1 $OUT/call2-qprepare.log

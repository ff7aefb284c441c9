# call 3 (session 25, an H100): the gate's check of the wgmma point with launch_overlap=pdl (byte for byte the file
# session 24's call 1 passed on the H200), on the same kind of machine as call 2's check of the fused-tail point
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch, triton, cupy; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__)"; } > $OUT/call3-gpu.txt 2>&1
python3 -m ferret.cli.main template render tasks/mla_attention/templates --set attention_kernel=wgmma --set launch_overlap=pdl --out /tmp/wgmma_pdl_mla.py 2>/dev/null
sha256sum /tmp/wgmma_pdl_mla.py
start=$(date +%s)
timeout 265 python3 -m ferret.cli.main check contracts/mla_attention.yaml /tmp/wgmma_pdl_mla.py --gates-dir /tmp/gates --profile gpu --verdict-out $OUT/call3-verdict.json > $OUT/call3-check.log 2>&1
echo "check rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-check.log
grep -E " us|PASS|FAIL|rc=" $OUT/call3-check.log | tail -16 | cut -c1-300

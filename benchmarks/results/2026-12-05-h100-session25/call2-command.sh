# call 2 (session 25; an H100 came for nvidia-h200, as in call 1): the serial, pdl and pdl + fused-tail wgmma points'
# whole steps as CUDA-graph replays side by side (benchmarks/mla_step_graph_probe.py), then the gate's check of the
# pdl + fused-tail point (call 1's check ran past its limit in the timing)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch, triton, cupy; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__)"; } > $OUT/call2-gpu.txt 2>&1
start=$(date +%s)
timeout 110 python3 -W ignore benchmarks/mla_step_graph_probe.py --out /tmp/graph --shapes 1:128:4096 8:128:4096 64:128:4096 128:128:4096 \
  --point attention_kernel=wgmma --point attention_kernel=wgmma,launch_overlap=pdl --point attention_kernel=wgmma,launch_overlap=pdl,merge_unabsorb=fused > $OUT/call2-probe.log 2>&1
echo "probe rc=$? $(( $(date +%s) - start ))s" >> $OUT/call2-probe.log
tail -16 $OUT/call2-probe.log | cut -c1-220
python3 -m ferret.cli.main template render tasks/mla_attention/templates --set attention_kernel=wgmma --set launch_overlap=pdl --set merge_unabsorb=fused --out /tmp/wgmma_pdl_fused_mla.py 2>/dev/null
start=$(date +%s)
timeout 440 python3 -m ferret.cli.main check contracts/mla_attention.yaml /tmp/wgmma_pdl_fused_mla.py --gates-dir /tmp/gates --profile gpu --verdict-out $OUT/call2-verdict.json > $OUT/call2-check.log 2>&1
echo "check rc=$? $(( $(date +%s) - start ))s" >> $OUT/call2-check.log
grep -E " us|PASS|FAIL|rc=" $OUT/call2-check.log | tail -16 | cut -c1-300

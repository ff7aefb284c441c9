# call 1 (session 24): launch_overlap=pdl beside the committed wgmma point. The bench times both whole steps
# (do_bench, L2 flushed, per-kernel times with --kernels, torch.compile and FlashMLA beside), then the gate times
# the pdl render (scratch_pdl/wgmma_pdl_mla.py: the space's default with attention_kernel=wgmma, launch_overlap=pdl)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"; } > $OUT/call1-gpu.txt 2>&1
timeout 230 python3 benchmarks/mla_template_bench.py --out $OUT/bench --budget-s 170 --kernels --shapes h128_b1_l4096 h128_b8_l4096 h128_b64_l4096 h128_b128_l4096 \
  --point attention_kernel=wgmma --point attention_kernel=wgmma,launch_overlap=pdl > $OUT/call1-bench.log 2>&1
echo "bench rc=$?" >> $OUT/call1-bench.log
tail -30 $OUT/call1-bench.log
start=$(date +%s)
timeout 330 python3 -c "from ferret.cli.main import app; app()" check contracts/mla_attention.yaml scratch_pdl/wgmma_pdl_mla.py --gates-dir /tmp/gates --profile gpu --verdict-out $OUT/call1-verdict.json > $OUT/call1-check.log 2>&1
echo "check rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-check.log
tail -5 $OUT/call1-check.log | cut -c1-600

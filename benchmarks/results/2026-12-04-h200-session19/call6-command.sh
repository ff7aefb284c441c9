# call 6 (session 19): the template bench, each kernel's device time (torch.profiler, L2 flushed) and FlashMLA's dense
# decode beside the Triton default and the wgmma candidate, every output checked first, at the full-length
# shapes and the ragged tp1_b64
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/call6-gpu.txt 2>&1
start=$(date +%s)
timeout 300 python3 -W ignore benchmarks/mla_template_bench.py --out /tmp/bench --budget-s 220 --kernels --point "" \
  --candidate tasks/mla_attention/candidates/wgmma_mla.py \
  --shapes full_h128_b64_l4096 full_h128_b128_l4096 full_h128_b8_l4096 full_h128_b1_l4096 tp1_b64_l4096 > $OUT/call6-bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call6-bench.log
cp /tmp/bench/mla-template-bench.jsonl $OUT/call6-bench.jsonl; cp /tmp/bench/mla-template-bench.md $OUT/call6-bench.md
grep -h "bench rc" $OUT/call6-bench.log
cat $OUT/call6-bench.md | cut -c1-300 | tail -60

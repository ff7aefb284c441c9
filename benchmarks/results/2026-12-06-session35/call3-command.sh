# Call 3 of session 35. On an H200: session 22's H200 run resumed (session 33's next-call-command.sh). On an H100:
# the peer table on this card: benchmarks/mla_template_bench.py with the committed candidate's point (wgmma +
# pdl_all, byte-identical to tasks/mla_attention/candidates/wgmma_mla.py), torch.compile of the baseline and FlashMLA's
# dense decode core (sgl-flash-mla), every output checked first, the floor, and per-kernel device times (--kernels).
set -u
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  exec bash benchmarks/results/2026-12-06-session33/next-call-command.sh
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 480 python3 benchmarks/mla_template_bench.py --out $OUT/bench --budget-s 330 --kernels --rounds 3 \
  --shapes h128_b1_l4096 h128_b8_l4096 h128_b64_l4096 h128_b128_l4096 full_h16_b64_l16384 \
  --point attention_kernel=wgmma,launch_overlap=pdl_all > $OUT/bench.log 2>&1
echo "bench rc=$?"
grep -v '^{' $OUT/bench/mla-template-bench.md 2>/dev/null | head -60 || tail -30 $OUT/bench.log

set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
left() { echo $(( 570 - ($(date +%s) - start) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/call1-gpu.txt 2>&1
# issue 11: torch.compile's picks, each compile into an empty cache, alone or beside a busy GPU
timeout 330 python3 benchmarks/compile_picks_probe.py --out $OUT/picks --alone 3 --contended 2 --rounds 5 > $OUT/call1-picks.log 2>&1
echo "picks rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-elapsed.txt
# issue 13: per-kernel device time of the default point, full length and the gate's speed cases
timeout $(( $(left) - 5 )) python3 benchmarks/mla_template_bench.py --out $OUT/bench --shapes h128_b64_l4096 tp1_b64_l4096 tp1_b8_l4096 h128_b8_l4096 \
  --rounds 3 --no-peers --kernels --point '' --budget-s $(( $(left) - 60 )) > $OUT/call1-bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-elapsed.txt

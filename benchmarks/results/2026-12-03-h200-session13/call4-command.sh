# call 4 (session 13, snapshot in COMMIT): the default point beside torch.compile and FlashMLA on the contract's
# full-length speed cases, with each kernel's device time (attention alone against FlashMLA's core)
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
timeout 250 python3 benchmarks/mla_template_bench.py --out $OUT/bench --budget-s 150 --point "" --kernels --shapes full_h128_b1_l4096 full_h128_b8_l4096 full_h128_b64_l4096 full_h128_b128_l4096 full_h16_b64_l16384 > $OUT/call4-bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call4-bench.log
tail -2 $OUT/call4-bench.log

set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
left() { echo $(( 570 - ($(date +%s) - start) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/call3-gpu.txt 2>&1
# issue 11: a cold MLA check (the compile choice runs) and a warm one, on another fresh machine
python3 benchmarks/timing_repeatability.py run --ops mla_attention --checks 1 --gates-dir /tmp/gates --out $OUT \
  --budget-s 330 > $OUT/call3-repeat.log 2>&1
echo "mla checks rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-elapsed.txt
python3 benchmarks/timing_repeatability.py table $OUT/checks.jsonl > $OUT/call3-repeat-table.md 2>&1
mv $OUT/checks.jsonl $OUT/call3-checks.jsonl
# the GPU test of the choice (rmsnorm, its own gates folder)
timeout $(( $(left) - 5 )) python3 -m pytest -q -m gpu tests/gate/test_compile_choice.py -p no:cacheprovider > $OUT/call3-gpu-test.log 2>&1
echo "gpu test rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-elapsed.txt

# call 3 (session 12, snapshot in COMMIT): the re-rendered honest candidates through the gate at production shapes, and the bf16-partials mutant
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
timeout 420 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "honest or bf16_partials" -n 3 > $OUT/call3-gates.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-gates.log

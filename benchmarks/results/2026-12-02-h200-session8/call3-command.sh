set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
timeout 200 python3 benchmarks/spin_order_probe.py --out $OUT --rounds 3 --calls 150 > $OUT/call3-probe.md 2> $OUT/call3-probe.err

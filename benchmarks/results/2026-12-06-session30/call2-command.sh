# NOT RUN: call 1 ran on an H100 (README.md).
# call 2 (session 30), only after call 1 ran on an H200 and with the device time for it: profile-kernels.sh there.
# Needs .whl/, carried.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/call2-gpu.txt 2>&1
cat $OUT/call2-gpu.txt
bash benchmarks/results/2026-12-06-session30/profile-kernels.sh call2

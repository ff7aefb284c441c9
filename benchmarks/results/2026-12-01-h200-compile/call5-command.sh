# Device call 5 (host launch time as a median): the side-stream guard and the clock tests on the GPU again.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
FERRET_GATES_DIR=/tmp/gates timeout 250 python3 -m pytest -q -m gpu tests/gpu/test_gpu_clock.py "tests/gpu/test_gpu_timing_guards.py::test_candidate_that_moves_to_a_side_stream_once_timed_is_caught_by_the_wall_clock" -p no:cacheprovider > $OUT/pytest-side-stream.log 2>&1; tail -4 $OUT/pytest-side-stream.log

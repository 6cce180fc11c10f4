#!/usr/bin/env bash
# One H200, from the repository's root: on c = main at 632d63c (the build lock mended), tests included, the GPU tests
# of tests/test_memory.py, stopped at 230 s.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
t0=$(date +%s)
cd .gpu/c && export TORCH_EXTENSIONS_DIR=/tmp/ext_c PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=632d63c
timeout 230 python3 -m pytest -m gpu tests/test_memory.py -v --durations=15 -p no:cacheprovider > $OUT/r/pytest_c.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest_c.log)"
cd ../.. && tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r

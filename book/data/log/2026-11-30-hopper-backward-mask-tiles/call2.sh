#!/usr/bin/env bash
# One H200, from the repository's root: on c = main with the masked tiles taken apart (ed38c57), tests included, the
# GPU tests of the files named as arguments, stopped at the second argument's seconds.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
t0=$(date +%s)
tag=$1 limit=$2; shift 2
cd .gpu/c && export TORCH_EXTENSIONS_DIR=/tmp/ext_c PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=ed38c57
timeout $limit python3 -m pytest -m gpu "$@" -v --durations=15 -p no:cacheprovider > $OUT/r/pytest_$tag.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest_$tag.log)"
cd ../.. && tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r

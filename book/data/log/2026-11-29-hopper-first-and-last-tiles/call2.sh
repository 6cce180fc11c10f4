#!/usr/bin/env bash
# One H200: m = main (78a861d); steps.py for the presets in argv[1], one process a preset, each stopped at argv[2] s.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
t0=$(date +%s)
cd .gpu/m && export TORCH_EXTENSIONS_DIR=/tmp/ext_m PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=78a861d
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
echo "built after $(( $(date +%s) - t0 )) s"
for size in ${1//,/ }; do
  timeout $2 python3 ../steps.py $size >> $OUT/r/steps.jsonl 2>> $OUT/r/steps.err
  echo "$size rc=$? after $(( $(date +%s) - t0 )) s"
done
cd ../.. && tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r

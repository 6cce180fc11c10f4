#!/usr/bin/env bash
# One H200, from the repository's root: nc.py, the forward and backward of flash_hopper and cuDNN timed apart and
# together, with and without the L2 flushed between them.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)' >> $OUT/r/machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=$(cat .gpu/commit)
t0=$(date +%s)
timeout 500 python3 .gpu/nc.py > $OUT/r/nc.jsonl 2> $OUT/r/nc.err
echo "nc rc=$? after $(( $(date +%s) - t0 )) s"; tail -c 1500 $OUT/r/nc.err
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r

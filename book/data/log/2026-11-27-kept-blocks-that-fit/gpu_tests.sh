#!/usr/bin/env bash
# GPU tests of what changed since the last GPU run: the availability check shared by flash_hopper, flash_cpp and
# flash_cuda under torch.compile (why_it_cannot_run), and the leaderboard bench's memory columns.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
t0=$(date +%s)
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
run() { local name=$1 lim=$2; shift 2
  timeout $lim python3 -m pytest -m gpu -q -p no:cacheprovider "$@" > $OUT/$name.log 2>&1
  echo "$name rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/$name.log)"; grep -E "^(FAILED|ERROR)" $OUT/$name.log | head; }
run compiled 240 tests/test_flash_hopper_cuda.py tests/test_flash_cuda.py tests/test_flash_cpp.py -k "graph_break or compiled"

#!/usr/bin/env bash
# the working tree (98bca8e, the stopped backward's wait, the trainer's --recompute offload): the offload GPU tests;
# the stopped-backward test against systems/offload.py of 98bca8e; the trainer at the xl preset, four ways to recompute
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/run1_machine.txt
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)' >> $OUT/run1_machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
timeout 150 python3 -m pytest -v -m gpu -p no:cacheprovider tests/test_offload.py > $OUT/run1_pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s"; grep -E "PASSED|FAILED|passed|failed" $OUT/run1_pytest.log | tail -6
mkdir -p /tmp/old && cp -r systems tests pyproject.toml /tmp/old/ && cp .gpu/offload_98bca8e.py /tmp/old/systems/offload.py
(cd /tmp/old && PYTHONPATH=/tmp/site:/tmp/old timeout 100 python3 -m pytest -v -m gpu -p no:cacheprovider \
  tests/test_offload.py -k stopped) > $OUT/run1_pytest_98bca8e.log 2>&1
echo "pytest at 98bca8e's offload rc=$?"; grep -E "PASSED|FAILED|passed|failed|^E " $OUT/run1_pytest_98bca8e.log | tail -6
for r in none all keep_attention offload; do
  blocks=1; [ $r = none ] && blocks=0
  recompute=$r; [ $r = none ] && recompute=all
  timeout 200 python3 -m systems.train --size xl --context-length 2048 --bf16 --checkpoint-blocks $blocks \
    --recompute $recompute --global-batch-size 8 --max-steps 12 --warmup-steps 2 --log-file $OUT/run1_train_$r.jsonl \
    --no-progress > $OUT/run1_train_$r.txt 2>&1
  echo "$r rc=$? at $(( $(date +%s) - t0 )) s: $(grep -v '^W1' $OUT/run1_train_$r.txt | tail -n1)"
done

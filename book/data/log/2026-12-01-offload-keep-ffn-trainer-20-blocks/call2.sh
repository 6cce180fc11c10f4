#!/usr/bin/env bash
# the working tree: the stopped-backward GPU test, at this tree and against systems/offload.py of 98bca8e (three
# times each); the trainer at the xl preset with context 2048 (offload again, for its peak) and 8192
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r && cd $PWD
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/run2_machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
mkdir -p /tmp/old && cp -r systems tests pyproject.toml /tmp/old/ && cp .gpu/offload_98bca8e.py /tmp/old/systems/offload.py
for i in 1 2 3; do
  timeout 100 python3 -m pytest -v -m gpu -p no:cacheprovider tests/test_offload.py >> $OUT/r/run2_pytest.log 2>&1
  echo "pytest rc=$?"
  (cd /tmp/old && PYTHONPATH=/tmp/site:/tmp/old timeout 100 python3 -m pytest -v -m gpu -p no:cacheprovider \
    tests/test_offload.py -k stopped) >> $OUT/r/run2_pytest_98bca8e.log 2>&1
  echo "pytest at 98bca8e's offload rc=$?"
done
grep -E "passed|failed|^E  .*copy" $OUT/r/run2_pytest.log $OUT/r/run2_pytest_98bca8e.log
train() {  # name, context, batch, blocks, recompute
  timeout 200 python3 -m systems.train --size xl --context-length $2 --bf16 --checkpoint-blocks $4 --recompute $5 \
    --global-batch-size $3 --max-steps 12 --warmup-steps 2 --log-file $OUT/r/run2_train_$1.jsonl --no-progress \
    > $OUT/r/run2_train_$1.txt 2>&1
  echo "$1 rc=$? at $(( $(date +%s) - t0 )) s: $(grep -v '^W1' $OUT/r/run2_train_$1.txt | tail -n1)"
}
train offload_2048 2048 8 1 offload
train keep_attention_8192 8192 2 1 keep_attention
train offload_8192 8192 2 1 offload
train all_8192 8192 2 1 all
cd $OUT && tar czf run2.tgz r && rm -rf r

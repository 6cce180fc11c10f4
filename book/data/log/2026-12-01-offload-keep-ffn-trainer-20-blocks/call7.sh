#!/usr/bin/env bash
# keep_attention_and_ffn: the offload GPU tests; the trainer at the xl preset against keep_attention (context 2048
# and 8192); the leaderboard's 4-block step on the whole GPU, ours keeping the feed-forward's products
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/run7_machine.txt
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
timeout 100 python3 -m pytest -v -m gpu -p no:cacheprovider tests/test_offload.py > $OUT/r/run7_pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s"; grep -E "passed|failed" $OUT/r/run7_pytest.log | tail -2
train() {  # name, context, batch, recompute
  timeout 150 python3 -m systems.train --size xl --context-length $2 --bf16 --checkpoint-blocks 1 --recompute $4 \
    --global-batch-size $3 --max-steps 12 --warmup-steps 2 --log-file $OUT/r/run7_train_$1.jsonl --no-progress \
    > $OUT/r/run7_train_$1.txt 2>&1
  echo "$1 rc=$? at $(( $(date +%s) - t0 )) s: $(grep -v '^W1' $OUT/r/run7_train_$1.txt | tail -n1)"
}
train keep_attention_2048 2048 8 keep_attention
train keep_attention_and_ffn_2048 2048 8 keep_attention_and_ffn
train keep_attention_8192 8192 2 keep_attention
train keep_attention_and_ffn_8192 8192 2 keep_attention_and_ffn
timeout $(( 500 - ($(date +%s) - t0) )) python3 .gpu/depth.py ours:keep_attention_and_ffn 4 > $OUT/r/run7_ffn4.json 2> $OUT/r/run7_ffn4.err
echo "ffn4 rc=$? after $(( $(date +%s) - t0 )) s"; grep -E '"(status|ms|mfu|peak_gib)"' $OUT/r/run7_ffn4.json
cd $OUT && tar czf run7.tgz r && rm -rf r

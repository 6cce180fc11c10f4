#!/usr/bin/env bash
# the trainer at the xl preset, context 2048, with --compile: keeping attention, no checkpointing, and
# keep_attention_and_ffn again in the same call
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
t0=$(date +%s)
train() {  # name, checkpoint blocks, recompute, more options
  timeout 75 python3 -m systems.train --size xl --context-length 2048 --bf16 --checkpoint-blocks $2 --recompute $3 \
    --global-batch-size 8 --max-steps 12 --warmup-steps 2 --log-file $OUT/r/run8_train_$1.jsonl --no-progress $4 \
    > $OUT/r/run8_train_$1.txt 2>&1
  echo "$1 rc=$? at $(( $(date +%s) - t0 )) s: $(grep -v '^W1' $OUT/r/run8_train_$1.txt | tail -n1)"
}
train keep_attention_compiled 1 keep_attention --compile
train keep_attention_and_ffn 1 keep_attention_and_ffn ""
train none_compiled 0 all --compile
cd $OUT && tar czf run8.tgz r && rm -rf r

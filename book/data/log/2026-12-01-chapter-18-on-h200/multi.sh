#!/usr/bin/env bash
# multi.sh DEADLINE_S NAME[:resume] ... : run chapters in turn (full profile) until DEADLINE_S seconds from the
# start, then tar what they wrote (and any staging left by a stopped one) into $OUT/book.tgz.
set -u
start=$(date +%s); deadline=$1; shift
touch /tmp/multi.start
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH TORCH_EXTENSIONS_DIR=$PWD/.gpu/ext TRITON_CACHE_DIR=$PWD/.gpu/triton SYSTEMS_GIT_COMMIT=$(cat .gpu/commit)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for spec in "$@"; do
  name=${spec%%:*}; flag=""; [[ $spec == *:resume ]] && flag=--resume
  left=$(( deadline - ($(date +%s) - start) ))
  if (( left < 30 )); then echo "[multi] no time left for $name"; continue; fi
  echo "[multi] $name $flag, $left s left"
  timeout -s KILL $left python3 -m systems.pipeline run "$name" --profile full $flag > /tmp/$name.log 2>&1
  echo "[multi] $name rc=$? after $(( $(date +%s) - start )) s"; tail -15 /tmp/$name.log
done
find book _build/staging -newer /tmp/multi.start -type f 2>/dev/null | tar czf "$OUT/book.tgz" -T -; tar czf "$OUT/cache.tgz" .gpu/ext .gpu/triton 2>/dev/null; du -sh .gpu/ext .gpu/triton
cp /tmp/*.log "$OUT/" 2>/dev/null; true

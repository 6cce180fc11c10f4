#!/usr/bin/env bash
# multi.sh DEADLINE_S NAME[:resume] ... : run chapters in turn (full profile) until DEADLINE_S seconds from the
# start, then tar what they wrote (and any staging left by a stopped one) into $OUT/book.tgz.
set -u
start=$(date +%s); deadline=$1; shift
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for spec in "$@"; do
  name=${spec%%:*}; flag=""; [[ $spec == *:resume ]] && flag=--resume
  left=$(( deadline - ($(date +%s) - start) ))
  if (( left < 30 )); then echo "[multi] no time left for $name"; continue; fi
  echo "[multi] $name $flag, $left s left"
  timeout -s KILL $left python3 -m systems.pipeline run "$name" --profile full $flag > /tmp/$name.log 2>&1
  echo "[multi] $name rc=$? after $(( $(date +%s) - start )) s"; tail -15 /tmp/$name.log
done
tar czf "$OUT/book.tgz" book/executed book/data book/status.md _build/staging 2>/dev/null
cp /tmp/*.log "$OUT/" 2>/dev/null; true

#!/usr/bin/env bash
# the stopped backward's copy with the allocator's cache warmed, probed and tested at 98bca8e's offload and this tree's
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
mkdir -p /tmp/old && cp -r systems tests pyproject.toml /tmp/old/ && cp .gpu/offload_98bca8e.py /tmp/old/systems/offload.py
(for tree in /tmp/old $PWD; do for warm in "" warm; do
   echo "== $tree $warm"; PYTHONPATH=/tmp/site python3 .gpu/race_probe.py $tree $warm 2>&1 | grep -v "^W1"; done; done) > $OUT/r/run5_probe.txt
cat $OUT/r/run5_probe.txt
for i in 1 2 3; do
  PYTHONPATH=/tmp/site:$PWD timeout 100 python3 -m pytest -v -m gpu -p no:cacheprovider tests/test_offload.py -k stopped >> $OUT/r/run5_pytest.log 2>&1
  echo "pytest rc=$?"
  (cd /tmp/old && PYTHONPATH=/tmp/site:/tmp/old timeout 100 python3 -m pytest -v -m gpu -p no:cacheprovider \
    tests/test_offload.py -k stopped) >> $OUT/r/run5_pytest_98bca8e.log 2>&1
  echo "pytest at 98bca8e's offload rc=$?"
done
grep -hE "passed|failed|^E  .*copy" $OUT/r/run5_pytest.log $OUT/r/run5_pytest_98bca8e.log
cd $OUT && tar czf run5.tgz r && rm -rf r

#!/usr/bin/env bash
# the working tree: the stopped-backward GPU test with the compute stream held busy, at this tree and against
# systems/offload.py of 98bca8e (three times each)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
export TORCH_EXTENSIONS_DIR=/tmp/ext PYTHONPATH=/tmp/site:$PWD
mkdir -p /tmp/old && cp -r systems tests pyproject.toml /tmp/old/ && cp .gpu/offload_98bca8e.py /tmp/old/systems/offload.py
for i in 1 2 3; do
  timeout 100 python3 -m pytest -v -m gpu -p no:cacheprovider tests/test_offload.py >> $OUT/r/run3_pytest.log 2>&1
  echo "pytest rc=$?"
  (cd /tmp/old && PYTHONPATH=/tmp/site:/tmp/old timeout 100 python3 -m pytest -v -m gpu -p no:cacheprovider \
    tests/test_offload.py -k stopped) >> $OUT/r/run3_pytest_98bca8e.log 2>&1
  echo "pytest at 98bca8e's offload rc=$?"
done
grep -E "passed|failed|^E  .*copy" $OUT/r/run3_pytest.log $OUT/r/run3_pytest_98bca8e.log
cd $OUT && tar czf run3.tgz r && rm -rf r

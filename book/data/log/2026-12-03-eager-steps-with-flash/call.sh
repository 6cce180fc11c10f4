set -u

export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/.gpu/ext SYSTEMS_GIT_COMMIT=$(cat .gpu/commit)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $OUT/machine.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" | tee -a $OUT/machine.txt
limit=${1:-480}; shift; timeout -s KILL $limit python3 .gpu/eager_steps.py "$@" > $OUT/steps.jsonl 2> $OUT/steps.err
echo rc=$?; tail -20 $OUT/steps.err

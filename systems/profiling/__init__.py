"""Profiling: Nsight Systems runs and their parsing (nsys.py, target.py), CUDA memory snapshots (memory.py), one
Transformer block's memory in an Nsight Systems trace (block_memory.py).

Handout §1.1.4 (where the GPU time goes, kernel by kernel) and §1.1.6 (where the memory goes, allocation by
allocation; the 2026 edition's part (f), a block's residuals and gradients, in the trace). Everything that reads a
profile works on plain files, so it is tested on the CPU with synthetic traces; only recording needs a GPU (and, for
nsys, the Nsight Systems CLI).
"""

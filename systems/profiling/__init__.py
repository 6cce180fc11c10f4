"""Profiling: Nsight Systems runs and their parsing (nsys.py, target.py), CUDA memory snapshots (memory.py).

Handout §1.1.4 (where the GPU time goes, kernel by kernel) and §1.1.6 (where the memory goes, allocation by
allocation). Everything that reads a profile works on plain files, so it is tested on the CPU with synthetic
traces; only recording needs a GPU (and, for nsys, the Nsight Systems CLI).
"""

"""Cost models that plan training at scale: collectives (:mod:`~systems.scaling.collectives`), per-device memory,
FLOPs and communication of data, fully-sharded, tensor and 2-D parallelism (:mod:`~systems.scaling.strategies`),
and a simulated data-parallel step (:mod:`~systems.scaling.simulate`). Pure arithmetic: no GPU, no torch."""

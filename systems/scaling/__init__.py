"""Cost models that plan training at scale: collectives (:mod:`~systems.scaling.collectives`), per-device memory,
FLOPs and communication of data, fully-sharded, tensor and 2-D parallelism (:mod:`~systems.scaling.parallel`),
plans over model sizes and clusters (:mod:`~systems.scaling.plans`), and a simulated data-parallel step
(:mod:`~systems.scaling.simulate`). Arithmetic that needs no GPU (the simulation reads the model's shapes)."""

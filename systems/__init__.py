"""systems: the CS336 Assignment 2 systems work as a library.

A Transformer LM (:mod:`systems.model`), attention kernels by name (:mod:`systems.attention`),
benchmarking and profiling (:mod:`systems.bench`, :mod:`systems.profiling`), data-parallel training
(:mod:`systems.ddp`, :mod:`systems.zero`, :mod:`systems.train`) and the notebook pipeline that builds the
book (:mod:`systems.pipeline`).
"""

__version__ = "0.1.0"

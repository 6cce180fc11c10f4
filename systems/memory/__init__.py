"""Single-GPU training memory: what autograd saves (:mod:`~systems.memory.saved`) and what activation checkpointing
trades for it (:mod:`~systems.memory.checkpointing`; the model runs it with ``TransformerLM(checkpoint_blocks=...)``)."""

"""``modeling.optimization``: the original's module name (google-research/bert ``optimization.py``).

The optimizer lives in ``modeling.training.optimizers`` (one class set for every Keras backend,
the rules of ``modeling.training.update_rules``). Its public names are importable from here, as
code ported from the original expects::

    from modeling import optimization
    optimizer = optimization.create_optimizer(2e-5, num_train_steps, num_warmup_steps)
    optimizer = optimization.AdamWeightDecayOptimizer(2e-5, weight_decay_rate=0.01,
                                                      exclude_from_weight_decay=["LayerNorm"])
"""

from modeling.training.optimizers import (AdamWeightDecay, AdamWeightDecayOptimizer, Lamb,
                                          create_optimizer)
from modeling.training.update_rules import uses_weight_decay

__all__ = ["AdamWeightDecay", "AdamWeightDecayOptimizer", "Lamb", "create_optimizer",
           "uses_weight_decay"]

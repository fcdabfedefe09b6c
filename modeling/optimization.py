"""``modeling.optimization``: the original's module name (google-research/bert ``optimization.py``).

The optimizer lives in ``modeling.training.optimization`` (TensorFlow) and
``modeling.training.keras_optimization`` (any other Keras backend: JAX); both apply the rules of
``modeling.training.update_rules``. The public names of the one for the running backend are
importable from here, as code ported from the original expects::

    from modeling import optimization
    optimizer = optimization.create_optimizer(2e-5, num_train_steps, num_warmup_steps)
    optimizer = optimization.AdamWeightDecayOptimizer(2e-5, weight_decay_rate=0.01,
                                                      exclude_from_weight_decay=["LayerNorm"])
"""

from modeling import backend

if backend.TENSORFLOW:
    from modeling.training.optimization import AdamWeightDecay, AdamWeightDecayOptimizer, Lamb
else:
    from modeling.training.keras_optimization import (AdamWeightDecay, AdamWeightDecayOptimizer,
                                                      Lamb)
from modeling.training.optimizers import create_optimizer
from modeling.training.update_rules import uses_weight_decay

__all__ = ["AdamWeightDecay", "AdamWeightDecayOptimizer", "Lamb", "create_optimizer",
           "uses_weight_decay"]

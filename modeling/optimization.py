"""``modeling.optimization``: the original's module name (google-research/bert ``optimization.py``).

The optimizer lives in ``modeling.training.optimization``; its public names are importable from
here, as code ported from the original expects::

    from modeling import optimization
    optimizer = optimization.create_optimizer(2e-5, num_train_steps, num_warmup_steps)
"""

from modeling.training.optimization import (AdamWeightDecay, Lamb, create_optimizer,
                                            uses_weight_decay)

__all__ = ["AdamWeightDecay", "Lamb", "create_optimizer", "uses_weight_decay"]

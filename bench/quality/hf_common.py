"""Torch-side helpers of the HF fine-tuning benchmarks (``quality/*_finetune_hf.py``; they run in
the PyTorch venv ``bench/.venvs/hf``, not in CI).

* ``BertAdamWeightDecay`` / ``create_optimizer``: the original BERT update (Adam without bias
  correction, decoupled weight decay 0.01 except biases and LayerNorm weights), or torch AdamW;
* ``bert_lr_lambda``: the original's schedule as this port applies it
  (``modeling/training/schedules.py``): the update made after t updates uses
  ``schedule(t + 1)`` = ``(t + 1) / W`` during the W warmup steps, then ``1 - (t + 1) / N``
  (decay over all N steps, not HF's decay over N - W);
* ``load_encoder_weights``: the all-MiniLM-L6-v2 safetensors into ``model.bert`` (strict);
* ``add_torch_args``: the HF sides' ``--threads`` and ``--optimizer``; ``finetune_parser`` /
  ``train_epochs``: the flags and the epoch loop of the classifier and NER sides (a fresh
  permutation per epoch, ``drop_remainder`` batches, clipping 1.0, progress lines).

The twins import this module as ``bench.quality.hf_common`` (the repository root on
``sys.path``): the shared arguments come from ``bench.harness``, standard library only.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, Dict

import numpy as np
import torch
from safetensors.torch import load_file

from bench import harness


class BertAdamWeightDecay(torch.optim.Optimizer):
    """The original BERT's AdamWeightDecayOptimizer update in torch: Adam moments WITHOUT bias
    correction, epsilon added to sqrt(v), decoupled weight decay added to the update."""

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-6):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=0.0))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.zeros_like(p)
                m, v = state["m"], state["v"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                update = m / (v.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update = update + group["weight_decay"] * p
                p.add_(update, alpha=-group["lr"])


def create_optimizer(model: torch.nn.Module, name: str, learning_rate: float
                     ) -> torch.optim.Optimizer:
    """The original's parameter groups (weight decay 0.01, none on biases and LayerNorm weights)
    under ``name``: "adamw" (torch AdamW, eps 1e-6, bias-corrected) or "bert_adam"
    (``BertAdamWeightDecay``, the original update)."""
    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {"params": [p for n, p in model.named_parameters() if not any(s in n for s in no_decay)],
         "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if any(s in n for s in no_decay)],
         "weight_decay": 0.0},
    ]
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=learning_rate, eps=1e-6)
    return BertAdamWeightDecay(groups, lr=learning_rate)


def bert_lr_lambda(num_train_steps: int, num_warmup_steps: int) -> Callable[[int], float]:
    """``LambdaLR`` factor of the update made after ``step`` updates: the original's
    ``schedule(step + 1)`` (see the module)."""

    def factor(step: int) -> float:
        s = step + 1
        if s < num_warmup_steps:
            return s / num_warmup_steps
        return max(0.0, 1.0 - min(s, num_train_steps) / num_train_steps)

    return factor


def load_encoder_weights(bert: torch.nn.Module, model_dir: str) -> None:
    """``model_dir/model.safetensors`` (keys without the ``bert.`` prefix) into ``bert``; the
    pooler only if ``bert`` has one. Exits with a message if anything else does not fit."""
    state = load_file(os.path.join(model_dir, "model.safetensors"))
    has_pooler = getattr(bert, "pooler", None) is not None
    state = {k: v for k, v in state.items() if k != "embeddings.position_ids"
             and (has_pooler or not k.startswith("pooler."))}
    missing, unexpected = bert.load_state_dict(state, strict=False)
    missing = [k for k in missing if "position_ids" not in k]
    if missing or unexpected:
        sys.exit("weights do not fit: missing %s unexpected %s" % (missing, unexpected))


def add_torch_args(parser) -> None:
    """The flags every HF side has: ``--threads`` (torch's, 2) and ``--optimizer`` (adamw)."""
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--optimizer", choices=["adamw", "bert_adam"], default="adamw",
                        help="torch AdamW (bias-corrected, HF's usual) or the original BERT update "
                        "(no bias correction), as this port's create_optimizer")


def finetune_parser(doc: str):
    """The parser of the classifier and NER sides: the shared arguments (``harness.parser``:
    ``--epochs`` 3, ``--batch_size`` 32, ``--learning_rate`` 5e-5, ``--seed`` 1), the torch ones
    (``add_torch_args``) and their files."""
    parser = harness.parser(doc, epochs=3.0, batch_size=32, learning_rate=5e-5, seed=1)
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--train", required=True)
    parser.add_argument("--dev", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--num_labels", type=int, required=True)
    parser.add_argument("--eval_batch_size", type=int, default=64)
    parser.add_argument("--warmup_proportion", type=float, default=0.1)
    add_torch_args(parser)
    return parser


def train_epochs(model: torch.nn.Module, optimizer, scheduler, n: int,
                 make_batch: Callable[[np.ndarray], Dict[str, torch.Tensor]], batch_size: int,
                 num_train_steps: int, permutation: Callable[[int], np.ndarray]) -> float:
    """``num_train_steps`` updates over epochs of ``n`` rows: each epoch ``permutation(n)``,
    cut into ``n // batch_size`` full batches (``make_batch(indices)``, with ``labels``).
    Returns the training seconds."""
    steps_per_epoch = n // batch_size  # drop_remainder, as the port
    if steps_per_epoch == 0:
        sys.exit("train has %d rows, fewer than one batch of %d" % (n, batch_size))
    model.train()
    start = time.time()
    step = 0
    while step < num_train_steps:
        order = permutation(n)
        for b in range(steps_per_epoch):
            if step >= num_train_steps:
                break
            loss = model(**make_batch(order[b * batch_size:(b + 1) * batch_size])).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            if step % 20 == 0 or step == num_train_steps:
                elapsed = time.time() - start
                print("hf train step %d/%d, %.2f/s, ETA %.0fs, loss %.4f"
                      % (step, num_train_steps, step / elapsed,
                         (num_train_steps - step) * elapsed / step, loss.item()),
                      file=sys.stderr, flush=True)
    return time.time() - start

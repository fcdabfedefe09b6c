"""HF transformers side of bench_squad_finetune.py (runs in the PyTorch venv, not in CI).

Reads the features that bench_squad_finetune.py wrote (``train.npz``: input_ids,
input_mask, segment_ids, start_positions, end_positions; ``eval.npz``:
unique_ids, input_ids, input_mask, segment_ids), fine-tunes
``BertForQuestionAnswering`` from the all-MiniLM-L6-v2 safetensors (encoder
weights; fresh span head) with AdamW (``--optimizer=adamw``, bias-corrected) or
the original BERT update (``--optimizer=bert_adam``, no bias correction) +
linear warmup/decay, weight decay 0.01 except LayerNorm/bias, global-norm
clipping 1.0, and writes the eval start/end logits to ``--output``.

Progress goes to stderr; the result file is written under a temporary name,
then renamed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import BertConfig, BertForQuestionAnswering


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--train", required=True)
    parser.add_argument("--eval", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--num_train_steps", type=int, required=True)
    parser.add_argument("--num_warmup_steps", type=int, required=True)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--predict_batch_size", type=int, default=64)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--optimizer", choices=["adamw", "bert_adam"], default="adamw",
                        help="torch AdamW (bias-corrected, HF's usual) or the original BERT update "
                        "(no bias correction), as this port's create_optimizer")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    with open(os.path.join(args.model_dir, "config.json"), encoding="utf-8") as f:
        config = BertConfig(**json.load(f))
    model = BertForQuestionAnswering(config)
    state = load_file(os.path.join(args.model_dir, "model.safetensors"))
    state = {k: v for k, v in state.items() if not k.startswith("pooler.") and k != "embeddings.position_ids"}
    missing, unexpected = model.bert.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith("pooler.") and "position_ids" not in k]
    if missing or unexpected:
        sys.exit("weights do not fit: missing %s unexpected %s" % (missing, unexpected))

    train = np.load(args.train)
    n = len(train["input_ids"])
    tensors = {k: torch.from_numpy(train[k].astype(np.int64)) for k in
               ("input_ids", "input_mask", "segment_ids", "start_positions", "end_positions")}
    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {"params": [p for name, p in model.named_parameters() if not any(s in name for s in no_decay)],
         "weight_decay": 0.01},
        {"params": [p for name, p in model.named_parameters() if any(s in name for s in no_decay)],
         "weight_decay": 0.0},
    ]
    if args.optimizer == "adamw":
        optimizer = torch.optim.AdamW(groups, lr=args.learning_rate, eps=1e-6)
    else:
        optimizer = BertAdamWeightDecay(groups, lr=args.learning_rate)

    def lr_lambda(step: int) -> float:
        if step < args.num_warmup_steps:
            return (step + 1) / max(1, args.num_warmup_steps)
        return max(0.0, (args.num_train_steps - step) / max(1, args.num_train_steps - args.num_warmup_steps))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    generator = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(n, generator=generator)
    cursor = 0
    model.train()
    t0 = time.time()
    for step in range(args.num_train_steps):
        if cursor + args.batch_size > n:
            order = torch.randperm(n, generator=generator)
            cursor = 0
        idx = order[cursor:cursor + args.batch_size]
        cursor += args.batch_size
        out = model(input_ids=tensors["input_ids"][idx], attention_mask=tensors["input_mask"][idx],
                    token_type_ids=tensors["segment_ids"][idx],
                    start_positions=tensors["start_positions"][idx],
                    end_positions=tensors["end_positions"][idx])
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if step % 10 == 0 or step == args.num_train_steps - 1:
            rate = (step + 1) / (time.time() - t0)
            print("hf train step %d/%d loss %.4f, %.2f steps/s, ETA %.0fs" % (
                step + 1, args.num_train_steps, out.loss.item(), rate,
                (args.num_train_steps - step - 1) / rate), file=sys.stderr, flush=True)

    evaluation = np.load(args.eval)
    model.eval()
    starts, ends = [], []
    with torch.no_grad():
        m = len(evaluation["input_ids"])
        for i in range(0, m, args.predict_batch_size):
            sl = slice(i, i + args.predict_batch_size)
            out = model(input_ids=torch.from_numpy(evaluation["input_ids"][sl].astype(np.int64)),
                        attention_mask=torch.from_numpy(evaluation["input_mask"][sl].astype(np.int64)),
                        token_type_ids=torch.from_numpy(evaluation["segment_ids"][sl].astype(np.int64)))
            starts.append(out.start_logits.numpy())
            ends.append(out.end_logits.numpy())
            print("hf predict %d/%d" % (min(i + args.predict_batch_size, m), m), file=sys.stderr, flush=True)
    tmp = args.output + ".tmp.npz"
    np.savez(tmp, unique_ids=evaluation["unique_ids"], start_logits=np.concatenate(starts),
             end_logits=np.concatenate(ends), train_seconds=np.float64(time.time() - t0))
    os.replace(tmp, args.output)


if __name__ == "__main__":
    main()

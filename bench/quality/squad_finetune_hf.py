"""HF transformers side of squad_finetune.py (runs in the PyTorch venv, not in CI).

Reads the features that squad_finetune.py wrote (``train.npz``: input_ids,
input_mask, segment_ids, start_positions, end_positions; ``eval.npz``:
unique_ids, input_ids, input_mask, segment_ids), fine-tunes
``BertForQuestionAnswering`` from the all-MiniLM-L6-v2 safetensors (encoder
weights; fresh span head) with AdamW (``--optimizer=adamw``, bias-corrected) or
the original BERT update (``--optimizer=bert_adam``, no bias correction) +
linear warmup/decay, weight decay 0.01 except LayerNorm/bias, global-norm
clipping 1.0, and writes the eval start/end logits to ``--output``.

The learning-rate schedule is the original's, as this port applies it (``modeling/training/schedules.py``):
the update made after t updates uses ``schedule(t + 1)`` = ``lr * (t + 1) / W`` during the
W warmup steps, then ``lr * (1 - (t + 1) / N)`` (decay over all N steps, so the rate drops to
``lr * (1 - W / N)`` when warmup ends).

Matched mode (``--in_order``, ``squad_finetune.py --stages matched``): trains on the rows
of ``--train`` in file order (the exact batches the port trains on), dropout on, span head from
``--head_init``, then evaluates as usual: only the dropout masks differ between the two sides.

Parity mode (``squad_finetune.py --stages parity``): ``--parity_steps K`` trains K steps
on the first K batches of ``train.npz`` in file order, with dropout off and the span head copied
from ``--head_init`` (npz ``w`` [2, H], ``b`` [2]), and writes the per-step losses and learning
rates as JSON to ``--output`` instead of eval logits.

Progress goes to stderr; the result file is written under a temporary name,
then renamed.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import torch
from transformers import BertConfig, BertForQuestionAnswering

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bench import harness  # noqa: E402
from bench.quality.hf_common import (add_torch_args, bert_lr_lambda,  # noqa: E402
                                     create_optimizer, load_encoder_weights)


def main() -> None:
    parser = harness.parser(__doc__, batch_size=16, learning_rate=1e-4, seed=12345)
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--train", required=True)
    parser.add_argument("--eval", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--num_train_steps", type=int, required=True)
    parser.add_argument("--num_warmup_steps", type=int, required=True)
    parser.add_argument("--predict_batch_size", type=int, default=64)
    add_torch_args(parser)
    parser.add_argument("--parity_steps", type=int, default=0,
                        help="parity mode: this many steps in file order, no dropout, no eval")
    parser.add_argument("--head_init", default=None, help="npz (w [2, H], b [2]) for the span head")
    parser.add_argument("--in_order", action="store_true",
                        help="train on the rows of --train in file order (the port's batches, "
                        "matched stage), dropout on, then evaluate as usual")
    args = parser.parse_args()
    parity = args.parity_steps > 0

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    with open(os.path.join(args.model_dir, "config.json"), encoding="utf-8") as f:
        config_dict = json.load(f)
    if parity:
        config_dict.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config = BertConfig(**config_dict)
    model = BertForQuestionAnswering(config)
    load_encoder_weights(model.bert, args.model_dir)
    if args.head_init:
        head = np.load(args.head_init)
        with torch.no_grad():
            model.qa_outputs.weight.copy_(torch.from_numpy(head["w"]))  # [2, H]
            model.qa_outputs.bias.copy_(torch.from_numpy(head["b"]))  # [2]

    train = np.load(args.train)
    n = len(train["input_ids"])
    tensors = {k: torch.from_numpy(train[k].astype(np.int64)) for k in
               ("input_ids", "input_mask", "segment_ids", "start_positions", "end_positions")}
    optimizer = create_optimizer(model, args.optimizer, args.learning_rate)

    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, bert_lr_lambda(args.num_train_steps, args.num_warmup_steps))
    generator = torch.Generator().manual_seed(args.seed)
    in_order = parity or args.in_order
    order = torch.arange(n) if in_order else torch.randperm(n, generator=generator)
    cursor = 0
    model.train()
    t0 = time.time()
    losses, rates = [], []
    steps = args.parity_steps if parity else args.num_train_steps
    for step in range(steps):
        if cursor + args.batch_size > n:
            if in_order:
                sys.exit("%d steps need %d features in order, train has %d"
                         % (steps, steps * args.batch_size, n))
            order = torch.randperm(n, generator=generator)
            cursor = 0
        idx = order[cursor:cursor + args.batch_size]
        cursor += args.batch_size
        out = model(input_ids=tensors["input_ids"][idx], attention_mask=tensors["input_mask"][idx],
                    token_type_ids=tensors["segment_ids"][idx],
                    start_positions=tensors["start_positions"][idx],
                    end_positions=tensors["end_positions"][idx])
        rates.append(optimizer.param_groups[0]["lr"])
        losses.append(out.loss.item())
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if step % 10 == 0 or step == steps - 1:
            rate = (step + 1) / (time.time() - t0)
            print("hf train step %d/%d loss %.4f, %.2f steps/s, ETA %.0fs" % (
                step + 1, steps, losses[-1], rate, (steps - step - 1) / rate),
                file=sys.stderr, flush=True)

    if parity:
        tmp = args.output + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"losses": losses, "learning_rates": rates}, f)
        os.replace(tmp, args.output)
        return
    train_seconds = time.time() - t0  # training only, as the port's side
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
             end_logits=np.concatenate(ends), train_seconds=np.float64(train_seconds),
             learning_rate=np.float64(args.learning_rate),
             num_train_steps=np.int64(args.num_train_steps))
    os.replace(tmp, args.output)


if __name__ == "__main__":
    main()

"""HF transformers side of classifier_finetune.py (runs in the PyTorch venv, not in CI).

Reads the features classifier_finetune.py wrote with run_classifier's converter
(``train.npz``/``dev.npz``: input_ids, input_mask, segment_ids [N, S] and label_ids [N]),
fine-tunes ``BertForSequenceClassification`` from the all-MiniLM-L6-v2 safetensors (encoder and
pooler; fresh classifier) with the paper's recipe as HF runs it: torch AdamW (``--optimizer=adamw``,
bias-corrected; or ``--optimizer=bert_adam``, the original BERT update without bias correction,
as this port's optimizer, for a like-for-like check; weight decay 0.01 except biases and
LayerNorm weights, epsilon 1e-6), linear warmup over ``--warmup_proportion``
then linear decay to 0, global-norm clipping 1.0, dropout 0.1, a fresh shuffle per epoch, each
batch cut to its longest example. Writes the dev logits and the training time to ``--output``
(``.npz``, temporary name then rename). Progress on stderr.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch
from transformers import BertConfig, BertForSequenceClassification

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bench.quality.hf_common import (create_optimizer, finetune_parser,  # noqa: E402
                                     load_encoder_weights, train_epochs)


def _batch(arrays, index, regression):
    length = int(arrays["input_mask"][index].sum(1).max())
    out = {
        "input_ids": torch.from_numpy(arrays["input_ids"][index, :length].astype(np.int64)),
        "attention_mask": torch.from_numpy(arrays["input_mask"][index, :length].astype(np.int64)),
        "token_type_ids": torch.from_numpy(arrays["segment_ids"][index, :length].astype(np.int64)),
    }
    labels = arrays["label_ids"][index]
    out["labels"] = torch.from_numpy(labels.astype(np.float32 if regression else np.int64))
    return out


def main() -> None:
    args = finetune_parser(__doc__).parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    regression = args.num_labels == 1
    with open(os.path.join(args.model_dir, "config.json"), encoding="utf-8") as f:
        config = BertConfig(**json.load(f))
    config.num_labels = args.num_labels
    config.problem_type = "regression" if regression else "single_label_classification"
    model = BertForSequenceClassification(config)
    load_encoder_weights(model.bert, args.model_dir)

    train = dict(np.load(args.train))
    dev = dict(np.load(args.dev))
    n = len(train["input_ids"])
    num_train_steps = int(n / args.batch_size * args.epochs)
    num_warmup_steps = int(num_train_steps * args.warmup_proportion)
    optimizer = create_optimizer(model, args.optimizer, args.learning_rate)

    def schedule(step):  # HF's linear schedule (decay over N - W), as the figures were measured
        if step < num_warmup_steps:
            return step / max(1, num_warmup_steps)
        return max(0.0, (num_train_steps - step) / max(1, num_train_steps - num_warmup_steps))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    generator = np.random.RandomState(args.seed)
    train_seconds = train_epochs(model, optimizer, scheduler, n,
                                 lambda index: _batch(train, index, regression), args.batch_size,
                                 num_train_steps, generator.permutation)

    model.eval()
    logits = []
    with torch.inference_mode():
        for i in range(0, len(dev["input_ids"]), args.eval_batch_size):
            index = np.arange(i, min(i + args.eval_batch_size, len(dev["input_ids"])))
            batch = _batch(dev, index, regression)
            batch.pop("labels")
            logits.append(model(**batch).logits.float().numpy())
    tmp = args.output + ".tmp.npz"
    np.savez(tmp, logits=np.concatenate(logits), train_seconds=train_seconds,
             num_train_steps=num_train_steps)
    os.replace(tmp, args.output)


if __name__ == "__main__":
    main()

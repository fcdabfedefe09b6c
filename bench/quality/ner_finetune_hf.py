"""HF transformers side of the NER fine-tuning benchmark (runs in the PyTorch venv, not in CI).

Reads the token-classification features (``--train``/``--dev`` ``.npz``: input_ids, input_mask,
segment_ids int32 [N, S], label_ids int32 [N, S] with the tag id at the first sub-token of each
scored word and 0 elsewhere, label_weights float32 [N, S], 1.0 where a word's first sub-token is
scored and 0 elsewhere), fine-tunes ``BertForTokenClassification`` from the all-MiniLM-L6-v2
safetensors (encoder weights; no pooler; fresh token classifier, normal std 0.02 and zero bias as
HF initializes it) with the paper's recipe as HF runs it: torch AdamW (``--optimizer=adamw``,
bias-corrected; or ``--optimizer=bert_adam``, the original BERT update without bias correction, as
this port's optimizer; weight decay 0.01 except biases and LayerNorm weights, epsilon 1e-6), the
original's schedule (linear decay to 0 over all steps, a linear warmup over ``--warmup_proportion``
overriding it), global-norm clipping 1.0, dropout 0.1, a fresh shuffle per epoch (torch
generator seeded by ``--seed``), each batch cut to its longest example. The loss is the mean
cross-entropy over the positions with label_weights > 0 in the batch (the other positions get
label -100, HF's ignore index).

Writes the dev logits (float32 [N_dev, S, K], zero past each batch's trimmed length) and the
training time to ``--output`` (``.npz``, temporary name then rename). Progress on stderr.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch
from transformers import BertConfig, BertForTokenClassification

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bench.quality.hf_common import (bert_lr_lambda, create_optimizer,  # noqa: E402
                                     finetune_parser, load_encoder_weights, train_epochs)


def _batch(arrays, index, with_labels):
    length = int(arrays["input_mask"][index].sum(1).max())
    out = {
        "input_ids": torch.from_numpy(arrays["input_ids"][index, :length].astype(np.int64)),
        "attention_mask": torch.from_numpy(arrays["input_mask"][index, :length].astype(np.int64)),
        "token_type_ids": torch.from_numpy(arrays["segment_ids"][index, :length].astype(np.int64)),
    }
    if with_labels:
        labels = arrays["label_ids"][index, :length].astype(np.int64)
        labels = np.where(arrays["label_weights"][index, :length] > 0, labels, -100)
        out["labels"] = torch.from_numpy(labels)
    return out


def main() -> None:
    args = finetune_parser(__doc__).parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    with open(os.path.join(args.model_dir, "config.json"), encoding="utf-8") as f:
        config = BertConfig(**json.load(f))
    config.num_labels = args.num_labels
    model = BertForTokenClassification(config)  # encoder without pooler
    load_encoder_weights(model.bert, args.model_dir)
    with torch.no_grad():  # fresh head as HF's _init_weights makes it
        model.classifier.weight.normal_(0.0, config.initializer_range)
        model.classifier.bias.zero_()

    train = dict(np.load(args.train))
    dev = dict(np.load(args.dev))
    n = len(train["input_ids"])
    num_train_steps = int(n / args.batch_size * args.epochs)
    num_warmup_steps = int(num_train_steps * args.warmup_proportion)
    optimizer = create_optimizer(model, args.optimizer, args.learning_rate)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, bert_lr_lambda(num_train_steps, num_warmup_steps))
    generator = torch.Generator().manual_seed(args.seed)
    train_seconds = train_epochs(
        model, optimizer, scheduler, n, lambda index: _batch(train, index, True),
        args.batch_size, num_train_steps,
        lambda rows: torch.randperm(rows, generator=generator).numpy())

    model.eval()
    m, s = dev["input_ids"].shape
    logits = np.zeros((m, s, args.num_labels), np.float32)
    with torch.inference_mode():
        for i in range(0, m, args.eval_batch_size):
            index = np.arange(i, min(i + args.eval_batch_size, m))
            batch = _batch(dev, index, False)
            out = model(**batch).logits.float().numpy()
            logits[index, :out.shape[1]] = out
    tmp = args.output + ".tmp.npz"
    np.savez(tmp, logits=logits, train_seconds=train_seconds, num_train_steps=num_train_steps)
    os.replace(tmp, args.output)


if __name__ == "__main__":
    main()

"""Check: a model trained and exported here gives the same outputs in HF transformers.

The model is exported with ``convert_checkpoint.py --output_format=hf`` and loaded in Hugging
Face ``transformers`` (not a test: it needs the PyTorch venv ``bench/.venvs/hf``, which CI does
not have).

    .venv/bin/python -m bench hf_export [--work_dir DIR] [--steps 5]

1. pre-trains the tiny model (``../shared/golden/modeling/tiny``) for ``--steps`` steps on
   ``../shared/data/pretrain/sample_text.txt`` (create_pretraining_data.py, run_pretraining.py),
   then fine-tunes it on MRPC for ``--steps`` steps (run_classifier.py; a trainer checkpoint);
2. exports three Hugging Face folders with convert_checkpoint.py: the encoder
   (``BertModel``), the pre-training model (``BertForPreTraining``) and the classifier
   (``BertForSequenceClassification``, MRPC's labels);
3. runs this project's Keras models on MRPC sentence pairs (tokenized by ``FullTokenizer``) and,
   in the HF venv, ``transformers``' classes loaded from the folders (``from_pretrained``,
   eval mode) on the ids ``transformers``' own tokenizer makes of the same pairs;
4. prints the largest differences: token ids must be equal, and sequence/pooled outputs,
   MLM and NSP log-probabilities and classifier logits within 1e-5 (exit 1 otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from bench import harness  # noqa: E402

SHARED = harness.SHARED
TINY = os.path.join(SHARED, "golden", "modeling", "tiny")
VOCAB = os.path.join(SHARED, "data", "vocab", "bert-base-uncased-vocab.txt")
MRPC = os.path.join(SHARED, "data", "glue", "MRPC")
HF_PYTHON = harness.HF_PYTHON
SEQ = 48
TOLERANCE = 1e-5


def _tool(args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
    print("$ python " + " ".join(args), flush=True)
    done = subprocess.run([sys.executable] + [os.path.join(ROOT, args[0])] + args[1:], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode:
        sys.exit(done.stdout[-3000:] + "\n%s failed (exit %d)" % (args[0], done.returncode))


def _pairs(n=8):
    with open(os.path.join(MRPC, "dev.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:n + 1]
    return [(r[3], r[4]) for r in rows]


def train_and_export(work: str, steps: int) -> dict:
    config = os.path.join(TINY, "bert_config.json")
    records = os.path.join(work, "pretraining.tfrecord")
    _tool(["create_pretraining_data.py", "--input_file=" + os.path.join(SHARED, "data", "pretrain",
                                                                         "sample_text.txt"),
           "--output_file=" + records, "--vocab_file=" + VOCAB, "--max_seq_length=%d" % SEQ,
           "--max_predictions_per_seq=8", "--dupe_factor=2"])
    pretrain = os.path.join(work, "pretrain")
    _tool(["run_pretraining.py", "--bert_config_file=" + config, "--input_file=" + records,
           "--output_dir=" + pretrain, "--init_checkpoint=" + os.path.join(TINY, "bert_model.ckpt"),
           "--do_train", "--train_batch_size=8", "--max_seq_length=%d" % SEQ,
           "--max_predictions_per_seq=8", "--num_train_steps=%d" % steps,
           "--num_warmup_steps=1", "--learning_rate=3e-4"])
    exported = os.path.join(pretrain, "export", "bert_model.ckpt")
    classifier = os.path.join(work, "classifier")
    _tool(["run_classifier.py", "--task_name=mrpc", "--data_dir=" + MRPC, "--vocab_file=" + VOCAB,
           "--bert_config_file=" + config, "--init_checkpoint=" + exported,
           "--output_dir=" + classifier, "--do_train", "--max_seq_length=%d" % SEQ,
           "--train_batch_size=8", "--learning_rate=3e-4",
           "--num_train_epochs=%g" % (steps * 8 / 3668.0)])
    import tensorflow as tf

    classifier_ckpt = tf.train.latest_checkpoint(classifier)
    folders = {kind: os.path.join(work, "hf_" + kind) for kind in ("encoder", "pretraining",
                                                                    "classifier")}
    common = ["--output_format=hf", "--bert_config_file=" + config, "--vocab_file=" + VOCAB]
    _tool(["convert_checkpoint.py", "--input=" + exported, "--model=bert",
           "--output=" + folders["encoder"]] + common)
    _tool(["convert_checkpoint.py", "--input=" + exported, "--output=" + folders["pretraining"]]
          + common)
    _tool(["convert_checkpoint.py", "--input=" + classifier_ckpt, "--model=classifier",
           "--task_name=mrpc", "--output=" + folders["classifier"]] + common)
    return dict(folders, exported=exported, classifier_ckpt=classifier_ckpt, config=config)


def our_outputs(paths: dict, out_file: str) -> None:
    sys.path.insert(0, ROOT)
    import modeling
    from data.tokenization import FullTokenizer
    from modeling.heads.classifier import build_classifier_model

    tokenizer = FullTokenizer(VOCAB, do_lower_case=True)
    ids = np.zeros([8, SEQ], np.int32)
    mask, segments = np.zeros_like(ids), np.zeros_like(ids)
    for row, (a, b) in enumerate(_pairs()):
        ta, tb = tokenizer.tokenize(a)[:SEQ // 2 - 2], tokenizer.tokenize(b)[:SEQ // 2 - 2]
        tokens = ["[CLS]"] + ta + ["[SEP]"] + tb + ["[SEP]"]
        ids[row, :len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
        mask[row, :len(tokens)] = 1
        segments[row, len(ta) + 2:len(tokens)] = 1
    inputs = {"input_ids": ids, "input_mask": mask, "segment_ids": segments}
    config = modeling.BertConfig.from_json_file(paths["config"])

    encoder = modeling.BertModel(config)
    modeling.load_checkpoint(encoder, paths["exported"], log=False)
    encoded = encoder(inputs, training=False)
    pretraining = modeling.BertPretrainingModel(config)
    modeling.load_checkpoint(pretraining, paths["exported"], log=False)
    positions = np.tile(np.arange(SEQ, dtype=np.int32), [8, 1])
    heads = pretraining(dict(inputs, masked_lm_positions=positions,
                             masked_lm_ids=np.zeros_like(ids),
                             masked_lm_weights=np.zeros(ids.shape, np.float32),
                             next_sentence_labels=np.zeros([8, 1], np.int32)), training=False)
    classifier = build_classifier_model(config, 2)
    modeling.load_checkpoint(classifier, paths["classifier_ckpt"], log=False)
    logits = classifier(inputs, training=False)["logits"]
    np.savez(out_file, **inputs, sequence_output=encoded["sequence_output"],
             pooled_output=encoded["pooled_output"],
             mlm_log_probs=np.reshape(heads["masked_lm_log_probs"], [8, SEQ, -1]),
             nsp_log_probs=heads["next_sentence_log_probs"], classifier_logits=logits)


# ------------------------------------------------------------------------------ the HF side

def hf_side(work: str) -> int:
    import torch
    import transformers

    ours = np.load(os.path.join(work, "ours.npz"))
    mask = ours["input_mask"].astype(bool)
    pairs = _pairs()
    results, failed = [], False

    def check(name, theirs, mine, where=None):
        nonlocal failed
        theirs, mine = np.asarray(theirs, np.float64), np.asarray(mine, np.float64)
        diff = np.abs(theirs - mine) if where is None else np.abs(theirs - mine)[where]
        worst = float(diff.max())
        failed |= not worst <= TOLERANCE
        results.append("%-42s max |diff| %.2e %s" % (name, worst,
                                                     "ok" if worst <= TOLERANCE else "FAIL"))

    tokenizer = transformers.AutoTokenizer.from_pretrained(os.path.join(work, "hf_encoder"))
    # The same pairs, cut per segment as the Keras side did, through transformers' tokenizer.
    their_ids = np.zeros_like(ours["input_ids"])
    for row, (a, b) in enumerate(pairs):
        ta = tokenizer.encode(a, add_special_tokens=False)[:SEQ // 2 - 2]
        tb = tokenizer.encode(b, add_special_tokens=False)[:SEQ // 2 - 2]
        row_ids = [tokenizer.cls_token_id] + ta + [tokenizer.sep_token_id] + tb + [
            tokenizer.sep_token_id]
        their_ids[row, :len(row_ids)] = row_ids
    ids_equal = bool((their_ids == ours["input_ids"]).all())
    failed |= not ids_equal
    results.append("%-42s %s" % ("token ids (transformers' BertTokenizer)",
                                 "equal" if ids_equal else "DIFFERENT"))

    feed = {"input_ids": torch.tensor(their_ids, dtype=torch.long),
            "attention_mask": torch.tensor(ours["input_mask"], dtype=torch.long),
            "token_type_ids": torch.tensor(ours["segment_ids"], dtype=torch.long)}
    def load(cls, folder):
        nonlocal failed
        model, info = cls.from_pretrained(os.path.join(work, folder), output_loading_info=True)
        # A tensor transformers had to initialise itself would be random, not exported.
        missing = [k for k in info["missing_keys"] if not k.endswith("position_ids")]
        failed |= bool(missing or info["mismatched_keys"])
        results.append("%-42s %s" % (cls.__name__ + " loading", "complete" if not missing else
                                     "MISSING %s" % missing))
        return model.eval()

    with torch.no_grad():
        model = load(transformers.BertModel, "hf_encoder")
        out = model(**feed)
        check("BertModel last_hidden_state (real tokens)", out.last_hidden_state.numpy(),
              ours["sequence_output"], mask)
        check("BertModel pooler_output", out.pooler_output.numpy(), ours["pooled_output"])
        model = load(transformers.BertForPreTraining, "hf_pretraining")
        out = model(**feed)
        check("BertForPreTraining MLM log-probs (real tokens)",
              torch.log_softmax(out.prediction_logits, -1).numpy(), ours["mlm_log_probs"], mask)
        check("BertForPreTraining NSP log-probs",
              torch.log_softmax(out.seq_relationship_logits, -1).numpy(), ours["nsp_log_probs"])
        model = load(transformers.BertForSequenceClassification, "hf_classifier")
        out = model(**feed)
        check("BertForSequenceClassification logits", out.logits.numpy(),
              ours["classifier_logits"])
        results.append("%-42s %s" % ("classifier id2label", json.dumps(model.config.id2label)))
    print("transformers %s, torch %s" % (transformers.__version__, torch.__version__))
    print("\n".join(results))
    print("FAILED" if failed else "all within %g" % TOLERANCE)
    return 1 if failed else 0


def main() -> int:
    parser = harness.parser(__doc__, work_dir=None,
                            helps={"work_dir": "default: a new temporary folder"})
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--side", choices=["ours", "hf"], default="ours", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side == "hf":
        return hf_side(args.work_dir)
    if not os.path.exists(HF_PYTHON):
        sys.exit("%s missing: create it with `python -m bench inference --setup_only "
                 "--skip_kerashub` (torch + transformers)" % HF_PYTHON)
    work = args.work_dir or tempfile.mkdtemp(prefix="check_hf_export.")
    os.makedirs(work, exist_ok=True)
    paths = train_and_export(work, args.steps)
    our_outputs(paths, os.path.join(work, "ours.npz"))
    return subprocess.run([HF_PYTHON, os.path.abspath(__file__), "--side=hf",
                           "--work_dir=" + work]).returncode


if __name__ == "__main__":
    sys.exit(main())

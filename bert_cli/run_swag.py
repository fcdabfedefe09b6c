"""BERT fine-tuning runner for SWAG (multiple choice over 4 endings, BERT paper §4.4).

Flags in run_classifier's style: ``--data_dir`` (``train.csv``/``val.csv``/``test.csv`` in the
swagaf layout, or ``train.jsonl``/``val.jsonl``/``test.jsonl``) or explicit ``--train_file``,
``--eval_file``, ``--predict_file``; ``--bert_config_file``, ``--vocab_file``, ``--output_dir``,
``--init_checkpoint``, ``--do_lower_case``, ``--max_seq_length=128``,
``--do_train``/``--do_eval``/``--do_predict``, batch sizes 16/8/8, ``--learning_rate=2e-5``,
``--num_train_epochs=3.0``, ``--warmup_proportion=0.1``, ``--save_checkpoints_steps``,
the shared ``--strategy``/``--use_tpu``/TPU flags, ``--mixed_precision``, ``--use_xla``
(``modeling/training/distribution.py``), ``--length_aware_batching``, ``--random_seed``.

Each example is 4 sequences ``[CLS] sent1 [SEP] sent2 endingN [SEP]`` (``data/swag.py``); the
head scores each pooled output with one learned vector and takes a softmax over the 4
(``modeling/heads/multiple_choice.py``). Writes ``train.tf_record``/``eval.tf_record``/
``predict.tf_record``, checkpoints ``model.ckpt-<step>``, ``eval_results.txt``
(``eval_accuracy``, ``eval_loss``, ``global_step``, ``loss``) and ``test_results.tsv`` (4
probabilities per example) into ``--output_dir``. Bad input: one line on stderr, exit code 1.
"""

from __future__ import annotations

import os
from typing import Dict, List

from absl import flags, logging

from bert_cli import flags as cli_flags
from bert_cli import finetuning as cli_finetuning
from bert_cli import runner
from bert_cli.flags import FlagError

FLAGS = flags.FLAGS
TOOL = "run_swag.py"
REQUIRED = ("vocab_file", "bert_config_file", "output_dir")

_SPLIT_FILES = {"train": "train", "eval": "val", "predict": "test"}


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The original's flags plus this port's."""
    define = cli_flags.definer(flag_values)

    define("string", "data_dir", None, "Folder with train/val/test .csv (swagaf) or .jsonl.")
    define("string", "train_file", None, "Training file (default: <data_dir>/train.csv|jsonl).")
    define("string", "eval_file", None, "Labelled eval file (default: <data_dir>/val.csv|jsonl).")
    define("string", "predict_file", None, "File to predict (default: <data_dir>/test.csv|jsonl).")
    define("string", "bert_config_file", None, "The config json file of the pre-trained model.")
    define("string", "vocab_file", None, "The vocabulary file that the BERT model was trained on.")
    define("string", "output_dir", None, "Where records, checkpoints and results are written.")
    define("string", "init_checkpoint", None, "Initial checkpoint: TF1 prefix/folder, HF "
           "folder or .safetensors, .keras or .weights.h5.")
    define("bool", "do_lower_case", True, "Whether to lower case the input text.")
    define("integer", "max_seq_length", 128, "Maximum length of each of the 4 sequences.")
    define("bool", "do_train", False, "Whether to run training.")
    define("bool", "do_eval", False, "Whether to run eval on the labelled eval file.")
    define("bool", "do_predict", False, "Whether to write test_results.tsv for predict_file.")
    define("integer", "train_batch_size", 16, "Total batch size for training (examples).")
    define("integer", "eval_batch_size", 8, "Total batch size for eval.")
    define("integer", "predict_batch_size", 8, "Total batch size for predict.")
    define("float", "learning_rate", 2e-5, "The initial learning rate for Adam.")
    define("float", "num_train_epochs", 3.0, "Total number of training epochs to perform.")
    define("float", "warmup_proportion", 0.1, "Proportion of training for linear warmup.")
    define("integer", "save_checkpoints_steps", 1000, "How often to save the model checkpoint.")
    define("integer", "iterations_per_loop", 1000, "Steps between progress lines (at most 100).")
    define("bool", "length_aware_batching", True, "Group eval/predict examples by length and "
           "cut every batch to its longest sequence (off on TPU).")
    define("bool", "fast_tokenizer", True, "Use FastFullTokenizer (same output).")
    define("integer", "random_seed", 12345, "Seed of the shuffle, dropout and head init.")
    # --strategy, --use_tpu and the original's TPU flags, --mixed_precision, --use_xla: shared.
    cli_flags.define_distribution_flags(flag_values)
    cli_flags.define_precision_flags(flag_values)


def split_file(fv: flags.FlagValues, split: str) -> str:
    """The file of ``split`` (train/eval/predict): its flag, else found in --data_dir."""
    explicit = getattr(fv, "%s_file" % split)
    if explicit:
        if not os.path.isfile(explicit):
            raise FlagError("--%s_file=%s: no such file" % (split, explicit))
        return explicit
    if not fv.data_dir:
        raise FlagError("--do_%s needs --%s_file or --data_dir" % (split, split))
    if not os.path.isdir(fv.data_dir):
        raise FlagError("--data_dir=%s: no such directory" % fv.data_dir)
    stem = _SPLIT_FILES[split]
    for ext in (".csv", ".jsonl"):
        path = os.path.join(fv.data_dir, stem + ext)
        if os.path.isfile(path):
            return path
    raise FlagError("--data_dir=%s has no %s split (expected %s.csv or %s.jsonl)"
                        % (fv.data_dir, split, stem, stem))


def _dataset(fv: flags.FlagValues, path: str, batch_size: int, is_training: bool, tpu: bool):
    from data import swag
    from data.glue import dataset as classifier_input

    length_aware = fv.length_aware_batching and not tpu
    return classifier_input.make_dataset(
        path, lambda r: swag.parse_example(r, fv.max_seq_length), batch_size, is_training,
        drop_remainder=tpu or is_training, trim=length_aware,
        bucket=length_aware and not is_training, max_seq_length=fv.max_seq_length,
        seed=fv.random_seed)


def _loss_fn(outputs, batch):
    from modeling.heads import classifier as classifier_head

    return classifier_head.classification_loss(outputs["logits"], batch["label_ids"])


def predict_file(fv: flags.FlagValues, model, examples: List, tokenizer, record_file: str, batch_size: int,
                 strategy) -> Dict:
    """Writes ``record_file``; returns logits/probabilities/labels in example order."""
    from data import swag
    from data.glue import dataset as classifier_input
    from modeling.training import distribution
    from modeling.training import finetuning

    tpu = distribution.is_tpu(strategy)
    n = len(examples)
    if tpu and n % batch_size:  # static shapes: repeat the last example, dropped below
        examples = list(examples) + [examples[-1]] * (-n % batch_size)
    swag.write_tf_records(examples, fv.max_seq_length, tokenizer, record_file)
    out = finetuning.predict(model, _dataset(fv, record_file, batch_size, False, tpu),
                             ["logits", "probabilities"], total=len(examples),
                             strategy=strategy, label=os.path.basename(record_file))
    order = out.pop(classifier_input.EXAMPLE_INDEX)
    return {k: classifier_input.restore_order(order, v)[:n] for k, v in out.items()}


def run(fv: flags.FlagValues) -> None:
    import numpy as np

    from data import swag
    from data.glue import metrics as glue_metrics
    from bert_common.files import atomic_open
    from modeling.training import distribution
    from modeling.training import finetuning
    from modeling.heads import multiple_choice as multiple_choice_head
    from modeling.config import BertConfig

    logging.set_verbosity(logging.INFO)
    bert_config = BertConfig.from_json_file(fv.bert_config_file)
    if not (fv.do_train or fv.do_eval or fv.do_predict):
        raise FlagError("At least one of `do_train`, `do_eval` or `do_predict` must be True.")
    if fv.max_seq_length > bert_config.max_position_embeddings:
        raise FlagError("Cannot use sequence length %d because the BERT model was only "
                            "trained up to sequence length %d"
                            % (fv.max_seq_length, bert_config.max_position_embeddings))
    examples = {}
    for split, wanted in (("train", fv.do_train), ("eval", fv.do_eval),
                          ("predict", fv.do_predict)):
        if wanted:
            examples[split] = swag.read_swag_examples(split_file(fv, split))
    for split in ("train", "eval"):
        unlabelled = [e.origin for e in examples.get(split, []) if e.label is None]
        if unlabelled:
            raise FlagError("%s: no label, but the %s split needs labels" % (unlabelled[0],
                                                                                split))
    strategy = cli_flags.strategy_from_flags(fv)  # before any other TF op
    precision = cli_flags.precision_from_flags(fv)  # sets the Keras dtype policy
    tpu = distribution.is_tpu(strategy)
    tokenizer = cli_finetuning.init_run(fv)  # --output_dir, --random_seed
    with strategy.scope():
        model = multiple_choice_head.build_multiple_choice_model(
            bert_config, swag.NUM_CHOICES, seq_length=fv.max_seq_length if tpu else None)
    init_checkpoint = cli_finetuning.restore_checkpoint(model, fv, "evaluate or predict")
    global_step = 0 if fv.do_train else cli_finetuning.checkpoint_step(init_checkpoint)

    if fv.do_train:
        train_examples = examples["train"]
        num_train_steps = cli_finetuning.count_train_steps(len(train_examples), fv)
        train_file = os.path.join(fv.output_dir, "train.tf_record")
        swag.write_tf_records(train_examples, fv.max_seq_length, tokenizer, train_file)
        logging.info("***** Running training: %d examples, batch %d, %d steps *****",
                     len(train_examples), fv.train_batch_size, num_train_steps)
        with strategy.scope():
            optimizer = finetuning.make_optimizer(
                fv.learning_rate, num_train_steps,
                int(num_train_steps * fv.warmup_proportion), precision.loss_scale, tpu)
        finetuning.train(model, optimizer, _dataset(fv, train_file, fv.train_batch_size, True, tpu),
                         num_train_steps, _loss_fn, strategy=strategy,
                         log_every=max(1, min(100, fv.iterations_per_loop)),
                         on_save=cli_finetuning.checkpoint_saver(model, fv.output_dir),
                         save_every=fv.save_checkpoints_steps, use_xla=fv.use_xla)
        global_step = num_train_steps

    if fv.do_eval:
        result = predict_file(fv, model, examples["eval"], tokenizer,
                              os.path.join(fv.output_dir, "eval.tf_record"),
                              fv.eval_batch_size, strategy)
        labels = np.array([e.label for e in examples["eval"]])
        logits = result["logits"].astype(np.float64)
        log_probs = logits - logits.max(-1, keepdims=True)
        log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
        loss = float(-np.mean(log_probs[np.arange(len(labels)), labels]))
        metrics = {"eval_accuracy": glue_metrics.accuracy(np.argmax(logits, -1), labels),
                   "eval_loss": loss, "loss": loss, "global_step": global_step}
        finetuning.write_eval_results(os.path.join(fv.output_dir, "eval_results.txt"), metrics)

    if fv.do_predict:
        result = predict_file(fv, model, examples["predict"], tokenizer,
                              os.path.join(fv.output_dir, "predict.tf_record"),
                              fv.predict_batch_size, strategy)
        path = os.path.join(fv.output_dir, "test_results.tsv")
        with atomic_open(path) as writer:
            for probabilities in result["probabilities"]:
                writer.write("\t".join(str(np.float32(p)) for p in probabilities) + "\n")
        logging.info("wrote %s", path)


def main(argv) -> None:
    runner.run_main(TOOL, run, FLAGS, argv)


def entry() -> None:
    """``python run_swag.py`` / the ``bert-run-swag`` command."""
    runner.start(define_flags, main, REQUIRED)

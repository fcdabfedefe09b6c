"""Run BERT on SQuAD 1.1 and SQuAD 2.0 (the original ``run_squad.py``, TF2 / Keras 3).

Flags are the original's (``--bert_config_file``, ``--vocab_file``, ``--output_dir``,
``--train_file``, ``--predict_file``, ``--init_checkpoint``, ``--do_lower_case``,
``--max_seq_length=384``, ``--doc_stride=128``, ``--max_query_length=64``, ``--do_train``,
``--do_predict``, batch sizes, ``--learning_rate``, ``--num_train_epochs``,
``--warmup_proportion``, ``--save_checkpoints_steps``, ``--n_best_size=20``,
``--max_answer_length=30``, ``--verbose_logging``, ``--version_2_with_negative``,
``--null_score_diff_threshold=0.0``, TPU flags) plus the shared ``--strategy``, ``--mixed_precision`` (bf16|fp16) and ``--use_xla``
(``modeling/training/distribution.py``), ``--export_dir``, ``--fast_tokenizer`` and ``--random_seed``.

``--do_train`` writes ``train.tf_record``, fine-tunes and saves a TF1-named checkpoint
``model.ckpt-<steps>`` in ``--output_dir``. ``--do_predict`` writes ``eval.tf_record``,
``predictions.json``, ``nbest_predictions.json``, ``null_odds.json`` (v2.0) and, when the
predict file has answers, ``eval_results.json`` with the official scores (v2.0: with the null
odds, so the best threshold on the file is reported too). ``--export_dir`` writes a SavedModel
whose ``serving_default`` signature maps ``question``/``context`` strings to ``answer_text``,
``answer_start``/``answer_end`` (character span) and ``score`` (see ``data/squad/serving.py``).

Bad input is one line on stderr and exit code 1; outputs are written atomically.
"""

from __future__ import annotations

import json
import os
import random
from typing import List, Optional

from absl import flags, logging

from bert_cli import flags as cli_flags
from bert_cli import finetuning as cli_finetuning
from bert_cli import runner
from bert_cli.flags import FlagError

FLAGS = flags.FLAGS
TOOL = "run_squad.py"
REQUIRED = ("vocab_file", "bert_config_file", "output_dir")



def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The original's flags plus this port's."""
    define = cli_flags.definer(flag_values)

    define("string", "bert_config_file", None, "The config json file of the pre-trained BERT model.")
    define("string", "vocab_file", None, "The vocabulary file that the BERT model was trained on.")
    define("string", "output_dir", None, "Where checkpoints, TFRecords and predictions are written.")
    define("string", "train_file", None, "SQuAD json for training. E.g., train-v1.1.json")
    define("string", "predict_file", None, "SQuAD json for predictions. E.g., dev-v1.1.json")
    define("string", "init_checkpoint", None, "Initial checkpoint: TF1 prefix/folder, HF folder, "
           ".keras or .weights.h5 (usually a pre-trained BERT model).")
    define("bool", "do_lower_case", True, "Lower case the input text (uncased models).")
    define("integer", "max_seq_length", 384, "Maximum total input length after WordPiece.")
    define("integer", "doc_stride", 128, "Stride between the windows of a long document.")
    define("integer", "max_query_length", 64, "Questions longer than this are truncated.")
    define("bool", "do_train", False, "Whether to run training.")
    define("bool", "do_predict", False, "Whether to run eval on the dev set.")
    define("integer", "train_batch_size", 32, "Total batch size for training.")
    define("integer", "predict_batch_size", 8, "Total batch size for predictions.")
    define("float", "learning_rate", 5e-5, "The initial learning rate for Adam.")
    define("float", "num_train_epochs", 3.0, "Total number of training epochs to perform.")
    define("float", "warmup_proportion", 0.1, "Proportion of training for linear warmup.")
    define("integer", "save_checkpoints_steps", 1000, "How often to save the model checkpoint.")
    define("integer", "iterations_per_loop", 1000, "Steps per compiled loop call (TPU); kept "
           "for compatibility, progress is logged at this interval at most.")
    define("integer", "n_best_size", 20, "The number of n-best predictions in nbest_predictions.json.")
    define("integer", "max_answer_length", 30, "The maximum length of an answer, in tokens.")
    define("bool", "verbose_logging", False, "Print all data-processing warnings.")
    define("bool", "version_2_with_negative", False, "SQuAD 2.0: some questions have no answer.")
    define("float", "null_score_diff_threshold", 0.0,
           "If null_score - best_non_null is greater than the threshold predict null.")
    # This port's flags: --strategy, --use_tpu and the original's TPU flags, --mixed_precision,
    # --use_xla (shared with the other tools, bert_cli/flags.py).
    cli_flags.define_distribution_flags(flag_values)
    cli_flags.define_precision_flags(flag_values)
    define("string", "export_dir", None, "Write a raw-text SavedModel (question, context -> "
           "answer text and span) here.")
    define("bool", "fast_tokenizer", True, "Use FastFullTokenizer (same output as FullTokenizer).")
    define("integer", "random_seed", 12345, "Seed of the training-example shuffle and the TF ops.")


# ---------------------------------------------------------------------------------- checks


def validate_flags_or_throw(fv: flags.FlagValues, bert_config) -> None:
    """The original's checks, plus the ones a missing file would otherwise turn into a traceback."""
    if not fv.do_train and not fv.do_predict and not fv.export_dir:
        raise FlagError("At least one of `do_train`, `do_predict` or `export_dir` must be set.")
    if fv.do_train and not fv.train_file:
        raise FlagError("If `do_train` is True, then `train_file` must be specified.")
    if fv.do_predict and not fv.predict_file:
        raise FlagError("If `do_predict` is True, then `predict_file` must be specified.")
    for name, used in (("train_file", fv.do_train), ("predict_file", fv.do_predict)):
        path = getattr(fv, name)
        if used and not os.path.isfile(path):
            raise FlagError("--%s=%s: no such file" % (name, path))
    if fv.max_seq_length > bert_config.max_position_embeddings:
        raise FlagError(
            "Cannot use sequence length %d because the BERT model was only trained up to "
            "sequence length %d" % (fv.max_seq_length, bert_config.max_position_embeddings))
    if fv.max_seq_length <= fv.max_query_length + 3:
        raise FlagError("The max_seq_length (%d) must be greater than max_query_length (%d) + 3"
                             % (fv.max_seq_length, fv.max_query_length))
    if fv.doc_stride <= 0:
        raise FlagError("--doc_stride=%d must be positive" % fv.doc_stride)
    for name in ("train_batch_size", "predict_batch_size", "n_best_size", "max_answer_length"):
        if getattr(fv, name) <= 0:
            raise FlagError("--%s=%d must be positive" % (name, getattr(fv, name)))


# ---------------------------------------------------------------------------------- wiring


def build_model(bert_config, seq_length: int):
    from modeling.heads import squad as squad_head

    return squad_head.build_squad_model(bert_config, seq_length=seq_length)


def make_optimizer(learning_rate: float, num_train_steps: int, num_warmup_steps: int,
                   loss_scale=None, use_tpu: bool = False):
    """The original's AdamWeightDecay schedule (via ``modeling.training.finetuning.make_optimizer``)."""
    from modeling.training import finetuning

    return finetuning.make_optimizer(learning_rate, num_train_steps, num_warmup_steps,
                                     loss_scale=loss_scale, use_tpu=use_tpu)


def train_squad(model, optimizer, train_file: str, seq_length: int, batch_size: int,
                num_train_steps: int, output_dir: Optional[str] = None,
                save_checkpoints_steps: int = 0, log_every: int = 10, seed: Optional[int] = None,
                strategy=None, use_xla: bool = False) -> List[float]:
    """Fine-tunes ``model`` on a training TFRecord for ``num_train_steps`` steps; returns the losses.

    Runs ``modeling.training.finetuning.train`` with ``squad_head.per_example_squad_loss`` (batch mean =
    the original's (start loss + end loss) / 2); progress (step, loss, steps/s, ETA) goes to
    stderr. With ``output_dir`` a TF1-named checkpoint ``model.ckpt-<step>`` is written every
    ``save_checkpoints_steps`` steps and at the end.
    """
    from data.squad import dataset as squad_input
    from modeling.training import finetuning
    from modeling.heads import squad as squad_head

    dataset = squad_input.make_dataset(train_file, seq_length, True, batch_size,
                                       drop_remainder=True, seed=seed)
    save = cli_finetuning.checkpoint_saver(model, output_dir) if output_dir else None
    return finetuning.train(model, optimizer, dataset, num_train_steps,
                            squad_head.per_example_squad_loss, strategy=strategy,
                            log_every=log_every, on_save=save,
                            save_every=save_checkpoints_steps, use_xla=use_xla)


def predict_raw_results(model, eval_file: str, seq_length: int, batch_size: int, strategy=None):
    """``RawResult``s (float32 logits as python floats) for every record of an eval TFRecord."""
    import numpy as np
    import tensorflow as tf

    from data.squad import features as squad
    from data.squad import dataset as squad_input
    from modeling.training import finetuning

    dataset = squad_input.make_dataset(eval_file, seq_length, False, batch_size, drop_remainder=False)
    total = sum(1 for _ in tf.data.TFRecordDataset(eval_file))
    out = finetuning.predict(model, dataset, ["start_logits", "end_logits"], total=total,
                             strategy=strategy)
    start_logits = out["start_logits"].astype(np.float32)  # [N, S]
    end_logits = out["end_logits"].astype(np.float32)  # [N, S]
    return [squad.RawResult(unique_id=int(u), start_logits=s.tolist(), end_logits=e.tolist())
            for u, s, e in zip(out["unique_ids"], start_logits, end_logits)]


def _has_answers(input_file: str) -> bool:
    """Whether any question of a SQuAD file carries a non-empty ``answers`` list."""
    with open(input_file, encoding="utf-8") as f:
        data = json.load(f)["data"]
    return any(qa.get("answers") for article in data for paragraph in article["paragraphs"]
               for qa in paragraph["qas"])


def run_predict(fv: flags.FlagValues, model, tokenizer, eval_examples, output_dir: str, strategy=None) -> Optional[dict]:
    """--do_predict: features, logits, the three JSON files, and the official scores if possible."""
    from data.squad import features as squad
    from data.squad import evaluate as squad_eval
    from bert_common.files import atomic_open

    eval_features = []
    with squad.FeatureWriter(os.path.join(output_dir, "eval.tf_record"), is_training=False) as writer:
        def append_feature(feature):
            eval_features.append(feature)
            writer.process_feature(feature)

        squad.convert_examples_to_features(
            eval_examples, tokenizer, fv.max_seq_length, fv.doc_stride, fv.max_query_length,
            is_training=False, output_fn=append_feature, show_progress=True)
    logging.info("***** Running predictions *****")
    logging.info("  Num orig examples = %d", len(eval_examples))
    logging.info("  Num split examples = %d", len(eval_features))
    logging.info("  Batch size = %d", fv.predict_batch_size)

    all_results = predict_raw_results(model, writer.filename, fv.max_seq_length,
                                      fv.predict_batch_size, strategy=strategy)
    prediction_file = os.path.join(output_dir, "predictions.json")
    null_odds_file = os.path.join(output_dir, "null_odds.json")
    squad.write_predictions(
        eval_examples, eval_features, all_results, fv.n_best_size, fv.max_answer_length,
        fv.do_lower_case, prediction_file, os.path.join(output_dir, "nbest_predictions.json"),
        null_odds_file, version_2_with_negative=fv.version_2_with_negative,
        null_score_diff_threshold=fv.null_score_diff_threshold,
        verbose_logging=fv.verbose_logging)

    if not _has_answers(fv.predict_file):
        logging.info("predict file has no answers: no official scores")
        return None
    notes = []
    scores = squad_eval.evaluate_files(
        fv.predict_file, prediction_file,
        na_prob_file=null_odds_file if fv.version_2_with_negative else None, notify=notes.append)
    for note in notes[:5]:
        logging.warning("squad_eval: %s", note)
    with atomic_open(os.path.join(output_dir, "eval_results.json")) as f:
        f.write(json.dumps(scores, indent=2) + "\n")
    print(json.dumps(scores))
    if "best_f1_thresh" in scores:
        print("best null_score_diff_threshold on %s: %.6f (best_f1 %.2f, best_exact %.2f at %.6f); "
              "rerun with --null_score_diff_threshold=%.6f to use it"
              % (fv.predict_file, scores["best_f1_thresh"], scores["best_f1"],
                 scores["best_exact"], scores["best_exact_thresh"], scores["best_f1_thresh"]))
    return scores


def run(fv: flags.FlagValues) -> None:
    from data.squad import features as squad
    from modeling.config import BertConfig

    logging.set_verbosity(logging.INFO)
    bert_config = BertConfig.from_json_file(fv.bert_config_file)
    validate_flags_or_throw(fv, bert_config)
    # Read the inputs first: a bad file fails before any model is built.
    train_examples = eval_examples = None
    if fv.do_train:
        train_examples = squad.read_squad_examples(
            fv.train_file, is_training=True, version_2_with_negative=fv.version_2_with_negative)
        if not train_examples:
            raise FlagError("--train_file=%s: no usable training question" % fv.train_file)
    if fv.do_predict:
        eval_examples = squad.read_squad_examples(
            fv.predict_file, is_training=False, version_2_with_negative=fv.version_2_with_negative)
    tokenizer = cli_finetuning.init_run(fv)  # --output_dir, --random_seed

    from modeling.training import distribution

    strategy = cli_flags.strategy_from_flags(fv)  # before any other TF op
    precision = cli_flags.precision_from_flags(fv)  # sets the Keras dtype policy
    with strategy.scope():
        model = build_model(bert_config, fv.max_seq_length)
    cli_finetuning.restore_checkpoint(model, fv, "predict or export")

    if fv.do_train:
        num_train_steps = cli_finetuning.count_train_steps(len(train_examples), fv)
        num_warmup_steps = int(num_train_steps * fv.warmup_proportion)
        # Pre-shuffle so that a small shuffle buffer suffices, as the original.
        random.Random(fv.random_seed).shuffle(train_examples)
        with squad.FeatureWriter(os.path.join(fv.output_dir, "train.tf_record"),
                                 is_training=True) as train_writer:
            squad.convert_examples_to_features(
                train_examples, tokenizer, fv.max_seq_length, fv.doc_stride,
                fv.max_query_length, is_training=True, output_fn=train_writer.process_feature,
                show_progress=True)
        logging.info("***** Running training *****")
        logging.info("  Num orig examples = %d", len(train_examples))
        logging.info("  Num split examples = %d", train_writer.num_features)
        logging.info("  Batch size = %d", fv.train_batch_size)
        logging.info("  Num steps = %d", num_train_steps)
        with strategy.scope():
            optimizer = make_optimizer(fv.learning_rate, num_train_steps, num_warmup_steps,
                                       precision.loss_scale, distribution.is_tpu(strategy))
        train_squad(model, optimizer, train_writer.filename, fv.max_seq_length,
                    fv.train_batch_size, num_train_steps, output_dir=fv.output_dir,
                    save_checkpoints_steps=fv.save_checkpoints_steps,
                    log_every=min(100, max(1, fv.iterations_per_loop)), seed=fv.random_seed,
                    strategy=strategy, use_xla=fv.use_xla)

    if fv.do_predict:
        run_predict(fv, model, tokenizer, eval_examples, fv.output_dir, strategy=strategy)

    if fv.export_dir:
        from data.squad import serving as squad_serving

        squad_serving.export_saved_model(
            model, fv.export_dir, fv.vocab_file, do_lower_case=fv.do_lower_case,
            max_seq_length=fv.max_seq_length, max_query_length=fv.max_query_length,
            max_answer_length=fv.max_answer_length,
            version_2_with_negative=fv.version_2_with_negative,
            null_score_diff_threshold=fv.null_score_diff_threshold)
        logging.info("exported raw-text SavedModel to %s", fv.export_dir)


def main(argv) -> None:
    runner.run_main(TOOL, run, FLAGS, argv)


def entry() -> None:
    """``python run_squad.py`` / the ``bert-run-squad`` command."""
    runner.start(define_flags, main, REQUIRED)

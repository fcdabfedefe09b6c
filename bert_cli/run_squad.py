"""Run BERT on SQuAD 1.1 and SQuAD 2.0 (the original ``run_squad.py``, TF2 / Keras 3).

Flags are the original's (``--bert_config_file``, ``--vocab_file``, ``--output_dir``,
``--train_file``, ``--predict_file``, ``--init_checkpoint``, ``--do_lower_case``,
``--max_seq_length=384``, ``--doc_stride=128``, ``--max_query_length=64``, ``--do_train``,
``--do_predict``, batch sizes, ``--learning_rate``, ``--num_train_epochs``,
``--warmup_proportion``, ``--save_checkpoints_steps``, ``--n_best_size=20``,
``--max_answer_length=30``, ``--verbose_logging``, ``--version_2_with_negative``,
``--null_score_diff_threshold=0.0``, TPU flags) plus the shared ``--strategy``,
``--mixed_precision`` (bf16|fp16) and ``--use_xla`` (``bert_cli/flags.py``), ``--export_dir``,
``--length_aware_batching``, ``--fast_tokenizer`` and ``--random_seed``.

``--do_train`` writes ``train.tf_record`` and fine-tunes on the one trainer: checkpoints
``model.ckpt-<step>`` in ``--output_dir`` (weights, optimizer state, data position: a rerun
resumes, as the original Estimator's ``model_dir``) and TensorBoard summaries in ``train/``. ``--do_predict`` writes ``eval.tf_record``,
``predictions.json``, ``nbest_predictions.json``, ``null_odds.json`` (v2.0) and, when the
predict file has answers, ``eval_results.json`` with the official scores (v2.0: with the null
odds, so the best threshold on the file is reported too; v1.1 scoring needs an answer for every
question, else a warning and predictions only). These files are written together: all renamed
into place only when every one is written (a failure leaves the previous ones). ``--export_dir`` is a TF Serving
model base path: each run adds the next version ``<export_dir>/1``, ``2``, ..., a SavedModel
whose ``serving_default`` signature maps ``question``/``context`` strings to ``answer_text``,
``answer_start``/``answer_end`` (character span) and ``score`` (see ``data/squad/serving.py``).

Bad input is one line on stderr and exit code 1; outputs are written atomically.
"""

from __future__ import annotations

import json
import os

from absl import flags, logging

from bert_cli import flags as cli_flags
from bert_cli import finetuning as cli_finetuning
from bert_cli import runner
from bert_cli.flags import FlagError
from bert_common import files

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
    cli_flags.define_checkpoint_flags(flag_values)
    define("string", "export_dir", None, "TF Serving model base path, e.g. models/squad: "
           "writes a raw-text SavedModel (question, context -> answer text and span) as its "
           "next version <export_dir>/1, 2, ... (the folder may hold only version folders).")
    define("bool", "length_aware_batching", True, "Run each batch at its longest window "
           "(predict: windows sorted by length first). Padding positions are then not "
           "computed: they leave the training loss's softmax and the n-best search. "
           "--nolength_aware_batching: the original's padded path exactly. Off on TPU.")
    define("bool", "fast_tokenizer", True, "Use FastFullTokenizer (same output as FullTokenizer).")
    define("integer", "random_seed", 12345, "Seed of the training-example shuffle and the TF ops.")


# ---------------------------------------------------------------------------------- checks


def validate_flags_or_throw(fv: flags.FlagValues, bert_config) -> None:
    """The original's checks, plus the ones a missing file would otherwise turn into a traceback."""
    cli_flags.check_values(fv)  # NaN/negative rates, batch 0, ...: before any data is read
    if not fv.do_train and not fv.do_predict and not fv.export_dir:
        raise FlagError("At least one of `do_train`, `do_predict` or `export_dir` must be set.")
    if fv.do_train and not fv.train_file:
        raise FlagError("If `do_train` is True, then `train_file` must be specified.")
    if fv.do_predict and not fv.predict_file:
        raise FlagError("If `do_predict` is True, then `predict_file` must be specified.")
    for name, used in (("train_file", fv.do_train), ("predict_file", fv.do_predict)):
        path = getattr(fv, name)
        if used and files.isdir(path):
            raise FlagError("--%s=%s is a directory, not a SQuAD JSON file" % (name, path))
        if used and not files.isfile(path):
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
    if fv.export_dir:
        files.check_export_base(fv.export_dir, "--export_dir", {"--output_dir": fv.output_dir})


# --------------------------------------------------------------------------------------- run


def _options(fv: flags.FlagValues):
    from bert_tasks.squad import SquadOptions

    return SquadOptions(
        max_seq_length=fv.max_seq_length, doc_stride=fv.doc_stride,
        max_query_length=fv.max_query_length, predict_batch_size=fv.predict_batch_size,
        n_best_size=fv.n_best_size, max_answer_length=fv.max_answer_length,
        do_lower_case=fv.do_lower_case, version_2_with_negative=fv.version_2_with_negative,
        null_score_diff_threshold=fv.null_score_diff_threshold,
        verbose_logging=fv.verbose_logging, length_aware_batching=fv.length_aware_batching)


def _print_scores(scores: dict, predict_file: str) -> None:
    print(json.dumps(scores))
    if "best_f1_thresh" in scores:
        print("best null_score_diff_threshold on %s: %.6f (best_f1 %.2f, best_exact %.2f at "
              "%.6f); rerun with --null_score_diff_threshold=%.6f to use it"
              % (predict_file, scores["best_f1_thresh"], scores["best_f1"],
                 scores["best_exact"], scores["best_exact_thresh"], scores["best_f1_thresh"]))


def run(fv: flags.FlagValues) -> None:
    from bert_tasks import squad as task
    from data.squad import features as squad
    from modeling.config import BertConfig
    from modeling.heads import squad as squad_head
    from modeling.training import distribution

    logging.set_verbosity(logging.INFO)
    bert_config = BertConfig.from_json_file(fv.bert_config_file)
    validate_flags_or_throw(fv, bert_config)
    options = _options(fv)
    # Read and check every input first: a bad file fails before any model is built or any
    # output written.
    train_examples = eval_examples = scoring = None
    if fv.do_train:
        train_examples = squad.read_squad_examples(
            fv.train_file, is_training=True, version_2_with_negative=fv.version_2_with_negative)
        if not train_examples:
            raise FlagError("--train_file=%s: no usable training question" % fv.train_file)
    if fv.do_predict:
        eval_examples = squad.read_squad_examples(
            fv.predict_file, is_training=False, version_2_with_negative=fv.version_2_with_negative)
        if not eval_examples:
            raise FlagError("--predict_file=%s: no question to predict (no 'qas' entry under "
                            "'data')" % fv.predict_file)
        scoring = task.scoring_dataset(  # None: predictions only (a warning says why)
            fv.predict_file, warn=lambda message: runner.warn(TOOL, message))
    tokenizer = cli_finetuning.init_run(fv)  # --output_dir, --random_seed
    strategy = cli_flags.strategy_from_flags(fv)  # before any other TF op
    precision = cli_flags.precision_from_flags(fv)  # sets the Keras dtype policy
    tpu = distribution.is_tpu(strategy)
    with strategy.scope():  # static shapes on TPU; any window length elsewhere
        model = squad_head.build_squad_model(bert_config,
                                             seq_length=fv.max_seq_length if tpu else None)
    cli_finetuning.restore_checkpoint(model, fv, "predict or export")

    if fv.do_train:
        train_file = os.path.join(fv.output_dir, "train.tf_record")
        num_features = task.write_train_records(train_examples, tokenizer, train_file, options,
                                                seed=fv.random_seed)
        logging.info("  Num split examples = %d", num_features)
        dataset = task.dataset(train_file, fv.max_seq_length, fv.train_batch_size, True,
                               seed=fv.random_seed,
                               length_aware=fv.length_aware_batching and not tpu)
        cli_finetuning.train(fv, model, dataset, task.per_example_loss, len(train_examples),
                             strategy, precision)

    if fv.do_predict:
        scores = task.predict(model, eval_examples, tokenizer, fv.output_dir, options,
                              score_against=scoring, strategy=strategy)
        if scores is not None:
            _print_scores(scores, fv.predict_file)

    if fv.export_dir:
        from data.squad import serving as squad_serving

        version_dir = squad_serving.export_version(
            model, fv.export_dir, fv.vocab_file, do_lower_case=fv.do_lower_case,
            max_seq_length=fv.max_seq_length, max_query_length=fv.max_query_length,
            max_answer_length=fv.max_answer_length,
            version_2_with_negative=fv.version_2_with_negative,
            null_score_diff_threshold=fv.null_score_diff_threshold)
        logging.info("exported SavedModel version %s to %s (raw text: question, context)",
                     os.path.basename(version_dir), version_dir)


def main(argv) -> None:
    runner.run_main(TOOL, run, FLAGS, argv)


def entry() -> None:
    """``python run_squad.py`` / the ``bert-run-squad`` command."""
    runner.start(define_flags, main, REQUIRED)

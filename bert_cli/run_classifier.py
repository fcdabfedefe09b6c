"""BERT fine-tuning runner for sentence (pair) classification: GLUE, XNLI and your own TSV.

The original ``run_classifier.py``'s flags (``--data_dir``, ``--bert_config_file``,
``--task_name``, ``--vocab_file``, ``--output_dir``, ``--init_checkpoint``, ``--do_lower_case``,
``--max_seq_length=128``, ``--do_train``/``--do_eval``/``--do_predict``, batch sizes 32/8/8,
``--learning_rate=5e-5``, ``--num_train_epochs=3.0``, ``--warmup_proportion=0.1``,
``--save_checkpoints_steps``, ``--iterations_per_loop``, TPU flags) plus ``--xnli_language``,
the project's shared ``--strategy`` / ``--mixed_precision`` / ``--use_xla`` flags
(``modeling/training/distribution.py``), ``--length_aware_batching``, ``--export_dir``,
``--fast_tokenizer`` and ``--random_seed``.

Writes into ``--output_dir``: ``train.tf_record``/``eval.tf_record``/``predict.tf_record`` (one
record per example, in processor order, padded to ``--max_seq_length``), checkpoints
``model.ckpt-<step>`` (weights, optimizer state, data position: a rerun into the same folder
resumes, as the original Estimator's ``model_dir``), TensorBoard summaries in ``train/``,
``eval_results.txt`` (``key = value``), ``test_results.tsv`` (one line
of class probabilities per test example; the prediction for STS-B) and a GLUE submission file
``<TASK>.tsv`` (``index<TAB>prediction``). ``--export_dir`` is a TF Serving model base path:
each run adds the next version ``<export_dir>/1``, ``2``, ... (``data/glue/serving.py``; a
folder holding anything else is refused before any work). Bad input: one line on stderr, exit
code 1, nothing half-written.
"""

from __future__ import annotations

import functools
import os

from absl import flags, logging

from bert_cli import flags as cli_flags
from bert_cli import finetuning as cli_finetuning
from bert_cli import runner
from bert_cli.flags import FlagError
from data.glue import processors as classifier

FLAGS = flags.FLAGS
TOOL = "run_classifier.py"
REQUIRED = ("task_name", "vocab_file", "bert_config_file", "output_dir")


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The original's flags plus this port's."""
    define = cli_flags.definer(flag_values)

    define("string", "data_dir", None, "The input data dir. Should contain the .tsv files "
           "(or other data files) for the task.")
    define("string", "bert_config_file", None, "The config json file of the pre-trained "
           "BERT model.")
    define("string", "task_name", None, "The name of the task to train: one of %s."
           % ", ".join(sorted(classifier.PROCESSORS)))
    define("string", "vocab_file", None, "The vocabulary file that the BERT model was "
           "trained on.")
    define("string", "output_dir", None, "The output directory where the model checkpoints, "
           "records and results will be written.")
    define("string", "init_checkpoint", None, "Initial checkpoint: TF1 prefix/folder, HF "
           "folder or .safetensors, .keras or .weights.h5.")
    define("bool", "do_lower_case", True, "Whether to lower case the input text.")
    define("integer", "max_seq_length", 128, "The maximum total input sequence length "
           "after WordPiece tokenization.")
    define("bool", "do_train", False, "Whether to run training.")
    define("bool", "do_eval", False, "Whether to run eval on the dev set.")
    define("bool", "do_predict", False, "Whether to run the model in inference mode on the "
           "test set.")
    define("integer", "train_batch_size", 32, "Total batch size for training.")
    define("integer", "eval_batch_size", 8, "Total batch size for eval.")
    define("integer", "predict_batch_size", 8, "Total batch size for predict.")
    define("float", "learning_rate", 5e-5, "The initial learning rate for Adam.")
    define("float", "num_train_epochs", 3.0, "Total number of training epochs to perform.")
    define("float", "warmup_proportion", 0.1, "Proportion of training to perform linear "
           "learning rate warmup for.")
    define("string", "xnli_language", "zh", "XNLI language (the original hard-codes zh).")
    define("bool", "length_aware_batching", True, "Eval/predict: group examples of similar "
           "length and cut each batch to its longest example; train: cut each batch "
           "(same batches). Off on TPU (static shapes).")
    define("string", "export_dir", None, "TF Serving model base path, e.g. models/mrpc: "
           "writes the SavedModel (ids and raw-text signatures) as its next version "
           "<export_dir>/1, 2, ... (the folder may hold only version folders).")
    define("string", "export_hf_dir", None, "Write a Hugging Face folder here "
           "(BertForSequenceClassification with the task's labels, vocab, casing).")
    define("bool", "fast_tokenizer", True, "Use FastFullTokenizer (same output as "
           "FullTokenizer).")
    define("integer", "random_seed", 12345, "Seed of the shuffle, dropout and head init.")
    # --strategy, --use_tpu and the original's TPU flags, --mixed_precision, --use_xla: shared.
    cli_flags.define_distribution_flags(flag_values)
    cli_flags.define_precision_flags(flag_values)
    cli_flags.define_checkpoint_flags(flag_values)


# ------------------------------------------------------------------------------------ checks


def validate_flags(fv: flags.FlagValues, bert_config) -> None:
    cli_flags.check_values(fv)  # NaN/negative rates, batch 0, ...: before any data is read
    if not (fv.do_train or fv.do_eval or fv.do_predict or fv.export_dir or fv.export_hf_dir):
        raise FlagError("At least one of `do_train`, `do_eval`, `do_predict`, `export_dir` or "
                        "`export_hf_dir` must be set.")
    if (fv.do_train or fv.do_eval or fv.do_predict) and not fv.data_dir:
        raise FlagError("--data_dir is required with --do_train/--do_eval/--do_predict")
    if fv.max_seq_length > bert_config.max_position_embeddings:
        raise FlagError(
            "Cannot use sequence length %d because the BERT model was only trained up to "
            "sequence length %d" % (fv.max_seq_length, bert_config.max_position_embeddings))
    if fv.max_seq_length < 3:
        raise FlagError("--max_seq_length=%d: at least 3 is needed ([CLS] a [SEP])"
                                  % fv.max_seq_length)
    for name in ("train_batch_size", "eval_batch_size", "predict_batch_size"):
        if getattr(fv, name) <= 0:
            raise FlagError("--%s=%d must be positive" % (name, getattr(fv, name)))
    if not 0.0 <= fv.warmup_proportion <= 1.0:
        raise FlagError("--warmup_proportion=%g must be in [0, 1]"
                                  % fv.warmup_proportion)
    if fv.export_dir:
        from bert_common import files

        files.check_export_base(fv.export_dir, "--export_dir", {"--output_dir": fv.output_dir})


# --------------------------------------------------------------------------------------- run


def run(fv: flags.FlagValues) -> None:
    from bert_common.results import write_eval_results
    from modeling import checkpoints
    from modeling.training.trainer import write_eval_summaries
    from bert_tasks import classifier as task
    from data.glue import metrics as glue_metrics
    from data.glue import submission
    from data.tokenization import wordpiece as tokenization
    from modeling.config import BertConfig
    from modeling.heads import classifier as classifier_head
    from modeling.training import distribution

    logging.set_verbosity(logging.INFO)
    bert_config = BertConfig.from_json_file(fv.bert_config_file)
    validate_flags(fv, bert_config)
    try:
        tokenization.validate_case_matches_checkpoint(fv.do_lower_case, fv.init_checkpoint)
    except ValueError as e:
        raise FlagError(str(e)) from None
    task_name = classifier.canonical_task_name(fv.task_name)
    processor = classifier.get_processor(task_name, fv.data_dir, fv.xnli_language)
    regression = processor.is_regression
    label_list = processor.get_labels()
    # Read every split first: bad data fails before a model is built or a file is written.
    splits = {split: classifier.get_examples(processor, split, fv.data_dir)
              for split, wanted in (("train", fv.do_train), ("dev", fv.do_eval),
                                    ("test", fv.do_predict)) if wanted}
    strategy = cli_flags.strategy_from_flags(fv)  # before any other TF op
    precision = cli_flags.precision_from_flags(fv)  # sets the Keras dtype policy
    tpu = distribution.is_tpu(strategy)
    tokenizer = cli_finetuning.init_run(fv)  # --output_dir, --random_seed

    with strategy.scope():
        model = classifier_head.build_classifier_model(
            bert_config, 1 if regression else len(label_list),
            seq_length=fv.max_seq_length if tpu else None, regression=regression)
    init_checkpoint = cli_finetuning.restore_checkpoint(model, fv, "evaluate, predict or export")
    global_step = 0 if fv.do_train else checkpoints.checkpoint_step(init_checkpoint)
    predict = functools.partial(task.predict_examples, model, label_list=label_list,
                                tokenizer=tokenizer, max_seq_length=fv.max_seq_length,
                                regression=regression, strategy=strategy,
                                length_aware=fv.length_aware_batching)

    if fv.do_train:
        train_file = os.path.join(fv.output_dir, "train.tf_record")
        task.write_train_records(splits["train"], label_list, fv.max_seq_length, tokenizer,
                                 train_file, fv.random_seed)
        dataset = task.dataset(train_file, fv.max_seq_length, fv.train_batch_size, True,
                               regression=regression, length_aware=fv.length_aware_batching,
                               static_shapes=tpu, seed=fv.random_seed)
        global_step = cli_finetuning.train(fv, model, dataset, task.per_example_loss(regression),
                                           len(splits["train"]), strategy, precision)

    if fv.do_eval:
        logging.info("***** Running evaluation *****")
        result = predict(splits["dev"], record_file=os.path.join(fv.output_dir, "eval.tf_record"),
                         batch_size=fv.eval_batch_size)
        metrics = glue_metrics.eval_metrics(task_name, result, regression)
        metrics["global_step"] = global_step
        write_eval_results(os.path.join(fv.output_dir, "eval_results.txt"), metrics)
        write_eval_summaries(fv.output_dir, metrics, global_step)

    if fv.do_predict:
        logging.info("***** Running prediction *****")
        result = predict(splits["test"],
                         record_file=os.path.join(fv.output_dir, "predict.tf_record"),
                         batch_size=fv.predict_batch_size)
        for path in submission.write_test_results(fv.output_dir, processor, splits["test"],
                                                  result, label_list, regression, task_name):
            logging.info("wrote %s", path)

    if fv.export_dir:
        from data.glue import serving as classifier_serving

        version_dir = classifier_serving.export_version(model, fv.export_dir, fv.vocab_file,
                                                        fv.do_lower_case, fv.max_seq_length,
                                                        label_list, regression)
        logging.info("exported SavedModel version %s to %s (signatures %s)",
                     os.path.basename(version_dir), version_dir,
                     ", ".join(classifier_serving.SIGNATURES))
    if fv.export_hf_dir:
        logging.info("exported %s", checkpoints.hf.export_hf_model(
            model, bert_config, fv.export_hf_dir, fv.vocab_file, fv.do_lower_case,
            labels=label_list, regression=regression))


def main(argv) -> None:
    runner.run_main(TOOL, run, FLAGS, argv)


def entry() -> None:
    """``python run_classifier.py`` / the ``bert-run-classifier`` command."""
    runner.start(define_flags, main, REQUIRED)

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
record per example, in processor order, padded to ``--max_seq_length``), TF1-named checkpoints
``model.ckpt-<step>``, ``eval_results.txt`` (``key = value``), ``test_results.tsv`` (one line
of class probabilities per test example; the prediction for STS-B) and a GLUE submission file
``<TASK>.tsv`` (``index<TAB>prediction``). ``--export_dir`` writes a SavedModel for TF Serving
(``data/glue/serving.py``). Bad input: one line on stderr, exit code 1, nothing
half-written.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional

from absl import app, flags, logging

FLAGS = flags.FLAGS


class ClassifierFlagError(ValueError):
    """An invalid flag or flag combination; the message names the flag."""


def define_flags(flag_values: Optional[flags.FlagValues] = None) -> None:
    """The original's flags plus this port's (defined only when run as a script)."""
    from data.glue import processors as classifier
    from modeling.training import distribution

    def define(kind, *args, **kwargs):
        target = FLAGS if flag_values is None else flag_values
        getattr(flags, "DEFINE_" + kind)(*args, flag_values=target, **kwargs)

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
    define("integer", "save_checkpoints_steps", 1000, "How often to save the model "
           "checkpoint.")
    define("integer", "iterations_per_loop", 1000, "How many steps between progress lines "
           "(at most 100; the original's TPU loop size).")
    define("string", "xnli_language", "zh", "XNLI language (the original hard-codes zh).")
    define("bool", "length_aware_batching", True, "Eval/predict: group examples of similar "
           "length and cut each batch to its longest example; train: cut each batch "
           "(same batches). Off on TPU (static shapes).")
    define("string", "export_dir", None, "Write a SavedModel for TF Serving here (ids and "
           "raw-text signatures), e.g. models/mrpc/1.")
    define("bool", "fast_tokenizer", True, "Use FastFullTokenizer (same output as "
           "FullTokenizer).")
    define("integer", "random_seed", 12345, "Seed of the shuffle, dropout and head init.")
    # --strategy, --use_tpu and the original's TPU flags, --mixed_precision, --use_xla: shared.
    target = FLAGS if flag_values is None else flag_values
    distribution.define_distribution_flags(target)
    distribution.define_precision_flags(target)


# ------------------------------------------------------------------------------------ checks


def validate_flags(bert_config) -> None:
    if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict or FLAGS.export_dir):
        raise ClassifierFlagError("At least one of `do_train`, `do_eval`, `do_predict` or "
                                  "`export_dir` must be set.")
    if (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict) and not FLAGS.data_dir:
        raise ClassifierFlagError("--data_dir is required with --do_train/--do_eval/--do_predict")
    if FLAGS.max_seq_length > bert_config.max_position_embeddings:
        raise ClassifierFlagError(
            "Cannot use sequence length %d because the BERT model was only trained up to "
            "sequence length %d" % (FLAGS.max_seq_length, bert_config.max_position_embeddings))
    if FLAGS.max_seq_length < 3:
        raise ClassifierFlagError("--max_seq_length=%d: at least 3 is needed ([CLS] a [SEP])"
                                  % FLAGS.max_seq_length)
    for name in ("train_batch_size", "eval_batch_size", "predict_batch_size"):
        if getattr(FLAGS, name) <= 0:
            raise ClassifierFlagError("--%s=%d must be positive" % (name, getattr(FLAGS, name)))
    if not 0.0 <= FLAGS.warmup_proportion <= 1.0:
        raise ClassifierFlagError("--warmup_proportion=%g must be in [0, 1]"
                                  % FLAGS.warmup_proportion)


# ------------------------------------------------------------------------------------ stages


def _loss_fn(regression: bool):
    from modeling.heads import classifier as classifier_head

    def loss_fn(outputs, batch):
        if regression:
            return classifier_head.regression_loss(outputs["predictions"], batch["label_ids"])
        return classifier_head.classification_loss(outputs["logits"], batch["label_ids"])

    return loss_fn


def _dataset(path: str, batch_size: int, is_training: bool, regression: bool, tpu: bool):
    from data.glue import dataset as classifier_input

    length_aware = FLAGS.length_aware_batching and not tpu
    return classifier_input.make_dataset(
        path, lambda r: classifier_input.decode_classifier_record(r, FLAGS.max_seq_length,
                                                                  regression),
        batch_size, is_training, drop_remainder=tpu or is_training, trim=length_aware,
        bucket=length_aware and not is_training, max_seq_length=FLAGS.max_seq_length,
        seed=FLAGS.random_seed)


def _padded(examples: List, batch_size: int, tpu: bool) -> List:
    """On TPU, pads with PaddingInputExample to a multiple of the batch size (as the original)."""
    from data.glue.processors import PaddingInputExample

    if not tpu:
        return list(examples)
    return list(examples) + [PaddingInputExample()] * (-len(examples) % batch_size)


def run_predictions(model, examples: List, label_list: List[str], tokenizer, record_file: str,
                    batch_size: int, regression: bool, strategy) -> Dict:
    """Writes ``record_file`` and returns the model's outputs for the real examples, in order."""
    import numpy as np

    from data.glue import features as classifier_features
    from data.glue import dataset as classifier_input
    from modeling.training import distribution
    from modeling.training import finetuning

    tpu = distribution.is_tpu(strategy)
    padded = _padded(examples, batch_size, tpu)
    classifier_features.file_based_convert_examples_to_features(
        padded, label_list, FLAGS.max_seq_length, tokenizer, record_file)
    logging.info("  Num examples = %d (%d actual, %d padding)", len(padded), len(examples),
                 len(padded) - len(examples))
    names = ["predictions"] if regression else ["logits", "probabilities"]
    out = finetuning.predict(model, _dataset(record_file, batch_size, False, regression, tpu),
                             names, total=len(padded), strategy=strategy,
                             label=os.path.basename(record_file))
    order = out[classifier_input.EXAMPLE_INDEX]
    result = {k: classifier_input.restore_order(order, v) for k, v in out.items()
              if k != classifier_input.EXAMPLE_INDEX}
    real = np.asarray(result["is_real_example"]) > 0
    assert int(real.sum()) == len(examples), "lost examples in the input pipeline"
    return {k: v[real] for k, v in result.items()}


def eval_metrics(task: str, result: Dict, regression: bool) -> Dict[str, float]:
    """eval_* metrics of the task, eval_loss (mean per-example loss) and loss."""
    import numpy as np

    from data.glue import metrics as glue_metrics

    labels = result["label_ids"]
    if regression:
        preds = result["predictions"]
        per_example = (preds - labels) ** 2
    else:
        logits = result["logits"].astype(np.float64)
        log_probs = logits - logits.max(-1, keepdims=True)
        log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
        per_example = -log_probs[np.arange(len(labels)), labels]
        preds = np.argmax(result["probabilities"], axis=-1)
    metrics = {"eval_" + k: v for k, v in glue_metrics.task_metrics(task, preds, labels).items()}
    metrics["eval_loss"] = float(np.mean(per_example))
    metrics["loss"] = metrics["eval_loss"]
    return metrics


def write_test_results(output_dir: str, processor, examples: List, result: Dict,
                       label_list: List[str], regression: bool, task: str) -> List[str]:
    """``test_results.tsv`` (the original's) and the GLUE submission TSV; returns their paths."""
    import numpy as np

    from bert_common.files import atomic_open

    results_path = os.path.join(output_dir, "test_results.tsv")
    with atomic_open(results_path) as writer:
        if regression:
            for value in result["predictions"]:
                writer.write("%s\n" % np.float32(value))
        else:
            for probabilities in result["probabilities"]:
                writer.write("\t".join(str(np.float32(p)) for p in probabilities) + "\n")
    name = processor.submission_name or ("XNLI" if task == "xnli" else "predictions")
    submission_path = os.path.join(output_dir, name + ".tsv")
    with atomic_open(submission_path) as writer:
        writer.write("index\tprediction\n")
        for i, example in enumerate(examples):
            index = example.index if example.index is not None else str(i)
            if regression:
                value = float(np.clip(result["predictions"][i], 0.0, 5.0))
                writer.write("%s\t%.3f\n" % (index, value))
            else:
                writer.write("%s\t%s\n" % (index,
                                           label_list[int(np.argmax(result["probabilities"][i]))]))
    return [results_path, submission_path]


def run(_argv) -> None:
    from data.glue import processors as classifier
    from data.glue import features as classifier_features
    from data.tokenization import wordpiece as tokenization
    from modeling.heads import classifier as classifier_head
    from modeling.training import distribution
    from modeling.training import finetuning
    from modeling.config import BertConfig

    logging.set_verbosity(logging.INFO)
    bert_config = BertConfig.from_json_file(FLAGS.bert_config_file)
    validate_flags(bert_config)
    try:
        tokenization.validate_case_matches_checkpoint(FLAGS.do_lower_case, FLAGS.init_checkpoint)
    except ValueError as e:
        raise ClassifierFlagError(str(e)) from None
    task = classifier.canonical_task_name(FLAGS.task_name)
    processor = classifier.get_processor(task, FLAGS.data_dir, FLAGS.xnli_language)
    regression = processor.is_regression
    label_list = processor.get_labels()
    # Read every split first: bad data fails before a model is built or a file is written.
    splits = {}
    for split, wanted in (("train", FLAGS.do_train), ("dev", FLAGS.do_eval),
                          ("test", FLAGS.do_predict)):
        if wanted:
            splits[split] = classifier.get_examples(processor, split, FLAGS.data_dir)
    strategy = distribution.strategy_from_flags(FLAGS)  # before any other TF op
    precision = distribution.precision_from_flags(FLAGS)  # sets the Keras dtype policy
    tpu = distribution.is_tpu(strategy)
    tokenizer = finetuning.init_run(FLAGS)  # --output_dir, --random_seed

    with strategy.scope():
        model = classifier_head.build_classifier_model(
            bert_config, 1 if regression else len(label_list),
            seq_length=FLAGS.max_seq_length if tpu else None, regression=regression)
    init_checkpoint = finetuning.restore_checkpoint(model, FLAGS, "evaluate, predict or export",
                                                    ClassifierFlagError)
    global_step = 0 if FLAGS.do_train else finetuning.checkpoint_step(init_checkpoint)

    if FLAGS.do_train:
        train_examples = splits["train"]
        num_train_steps = finetuning.count_train_steps(len(train_examples), FLAGS,
                                                       ClassifierFlagError)
        num_warmup_steps = int(num_train_steps * FLAGS.warmup_proportion)
        train_file = os.path.join(FLAGS.output_dir, "train.tf_record")
        classifier_features.file_based_convert_examples_to_features(
            train_examples, label_list, FLAGS.max_seq_length, tokenizer, train_file)
        logging.info("***** Running training *****")
        logging.info("  Num examples = %d", len(train_examples))
        logging.info("  Batch size = %d", FLAGS.train_batch_size)
        logging.info("  Num steps = %d", num_train_steps)
        with strategy.scope():
            optimizer = finetuning.make_optimizer(FLAGS.learning_rate, num_train_steps,
                                                  num_warmup_steps, precision.loss_scale, tpu)
        finetuning.train(model, optimizer,
                         _dataset(train_file, FLAGS.train_batch_size, True, regression, tpu),
                         num_train_steps, _loss_fn(regression), strategy=strategy,
                         log_every=max(1, min(100, FLAGS.iterations_per_loop)),
                         on_save=finetuning.checkpoint_saver(model, FLAGS.output_dir),
                         save_every=FLAGS.save_checkpoints_steps, use_xla=FLAGS.use_xla)
        global_step = num_train_steps

    if FLAGS.do_eval:
        logging.info("***** Running evaluation *****")
        result = run_predictions(model, splits["dev"], label_list, tokenizer,
                                 os.path.join(FLAGS.output_dir, "eval.tf_record"),
                                 FLAGS.eval_batch_size, regression, strategy)
        metrics = eval_metrics(task, result, regression)
        metrics["global_step"] = global_step
        finetuning.write_eval_results(os.path.join(FLAGS.output_dir, "eval_results.txt"),
                                      metrics)

    if FLAGS.do_predict:
        logging.info("***** Running prediction *****")
        test_examples = splits["test"]
        result = run_predictions(model, test_examples, label_list, tokenizer,
                                 os.path.join(FLAGS.output_dir, "predict.tf_record"),
                                 FLAGS.predict_batch_size, regression, strategy)
        for path in write_test_results(FLAGS.output_dir, processor, test_examples, result,
                                       label_list, regression, task):
            logging.info("wrote %s", path)

    if FLAGS.export_dir:
        from data.glue import serving as classifier_serving

        classifier_serving.export_saved_model(model, FLAGS.export_dir, FLAGS.vocab_file,
                                              FLAGS.do_lower_case, FLAGS.max_seq_length,
                                              label_list, regression)
        logging.info("exported SavedModel (signatures %s) to %s",
                     ", ".join(classifier_serving.SIGNATURES), FLAGS.export_dir)


def main(argv) -> None:
    """Runs ``run``; bad input becomes one line on stderr and exit code 1."""
    from data.glue.processors import ClassifierDataError
    from modeling.training import finetuning

    finetuning.run_main("run_classifier.py", lambda: run(argv),
                        (ClassifierFlagError, ClassifierDataError))


if __name__ == "__main__":
    define_flags()
    for required in ("task_name", "vocab_file", "bert_config_file", "output_dir"):
        flags.mark_flag_as_required(required)
    app.run(main)

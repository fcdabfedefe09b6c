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
from typing import Dict, List

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
    cli_flags.define_distribution_flags(flag_values)
    cli_flags.define_precision_flags(flag_values)


# ------------------------------------------------------------------------------------ checks


def validate_flags(fv: flags.FlagValues, bert_config) -> None:
    if not (fv.do_train or fv.do_eval or fv.do_predict or fv.export_dir):
        raise FlagError("At least one of `do_train`, `do_eval`, `do_predict` or "
                                  "`export_dir` must be set.")
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


# ------------------------------------------------------------------------------------ stages


def _loss_fn(regression: bool):
    from modeling.heads import classifier as classifier_head

    def loss_fn(outputs, batch):
        if regression:
            return classifier_head.regression_loss(outputs["predictions"], batch["label_ids"])
        return classifier_head.classification_loss(outputs["logits"], batch["label_ids"])

    return loss_fn


def _dataset(fv: flags.FlagValues, path: str, batch_size: int, is_training: bool,
             regression: bool, tpu: bool):
    from data.glue import dataset as classifier_input

    length_aware = fv.length_aware_batching and not tpu
    return classifier_input.make_dataset(
        path, lambda r: classifier_input.decode_classifier_record(r, fv.max_seq_length,
                                                                  regression),
        batch_size, is_training, drop_remainder=tpu or is_training, trim=length_aware,
        bucket=length_aware and not is_training, max_seq_length=fv.max_seq_length,
        seed=fv.random_seed)


def _padded(examples: List, batch_size: int, tpu: bool) -> List:
    """On TPU, pads with PaddingInputExample to a multiple of the batch size (as the original)."""
    from data.glue.processors import PaddingInputExample

    if not tpu:
        return list(examples)
    return list(examples) + [PaddingInputExample()] * (-len(examples) % batch_size)


def run_predictions(fv: flags.FlagValues, model, examples: List, label_list: List[str],
                    tokenizer, record_file: str,
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
        padded, label_list, fv.max_seq_length, tokenizer, record_file)
    logging.info("  Num examples = %d (%d actual, %d padding)", len(padded), len(examples),
                 len(padded) - len(examples))
    names = ["predictions"] if regression else ["logits", "probabilities"]
    out = finetuning.predict(model, _dataset(fv, record_file, batch_size, False, regression, tpu),
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


def run(fv: flags.FlagValues) -> None:
    from data.glue import features as classifier_features
    from data.tokenization import wordpiece as tokenization
    from modeling.heads import classifier as classifier_head
    from modeling.training import distribution
    from modeling.training import finetuning
    from modeling.config import BertConfig

    logging.set_verbosity(logging.INFO)
    bert_config = BertConfig.from_json_file(fv.bert_config_file)
    validate_flags(fv, bert_config)
    try:
        tokenization.validate_case_matches_checkpoint(fv.do_lower_case, fv.init_checkpoint)
    except ValueError as e:
        raise FlagError(str(e)) from None
    task = classifier.canonical_task_name(fv.task_name)
    processor = classifier.get_processor(task, fv.data_dir, fv.xnli_language)
    regression = processor.is_regression
    label_list = processor.get_labels()
    # Read every split first: bad data fails before a model is built or a file is written.
    splits = {}
    for split, wanted in (("train", fv.do_train), ("dev", fv.do_eval),
                          ("test", fv.do_predict)):
        if wanted:
            splits[split] = classifier.get_examples(processor, split, fv.data_dir)
    strategy = cli_flags.strategy_from_flags(fv)  # before any other TF op
    precision = cli_flags.precision_from_flags(fv)  # sets the Keras dtype policy
    tpu = distribution.is_tpu(strategy)
    tokenizer = cli_finetuning.init_run(fv)  # --output_dir, --random_seed

    with strategy.scope():
        model = classifier_head.build_classifier_model(
            bert_config, 1 if regression else len(label_list),
            seq_length=fv.max_seq_length if tpu else None, regression=regression)
    init_checkpoint = cli_finetuning.restore_checkpoint(model, fv, "evaluate, predict or export")
    global_step = 0 if fv.do_train else cli_finetuning.checkpoint_step(init_checkpoint)

    if fv.do_train:
        train_examples = splits["train"]
        num_train_steps = cli_finetuning.count_train_steps(len(train_examples), fv)
        num_warmup_steps = int(num_train_steps * fv.warmup_proportion)
        train_file = os.path.join(fv.output_dir, "train.tf_record")
        classifier_features.file_based_convert_examples_to_features(
            train_examples, label_list, fv.max_seq_length, tokenizer, train_file)
        logging.info("***** Running training *****")
        logging.info("  Num examples = %d", len(train_examples))
        logging.info("  Batch size = %d", fv.train_batch_size)
        logging.info("  Num steps = %d", num_train_steps)
        with strategy.scope():
            optimizer = finetuning.make_optimizer(fv.learning_rate, num_train_steps,
                                                  num_warmup_steps, precision.loss_scale, tpu)
        finetuning.train(model, optimizer,
                         _dataset(fv, train_file, fv.train_batch_size, True, regression, tpu),
                         num_train_steps, _loss_fn(regression), strategy=strategy,
                         log_every=max(1, min(100, fv.iterations_per_loop)),
                         on_save=cli_finetuning.checkpoint_saver(model, fv.output_dir),
                         save_every=fv.save_checkpoints_steps, use_xla=fv.use_xla)
        global_step = num_train_steps

    if fv.do_eval:
        logging.info("***** Running evaluation *****")
        result = run_predictions(fv, model, splits["dev"], label_list, tokenizer,
                                 os.path.join(fv.output_dir, "eval.tf_record"),
                                 fv.eval_batch_size, regression, strategy)
        metrics = eval_metrics(task, result, regression)
        metrics["global_step"] = global_step
        finetuning.write_eval_results(os.path.join(fv.output_dir, "eval_results.txt"),
                                      metrics)

    if fv.do_predict:
        logging.info("***** Running prediction *****")
        test_examples = splits["test"]
        result = run_predictions(fv, model, test_examples, label_list, tokenizer,
                                 os.path.join(fv.output_dir, "predict.tf_record"),
                                 fv.predict_batch_size, regression, strategy)
        for path in write_test_results(fv.output_dir, processor, test_examples, result,
                                       label_list, regression, task):
            logging.info("wrote %s", path)

    if fv.export_dir:
        from data.glue import serving as classifier_serving

        classifier_serving.export_saved_model(model, fv.export_dir, fv.vocab_file,
                                              fv.do_lower_case, fv.max_seq_length,
                                              label_list, regression)
        logging.info("exported SavedModel (signatures %s) to %s",
                     ", ".join(classifier_serving.SIGNATURES), fv.export_dir)


def main(argv) -> None:
    runner.run_main(TOOL, run, FLAGS, argv)


def entry() -> None:
    """``python run_classifier.py`` / the ``bert-run-classifier`` command."""
    runner.start(define_flags, main, REQUIRED)

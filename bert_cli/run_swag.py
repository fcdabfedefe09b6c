"""BERT fine-tuning runner for SWAG (multiple choice over 4 endings, BERT paper §4.4).

Flags in run_classifier's style: ``--data_dir`` (``train.csv``/``val.csv``/``test.csv`` in the
swagaf layout, or ``train.jsonl``/``val.jsonl``/``test.jsonl``) or explicit ``--train_file``,
``--eval_file``, ``--predict_file``; ``--bert_config_file``, ``--vocab_file``, ``--output_dir``,
``--init_checkpoint``, ``--do_lower_case``, ``--max_seq_length=128``,
``--do_train``/``--do_eval``/``--do_predict``, batch sizes 16/8/8, ``--learning_rate=2e-5``,
``--num_train_epochs=3.0``, ``--warmup_proportion=0.1``, ``--save_checkpoints_steps``,
the shared ``--strategy``/``--use_tpu``/TPU flags, ``--mixed_precision``, ``--use_xla``
(``bert_cli/flags.py``), ``--length_aware_batching``, ``--random_seed``.

Each example is 4 sequences ``[CLS] sent1 [SEP] sent2 endingN [SEP]`` (``data/swag.py``); the
head scores each pooled output with one learned vector and takes a softmax over the 4
(``modeling/heads/multiple_choice.py``). Writes ``train.tf_record``/``eval.tf_record``/
``predict.tf_record``, checkpoints ``model.ckpt-<step>`` (with the optimizer state: a rerun
resumes), TensorBoard summaries in ``train/``, ``eval_results.txt``
(``eval_accuracy``, ``eval_loss``, ``global_step``, ``loss``) and ``test_results.tsv`` (4
probabilities per example) into ``--output_dir``. Bad input: one line on stderr, exit code 1.
"""

from __future__ import annotations

import functools
import os

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
    define("bool", "length_aware_batching", True, "Sort eval/predict examples by length and "
           "cut every batch to its longest sequence (off on TPU).")
    define("bool", "fast_tokenizer", True, "Use FastFullTokenizer (same output).")
    define("integer", "random_seed", 12345, "Seed of the shuffle, dropout and head init.")
    # --strategy, --use_tpu and the original's TPU flags, --mixed_precision, --use_xla: shared.
    cli_flags.define_distribution_flags(flag_values)
    cli_flags.define_precision_flags(flag_values)
    cli_flags.define_checkpoint_flags(flag_values)


def split_file(fv: flags.FlagValues, split: str) -> str:
    """The file of ``split`` (train/eval/predict): its flag, else found in --data_dir."""
    stem = _SPLIT_FILES[split]
    return cli_finetuning.split_file(fv, split, (stem + ".csv", stem + ".jsonl"))


def validate_flags(fv: flags.FlagValues, bert_config) -> None:
    """``FlagError`` naming a flag that cannot work, before any file is read or written."""
    if not (fv.do_train or fv.do_eval or fv.do_predict):
        raise FlagError("At least one of `do_train`, `do_eval` or `do_predict` must be True.")
    if fv.max_seq_length > bert_config.max_position_embeddings:
        raise FlagError("Cannot use sequence length %d because the BERT model was only "
                        "trained up to sequence length %d"
                        % (fv.max_seq_length, bert_config.max_position_embeddings))
    cli_flags.check_values(fv)  # batch sizes, --learning_rate, epochs, warmup, ...


def run(fv: flags.FlagValues) -> None:
    from bert_common.results import write_eval_results
    from modeling import checkpoints
    from modeling.training.trainer import write_eval_summaries
    from bert_tasks import swag as task
    from data import swag
    from data.glue import submission
    from modeling.config import BertConfig
    from modeling.heads import multiple_choice as multiple_choice_head
    from modeling.training import distribution

    logging.set_verbosity(logging.INFO)
    bert_config = BertConfig.from_json_file(fv.bert_config_file)
    validate_flags(fv, bert_config)
    examples = {split: swag.read_swag_examples(split_file(fv, split))
                for split, wanted in (("train", fv.do_train), ("eval", fv.do_eval),
                                      ("predict", fv.do_predict)) if wanted}
    for split in ("train", "eval"):
        unlabelled = [e.origin for e in examples.get(split, []) if e.label is None]
        if unlabelled:
            raise FlagError("%s: no label, but the %s split needs labels"
                            % (unlabelled[0], split))
    strategy = cli_flags.strategy_from_flags(fv)  # before any other TF op
    precision = cli_flags.precision_from_flags(fv)  # sets the Keras dtype policy
    tpu = distribution.is_tpu(strategy)
    tokenizer = cli_finetuning.init_run(fv)  # --output_dir, --random_seed
    with strategy.scope():
        model = multiple_choice_head.build_multiple_choice_model(
            bert_config, swag.NUM_CHOICES, seq_length=fv.max_seq_length if tpu else None)
    init_checkpoint = cli_finetuning.restore_checkpoint(model, fv, "evaluate or predict")
    global_step = 0 if fv.do_train else checkpoints.checkpoint_step(init_checkpoint)
    predict = functools.partial(task.predict_examples, model, tokenizer=tokenizer,
                                max_seq_length=fv.max_seq_length, strategy=strategy,
                                length_aware=fv.length_aware_batching)

    if fv.do_train:
        train_file = os.path.join(fv.output_dir, "train.tf_record")
        swag.write_tf_records(examples["train"], fv.max_seq_length, tokenizer, train_file)
        dataset = task.dataset(train_file, fv.max_seq_length, fv.train_batch_size, True,
                               length_aware=fv.length_aware_batching, static_shapes=tpu,
                               seed=fv.random_seed)
        global_step = cli_finetuning.train(fv, model, dataset, task.per_example_loss,
                                           len(examples["train"]), strategy, precision)

    if fv.do_eval:
        result = predict(examples["eval"],
                         record_file=os.path.join(fv.output_dir, "eval.tf_record"),
                         batch_size=fv.eval_batch_size)
        metrics = task.eval_metrics(examples["eval"], result)
        metrics["global_step"] = global_step
        write_eval_results(os.path.join(fv.output_dir, "eval_results.txt"), metrics)
        write_eval_summaries(fv.output_dir, metrics, global_step)

    if fv.do_predict:
        result = predict(examples["predict"],
                         record_file=os.path.join(fv.output_dir, "predict.tf_record"),
                         batch_size=fv.predict_batch_size)
        path = os.path.join(fv.output_dir, "test_results.tsv")
        submission.write_probabilities(path, result["probabilities"])
        logging.info("wrote %s", path)


def main(argv) -> None:
    runner.run_main(TOOL, run, FLAGS, argv)


def entry() -> None:
    """``python run_swag.py`` / the ``bert-run-swag`` command."""
    runner.start(define_flags, main, REQUIRED)

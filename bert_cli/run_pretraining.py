"""Run masked LM / next sentence pre-training for BERT (the original run_pretraining.py).

Example (the tiny demo model on records written by create_pretraining_data.py)::

    python run_pretraining.py --bert_config_file=bert_config.json \\
        --input_file=records/*.tfrecord --output_dir=pretrain_out \\
        --do_train --do_eval --train_batch_size=32 --max_seq_length=128 \\
        --max_predictions_per_seq=20 --num_train_steps=10000 --num_warmup_steps=1000 \\
        --learning_rate=1e-4

The original's flags keep their names and defaults; this port adds the training flags every
tool shares (``--strategy``, ``--mixed_precision``, ``--use_xla``, ``--xla_optimizer``,
``--xla_kernels``, ``--keep_checkpoint_max``: ``bert_cli/flags.py``) and its own
``--num_accumulation_steps``, ``--optimizer``, ``--corrected_lr_schedule``,
``--gradient_reduction``, ``--deterministic``, ``--random_seed`` and ``--num_cpu_devices``.
Semantics:

* ``--train_batch_size`` is the global batch of one optimizer update (split over replicas, and
  over ``--num_accumulation_steps`` micro-batches per replica).
* The optimizer is the original's (``modeling.training.optimization``): clip by global norm 1.0,
  AdamWeightDecay, learning rate one step ahead as the original (``--corrected_lr_schedule``
  for schedule(t) at update t), or LAMB (``--optimizer=lamb``).
* Gradient reduction over replicas: ``mean_then_clip`` (the default off TPU: identical to one
  replica at the same global batch) or ``clip_then_sum`` (the default on TPU: what the
  original's CrossShardOptimizer does: each core clips the gradient of its own batch loss, then
  the clipped gradients are summed).
* Checkpoints every ``--save_checkpoints_steps`` in ``--output_dir`` (``ckpt-N``: weights,
  optimizer slots, global step, data position); a restarted run resumes from the latest. At the
  end of training the weights are also exported under the original names to
  ``output_dir/export/bert_model.ckpt`` (with ``bert_config.json``) for the fine-tuning scripts.
* ``--do_eval`` writes ``eval_results.txt`` (``key = value``, sorted keys): ``global_step``,
  ``loss``, ``masked_lm_accuracy``, ``masked_lm_loss``, ``next_sentence_accuracy``,
  ``next_sentence_loss`` over ``--max_eval_steps`` batches of ``--eval_batch_size`` read in file
  order (repeating), as the original's metric_fn. Without a checkpoint in ``--output_dir`` the
  ``--init_checkpoint`` weights are evaluated (global_step 0).
* ``--deterministic``: records in file order, no shuffling (batch t = records t*B..t*B+B-1),
  fixed seeds, TensorFlow's op determinism (``tf.config.experimental.enable_op_determinism``,
  for the rest of the process) and the optimizer update op by op: a run reproduces the
  original's train steps from the same checkpoint. Otherwise (``--xla_kernels``,
  ``--xla_optimizer``, default) one replica runs the fused training kernels and update: faster,
  with float rounding within ~1e-6 relative of the original's and other dropout masks.
* ``--init_checkpoint``: a TF1 checkpoint with Google's names (prefix or folder), a Hugging
  Face folder / .safetensors, a .keras / .weights.h5 file, or a ``ckpt-N`` of this script.

Bad input (no file matched, records whose lengths differ from the flags, a config/checkpoint
mismatch, an unwritable output dir, bad flag values) stops with one line on stderr and exit
status 1 before any training starts. A record file damaged part-way (truncated, corrupted) is
found only when it is read: the run stops with one line naming the file (no checkpoint is
written past the last complete one).
"""

from __future__ import annotations

import contextlib
import os
from typing import Dict, Optional

from absl import flags, logging

from bert_cli import flags as cli_flags
from bert_common import atomic
from bert_common import files as fs
from bert_cli import runner
from bert_common import checks
from bert_cli.flags import FlagError

FLAGS = flags.FLAGS
TOOL = "run_pretraining.py"
REQUIRED = ()  # checked in run: one line naming the flag
# Kept equal to modeling.training.optimization's (tested): listing them imports no TensorFlow.
OPTIMIZERS = ("adamw", "lamb")
GRADIENT_REDUCTIONS = ("mean_then_clip", "clip_then_sum")
EVAL_RESULTS = "eval_results.txt"


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The original's flags plus this port's (see the module docstring).

    Args:
        flag_values: the ``FlagValues`` to define them in.
    """
    define = cli_flags.definer(flag_values)

    define("string", "bert_config_file", None, "The config json file corresponding to the "
           "pre-trained BERT model. This specifies the model architecture.")
    define("string", "input_file", None, "Input TF example files (can be a glob or comma "
           "separated).")
    define("string", "output_dir", None, "The output directory where the model checkpoints "
           "will be written.")
    define("string", "init_checkpoint", None, "Initial checkpoint (usually from a pre-trained "
           "BERT model).")
    define("integer", "max_seq_length", 128, "The maximum total input sequence length after "
           "WordPiece tokenization. Sequences longer than this will be truncated, and "
           "sequences shorter than this will be padded. Must match data generation.")
    define("integer", "max_predictions_per_seq", 20, "Maximum number of masked LM predictions "
           "per sequence. Must match data generation.")
    define("bool", "do_train", False, "Whether to run training.")
    define("bool", "do_eval", False, "Whether to run eval on the dev set.")
    define("integer", "train_batch_size", 32, "Total batch size for training.")
    define("integer", "eval_batch_size", 8, "Total batch size for eval.")
    define("float", "learning_rate", 5e-5, "The initial learning rate for Adam.")
    define("integer", "num_train_steps", 100000, "Number of training steps.")
    define("integer", "num_warmup_steps", 10000, "Number of warmup steps.")
    define("integer", "max_eval_steps", 100, "Maximum number of eval steps.")
    cli_flags.define_distribution_flags(flag_values)
    cli_flags.define_precision_flags(flag_values)
    cli_flags.define_checkpoint_flags(flag_values)
    define("integer", "num_accumulation_steps", 1, "Gradient accumulation: micro-batches per "
           "replica and update (the global batch stays --train_batch_size).")
    define("enum", "optimizer", "adamw", "adamw: the original AdamWeightDecay; lamb: LAMB "
           "for large batches.", enum_values=list(OPTIMIZERS))
    define("bool", "corrected_lr_schedule", False, "Use schedule(t) at update t instead of "
           "the original's schedule(t+1) (google-research/bert #1050).")
    define("enum", "gradient_reduction", "auto", "auto: clip_then_sum on TPU (the original), "
           "mean_then_clip elsewhere.",
           enum_values=["auto"] + list(GRADIENT_REDUCTIONS))
    define("bool", "deterministic", False, "Records in file order, no shuffling, fixed seeds, "
           "TensorFlow's op determinism, the original's op-by-op optimizer rounding (no "
           "--xla_optimizer, no --xla_kernels, in training and evaluation).")
    define("integer", "random_seed", 12345, "Seed of the initialisation, dropout and shuffles.")
    define("integer", "num_cpu_devices", 0, "Split the CPU into this many logical devices "
           "(for --strategy=mirrored on a machine without accelerators; 0 = off).")


# ------------------------------------------------------------------------------------ checks


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise FlagError(message)


def check_flags(fv) -> None:
    """Checks that need no TensorFlow (run before the strategy is created).

    Args:
        fv: the parsed flag values.

    Raises:
        FlagError: a missing or bad flag.
    """
    _require(fv.do_train or fv.do_eval, "At least one of `do_train` or `do_eval` must be True.")
    _require(bool(fv.bert_config_file), "--bert_config_file is required")
    _require(bool(fv.input_file), "--input_file is required")
    _require(bool(fv.output_dir), "--output_dir is required")
    # Batch sizes, step counts, --learning_rate (NaN too), --max_seq_length, --num_train_steps
    # with --do_train: the checks every tool shares.
    checks.check_values(fv)
    _require(fv.max_predictions_per_seq <= fv.max_seq_length,
             "--max_predictions_per_seq=%d is larger than --max_seq_length=%d"
             % (fv.max_predictions_per_seq, fv.max_seq_length))
    if fv.init_checkpoint:
        path = fv.init_checkpoint
        exists = fs.exists(path) or fs.exists(path + ".index")
        _require(exists, "--init_checkpoint=%s: no such checkpoint" % path)




def load_init_checkpoint(model, path: str) -> None:
    """``--init_checkpoint`` into ``model`` (any format ``load_checkpoint`` reads);
    ``CheckpointError`` when no variable of the model is in it.

    Args:
        model: the pre-training model.
        path: the checkpoint.

    Raises:
        CheckpointError: no variable of the model is in it.
    """
    from modeling import checkpoints

    report = checkpoints.load_checkpoint(model, path, log=False)
    logging.info("%s", report.summary())
    if not report.loaded:
        raise checkpoints.CheckpointError("--init_checkpoint=%s: no BERT variable of the model "
                                          "found in it" % path)


def export_for_finetuning(model, fv, global_step: int) -> str:
    """``output_dir/export/bert_model.ckpt`` (Google's TF1 names) with ``bert_config.json``:
    what the fine-tuning tools' ``--init_checkpoint`` / ``--bert_config_file`` take.

    Args:
        model: the pre-training model.
        fv: the parsed flag values.
        global_step: the step trained to (logged).

    Returns:
        The checkpoint prefix written.
    """
    from modeling import checkpoints

    export_dir = os.path.join(fv.output_dir, "export")
    fs.makedirs(export_dir)
    prefix = checkpoints.save_tf1_checkpoint(model, os.path.join(export_dir, "bert_model.ckpt"),
                                             global_step=global_step)
    with atomic.atomic_open(os.path.join(export_dir, "bert_config.json")) as f:
        f.write(fs.read_text(fv.bert_config_file))
    return prefix


def check_batches(fv, replicas: int) -> None:
    """Global batches that split evenly over replicas (and micro-batches).

    Args:
        fv: the parsed flag values.
        replicas: the strategy's replicas in sync.

    Raises:
        FlagError: a batch size that does not split evenly.
    """
    if fv.do_train:
        per_update = replicas * fv.num_accumulation_steps
        _require(fv.train_batch_size % per_update == 0,
                 "--train_batch_size=%d is not divisible by %d replicas x "
                 "--num_accumulation_steps=%d" % (fv.train_batch_size, replicas,
                                                  fv.num_accumulation_steps))
    if fv.do_eval:
        _require(fv.eval_batch_size % replicas == 0, "--eval_batch_size=%d is not divisible "
                 "by %d replicas" % (fv.eval_batch_size, replicas))


def build_trainer(fv, config, strategy, precision):
    """The model, the original's optimizer (or LAMB) and the trainer, from the flags.

    Args:
        fv: the parsed flag values.
        config: the ``BertConfig``.
        strategy: the ``tf.distribute.Strategy``.
        precision: the ``Precision`` set (``distribution.set_precision``).

    Returns:
        The ``trainer.Trainer``.
    """
    from modeling.heads.pretraining import BertPretrainingModel
    from modeling.training import distribution, optimization
    from modeling.training import objectives as pretraining_objective
    from modeling.training import trainer

    reduction = fv.gradient_reduction
    if reduction == "auto":
        reduction = "clip_then_sum" if distribution.is_tpu(strategy) else "mean_then_clip"
    with strategy.scope():
        model = BertPretrainingModel(config, seq_length=fv.max_seq_length,
                                     max_predictions_per_seq=fv.max_predictions_per_seq)
        optimizer = optimization.create_optimizer(
            fv.learning_rate, max(fv.num_train_steps, 1), fv.num_warmup_steps,
            optimizer=fv.optimizer, one_step_ahead=not fv.corrected_lr_schedule,
            gradient_reduction=reduction, loss_scale=precision.loss_scale)
    return trainer.Trainer(
        model, optimizer, pretraining_objective.PretrainingObjective(), strategy,
        trainer.TrainerConfig(
            model_dir=fv.output_dir, num_train_steps=fv.num_train_steps,
            steps_per_loop=fv.iterations_per_loop,
            save_checkpoints_steps=fv.save_checkpoints_steps,
            num_accumulation_steps=fv.num_accumulation_steps,
            keep_checkpoint_max=fv.keep_checkpoint_max, use_xla=fv.use_xla,
            fuse_optimizer=fv.xla_optimizer and not fv.deterministic,
            fused_kernels=fv.xla_kernels and not fv.deterministic))


def evaluate(fv, model, files, strategy, global_step: int, chief: bool) -> Dict[str, float]:
    """``--max_eval_steps`` batches in file order: the original's metric_fn values, written to
    ``eval_results.txt`` and TensorBoard (``output_dir/eval``) by the chief.

    Args:
        fv: the parsed flag values.
        model: the pre-training model.
        files: the input record files.
        strategy: the ``tf.distribute.Strategy``.
        global_step: the step evaluated (logged and written).
        chief: this process writes the results.

    Returns:
        metric name -> float.
    """
    from bert_common.results import write_eval_results
    from data.pretraining import dataset as pd
    from modeling.training import evaluation
    from modeling.training import objectives as pretraining_objective

    logging.info("***** Running evaluation *****  batch size %d, %d steps",
                 fv.eval_batch_size, fv.max_eval_steps)
    eval_data = pd.pretraining_dataset(files, fv.max_seq_length, fv.max_predictions_per_seq,
                                       fv.eval_batch_size, is_training=False)
    results = evaluation.evaluate(model, eval_data, pretraining_objective.eval_metrics,
                                  fv.max_eval_steps, strategy,
                                  model_inputs=pretraining_objective.model_inputs)
    results = {key: results[key] for key in pretraining_objective.EVAL_KEYS}
    results["global_step"] = global_step
    if chief:
        write_eval_results(os.path.join(fv.output_dir, EVAL_RESULTS), results)
        evaluation.write_eval_summaries(fv.output_dir, results, global_step)
    return results


def run(fv) -> Optional[Dict[str, float]]:
    """The whole job for parsed flags ``fv``; returns the eval results (None without eval).

    Args:
        fv: the parsed flag values.

    Returns:
        The eval results (metric name -> float), or None.

    Raises:
        FlagError: a missing or bad flag.
    """
    config, strategy, precision = _setup(fv)  # the strategy before any other TF op
    import keras
    import tensorflow as tf

    from data.pretraining import dataset as pd
    from modeling.training import distribution

    chief = distribution.is_chief(strategy)
    if chief:
        fs.prepare_output_dir(fv.output_dir)
    files = pd.input_files(fv.input_file)
    pd.check_input_files(files, fv.max_seq_length, fv.max_predictions_per_seq)
    check_batches(fv, strategy.num_replicas_in_sync)
    logging.info("%d input files; %d replicas; precision %s", len(files),
                 strategy.num_replicas_in_sync, precision.policy)
    keras.utils.set_random_seed(fv.random_seed)
    if fv.deterministic:  # the other --deterministic choices: build_trainer, the dataset
        tf.config.experimental.enable_op_determinism()  # for the rest of the process
    trainer = build_trainer(fv, config, strategy, precision)
    global_step = _restore(fv, trainer)
    if fv.do_train:
        logging.info("***** Running training *****  batch size %d, %d steps",
                     fv.train_batch_size, fv.num_train_steps)
        with _reading(fv, files):
            global_step = trainer.train(_training_data(fv, files)).global_step
        if chief:
            export_for_finetuning(trainer.model, fv, global_step)
    if fv.do_eval:
        with _reading(fv, files):
            return evaluate(fv, trainer.model, files, strategy, global_step, chief)
    return None


def _setup(fv):
    """The flags checked, then (config, strategy, precision); the strategy before any other
    TensorFlow op (multi-worker and TPU set-up must come first)."""
    check_flags(fv)
    from modeling.config import BertConfig
    from modeling.training import distribution, execution

    config = BertConfig.from_json_file(fv.bert_config_file)
    _require(fv.max_seq_length <= config.max_position_embeddings,
             "Cannot use sequence length %d because the BERT model was only trained up to "
             "sequence length %d" % (fv.max_seq_length, config.max_position_embeddings))
    precision = cli_flags.precision_from_flags(fv)
    if fv.num_cpu_devices > 1:
        distribution.split_cpu(fv.num_cpu_devices)
    strategy = cli_flags.strategy_from_flags(fv)
    execution.check_use_xla(strategy, fv.use_xla)  # before anything is written
    return config, strategy, precision


def _restore(fv, trainer) -> int:
    """The run's own newest checkpoint (the trainer resumes from it when training; loaded here
    for eval only), else ``--init_checkpoint``, else the random initialisation; the step."""
    from modeling import checkpoints

    own = trainer.latest_checkpoint()
    if own is None and fv.init_checkpoint:
        load_init_checkpoint(trainer.model, fv.init_checkpoint)  # a mismatch stops here
    elif own is None:
        logging.info("No --init_checkpoint: random initialisation (seed %d)", fv.random_seed)
    elif not fv.do_train:
        checkpoints.load_checkpoint(trainer.model, own)
        return checkpoints.checkpoint_step(own)
    return 0


def _training_data(fv, files):
    """The training input: a dataset with ``--deterministic``, else a function of the input
    context (per host: shuffled runs read only that host's files)."""
    from data.pretraining import dataset as pd

    def training_data(input_context=None):
        return pd.pretraining_dataset(
            files, fv.max_seq_length, fv.max_predictions_per_seq, fv.train_batch_size,
            is_training=True, deterministic=fv.deterministic, seed=fv.random_seed,
            input_context=input_context)

    return training_data() if fv.deterministic else training_data


@contextlib.contextmanager
def _reading(fv, files):
    """A record file damaged part-way, or one the sampled check did not read, stops the run
    with one line naming the file."""
    import tensorflow as tf

    from data.pretraining import dataset as pd

    try:
        yield
    except tf.errors.DataLossError as e:
        raise pd.damaged_record_error(files, e) from None
    except tf.errors.InvalidArgumentError as e:
        raise pd.find_bad_file(files, fv.max_seq_length, fv.max_predictions_per_seq,
                               e) from None


def main(argv) -> None:
    """``run`` under ``runner.run_main`` (absl's main).

    Args:
        argv: the command line left after absl's flags (only the program name).
    """
    runner.run_main(TOOL, run, FLAGS, argv)


def entry() -> None:
    """``python run_pretraining.py`` / the ``bert-run-pretraining`` command."""
    runner.start(define_flags, main, REQUIRED)

"""Runner helpers shared by the fine-tuning tools (run_classifier, run_swag, run_squad): the
original Estimator's conventions, read from the tools' flags.

* ``init_run(fv)``: the shared flag values checked (``bert_cli.flags.check_values``: a NaN or
  out-of-range value fails before anything is written), ``--output_dir`` created,
  ``--random_seed`` set, the tokenizer of ``--vocab_file``/``--do_lower_case``
  (``--fast_tokenizer``; ``tokenizer_from_flags`` alone: the vocab must hold [UNK], [CLS] and
  [SEP], else a ``VocabError`` naming the file and the token);
* ``split_file(fv, split, names)``: ``--<split>_file``, else a file of ``--data_dir``;
* ``restore_checkpoint(model, fv, ...)``: ``--init_checkpoint``, else the newest
  ``model.ckpt-<step>`` in ``--output_dir`` (as the Estimator's ``model_dir``);
* ``count_train_steps``: the original's step count from examples, batch size and epochs;
* ``train(fv, model, dataset, per_example_loss, ...)``: ``--do_train`` on the one trainer
  (``modeling.training.finetuning.finetune``): checkpoints ``model.ckpt-<step>`` with the
  optimizer state in ``--output_dir`` (a rerun resumes), TensorBoard in ``--output_dir/train``.
"""

from __future__ import annotations

import os
from typing import Callable, Optional, Sequence

from absl import logging

from bert_cli import runner
from bert_cli.flags import FlagError


# The special tokens every fine-tuning tool's features use ([UNK]: load_vocab checks it).
FINETUNING_TOKENS = ("[UNK]", "[CLS]", "[SEP]")


def tokenizer_from_flags(flag_values):
    """The tokenizer of ``--vocab_file``/``--do_lower_case`` (``FastFullTokenizer`` with
    ``--fast_tokenizer``, else ``FullTokenizer``); ``VocabError`` naming the file and the token
    when the vocab lacks one of ``FINETUNING_TOKENS``."""
    from data.tokenization import wordpiece

    tokenizer_class = (wordpiece.FastFullTokenizer if flag_values.fast_tokenizer
                       else wordpiece.FullTokenizer)
    tokenizer = tokenizer_class(vocab_file=flag_values.vocab_file,
                                do_lower_case=flag_values.do_lower_case)
    wordpiece.require_tokens(tokenizer, FINETUNING_TOKENS)
    return tokenizer


def init_run(flag_values, tokenizer=None):
    """Checks the shared flag values (``bert_cli.flags.check_values``), makes the tokenizer
    (``tokenizer`` or else ``tokenizer_from_flags``), creates ``--output_dir``, seeds python,
    numpy, TF and Keras (initializers, dropout) with ``--random_seed``; returns the tokenizer.
    Bad flags or vocab fail before anything is written."""
    import keras

    from bert_cli import flags as cli_flags

    cli_flags.check_values(flag_values)  # before anything is written
    tokenizer = tokenizer or tokenizer_from_flags(flag_values)  # a bad vocab: nothing written
    runner.prepare_output_dir(flag_values.output_dir)
    keras.utils.set_random_seed(flag_values.random_seed)
    return tokenizer


def split_file(flag_values, split: str, names: Sequence[str]) -> str:
    """The input file of ``split`` (train/eval/predict): ``--<split>_file`` if set (it must
    exist), else the first of ``names`` found in ``--data_dir``. ``FlagError`` names the flag
    or the folder and what was expected."""
    from bert_common import files

    explicit = getattr(flag_values, "%s_file" % split)
    if explicit:
        if not files.isfile(explicit):
            raise FlagError("--%s_file=%s: %s" % (split, explicit, "a folder, not a file"
                                                  if files.isdir(explicit) else "no such file"))
        return explicit
    data_dir = flag_values.data_dir
    if not data_dir:
        raise FlagError("--do_%s needs --%s_file or --data_dir" % (split, split))
    if not files.isdir(data_dir):
        raise FlagError("--data_dir=%s: no such directory" % data_dir)
    for name in names:
        path = os.path.join(data_dir, name)
        if files.isfile(path):
            return path
        if files.isdir(path):
            raise FlagError("--data_dir=%s: %s is a folder, not a file" % (data_dir, name))
    raise FlagError("--data_dir=%s has no %s split (expected %s)"
                    % (data_dir, split, " or ".join(names)))


def latest_checkpoint(output_dir: str) -> Optional[str]:
    """The newest TF1 checkpoint in ``output_dir``; None when there is none (or no folder)."""
    from modeling.checkpoints.tf1 import latest_checkpoint as newest

    return newest(output_dir)


def restore_checkpoint(model, flag_values, without_training: str,
) -> Optional[str]:
    """Loads ``--init_checkpoint`` into ``model`` (the load report is logged) and returns it.

    Without ``--do_train`` and ``--init_checkpoint`` the newest checkpoint in ``--output_dir``
    is loaded instead (as the original Estimator's ``model_dir``); if there is none, raises
    ``FlagError("--init_checkpoint is needed to <without_training> without --do_train (no
    checkpoint in --output_dir=<dir>)")``. Returns None when nothing was loaded (training from
    the random initialisation).
    """
    from modeling import checkpoints

    init_checkpoint = flag_values.init_checkpoint
    if not flag_values.do_train and not init_checkpoint:
        init_checkpoint = latest_checkpoint(flag_values.output_dir)
        if init_checkpoint is None:
            raise FlagError("--init_checkpoint is needed to %s without --do_train (no checkpoint "
                        "in --output_dir=%s)" % (without_training, flag_values.output_dir))
        # Said, not silent: after an interrupted run the newest checkpoint is a partial one.
        logging.warning("no --init_checkpoint: using the newest checkpoint in --output_dir, %s "
                        "(step %d); if its training was interrupted, rerun with --do_train to "
                        "finish it first", init_checkpoint,
                        checkpoints.checkpoint_step(init_checkpoint))
    if init_checkpoint:
        logging.info("%s", checkpoints.load_checkpoint(model, init_checkpoint, log=False).summary())
    return init_checkpoint


def count_train_steps(num_examples: int, flag_values) -> int:
    """The original's ``int(num_examples / --train_batch_size * --num_train_epochs)``; raises
    ``FlagError`` (naming both flags) when that is no step at all."""
    num_train_steps = int(num_examples / flag_values.train_batch_size
                          * flag_values.num_train_epochs)
    if num_train_steps <= 0:
        raise FlagError("%d training examples, --train_batch_size=%d and --num_train_epochs=%g "
                    "give no training step" % (num_examples, flag_values.train_batch_size,
                                               flag_values.num_train_epochs))
    return num_train_steps


def train(flag_values, model, dataset, per_example_loss: Callable, num_examples: int,
          strategy, precision, loss_weights: Optional[str] = None) -> int:
    """``--do_train`` of a fine-tuning tool: the original's step count and AdamWeightDecay
    schedule from the flags, then ``modeling.training.finetuning.finetune`` into
    ``--output_dir`` (resuming from its newest ``model.ckpt-<step>``). Returns the global step.

    ``dataset``: the training batches (``--train_batch_size``, repeated); ``precision``: from
    ``bert_cli.flags.precision_from_flags`` (its loss scale for float16); ``loss_weights``:
    see ``finetune`` (NER: the mean over scored tokens).
    """
    from modeling.training import distribution, finetuning, optimization

    from bert_cli import flags as cli_flags

    cli_flags.check_checkpoint_flags(flag_values)
    num_train_steps = count_train_steps(num_examples, flag_values)
    num_warmup_steps = int(num_train_steps * flag_values.warmup_proportion)
    logging.info("***** Running training *****")
    logging.info("  Num examples = %d", num_examples)
    logging.info("  Batch size = %d", flag_values.train_batch_size)
    logging.info("  Num steps = %d", num_train_steps)
    with strategy.scope():
        optimizer = optimization.create_optimizer(
            flag_values.learning_rate, num_train_steps, num_warmup_steps,
            loss_scale=precision.loss_scale, use_tpu=distribution.is_tpu(strategy))
    result = finetuning.finetune(
        model, optimizer, dataset, per_example_loss, model_dir=flag_values.output_dir,
        num_train_steps=num_train_steps, strategy=strategy,
        steps_per_loop=flag_values.iterations_per_loop,
        save_checkpoints_steps=flag_values.save_checkpoints_steps,
        keep_checkpoint_max=flag_values.keep_checkpoint_max,
        use_xla=flag_values.use_xla, loss_weights=loss_weights,
        fuse_optimizer=flag_values.xla_optimizer, fused_kernels=flag_values.xla_kernels)
    return result.global_step

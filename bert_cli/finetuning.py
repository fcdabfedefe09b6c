"""The fine-tuning tools' shared flags, defined once, and their one call into the driver.

A fine-tuning tool (run_classifier, run_squad, run_swag, run_ner, or your own) is its task's
own flags plus::

    def define_flags(flag_values):
        define = cli_flags.definer(flag_values)
        define("string", "data_dir", None, "...")            # the task's own flags
        finetuning.define_flags(flag_values)                  # the shared ones

    def run(fv):
        finetuning.run(TOOL, MyTask(fv.data_dir), fv)

``define_flags`` defines the ``bert_tasks.task.FinetuningSettings`` flags (the original's
names and defaults: ``--bert_config_file``, ``--vocab_file``, ``--output_dir``,
``--init_checkpoint``, ``--do_lower_case``, ``--max_seq_length``,
``--do_train``/``--do_eval``/``--do_predict``, batch sizes, ``--learning_rate``,
``--num_train_epochs``, ``--warmup_proportion``, ``--export_dir``,
``--length_aware_batching``, ``--fast_tokenizer``, ``--random_seed``), then the strategy, TPU,
precision and checkpoint flags every training tool shares (``bert_cli.flags``). A tool may
change a default or a help text, or leave out a flag its task has no use for (run_squad has no
``--do_eval``).

Your own task gets the same command line with ``start`` (``docs/your-own-task.md``)::

    if __name__ == "__main__":
        finetuning.start("csv_regression.py", lambda fv: CsvRegressionTask(fv.data_dir),
                         lambda define: define("string", "data_dir", None, "train.csv, dev.csv"))
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Optional, Sequence

from absl import flags

from bert_cli import flags as cli_flags
from bert_cli import runner

# FinetuningSettings' annotations (strings: the module uses postponed annotations) -> flag kind.
_KINDS = {"bool": "bool", "int": "integer", "float": "float", "Optional[str]": "string",
          "str": "string"}


def define_flags(flag_values: flags.FlagValues, *, defaults: Optional[Dict[str, Any]] = None,
                 helps: Optional[Dict[str, str]] = None, omit: Sequence[str] = ()) -> None:
    """Defines the shared fine-tuning flags into ``flag_values``.

    Args:
        flag_values: the tool's flag values.
        defaults: flag name -> the tool's default, where it is not run_classifier's.
        helps: flag name -> the tool's help text, where it says more than the shared one.
        omit: flags the tool does not define (its task does not use them).
    """
    from bert_tasks.task import own_fields

    define = cli_flags.definer(flag_values)
    defaults, helps = defaults or {}, helps or {}
    for field in own_fields():
        if field.name in omit:
            continue
        define(_KINDS[field.type], field.name, defaults.get(field.name, field.default),
               helps.get(field.name, field.metadata["help"]))
    cli_flags.define_distribution_flags(flag_values)
    cli_flags.define_precision_flags(flag_values)
    cli_flags.define_checkpoint_flags(flag_values)


def run(tool: str, task: Any, flag_values: flags.FlagValues) -> None:
    """Runs ``task`` on the tool's flags (``bert_tasks.driver.run``); warnings are said as
    ``<tool>: warning: ...`` on stderr.

    Args:
        tool: the tool's name (messages).
        task: the ``bert_tasks.task.Task`` to run.
        flag_values: the parsed flag values.
    """
    from bert_tasks import driver

    driver.run(task, flag_values, warn=functools.partial(runner.warn, tool))


def start(tool: str, make_task: Callable[[flags.FlagValues], Any],
          define_task_flags: Optional[Callable[[Callable[..., None]], None]] = None,
          required: Sequence[str] = ("vocab_file", "bert_config_file", "output_dir")) -> None:
    """The ``__main__`` of a fine-tuning tool for any task: its flags (the task's own, defined
    by ``define_task_flags(define)``, plus the shared ones), then ``make_task(flags)`` run by
    the driver; bad input is one line and exit status 1, as every tool.

    Args:
        tool: the tool's name in its messages (``csv_regression.py: error: ...``).
        make_task: the parsed flags -> the task.
        define_task_flags: called with ``bert_cli.flags.definer(FLAGS)``:
            ``define("string", "data_dir", None, "help")``.
        required: flags a run must be given.
    """
    def define_all(flag_values: flags.FlagValues) -> None:
        if define_task_flags is not None:
            define_task_flags(cli_flags.definer(flag_values))
        define_flags(flag_values)

    _, entry = runner.entry_points(tool, define_all, lambda fv: run(tool, make_task(fv), fv),
                                   required)
    entry()

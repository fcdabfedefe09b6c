"""BERT named-entity recognition on CoNLL-2003 (BERT paper section 5.3, Table 7).

Flags in the original scripts' style: ``--data_dir`` (``train.txt``, ``valid.txt`` for
``--do_eval``, ``test.txt`` for ``--do_predict``, as the CoNLL-2003 release names them) or
explicit ``--train_file``/``--eval_file``/``--predict_file``; ``--bert_config_file``,
``--vocab_file``, ``--init_checkpoint`` (TF1, HF, this project's), ``--output_dir``,
``--do_lower_case``, ``--max_seq_length=128``, ``--do_train``/``--do_eval``/``--do_predict``,
batch sizes 32/8/8, ``--learning_rate=5e-5``, ``--num_train_epochs=3.0``,
``--warmup_proportion=0.1``, the shared strategy/precision/TPU/checkpoint flags, ``--export_dir``.

The recipe (``data/ner/features.py``): the first sub-token of each word is classified, with the
maximal document context around the sentence (``--document_context``; off = one sentence per
sequence); a sentence longer than the window is split into windows (``--split_long_sentences``;
off = an error). ``--feature_mode`` trains the feature-based tagger of Table 7 instead
(frozen BERT activations -> two-layer BiLSTM of ``--lstm_units`` per direction -> classifier).

Writes into ``--output_dir``: ``labels.txt`` (the training file's tag set, IOB2),
``train.tf_record``/``eval.tf_record``/``predict.tf_record``, checkpoints ``model.ckpt-<step>``
(a rerun resumes), TensorBoard in ``train/`` and ``eval/``, and for ``--do_eval``
``eval_results.txt`` (``conlleval``'s entity-level ``f1``/``precision``/``recall``, token
``accuracy``, per type ``<TYPE>_f1`` ..., ``eval_loss``, ``global_step``),
``eval_predictions.txt`` (the eval file with a predicted-tag column: ``conlleval <
eval_predictions.txt`` gives the same scores) and ``eval_report.txt`` (that report);
``--do_predict``: ``test_predictions.txt`` (and ``test_report.txt`` when the file has tags).
``--export_dir``: a TF Serving model base path; each run adds the next version
``<export_dir>/1``, ``2``, ..., a SavedModel taking raw words or text and returning a tag per
word (``bert_tasks/exports/ner.py``). Bad input: one line on stderr, exit code 1, nothing
half-written.

The job is ``bert_tasks.ner.NerTask`` run by the one fine-tuning driver
(``bert_tasks.driver``); this module holds the task's own flags.
"""

from __future__ import annotations

from absl import flags

from bert_cli import finetuning
from bert_cli import flags as cli_flags
from bert_cli import runner

FLAGS = flags.FLAGS
TOOL = "run_ner.py"
REQUIRED = ("vocab_file", "bert_config_file", "output_dir")

FEATURE_MODES = ("embeddings", "second_to_last_hidden", "last_hidden", "sum_last_four_hidden",
                 "concat_last_four_hidden", "weighted_sum_last_four_hidden",
                 "weighted_sum_all_layers")  # = modeling.heads.token_classifier (tested)


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The original scripts' flags plus NER's.

    Args:
        flag_values: the ``FlagValues`` to define them in.
    """
    define = cli_flags.definer(flag_values)
    define("string", "data_dir", None, "Folder with the CoNLL-2003 files train.txt, valid.txt "
           "(eval) and test.txt (predict).")
    define("string", "train_file", None, "Training file (default: <data_dir>/train.txt).")
    define("string", "eval_file", None, "Labelled eval file (default: <data_dir>/valid.txt).")
    define("string", "predict_file", None, "File to tag (default: <data_dir>/test.txt); "
           "a one-column file of words is accepted.")
    define("bool", "document_context", True, "Pack the sentences of the same document around "
           "each sentence up to --max_seq_length (the paper); off: one sentence per sequence.")
    define("bool", "split_long_sentences", True, "Split a sentence longer than the window into "
           "several windows (every word predicted once); off: such a sentence is an error.")
    define("enum", "feature_mode", None, "Feature-based approach (Table 7): train a BiLSTM "
           "tagger on these activations of the frozen encoder. Unset: fine-tune BERT.",
           enum_values=list(FEATURE_MODES))
    define("integer", "lstm_units", 0, "--feature_mode: LSTM units per direction (0 = the "
           "encoder's hidden size; the paper: 768 for BERT-base).")
    finetuning.define_flags(flag_values, helps={
        "init_checkpoint": "Initial checkpoint: TF1 prefix/folder, HF folder or .safetensors, "
                           ".keras or .weights.h5, or a run_ner checkpoint.",
        "max_seq_length": "Window length in sub-tokens ([CLS] and [SEP] included).",
        "do_eval": "Whether to score the eval file (conlleval).",
        "do_predict": "Whether to tag the predict file.",
        "train_batch_size": "Total batch size for training (windows).",
        "export_dir": "TF Serving model base path, e.g. models/ner: writes the SavedModel "
                      "(words or text in, a tag per word out) as its next version "
                      "<export_dir>/1, 2, ... (the folder may hold only version folders).",
        "length_aware_batching": "Sort eval/predict windows by length and cut every batch to "
                                 "its longest (off on TPU)."})


def run(fv: flags.FlagValues) -> None:
    """Runs ``NerTask`` on the flags (``finetuning.run``).

    Args:
        fv: the parsed flag values.
    """
    from bert_tasks.ner import NerTask

    finetuning.run(TOOL, NerTask(
        fv.data_dir, fv.train_file, fv.eval_file, fv.predict_file,
        document_context=fv.document_context, split_long_sentences=fv.split_long_sentences,
        feature_mode=fv.feature_mode, lstm_units=fv.lstm_units), fv)


# absl's main(argv), and the console command / ``python run_ner.py``
main, entry = runner.entry_points(TOOL, define_flags, run, required=REQUIRED)

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
word (``data/ner/serving.py``). Bad input: one line on stderr, exit code 1, nothing
half-written.
"""

from __future__ import annotations

import os

from absl import flags, logging

from bert_cli import flags as cli_flags
from bert_cli import finetuning as cli_finetuning
from bert_cli import runner
from bert_cli.flags import FlagError
from bert_common import files

FLAGS = flags.FLAGS
TOOL = "run_ner.py"
REQUIRED = ("vocab_file", "bert_config_file", "output_dir")

# CoNLL-2003's file names; split -> (file, flag stem).
SPLIT_FILES = {"train": "train.txt", "eval": "valid.txt", "predict": "test.txt"}
FEATURE_MODES = ("embeddings", "second_to_last_hidden", "last_hidden", "sum_last_four_hidden",
                 "concat_last_four_hidden", "weighted_sum_last_four_hidden",
                 "weighted_sum_all_layers")  # = modeling.heads.token_classifier (tested)


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The original scripts' flags plus NER's."""
    define = cli_flags.definer(flag_values)

    define("string", "data_dir", None, "Folder with the CoNLL-2003 files train.txt, valid.txt "
           "(eval) and test.txt (predict).")
    define("string", "train_file", None, "Training file (default: <data_dir>/train.txt).")
    define("string", "eval_file", None, "Labelled eval file (default: <data_dir>/valid.txt).")
    define("string", "predict_file", None, "File to tag (default: <data_dir>/test.txt); "
           "a one-column file of words is accepted.")
    define("string", "bert_config_file", None, "The config json file of the pre-trained model.")
    define("string", "vocab_file", None, "The vocabulary file that the BERT model was trained on.")
    define("string", "output_dir", None, "Where records, checkpoints and results are written.")
    define("string", "init_checkpoint", None, "Initial checkpoint: TF1 prefix/folder, HF "
           "folder or .safetensors, .keras or .weights.h5, or a run_ner checkpoint.")
    define("bool", "do_lower_case", True, "Whether to lower case the input text.")
    define("integer", "max_seq_length", 128, "Window length in sub-tokens ([CLS] and [SEP] "
           "included).")
    define("bool", "do_train", False, "Whether to run training.")
    define("bool", "do_eval", False, "Whether to score the eval file (conlleval).")
    define("bool", "do_predict", False, "Whether to tag the predict file.")
    define("integer", "train_batch_size", 32, "Total batch size for training (windows).")
    define("integer", "eval_batch_size", 8, "Total batch size for eval.")
    define("integer", "predict_batch_size", 8, "Total batch size for predict.")
    define("float", "learning_rate", 5e-5, "The initial learning rate for Adam.")
    define("float", "num_train_epochs", 3.0, "Total number of training epochs to perform.")
    define("float", "warmup_proportion", 0.1, "Proportion of training for linear warmup.")
    define("bool", "document_context", True, "Pack the sentences of the same document around "
           "each sentence up to --max_seq_length (the paper); off: one sentence per sequence.")
    define("bool", "split_long_sentences", True, "Split a sentence longer than the window into "
           "several windows (every word predicted once); off: such a sentence is an error.")
    define("enum", "feature_mode", None, "Feature-based approach (Table 7): train a BiLSTM "
           "tagger on these activations of the frozen encoder. Unset: fine-tune BERT.",
           enum_values=list(FEATURE_MODES))
    define("integer", "lstm_units", 0, "--feature_mode: LSTM units per direction (0 = the "
           "encoder's hidden size; the paper: 768 for BERT-base).")
    define("string", "export_dir", None, "TF Serving model base path, e.g. models/ner: "
           "writes the SavedModel (words or text in, a tag per word out) as its next version "
           "<export_dir>/1, 2, ... (the folder may hold only version folders).")
    define("bool", "length_aware_batching", True, "Sort eval/predict windows by length and "
           "cut every batch to its longest (off on TPU).")
    define("bool", "fast_tokenizer", True, "Use FastFullTokenizer (same output).")
    define("integer", "random_seed", 12345, "Seed of the shuffle, dropout and head init.")
    cli_flags.define_distribution_flags(flag_values)
    cli_flags.define_precision_flags(flag_values)
    cli_flags.define_checkpoint_flags(flag_values)


def split_file(fv: flags.FlagValues, split: str) -> str:
    """The file of ``split`` (train/eval/predict): its flag, else found in --data_dir."""
    return cli_finetuning.split_file(fv, split, (SPLIT_FILES[split],))


def validate_flags(fv: flags.FlagValues, bert_config) -> None:
    cli_flags.check_values(fv)  # NaN/negative rates, batch 0, ...: before any data is read
    if not (fv.do_train or fv.do_eval or fv.do_predict or fv.export_dir):
        raise FlagError("At least one of `do_train`, `do_eval`, `do_predict` or `export_dir` "
                        "must be set.")
    if fv.max_seq_length > bert_config.max_position_embeddings:
        raise FlagError("Cannot use sequence length %d because the BERT model was only "
                        "trained up to sequence length %d"
                        % (fv.max_seq_length, bert_config.max_position_embeddings))
    if fv.max_seq_length < 3:
        raise FlagError("--max_seq_length=%d: at least 3 is needed ([CLS] word [SEP])"
                        % fv.max_seq_length)
    for name in ("train_batch_size", "eval_batch_size", "predict_batch_size"):
        if getattr(fv, name) <= 0:
            raise FlagError("--%s=%d must be positive" % (name, getattr(fv, name)))
    if fv.lstm_units < 0:
        raise FlagError("--lstm_units=%d must be positive (or 0: the hidden size)"
                        % fv.lstm_units)
    if not 0.0 <= fv.warmup_proportion <= 1.0:
        raise FlagError("--warmup_proportion=%g must be in [0, 1]" % fv.warmup_proportion)
    if fv.export_dir:
        files.check_export_base(fv.export_dir, "--export_dir", {"--output_dir": fv.output_dir})


def run(fv: flags.FlagValues) -> None:
    from bert_tasks import ner as task
    from bert_common.results import write_eval_results
    from data.ner import conll
    from modeling import checkpoints
    from modeling.config import BertConfig
    from modeling.heads import token_classifier
    from modeling.training import distribution
    from modeling.training.trainer import write_eval_summaries

    logging.set_verbosity(logging.INFO)
    bert_config = BertConfig.from_json_file(fv.bert_config_file)
    validate_flags(fv, bert_config)
    # Read every split and the label set first: bad data fails before anything is written.
    wanted = [("train", fv.do_train), ("eval", fv.do_eval), ("predict", fv.do_predict)]
    sentences = {split: conll.read_conll(split_file(fv, split), labelled=split != "predict")
                 for split, want in wanted if want}
    if fv.do_train:
        label_list, label_source = conll.label_list(sentences["train"]), split_file(fv, "train")
    else:
        train_file = None
        if fv.train_file or (fv.data_dir and files.isfile(os.path.join(fv.data_dir,
                                                                        SPLIT_FILES["train"]))):
            train_file = split_file(fv, "train")
        label_list, label_source = task.labels_for(
            fv.init_checkpoint or cli_finetuning.latest_checkpoint(fv.output_dir),
            fv.output_dir, train_file)
    for split in ("eval", "predict"):
        if split in sentences:
            conll.check_labels(sentences[split], label_list, label_source)
    options = dict(max_seq_length=fv.max_seq_length, document_context=fv.document_context,
                   split_long_sentences=fv.split_long_sentences)
    strategy = cli_flags.strategy_from_flags(fv)  # before any other TF op
    precision = cli_flags.precision_from_flags(fv)  # sets the Keras dtype policy
    tpu = distribution.is_tpu(strategy)
    tokenizer = cli_finetuning.tokenizer_from_flags(fv)
    windows = task.convert_all(sentences, label_list, tokenizer, **options)  # checks lengths
    cli_finetuning.init_run(fv, tokenizer)  # --output_dir, --random_seed

    with strategy.scope():
        model = token_classifier.build_token_classifier_model(
            bert_config, len(label_list), seq_length=fv.max_seq_length if tpu else None,
            feature_mode=fv.feature_mode, lstm_units=fv.lstm_units or None)
    init_checkpoint = cli_finetuning.restore_checkpoint(model, fv, "evaluate, predict or export")
    global_step = 0 if fv.do_train else checkpoints.checkpoint_step(init_checkpoint)

    if fv.do_train:
        task.write_labels(os.path.join(fv.output_dir, task.LABELS_FILE), label_list)
        train_file = os.path.join(fv.output_dir, "train.tf_record")
        task.write_records(windows["train"], train_file)
        logging.info("%d training windows from %d sentences", len(windows["train"]),
                     len(sentences["train"]))
        # The whole training set is shuffled, not the classifier's buffer of 100 (the
        # original's): CoNLL windows come in document order, grouped by topic (sports results,
        # then politics...), and batches of 100 neighbours cost ~2.5 F1 in one epoch.
        dataset = task.dataset(train_file, fv.max_seq_length, fv.train_batch_size, True,
                               length_aware=fv.length_aware_batching, static_shapes=tpu,
                               seed=fv.random_seed, shuffle_buffer=len(windows["train"]))
        global_step = cli_finetuning.train(fv, model, dataset, task.per_token_loss,
                                           len(windows["train"]), strategy, precision,
                                           loss_weights=task.LOSS_WEIGHTS)

    for split, prefix, want in (("eval", "eval", fv.do_eval), ("predict", "test", fv.do_predict)):
        if not want:
            continue
        logging.info("***** Running %s *****", "evaluation" if split == "eval" else "prediction")
        tags, loss = task.predict_windows(
            model, sentences[split], windows[split], label_list,
            os.path.join(fv.output_dir, "%s.tf_record" % split),
            batch_size=getattr(fv, "%s_batch_size" % split), max_seq_length=fv.max_seq_length,
            strategy=strategy, length_aware=fv.length_aware_batching)
        predictions_file = os.path.join(fv.output_dir, "%s_predictions.txt" % prefix)
        conll.write_predictions(predictions_file, sentences[split], tags)
        logging.info("wrote %s", predictions_file)
        if sentences[split][0].tags is None:
            continue
        result = task.score(sentences[split], tags)
        with files.atomic_open(os.path.join(fv.output_dir, "%s_report.txt" % prefix)) as f:
            f.write(result.report())
        for line in result.report().splitlines():
            logging.info("conlleval: %s", line)
        if split == "eval":
            metrics = task.eval_metrics(result, loss)
            metrics["global_step"] = global_step
            write_eval_results(os.path.join(fv.output_dir, "eval_results.txt"), metrics)
            write_eval_summaries(fv.output_dir, metrics, global_step)

    if fv.export_dir:
        from data.ner import serving

        version_dir = serving.export_version(model, fv.export_dir, fv.vocab_file,
                                             fv.do_lower_case, fv.max_seq_length, label_list)
        logging.info("exported SavedModel version %s to %s (signatures %s)",
                     os.path.basename(version_dir), version_dir, ", ".join(serving.SIGNATURES))


def main(argv) -> None:
    runner.run_main(TOOL, run, FLAGS, argv)


def entry() -> None:
    """``python run_ner.py`` / the ``bert-run-ner`` command."""
    runner.start(define_flags, main, REQUIRED)

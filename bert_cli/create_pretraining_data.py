"""Creates masked-LM / next-sentence pre-training records (TFRecord of tf.train.Example).

The original ``create_pretraining_data.py``'s flags and defaults: ``--input_file`` (comma list,
each globbed), ``--output_file`` (comma list: records go round-robin), ``--vocab_file``,
``--do_lower_case=True``, ``--do_whole_word_mask=False``, ``--max_seq_length=128``,
``--max_predictions_per_seq=20``, ``--random_seed=12345``, ``--dupe_factor=10``,
``--masked_lm_prob=0.15``, ``--short_seq_prob=0.1``; plus ``--num_workers`` (default 1: one
stream, the original's records for the same seed; N > 1 splits the corpus at document
boundaries across N processes, each with its own seed and output file, see
``data/pretraining/worker_shards.py``), ``--num_shards`` / ``--shard_range`` (corpus scale: shards
by content hash, generated independently in bounded memory, resumable, split across machines;
``data/pretraining/corpus_shards.py``) and ``--show_progress``.

Input: one sentence per line, a blank line between documents; documents continue across input
files. With ``--num_workers=1`` the records are identical (parsed) to the original's.
Nothing is written unless everything succeeds; bad input is one line on stderr and exit code 1.
TensorFlow is not imported.
"""

from __future__ import annotations

import sys
import time
from typing import List

from absl import flags

from bert_cli import flags as cli_flags
from bert_common import atomic
from bert_common import files as fs
from bert_cli import runner
from bert_common import checks
from bert_cli.flags import FlagError

FLAGS = flags.FLAGS
TOOL = "create_pretraining_data.py"


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The original's flags plus ``--num_workers`` and ``--show_progress``.

    Args:
        flag_values: the ``FlagValues`` to define them in.
    """
    fv = flag_values
    flags.DEFINE_string("input_file", None,
                        "Input raw text file (or comma-separated list of files).", flag_values=fv)
    flags.DEFINE_string("output_file", None,
                        "Output TF example file (or comma-separated list of files).",
                        flag_values=fv)
    flags.DEFINE_string("vocab_file", None,
                        "The vocabulary file that the BERT model was trained on.", flag_values=fv)
    flags.DEFINE_bool("do_lower_case", True,
                      "Whether to lower case the input text. Should be True for uncased "
                      "models and False for cased models.", flag_values=fv)
    flags.DEFINE_bool("do_whole_word_mask", False,
                      "Whether to use whole word masking rather than per-WordPiece masking.",
                      flag_values=fv)
    flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.", flag_values=fv)
    flags.DEFINE_integer("max_predictions_per_seq", 20,
                         "Maximum number of masked LM predictions per sequence.", flag_values=fv)
    flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.", flag_values=fv)
    flags.DEFINE_integer("dupe_factor", 10,
                         "Number of times to duplicate the input data (with different masks).",
                         flag_values=fv)
    flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.", flag_values=fv)
    flags.DEFINE_float("short_seq_prob", 0.1,
                       "Probability of creating sequences which are shorter than the maximum "
                       "length.", flag_values=fv)
    flags.DEFINE_integer("num_workers", 1,
                         "Processes to split the corpus across (at document boundaries). 1 = one "
                         "stream: the original's records for the same seed. N > 1: worker k uses "
                         "seed '<random_seed>/<k>' and writes its own file(s), so the records "
                         "differ from the original's. With --num_shards: the processes that "
                         "share the shards (the output does not depend on it).", flag_values=fv)
    flags.DEFINE_integer("num_shards", None,
                         "Corpus scale: write PREFIX-00000-of-NNNNN .. (--output_file=PREFIX), "
                         "each document in the shard its content's hash picks, each shard "
                         "generated on its own (seed '<random_seed>/<shard>/<num_shards>'), in "
                         "memory bounded by its text; --num_workers processes share the "
                         "shards. The bytes depend only on the corpus, flags, seed and "
                         "num_shards. Shards that exist are skipped (a rerun continues). "
                         "About 30 MB of text per shard at --dupe_factor=1, 16 MB at 10 "
                         "(docs/pretraining-data.md).", flag_values=fv)
    flags.DEFINE_string("shard_range", None,
                        "With --num_shards: only shards i..j-1, as 'i:j' (split the work "
                        "across machines or array jobs).", flag_values=fv)
    flags.DEFINE_string("beam_options", None,
                        "With --num_shards: make the shards with an Apache Beam pipeline "
                        "(pip install '.[beam]') run with these pipeline options, e.g. "
                        "'--runner=DataflowRunner --project=P --region=R "
                        "--temp_location=gs://B/tmp --setup_file=./setup.py'; the same bytes "
                        "as the process pool. Without --runner: Beam's local DirectRunner.",
                        flag_values=fv)
    flags.DEFINE_bool("show_progress", True, "Print progress (documents, instances, rate, ETA) "
                      "on stderr.", flag_values=fv)


def _split_outputs(value: str) -> List[str]:
    files = value.split(",")
    if any(not f for f in files):
        raise FlagError("--output_file has an empty entry (stray comma?)")
    if len(set(fs.abspath(f) for f in files)) != len(files):
        raise FlagError("--output_file lists the same file twice")
    for f in files:
        try:
            atomic.check_output_folder(f)
        except OSError as e:
            raise FlagError("--output_file %s: %s" % (f, e)) from None
        if fs.isdir(f):
            raise FlagError("--output_file %s is a folder" % f)
    return files


def run(fv: flags.FlagValues = FLAGS) -> int:
    """Creates the records as the flags say; returns the number of records written.

    Args:
        fv: the parsed flag values.

    Returns:
        The number of records written.
    """
    from data.pretraining import corpus as pretraining_corpus
    from data.pretraining import corpus_shards
    from data.pretraining import instances as pretraining

    cli_flags.require(fv, ("input_file", "output_file", "vocab_file"))
    # --masked_lm_prob in (0, 1], --dupe_factor, --max_predictions_per_seq, --num_workers >= 1,
    # --max_seq_length >= 5 ([CLS] A [SEP] B [SEP]): the checks the tools share.
    checks.check_values(fv, min_seq_length=5)
    pretraining.check_settings(fv.max_seq_length, fv.max_predictions_per_seq, fv.dupe_factor,
                               fv.masked_lm_prob, fv.short_seq_prob)
    shard_range = _check_sharding(fv)
    output_files = [fv.output_file] if fv.num_shards else _split_outputs(fv.output_file)
    # [CLS] [SEP] [MASK]: checked before any text is read
    tokenizer, vocab = corpus_shards.load_tokenizer(fv.vocab_file, fv.do_lower_case)
    input_files = pretraining_corpus.expand_input_patterns(fv.input_file,
                                                           sort=bool(fv.num_shards))
    settings = dict(max_seq_length=fv.max_seq_length,
                    max_predictions_per_seq=fv.max_predictions_per_seq,
                    masked_lm_prob=fv.masked_lm_prob, short_seq_prob=fv.short_seq_prob,
                    dupe_factor=fv.dupe_factor, do_whole_word_mask=fv.do_whole_word_mask,
                    random_seed=fv.random_seed)
    if not fv.num_shards and fv.num_workers <= 1:
        return _write_stream(fv, tokenizer, vocab, input_files, output_files, settings)
    del tokenizer, vocab  # each worker loads the vocab itself: the pool starts lean
    if fv.num_shards:
        return _write_shards(fv, input_files, shard_range, settings)
    return _write_with_workers(fv, input_files, output_files, settings)


def _write_shards(fv: flags.FlagValues, input_files, shard_range, settings) -> int:
    """``--num_shards``: the shards of ``shard_range`` by the process pool, or by Apache Beam
    with ``--beam_options``; the summary line; the instances written."""
    from data.pretraining import corpus_shards

    if fv.beam_options is not None:
        from data.pretraining import beam

        summary = beam.run_beam(input_files, fv.output_file, fv.num_shards, shard_range,
                                fv.vocab_file, fv.do_lower_case, settings,
                                fv.beam_options, parts=fv.num_workers)
    else:
        summary = corpus_shards.run_sharded(input_files, fv.output_file, fv.num_shards,
                                      shard_range, fv.num_workers, fv.vocab_file,
                                      fv.do_lower_case, settings, fv.show_progress)
    _log(fv, summary.line())
    if summary.one_document:
        runner.warn(TOOL, "%d shards hold a single document, so their 'random next' "
                    "sentences come from that same document: use fewer shards (about "
                    "30 MB of text each, docs/pretraining-data.md)" % len(summary.one_document))
    return summary.instances


def _write_with_workers(fv: flags.FlagValues, input_files, output_files, settings) -> int:
    """``--num_workers`` > 1 without ``--num_shards``: the outputs split over processes."""
    from data.pretraining import corpus as pretraining_corpus
    from data.pretraining import worker_shards

    start = time.perf_counter()
    results = worker_shards.run_workers(input_files, output_files, fv.num_workers,
                                             fv.vocab_file, fv.do_lower_case, settings,
                                             fv.show_progress)
    total = sum(r["instances"] for r in results)
    if total == 0:
        raise pretraining_corpus.no_text_error(input_files)
    _log(fv, "wrote %d instances with %d workers in %.1fs"
         % (total, fv.num_workers, time.perf_counter() - start))
    return total


def _write_stream(fv: flags.FlagValues, tokenizer, vocab, input_files, output_files,
                  settings) -> int:
    """One stream, the original's records exactly: the corpus read, then written."""
    from data.pretraining import corpus as pretraining_corpus
    from data.pretraining import instances_fast

    start = time.perf_counter()
    corpus = pretraining_corpus.read_corpus(input_files, tokenizer, fv.show_progress)
    del tokenizer  # its caches are not needed any more (``vocab`` has the ids)
    _check_corpus(corpus, input_files)
    written = instances_fast.write_records(corpus, vocab, output_files,
                                             show_progress=fv.show_progress, **settings)
    _log(fv, "wrote %d instances (%d documents, %d sentences) to %s in %.1fs"
         % (written, corpus.num_documents, corpus.num_sentences, ",".join(output_files),
            time.perf_counter() - start))
    return written


def _check_sharding(fv: flags.FlagValues):
    """``(first, end)`` of the shards to make with ``--num_shards`` (else None); FlagError for
    ``--num_shards`` < 1, a bad ``--shard_range`` or one without ``--num_shards``, and a comma
    list of outputs with ``--num_shards``."""
    from data.pretraining import corpus_shards

    if fv.num_shards is None:
        for name in ("shard_range", "beam_options"):
            if fv[name].value is not None:
                raise FlagError("--%s=%s needs --num_shards" % (name, fv[name].value))
        return None
    if fv.num_shards < 1:
        raise FlagError("--num_shards=%d must be at least 1" % fv.num_shards)
    if fv.num_shards > 99999:
        raise FlagError("--num_shards=%d: at most 99999 (five-digit shard names)"
                        % fv.num_shards)
    if "," in fv.output_file:
        raise FlagError("--output_file=%s: with --num_shards it is one name prefix (the "
                        "shards are PREFIX-00000-of-%05d ...), not a comma list"
                        % (fv.output_file, fv.num_shards))
    try:
        return corpus_shards.parse_shard_range(fv.shard_range, fv.num_shards)
    except ValueError as e:
        raise FlagError(str(e)) from None


def _check_corpus(corpus, input_files) -> None:
    from data.pretraining.corpus import no_text_error

    if corpus.num_documents == 0:
        raise no_text_error(input_files)
    if int(corpus.document_sentence_counts().max()) < 2:
        runner.warn(TOOL, "no document has two sentences, so every instance pairs its "
                    "sentence with one of a random document (label 1), as the original does")
    if corpus.num_documents == 1:
        runner.warn(TOOL, "only one document: 'random next' sentences come from the same "
                    "document, as in the original")


def _log(fv, message: str) -> None:
    if fv.show_progress:
        print(message, file=sys.stderr, flush=True)


def main(argv) -> None:
    """``run`` under ``runner.run_main`` (absl's main).

    Args:
        argv: the command line left after absl's flags (only the program name).
    """
    from data.pretraining.instances_fast import HelperError

    try:
        runner.run_main(TOOL, run, FLAGS, argv)
    except HelperError as e:  # a helper process died: its reason, in one line
        runner.fail(TOOL, e)


def entry() -> None:
    """``python create_pretraining_data.py`` / the ``bert-create-pretraining-data`` command."""
    runner.start(define_flags, main)

"""Learns a WordPiece vocab file from text, laid out as Google's BERT vocabs.

Example::

    python build_vocab.py --input_file=corpus/*.txt --output_file=vocab.txt --vocab_size=30522

``--input_file``: comma-separated glob patterns, read as create_pretraining_data.py reads them
(the pre-training corpus format: one sentence per line, a blank line between documents). The
text is normalised and split exactly as ``FullTokenizer`` does (``--do_lower_case``: lower-case
and strip accents), then Hugging Face ``tokenizers``' WordPiece trainer learns the pieces. The
file: ``[PAD]``, ``[unused0..98]``, ``[UNK] [CLS] [SEP] [MASK]`` at ids 0..103 as Google's,
further ``[unusedN]``, ``--reserved_tokens``, every character (alone and as ``##`` piece), then
the learned pieces: exactly ``--vocab_size`` lines (fewer only when the text has no more to
learn; the summary line says so). Nothing is written unless everything succeeds; bad input is
one line on stderr and exit code 1. TensorFlow is not imported (unless a path is a URL).
"""

from __future__ import annotations

import sys

from absl import flags

from bert_cli import flags as cli_flags
from bert_cli import runner
from bert_cli.flags import FlagError

FLAGS = flags.FLAGS
TOOL = "build_vocab.py"


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """``--input_file --output_file --vocab_size --do_lower_case --num_unused --reserved_tokens
    --show_progress``.

    Args:
        flag_values: the ``FlagValues`` to define them in.
    """
    define = cli_flags.definer(flag_values)
    define("string", "input_file", None, "Input raw text file, or comma-separated list of "
           "files/glob patterns (one sentence per line, blank line between documents).")
    define("string", "output_file", None, "The vocab file to write (one token per line); its "
           "folder must exist.")
    define("integer", "vocab_size", 30522, "Lines of the vocab file, special/unused/reserved "
           "tokens included (30522: Google's English vocabs).")
    define("bool", "do_lower_case", True, "Whether to lower case the input text. Should be "
           "True for uncased models and False for cased models.")
    define("integer", "num_unused", 99, "[unusedN] tokens. The first 99 go between [PAD] and "
           "[UNK] as in Google's vocabs ([UNK]=100 [CLS]=101 [SEP]=102 [MASK]=103), any more "
           "right after [MASK]. Fewer than 99 shift the special tokens down: [UNK] is then "
           "num_unused+1 (0 gives [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4).")
    define("list", "reserved_tokens", [], "Comma-separated extra tokens of your own (e.g. "
           "[URL],[EMAIL]), placed right after the special and unused tokens, in order.")
    define("bool", "show_progress", True, "Print progress (MB read, lines, words) on stderr.")


def run(fv: flags.FlagValues = FLAGS):
    """Builds the vocab file as the flags say; prints and returns the ``BuildSummary``.

    Args:
        fv: the parsed flag values.

    Returns:
        The ``BuildSummary``.

    Raises:
        FlagError: a missing or bad flag.
    """
    from data.tokenization import vocab_builder

    cli_flags.require(fv, ("input_file", "output_file"))
    if fv.vocab_size is None or fv.vocab_size <= 0:
        raise FlagError("--vocab_size must be positive")
    summary = vocab_builder.build_vocab_files(
        fv.input_file, fv.output_file, fv.vocab_size, do_lower_case=fv.do_lower_case,
        num_unused=fv.num_unused, reserved_tokens=list(fv.reserved_tokens),
        show_progress=fv.show_progress)
    print("%s: %s" % (TOOL, summary), file=sys.stderr, flush=True)
    return summary


# absl's main(argv), and the console command / ``python build_vocab.py``
main, entry = runner.entry_points(TOOL, define_flags, run)

"""Pre-training records at corpus scale: ``--num_shards`` shards, each made on its own, in a
worker's memory bounded by the shard's text, not the corpus.

Which document goes where, and in what order (one rule, shared by the process pool here and
the Beam pipeline, ``data.pretraining.beam``):

* a document is what ``corpus`` reads as one (lines up to a blank line; documents continue
  across files): its stripped lines joined by ``\\n``, UTF-8 (``document_bytes``);
* its key is ``blake2b(bytes, digest_size=16)``; it goes to shard
  ``int(key[:8], big-endian) % num_shards`` (``shard_of``): its content alone decides, not the
  order of the files, the worker count or the machine;
* shard ``s`` is the single-stream generator (``data.pretraining.instances_fast``, the original's rules)
  over the shard's documents sorted by key, seeded with
  ``random.Random("<random_seed>/<s>/<num_shards>")`` (``shard_seed``); its random-next
  sentences come from its own documents; it is written to ``PREFIX-<s>-of-<num_shards>``
  (five digits each, the TFRecord/Beam naming).

So a shard's bytes depend on the corpus's documents, the flags, the seed and ``num_shards``
only. ``PREFIX.shards.json`` (``manifest``) records what they were made with; a run whose flags
differ stops before it writes anything. A shard whose file exists is complete (each appears
atomically under its final name) and is skipped, so a killed run that is run again goes on
where it stopped, and ``--shard_range`` splits the work across machines.

The process pool does it in two passes, so that no step holds or sorts the corpus:

1. *split*: the input, cut at document boundaries into runs of at most ``RUN_BYTES``, is read
   by the workers; each appends the documents of the shards wanted to one scratch file per
   (shard, run) in a local scratch folder (``$TMPDIR``), holding at most ``BUFFER_BYTES``;
2. *generate*: each missing shard is read back, sorted, tokenized, generated and written by
   one worker, then its scratch files are removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import re
import sys
import time
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from bert_common import atomic, files
from bert_common import fork_safety
from bert_common.progress import Progress
from data.pretraining import corpus as pretraining_corpus
from data.pretraining.instances import PretrainingDataError
from data.records import numpy_reader

MANIFEST_SUFFIX = ".shards.json"
MANIFEST_FORMAT = "bert-tf2 sharded pre-training records 1"
RUN_BYTES = 64 << 20  # the most text one split task reads
BUFFER_BYTES = 32 << 20  # the most document text a split task holds before appending it
_SHARD_FILE_RE = re.compile(r"-(\d{5})-of-(\d{5})$")


def input_files(pattern_list: str) -> List[str]:
    """``--input_file``: comma-separated globs -> files (sorted per glob, in flag order);
    a glob skips the shards' manifest (``PREFIX.shards.json`` of create_pretraining_data).

    Args:
        pattern_list: comma-separated glob patterns.

    Returns:
        The matching files.

    Raises:
        PretrainingDataError: no file matched.
    """
    found: List[str] = []
    for pattern in (pattern_list or "").split(","):
        pattern = pattern.strip()
        if pattern:
            matches = sorted(files.glob(pattern))
            if any(c in pattern for c in "*?["):
                matches = [m for m in matches if not m.endswith(MANIFEST_SUFFIX)]
            found.extend(matches)
    if not found:
        raise PretrainingDataError("--input_file=%s: no file matched" % pattern_list)
    return found


# ------------------------------------------------------------------------------------------
# The rule (see the module docstring).
# ------------------------------------------------------------------------------------------


def shard_path(prefix: str, shard: int, num_shards: int) -> str:
    """``PREFIX-00003-of-00512``.

    Args:
        prefix: the shards' prefix.
        shard: the shard's index.
        num_shards: the number of shards.

    Returns:
        The shard's path.
    """
    return "%s-%05d-of-%05d" % (prefix, shard, num_shards)


def manifest_path(prefix: str) -> str:
    """``PREFIX.shards.json``: the flags the shards of ``prefix`` were made with.

    Args:
        prefix: the shards' prefix.

    Returns:
        The manifest's path.
    """
    return prefix + MANIFEST_SUFFIX


def document_bytes(lines: Sequence[str]) -> bytes:
    """A document as the rule hashes and stores it: its lines joined by ``\\n``, UTF-8.

    Args:
        lines: the document's lines.

    Returns:
        The document's bytes.
    """
    return "\n".join(lines).encode("utf-8")


def document_key(data: bytes) -> bytes:
    """The 16-byte key of a document's bytes (``document_bytes``).

    Args:
        data: the document's bytes.

    Returns:
        The 16-byte key.
    """
    return hashlib.blake2b(data, digest_size=16).digest()


def shard_of(key: bytes, num_shards: int) -> int:
    """The shard of a document with key ``key``.

    Args:
        key: the document's key.
        num_shards: the number of shards.

    Returns:
        The shard's index.
    """
    return int.from_bytes(key[:8], "big") % num_shards


def shard_seed(random_seed: int, shard: int, num_shards: int) -> random.Random:
    """The generator of shard ``shard`` (a string seed: hashed with SHA-512, stable).

    Args:
        random_seed: the ``--random_seed``.
        shard: the shard's index.
        num_shards: the number of shards.

    Returns:
        The shard's ``random.Random``.
    """
    return random.Random("%d/%d/%d" % (random_seed, shard, num_shards))


def sorted_documents(datas: Iterable[bytes]) -> List[List[str]]:
    """A shard's documents (their bytes, in any order) in the rule's order, as lists of lines.

    Args:
        datas: the documents' bytes.

    Returns:
        The documents, as lists of lines, in key order.
    """
    keyed = sorted((document_key(d), d) for d in datas)
    return [d.decode("utf-8").split("\n") for _, d in keyed]


def parse_shard_range(text: Optional[str], num_shards: int) -> Tuple[int, int]:
    """``--shard_range=i:j`` -> ``(i, j)``, the shards ``i .. j-1``; all of them when unset.

    Raises PretrainingDataError naming the flag when it is not ``i:j`` with
    ``0 <= i < j <= num_shards``.

    Args:
        text: the flag's value, or None.
        num_shards: the number of shards.

    Returns:
        ``(i, j)``.

    Raises:
        PretrainingDataError: a malformed or out-of-range value.
    """
    if text is None:
        return 0, num_shards
    match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
    if match is None:
        raise PretrainingDataError("--shard_range=%s: expected i:j (shards i to j-1), e.g. "
                                   "0:%d" % (text, num_shards))
    lo, hi = int(match.group(1)), int(match.group(2))
    if not 0 <= lo < hi <= num_shards:
        raise PretrainingDataError("--shard_range=%s: needs 0 <= i < j <= --num_shards=%d"
                                   % (text, num_shards))
    return lo, hi


def manifest(num_shards: int, settings: Dict, do_lower_case: bool, vocab_file: str,
             input_files: Sequence[str]) -> Dict:
    """What a set of shards is made from: the flags, the vocabulary's hash and the input's
    size (file count and bytes; their names and order do not change the shards).

    Args:
        num_shards: the number of shards.
        settings: the generation settings.
        do_lower_case: lower-case and strip accents.
        vocab_file: the WordPiece vocab (hashed).
        input_files: the corpus files (counted and sized).

    Returns:
        The manifest, a JSON-able dict.
    """
    with files.open(vocab_file, "rb") as f:
        vocab_hash = hashlib.sha256(f.read()).hexdigest()
    out = {"format": MANIFEST_FORMAT, "num_shards": num_shards}
    out.update({name: settings[name] for name in (
        "random_seed", "max_seq_length", "max_predictions_per_seq", "masked_lm_prob",
        "short_seq_prob", "dupe_factor", "do_whole_word_mask")})
    out.update(do_lower_case=bool(do_lower_case), vocab_sha256=vocab_hash,
               input_files=len(input_files),
               input_bytes=sum(files.getsize(p) for p in input_files))
    return out


# ------------------------------------------------------------------------------------------
# The destination: what is there already.
# ------------------------------------------------------------------------------------------


def _describe(key: str, value) -> str:
    if key == "vocab_sha256":
        return "a --vocab_file of SHA-256 %s" % str(value)[:12]
    if key == "input_files":
        return "%s input files" % value
    if key == "input_bytes":
        return "%s bytes of input" % value
    return "--%s=%s" % (key, value)


def existing_shards(prefix: str, num_shards: int) -> List[int]:
    """The shards of ``prefix`` (of ``num_shards``) whose files exist: one listing, not a
    request per shard (10,000 shards on an object store).

    Args:
        prefix: the shards' prefix.
        num_shards: the number of shards.

    Returns:
        The indexes of the existing shards, sorted.
    """
    found = files.glob(prefix + "-[0-9][0-9][0-9][0-9][0-9]-of-%05d" % num_shards)
    return sorted({int(m.group(1)) for m in map(_SHARD_FILE_RE.search, found) if m})


def check_destination(prefix: str, expected: Dict) -> bool:
    """Checks that ``prefix`` can take this run's shards; returns whether its manifest is
    there and says ``expected``.

    Raises PretrainingDataError (nothing written) when ``prefix`` holds glob characters or is a
    folder, when shards of another ``--num_shards`` are there, when shards are there without a
    manifest, or when shards are there and the manifest says other flags.

    Args:
        prefix: the shards' prefix.
        expected: this run's ``manifest``.

    Returns:
        Whether the manifest is there and matches.

    Raises:
        PretrainingDataError: as above.
        OSError: the output folder is missing or read-only.
    """
    if any(c in os.path.basename(prefix) or c in os.path.dirname(prefix) for c in "*?["):
        raise PretrainingDataError("--output_file=%s: the shards' prefix must not hold * ? [ "
                                   "(their names are globbed, here and by run_pretraining's "
                                   "--input_file)" % prefix)
    if files.isdir(prefix):
        raise PretrainingDataError("--output_file=%s is a folder: with --num_shards it is the "
                                   "shards' name prefix, e.g. %s" % (
                                       prefix, os.path.join(prefix, "records")))
    atomic.check_output_folder(prefix)
    num_shards = expected["num_shards"]
    found = sorted(files.glob(
        prefix + "-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]"))
    others = sorted({int(m.group(2)) for m in map(_SHARD_FILE_RE.search, found)
                     if m and int(m.group(2)) != num_shards})
    if others:
        raise PretrainingDataError(
            "%s holds the shards of another run (-of-%05d) and this one writes -of-%05d: use "
            "another --output_file prefix or remove them" % (
                os.path.dirname(prefix) or ".", others[0], num_shards))
    path = manifest_path(prefix)
    if not files.exists(path):
        if found:
            raise PretrainingDataError(
                "%s exists but %s does not, so the flags that made it are unknown: use "
                "another --output_file prefix or remove the shards" % (found[0], path))
        return False
    try:
        with files.open(path, "r") as f:
            there = json.load(f)
        if not isinstance(there, dict) or there.get("format") != MANIFEST_FORMAT:
            raise ValueError
    except (ValueError, UnicodeDecodeError):
        raise PretrainingDataError("%s is not a shards manifest of this tool: use another "
                                   "--output_file prefix" % path) from None
    for key, value in expected.items():
        if there.get(key) != value and found:
            raise PretrainingDataError(
                "%s: the shards there were made with %s, this run has %s: use another "
                "--output_file prefix, or the same flags and input to continue them" % (
                    path, _describe(key, there.get(key)), _describe(key, value)))
    # Without a shard, a manifest protects nothing (a run killed before its first shard):
    # it is rewritten with this run's flags.
    return there == expected


def _name_shards(shards: Sequence[int]) -> str:
    """``00000-00003, 00007``: runs of consecutive shard numbers."""
    parts: List[str] = []
    start = prev = None
    for s in list(shards) + [None]:
        if s is not None and prev is not None and s == prev + 1:
            prev = s
            continue
        if start is not None:
            parts.append("%05d" % start if start == prev else "%05d-%05d" % (start, prev))
        start = prev = s
    return ", ".join(parts)


# ------------------------------------------------------------------------------------------
# The workers' two tasks.
# ------------------------------------------------------------------------------------------

_WORKER: Dict = {}  # this process's tokenizer and vocabulary (``_init_worker``)


def _die_with_parent() -> None:
    """A pool worker stops when the tool is killed (Linux), instead of finishing its task:
    a rerun started at once must not race it."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _init_pool_worker(vocab_file: str, do_lower_case: bool) -> None:
    _die_with_parent()
    _init_worker(vocab_file, do_lower_case)


def load_tokenizer(vocab_file: str, do_lower_case: bool) -> Tuple:
    """``(tokenizer, vocab)`` for ``generate_shard`` (and the ``--num_workers`` workers and the
    single stream): the fast tokenizer and the pre-training vocabulary ([CLS] [SEP] [MASK] ids).

    Args:
        vocab_file: the WordPiece vocab.
        do_lower_case: lower-case and strip accents.

    Returns:
        ``(tokenizer, vocab)``.
    """
    from data.pretraining import instances as pretraining
    from data.tokenization.wordpiece import FastFullTokenizer

    tokenizer = FastFullTokenizer(vocab_file, do_lower_case)
    return tokenizer, pretraining.PretrainingVocab(tokenizer.vocab, vocab_file)


def _init_worker(vocab_file: str, do_lower_case: bool) -> None:
    tokenizer, vocab = load_tokenizer(vocab_file, do_lower_case)
    _WORKER.update(tokenizer=tokenizer, vocab=vocab)


def iter_keyed_documents(pieces: Sequence) -> Iterator[Tuple[bytes, bytes]]:
    """``(key, bytes)`` of each document of ``pieces`` (paths or ``(path, start, stop)``).

    Args:
        pieces: paths or ``(path, start, stop)`` pieces, in order.

    Yields:
        ``(key, bytes)`` per document.
    """
    for lines in pretraining_corpus.iter_documents(pieces):
        data = document_bytes(lines)
        yield document_key(data), data


def _split_task(args: Tuple) -> Dict[str, int]:
    """Split pass, one run: its documents of shards ``[lo, hi)`` appended to
    ``<scratch>/<shard>/<run>.txt`` (each followed by a blank line)."""
    run, pieces, scratch, num_shards, lo, hi = args
    buffers: Dict[int, List[bytes]] = {}
    held = documents = kept = 0

    def flush():
        for shard, parts in buffers.items():
            folder = os.path.join(scratch, "%05d" % shard)
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "%05d.txt" % run), "ab") as f:
                f.write(b"".join(parts))
        buffers.clear()

    for key, data in iter_keyed_documents(pieces):
        documents += 1
        shard = shard_of(key, num_shards)
        if lo <= shard < hi:
            kept += 1
            buffers.setdefault(shard, []).extend((data, b"\n\n"))
            held += len(data) + 2
            if held >= BUFFER_BYTES:
                flush()
                held = 0
    flush()
    size = 0
    for path, start, stop in pieces:
        end = files.getsize(path) if stop is None else stop
        size += end - start
    return {"run": run, "bytes": size, "documents": documents, "kept": kept}


def _read_scratch(folder: str) -> List[bytes]:
    datas: List[bytes] = []
    if os.path.isdir(folder):
        for name in sorted(os.listdir(folder)):
            with open(os.path.join(folder, name), "rb") as f:
                datas.extend(f.read().split(b"\n\n")[:-1])
    return datas


def generate_shard(shard: int, datas: Iterable[bytes], prefix: str, num_shards: int,
                   settings: Dict, tokenizer, vocab, show_progress: bool = False
                   ) -> Dict[str, int]:
    """Shard ``shard`` from its documents' bytes (any order): sorted by key, tokenized,
    generated and written atomically to ``shard_path(prefix, shard, num_shards)`` (an empty
    file for a shard without documents). The one generation step of the process pool and of
    the Beam pipeline. Returns its counts.

    Args:
        shard: the shard's index.
        datas: its documents' bytes.
        prefix: the shards' prefix.
        num_shards: the number of shards.
        settings: the generation settings.
        tokenizer: the fast tokenizer (``load_tokenizer``).
        vocab: the ``PretrainingVocab``.
        show_progress: report progress on stderr.

    Returns:
        The shard's counts (``shard``, ``instances``, ``documents``, ...).
    """
    from data.pretraining import instances_fast

    documents = sorted_documents(datas)
    corpus = pretraining_corpus.tokenize_documents(documents, tokenizer)
    del documents
    path = shard_path(prefix, shard, num_shards)
    if corpus.num_documents == 0:
        with atomic.atomic_path(path) as temp:
            files.open(temp, "wb").close()  # a valid, empty TFRecord file
        written = 0
    else:
        seeded = dict(settings, random_seed=shard_seed(settings["random_seed"], shard,
                                                       num_shards))
        written = instances_fast.write_records(corpus, vocab, [path],
                                                 show_progress=show_progress, helper=False,
                                                 **seeded)
    return {"shard": shard, "instances": written, "documents": corpus.num_documents,
            "tokens": corpus.num_tokens}


def _generate_task(args: Tuple) -> Dict[str, int]:
    """Generate pass, one shard: its documents read back from the scratch folder, the shard
    written (``generate_shard``), its scratch files removed."""
    shard, scratch, prefix, num_shards, settings, show_progress = args
    folder = os.path.join(scratch, "%05d" % shard)
    result = generate_shard(shard, _read_scratch(folder), prefix, num_shards, settings,
                            _WORKER["tokenizer"], _WORKER["vocab"], show_progress)
    files.rmtree(folder, ignore_errors=True)
    return result


# ------------------------------------------------------------------------------------------
# The driver.
# ------------------------------------------------------------------------------------------


class ShardedSummary:
    """What a sharded run did (``line()``: the tool's summary).

    Args:
        prefix: the shards' prefix.
        num_shards: the number of shards.
    """

    def __init__(self, prefix: str, num_shards: int):
        self.prefix = prefix
        self.num_shards = num_shards
        self.written: List[int] = []  # shards made by this run
        self.instances = 0  # in them
        self.documents = 0
        self.one_document: List[int] = []  # shards made with a single document
        self.skipped: List[int] = []  # shards complete before it
        self.skipped_instances: Optional[int] = 0  # None: not counted (object store)
        self.seconds = 0.0

    def add(self, result: Dict[str, int]) -> None:
        """Counts a shard made (``generate_shard``'s result).

        Args:
            result: the shard's counts.
        """
        self.written.append(result["shard"])
        self.instances += result["instances"]
        self.documents += result["documents"]
        if result["documents"] == 1:
            self.one_document.append(result["shard"])

    def line(self) -> str:
        shards = sorted(self.written)
        text = "%s-*-of-%05d: wrote %d shard%s" % (self.prefix, self.num_shards, len(shards),
                                                  "" if len(shards) == 1 else "s")
        if shards:
            text += " (%s), %d instances from %d documents" % (
                _name_shards(shards), self.instances, self.documents)
        if self.skipped:
            text += "; skipped %d complete (%s)" % (len(self.skipped),
                                                   _name_shards(self.skipped))
            if self.skipped_instances is not None:
                text += ", %d instances" % self.skipped_instances
        return text + "; %.1fs" % self.seconds


def split_runs(input_files: Sequence[str], parts: int) -> List[List]:
    """The input cut at document boundaries into at least ``parts`` runs of pieces, each at
    most ``RUN_BYTES`` where documents allow: the split pass's tasks.

    Args:
        input_files: the corpus files, in order.
        parts: the least number of runs.

    Returns:
        The runs, each a list of pieces.
    """
    total = sum(files.getsize(p) for p in input_files)
    parts = max(parts, int(math.ceil(total / RUN_BYTES)))
    return pretraining_corpus.split_at_documents(input_files, parts) if total else []


def _sweep_skipped(prefix: str, num_shards: int, skipped: Sequence[int]) -> None:
    """Removes the temporaries that killed runs left for shards that are complete: a run
    killed in a shard's commit, after its file was in place, can leave that commit's empty
    staging folder, and a rerun writes no such shard (whose first write would sweep it). The
    folder is listed once."""
    folder = os.path.dirname(shard_path(prefix, 0, num_shards))
    try:
        names = files.listdir(folder)
    except Exception:  # noqa: BLE001 - unreadable: the shards' own writes report it
        return
    complete = {os.path.basename(shard_path(prefix, s, num_shards)) for s in skipped}
    bases = set()
    for name in names:
        m = atomic.TEMP_RE.match(name.rstrip("/"))
        if m is not None and m.group("base") in complete:
            bases.add(m.group("base"))
    for base in sorted(bases):
        atomic.remove_stale_temps(os.path.join(folder, base))


@contextlib.contextmanager
def destination(input_files: Sequence[str], prefix: str, num_shards: int,
                shard_range: Tuple[int, int], vocab_file: str, do_lower_case: bool,
                settings: Dict) -> Iterator[Tuple[List[int], ShardedSummary]]:
    """The shards of ``shard_range`` still to make, and the run's summary (skipped shards
    filled in); the block makes them. Checks the destination first (``check_destination``)
    and writes the manifest when it is not there; when the block fails and no shard exists,
    the manifest this run wrote is removed (the shards completed stay: a rerun continues).

    Args:
        input_files: the corpus files.
        prefix: the shards' prefix.
        num_shards: the number of shards.
        shard_range: ``(first, end)`` of the shards of this run.
        vocab_file: the WordPiece vocab.
        do_lower_case: lower-case and strip accents.
        settings: the generation settings.

    Yields:
        ``(todo, summary)``: the shard indexes to make and the run's ``ShardedSummary``.
    """
    start = time.perf_counter()
    lo, hi = shard_range
    summary = ShardedSummary(prefix, num_shards)
    expected = manifest(num_shards, settings, do_lower_case, vocab_file, input_files)
    had_manifest = check_destination(prefix, expected)
    existing = set(existing_shards(prefix, num_shards))
    todo = [s for s in range(lo, hi) if s not in existing]
    summary.skipped = sorted(set(range(lo, hi)) & existing)
    if summary.skipped:
        counts = [numpy_reader.count_records(shard_path(prefix, s, num_shards))
                  for s in summary.skipped]
        summary.skipped_instances = None if None in counts else sum(counts)
        _sweep_skipped(prefix, num_shards, summary.skipped)
    made_manifest = False
    try:
        if todo and not had_manifest:
            with atomic.atomic_open(manifest_path(prefix), "w") as f:
                json.dump(expected, f, indent=1, sort_keys=True)
                f.write("\n")
            made_manifest = True
        yield todo, summary
    except BaseException:
        if made_manifest and not existing_shards(prefix, num_shards):
            files.remove(manifest_path(prefix))
        raise
    summary.seconds = time.perf_counter() - start


def check_some_text(summary: ShardedSummary, shard_range: Tuple[int, int],
                    input_files: Sequence[str]) -> None:
    """A run that made every shard and found no document with a token in any: the corpus
    has no text (lines of control characters only, say), as the single stream says; the
    empty shards it wrote are removed first.

    Args:
        summary: the run's summary.
        shard_range: ``(first, end)`` of the shards of this run.
        input_files: the corpus files.

    Raises:
        CorpusError: the corpus has no text.
    """
    if (summary.documents == 0 and not summary.skipped
            and shard_range == (0, summary.num_shards)):
        for s in summary.written:
            path = shard_path(summary.prefix, s, summary.num_shards)
            if files.exists(path):
                files.remove(path)
        raise pretraining_corpus.no_text_error(input_files)


def _pool_map(pool, function, tasks):
    if pool is None:
        return map(function, tasks)
    return pool.imap_unordered(function, tasks, chunksize=1)


def run_sharded(input_files: Sequence[str], prefix: str, num_shards: int,
                shard_range: Tuple[int, int], num_workers: int, vocab_file: str,
                do_lower_case: bool, settings: Dict, show_progress: bool = False
                ) -> ShardedSummary:
    """Makes the missing shards of ``shard_range`` with ``num_workers`` processes (1: this
    one); see the module docstring.

    ``settings``: max_seq_length, max_predictions_per_seq, masked_lm_prob, short_seq_prob,
    dupe_factor, do_whole_word_mask, random_seed (an int). Raises PretrainingDataError
    (nothing written) for a destination that holds another run's shards, CorpusError for bad
    or empty input; on any failure the shards completed stay (a rerun continues) and nothing
    else this run made does.

    Args:
        input_files: the corpus files.
        prefix: the shards' prefix.
        num_shards: the number of shards.
        shard_range: ``(first, end)`` of the shards of this run.
        num_workers: the number of processes.
        vocab_file: the WordPiece vocab.
        do_lower_case: lower-case and strip accents.
        settings: the generation settings (above).
        show_progress: report progress on stderr.

    Returns:
        The run's ``ShardedSummary``.

    Raises:
        PretrainingDataError: the destination holds another run's shards.
        CorpusError: bad or empty input.
    """
    lo, hi = shard_range
    with destination(input_files, prefix, num_shards, shard_range, vocab_file, do_lower_case,
                     settings) as (todo, summary):
        if not todo:
            return summary
        scratch = pool = None
        try:
            scratch = atomic.local_scratch_dir("bert-shards")
            runs = split_runs(input_files, num_workers)
            if num_workers > 1:
                pool = fork_safety.worker_context().Pool(
                    num_workers, initializer=_init_pool_worker,
                    initargs=(vocab_file, do_lower_case))
            else:
                _init_worker(vocab_file, do_lower_case)
            total_mb = sum(files.getsize(p) for p in input_files) / 1e6
            progress = Progress("splitting", total_mb, unit="MB", enabled=show_progress)
            done_mb = 0.0
            documents = 0
            tasks = [(r, run, scratch, num_shards, lo, hi) for r, run in enumerate(runs)]
            for result in _pool_map(pool, _split_task, tasks):
                done_mb += result["bytes"] / 1e6
                documents += result["documents"]
                progress.update(done_mb, "%d documents" % documents)
            progress.finish()
            if documents == 0:
                raise pretraining_corpus.no_text_error(input_files)
            progress = Progress("generating shards", len(todo), unit="shards",
                                enabled=show_progress)
            tasks = [(s, scratch, prefix, num_shards, settings, show_progress and pool is None)
                     for s in todo]
            for result in _pool_map(pool, _generate_task, tasks):
                summary.add(result)
                progress.update(len(summary.written), "%d instances" % summary.instances)
            progress.finish()
            check_some_text(summary, shard_range, input_files)
        finally:
            if pool is not None:
                pool.terminate()
                pool.join()
            if scratch is not None:
                files.rmtree(scratch, ignore_errors=True)
    return summary

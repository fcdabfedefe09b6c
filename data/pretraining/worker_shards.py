"""Pre-training data in parallel: the corpus split across worker processes (``--num_workers``).

The input files are cut into ``num_workers`` runs of about equal size, each cut right after a
blank line (``pretraining_corpus.split_at_documents``), so every document stays whole. Worker
``k`` reads and tokenizes its run, and generates its records exactly as the single-stream
generator does, but on its own documents and with its own seed,
``random.Random("<random_seed>/<k>")``, into its own output file(s). Only ``num_workers=1``
reproduces the original's records; with more workers, random-next pairs only draw from the
worker's documents, and the final shuffle is per worker.

Outputs are all-or-nothing: workers write temporary files next to the outputs, which are
renamed to their final names only when every worker has succeeded.
"""

from __future__ import annotations

import os
import random
from typing import Dict, List, Sequence, Tuple

from bert_common import atomic, files
from bert_common import fork_safety
from data.pretraining import corpus as pretraining_corpus


def worker_output_files(output_files: Sequence[str], num_workers: int) -> List[List[str]]:
    """The files each worker writes: one each when ``num_workers`` files are given; with a
    single file, ``<stem>-<k>-of-<N><ext>`` per worker (k from 00000).

    Args:
        output_files: the ``--output_file`` entries (1 or ``num_workers``).
        num_workers: the number of workers.

    Returns:
        Per worker, the list of its files.

    Raises:
        PretrainingDataError: neither 1 nor ``num_workers`` files.
    """
    if len(output_files) == num_workers:
        return [[f] for f in output_files]
    if len(output_files) == 1:
        stem, ext = os.path.splitext(output_files[0])
        return [["%s-%05d-of-%05d%s" % (stem, k, num_workers, ext)]
                for k in range(num_workers)]
    from data.pretraining.instances import PretrainingDataError

    raise PretrainingDataError(
        "--num_workers=%d needs 1 or %d comma-separated --output_file entries, got %d"
        % (num_workers, num_workers, len(output_files)))


def worker_seed(random_seed: int, worker: int) -> random.Random:
    """The generator of worker ``worker`` (a string seed: hashed with SHA-512, stable).

    Args:
        random_seed: the ``--random_seed``.
        worker: the worker's index.

    Returns:
        The worker's ``random.Random``.
    """
    return random.Random("%d/%d" % (random_seed, worker))


def _run_worker(args: Tuple) -> Dict[str, int]:
    (worker, pieces, temp_files, vocab_file, do_lower_case, settings, show_progress) = args
    from data.pretraining import instances_fast
    from data.pretraining.corpus_shards import load_tokenizer

    tokenizer, vocab = load_tokenizer(vocab_file, do_lower_case)
    corpus = pretraining_corpus.read_corpus(pieces, tokenizer, show_progress=False)
    if corpus.num_documents == 0:
        for path in temp_files:
            files.open(path, "wb").close()
        return {"worker": worker, "instances": 0, "documents": 0}
    written = instances_fast.write_records(corpus, vocab, temp_files,
                                           show_progress=show_progress, helper=False, **settings)
    return {"worker": worker, "instances": written, "documents": corpus.num_documents}


def run_workers(input_files: Sequence[str], output_files: Sequence[str], num_workers: int,
                vocab_file: str, do_lower_case: bool, settings: Dict, show_progress: bool
                ) -> List[Dict[str, int]]:
    """Generates the shards in ``num_workers`` processes; returns per-worker counts.

    ``settings``: max_seq_length, max_predictions_per_seq, masked_lm_prob, short_seq_prob,
    dupe_factor, do_whole_word_mask, random_seed.

    Args:
        input_files: the corpus files.
        output_files: the ``--output_file`` entries (see ``worker_output_files``).
        num_workers: the number of processes.
        vocab_file: the WordPiece vocab.
        do_lower_case: lower-case and strip accents.
        settings: the generation settings (above).
        show_progress: report progress on stderr.

    Returns:
        Per worker, its counts (name -> int).
    """
    outputs = worker_output_files(output_files, num_workers)
    runs = pretraining_corpus.split_at_documents(input_files, num_workers)
    while len(runs) < num_workers:
        runs.append([])  # fewer document boundaries than workers: empty shards
    # Every worker writes temporaries beside its outputs; all are renamed only when every
    # worker has succeeded (and all removed otherwise).
    with atomic.atomic_paths([path for paths in outputs for path in paths]) as flat_temps:
        temps = iter(flat_temps)
        jobs = []
        for k in range(num_workers):
            temp_k = [next(temps) for _ in outputs[k]]
            seed_settings = dict(settings, random_seed=worker_seed(settings["random_seed"], k))
            jobs.append((k, runs[k], temp_k, vocab_file, do_lower_case, seed_settings,
                         show_progress and k == 0))
        with fork_safety.worker_context().Pool(num_workers) as pool:
            results = pool.map(_run_worker, jobs, chunksize=1)
    return results

"""The sharded pre-training records (``data.pretraining.corpus_shards``) as an Apache Beam pipeline:
Dataflow, Flink or Spark instead of one machine's process pool, the same bytes.

``pip install .[beam]`` (``apache-beam``; ``apache-beam[gcp]`` for Dataflow and ``gs://``).
The pipeline, for the shards of ``--shard_range`` whose files are missing:

1. ``Create`` the split pass's runs (the input cut at document boundaries, computed here from
   the files' sizes), ``Reshuffle`` them over the workers;
2. ``ParDo`` each run to ``(shard, document bytes)`` for its documents of the wanted shards
   (``corpus_shards.iter_keyed_documents``, ``corpus_shards.shard_of``), plus one empty marker per wanted
   shard so that a shard without documents is written too;
3. ``GroupByKey`` by shard; ``Map`` each group through ``corpus_shards.generate_shard``, the process
   pool's own step (sort by key, tokenize, generate, write atomically under the final name).

The manifest, the checks of the destination and the skipping of complete shards are the
process pool's (``corpus_shards.destination``), done here before the pipeline starts. A worker holds
one shard's documents at a time. Counters ``bert/instances`` and ``bert/documents`` give the
summary.

Pipeline options come as one string (``--beam_options``), e.g.
``--runner=DataflowRunner --project=P --region=R --temp_location=gs://B/tmp
--setup_file=./setup.py``; without ``--runner`` it is Beam's local ``DirectRunner``.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import shutil
import tempfile
from typing import Dict, List, Sequence, Tuple

from data.pretraining import corpus_shards

_NAMESPACE = "bert"


def import_beam():
    """``apache_beam``, or PretrainingDataError saying how to install it."""
    try:
        import apache_beam
    except ImportError:
        from data.pretraining.instances import PretrainingDataError

        raise PretrainingDataError(
            "--beam_options needs Apache Beam: pip install '.[beam]' (or "
            "'apache-beam[gcp]' for Dataflow)") from None
    return apache_beam


def _make_split_fn(beam, num_shards: int, wanted: frozenset):
    class SplitRun(beam.DoFn):
        """A run's documents of the wanted shards, as ``(shard, bytes)``."""

        def process(self, run):
            for key, data in corpus_shards.iter_keyed_documents(run):
                shard = corpus_shards.shard_of(key, num_shards)
                if shard in wanted:
                    yield shard, data

    return SplitRun()


def _make_generate_fn(beam, prefix: str, num_shards: int, settings: Dict, vocab_file: str,
                      do_lower_case: bool):
    class GenerateShard(beam.DoFn):
        """One shard from its grouped documents (``corpus_shards.generate_shard``)."""

        def setup(self):
            self.tokenizer, self.vocab = corpus_shards.load_tokenizer(vocab_file, do_lower_case)
            self.instances = beam.metrics.Metrics.counter(_NAMESPACE, "instances")
            self.documents = beam.metrics.Metrics.counter(_NAMESPACE, "documents")
            self.shards = beam.metrics.Metrics.counter(_NAMESPACE, "shards")
            self.one_document = beam.metrics.Metrics.counter(_NAMESPACE, "one_document_shards")

        def process(self, element):
            shard, datas = element
            result = corpus_shards.generate_shard(
                shard, (d for d in datas if d), prefix, num_shards, settings,
                self.tokenizer, self.vocab)
            self.instances.inc(result["instances"])
            self.documents.inc(result["documents"])
            self.shards.inc(1)
            if result["documents"] == 1:
                self.one_document.inc(1)
            yield result

    return GenerateShard()


def build_pipeline(pipeline, runs: List, todo: Sequence[int], prefix: str, num_shards: int,
                   settings: Dict, vocab_file: str, do_lower_case: bool):
    """Adds the steps that make shards ``todo`` from ``runs`` (``corpus_shards.split_runs``) to
    ``pipeline``; returns the PCollection of the shards' counts.

    Args:
        pipeline: the ``beam.Pipeline``.
        runs: the split runs (``corpus_shards.split_runs``).
        todo: the indexes of the shards to make.
        prefix: the output prefix.
        num_shards: the total number of shards.
        settings: the generation settings.
        vocab_file: the WordPiece vocab.
        do_lower_case: lower-case and strip accents.

    Returns:
        The PCollection of per-shard counts.
    """
    beam = import_beam()
    wanted = frozenset(todo)
    documents = (pipeline
                 | "Runs" >> beam.Create(runs)
                 | "SpreadRuns" >> beam.Reshuffle()
                 | "Documents" >> beam.ParDo(_make_split_fn(beam, num_shards, wanted)))
    markers = pipeline | "EveryShard" >> beam.Create([(s, b"") for s in todo])
    return ((documents, markers)
            | "WithMarkers" >> beam.Flatten()
            | "ByShard" >> beam.GroupByKey()
            | "Generate" >> beam.ParDo(_make_generate_fn(beam, prefix, num_shards, settings,
                                                         vocab_file, do_lower_case)))


def pipeline_options(options: str):
    """``--beam_options`` -> ``PipelineOptions`` (``DirectRunner`` when no runner is named:
    Beam's newer local default may fetch a runner binary, which needs the network).

    Args:
        options: the ``--beam_options`` string (command-line style flags).

    Returns:
        The ``PipelineOptions``.
    """
    import_beam()  # one line saying how to install it, not an ImportError
    from apache_beam.options.pipeline_options import PipelineOptions

    args = shlex.split(options or "")
    named = {a.split("=", 1)[0] for a in args}
    if "--runner" not in named:
        args.append("--runner=DirectRunner")
    if "--default_sdk_harness_log_level" not in named:  # workers: warnings and up
        args.append("--default_sdk_harness_log_level=WARNING")
    return PipelineOptions(args)


@contextlib.contextmanager
def _local_temp_folder():
    """The process's temporary files in a folder of this run's, removed after it: Beam's local
    job server (the multi-process local runner) makes a ``beam-temp*`` folder in the system's
    temporary folder and leaves it behind (it is removed only when the server is stopped)."""
    folder = tempfile.mkdtemp(prefix="bert-beam-")
    before = tempfile.tempdir
    tempfile.tempdir = folder
    try:
        yield
    finally:
        tempfile.tempdir = before
        shutil.rmtree(folder, ignore_errors=True)


def run_beam(input_files: Sequence[str], prefix: str, num_shards: int,
             shard_range: Tuple[int, int], vocab_file: str, do_lower_case: bool,
             settings: Dict, options: str, parts: int = 1) -> corpus_shards.ShardedSummary:
    """The missing shards of ``shard_range`` made by a Beam pipeline with ``options``; the
    same files, bytes and checks as ``corpus_shards.run_sharded``. ``parts``: the least number of
    split runs (more spreads small inputs over more workers).

    Args:
        input_files: the corpus files.
        prefix: the output prefix.
        num_shards: the total number of shards.
        shard_range: ``(first, end)`` of the shards this run makes.
        vocab_file: the WordPiece vocab.
        do_lower_case: lower-case and strip accents.
        settings: the generation settings.
        options: the ``--beam_options`` string.
        parts: the least number of split runs.

    Returns:
        The run's ``corpus_shards.ShardedSummary``.
    """
    beam = import_beam()
    from apache_beam.metrics.metric import MetricsFilter

    opts = pipeline_options(options)
    # Beam's local runners log every worker's start and stop at INFO: warnings and up only.
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    with corpus_shards.destination(input_files, prefix, num_shards, shard_range, vocab_file,
                             do_lower_case, settings) as (todo, summary):
        if not todo:
            return summary
        runs = corpus_shards.split_runs(input_files, parts)
        pipeline = beam.Pipeline(options=opts)
        build_pipeline(pipeline, runs, todo, prefix, num_shards, settings, vocab_file,
                       do_lower_case)
        with _local_temp_folder():
            result = pipeline.run()
            result.wait_until_finish()
        counters = {c.key.metric.name: c.committed if c.committed is not None else c.attempted
                    for c in result.metrics().query(
                        MetricsFilter().with_namespace(_NAMESPACE))["counters"]}
        summary.written = list(todo)
        summary.instances = int(counters.get("instances", 0))
        summary.documents = int(counters.get("documents", 0))
        # Which shards hold one document is not gathered back from the workers: only how many.
        summary.one_document = [None] * int(counters.get("one_document_shards", 0))
        corpus_shards.check_some_text(summary, shard_range, input_files)
    return summary

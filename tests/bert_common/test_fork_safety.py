"""bert_common/fork_safety.py: no fork once TensorFlow's threads may exist."""

import os
import sys

import pytest

from bert_common import fork_safety


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork is the Linux default")
def test_fork_only_without_tensorflow(monkeypatch):
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    assert fork_safety.fork_is_safe()
    assert fork_safety.worker_context().get_start_method() == "fork"
    monkeypatch.setitem(sys.modules, "tensorflow", object())
    assert not fork_safety.fork_is_safe()
    assert fork_safety.worker_context().get_start_method() == "forkserver"


def test_workers_started_from_a_forkserver_write_the_forked_records(tmp_path, monkeypatch):
    """run_workers as called from a process with TensorFlow loaded (forkserver: jobs pickled,
    modules imported afresh) writes the same shards as with fork."""
    from data.pretraining import worker_shards
    from tests import paths

    corpus = os.path.join(paths.GOLDEN, "inputs", "pretrain_trajectory_corpus.txt")
    settings = dict(max_seq_length=32, max_predictions_per_seq=5, masked_lm_prob=0.15,
                    short_seq_prob=0.1, dupe_factor=1, do_whole_word_mask=False,
                    random_seed=7)

    def shards(folder, tensorflow_loaded):
        if tensorflow_loaded:
            monkeypatch.setitem(sys.modules, "tensorflow", object())
        else:
            monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
        assert fork_safety.fork_is_safe() is not tensorflow_loaded
        (tmp_path / folder).mkdir()
        out = [str(tmp_path / folder / "w.tfrecord")]
        counts = worker_shards.run_workers([corpus], out, 2, paths.GOLDEN_VOCAB, True,
                                                settings, False)
        names = sorted(p.name for p in (tmp_path / folder).iterdir())
        return counts, [(tmp_path / folder / n).read_bytes() for n in names]

    forked = shards("fork", False)
    served = shards("forkserver", True)
    assert [c["instances"] for c in forked[0]] == [c["instances"] for c in served[0]]
    assert all(c["instances"] > 0 for c in served[0])
    assert len(served[1]) == 2 and served[1] == forked[1]

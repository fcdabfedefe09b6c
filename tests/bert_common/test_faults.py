"""The file layer's fault points and leftovers: a write that fails (a full disk) at any step
leaves the previous output as it was and no temporary; temporaries of killed processes are
removed by the next write of the same output, those of live processes never."""

import errno
import os

import pytest

from bert_common import files
from tests.support.tools import dead_pid


def _disk_full_at(event, target):
    """A hook failing like a full disk at ``event`` for output ``target``."""
    def hook(ev, path):
        if ev == event and os.path.basename(path) == os.path.basename(target):
            raise OSError(errno.ENOSPC, "No space left on device", path)
    return hook


def _listing(folder):
    return sorted(os.listdir(folder))


@pytest.mark.parametrize("event", ["write", "commit"])
def test_atomic_open_failure_keeps_the_previous_file(tmp_path, event):
    out = tmp_path / "results.txt"
    out.write_text("previous\n")
    with files.inject_faults(_disk_full_at(event, str(out))):
        with pytest.raises(OSError, match="No space left"):
            with files.atomic_open(str(out)) as f:
                f.write("new\n")
    assert out.read_text() == "previous\n" and _listing(tmp_path) == ["results.txt"]


@pytest.mark.parametrize("event", ["write", "commit"])
def test_a_group_of_outputs_is_all_new_or_all_old(tmp_path, event):
    paths = [str(tmp_path / n) for n in ("predictions.json", "nbest_predictions.json")]
    for p in paths:
        with open(p, "w") as f:
            f.write("old")
    with files.inject_faults(_disk_full_at(event, paths[1])):
        with pytest.raises(OSError):
            with files.atomic_paths(paths) as temps:
                for t in temps:
                    with open(t, "w") as f:
                        f.write("new")
    assert [open(p).read() for p in paths] == ["old", "old"]
    assert _listing(tmp_path) == ["nbest_predictions.json", "predictions.json"]


def test_tfrecords_fail_mid_stream_and_leave_nothing(tmp_path):
    paths = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    count = {"n": 0}

    def hook(event, path):
        count["n"] += event == "write"
        if count["n"] == 7:
            raise OSError(errno.ENOSPC, "No space left on device", path)

    with files.inject_faults(hook):
        with pytest.raises(OSError):
            with files.AtomicTFRecordWriters(paths) as writers:
                for i in range(20):
                    writers.write(b"record %d" % i)
    assert _listing(tmp_path) == []


def test_no_hook_outside_the_block(tmp_path):
    with files.inject_faults(_disk_full_at("write", "x")):
        pass
    with files.atomic_open(str(tmp_path / "x")) as f:
        f.write("fine")
    assert (tmp_path / "x").read_text() == "fine"


def test_leftovers_of_killed_processes_are_removed_and_only_those(tmp_path):
    out = tmp_path / "train.tf_record"
    host = files._HOST
    dead = dead_pid()
    stale_file = tmp_path / (".train.tf_record.%s-%d.abc123.tmp" % (host, dead))
    stale_dir = tmp_path / (".train.tf_record.%s-%d.def456.tmp" % (host, dead))
    live = tmp_path / (".train.tf_record.%s-%d.ghi789.tmp" % (host, os.getppid()))
    other_host = tmp_path / (".train.tf_record.%s-%d.jkl000.tmp" % ("0" * 6, dead))
    other_output = tmp_path / (".eval.tf_record.%s-%d.mno111.tmp" % (host, dead))
    users = tmp_path / ".train.tf_record.notes.tmp"  # not this layer's name: never touched
    stale_file.write_text("partial")
    stale_dir.mkdir()
    (stale_dir / "part").write_text("partial")
    for p in (live, other_host, other_output, users):
        p.write_text("keep")
    with files.atomic_open(str(out)) as f:
        f.write("complete")
    assert not stale_file.exists() and not stale_dir.exists()
    assert all(p.read_text() == "keep" for p in (live, other_host, other_output, users))
    assert out.read_text() == "complete"


def test_temporaries_are_named_by_host_and_pid(tmp_path):
    seen = []

    def hook(event, path):
        seen.extend(os.listdir(tmp_path))

    with files.inject_faults(hook):
        with files.atomic_open(str(tmp_path / "out.txt")) as f:
            f.write("x")
    temps = [n for n in seen if n.endswith(".tmp")]
    assert temps and all(files._TEMP_RE.match(n).group("pid") == str(os.getpid()) for n in temps)


def test_recording_writes_lists_what_is_in_place(tmp_path):
    """``recording_writes``: the outputs put in place, not those a failed group took back."""
    a, b = str(tmp_path / "a.txt"), str(tmp_path / "b.txt")
    with files.recording_writes() as written:
        with files.atomic_paths([a, b]) as (ta, tb):
            for t in (ta, tb):
                with open(t, "w") as f:
                    f.write("new")
    assert written == [a, b]

    def fail_b(event, path):
        if event == "commit" and path == b:
            raise OSError(errno.ENOSPC, "No space left on device", path)

    with files.recording_writes() as written:
        with files.inject_faults(fail_b), pytest.raises(OSError):
            with files.atomic_paths([a, b]) as (ta, tb):
                for t in (ta, tb):
                    with open(t, "w") as f:
                        f.write("newer")
    assert written == []  # a.txt was put back as it was
    assert open(a).read() == "new"


def test_a_previous_output_that_cannot_be_put_back_is_kept(tmp_path, monkeypatch):
    """A group fails and putting a previous output back fails too: that previous output is
    not deleted with the staging folders; the error names where it is."""
    a, b = str(tmp_path / "a.txt"), str(tmp_path / "b.txt")
    for path in (a, b):
        with open(path, "w") as f:
            f.write("old")

    def fail_b(event, path):
        if event == "commit" and path == b:
            raise OSError(errno.ENOSPC, "No space left on device", path)

    real_rename = files.rename

    def rename(src, dst):
        if ".previous." in src and dst == a:
            raise OSError(errno.EIO, "I/O error", src)
        real_rename(src, dst)

    monkeypatch.setattr(files, "rename", rename)
    with files.inject_faults(fail_b), pytest.raises(OSError) as info:
        with files.atomic_paths([a, b]) as (ta, tb):
            for t in (ta, tb):
                with open(t, "w") as f:
                    f.write("new")
    kept = [n for n in info.value.__notes__ if "the previous %s is kept in " % a in n]
    assert len(kept) == 1
    previous = kept[0].rsplit(" is kept in ", 1)[1]
    assert open(previous).read() == "old"
    assert open(b).read() == "old"  # put back
    assert not os.path.exists(a)

    # Once this process is gone, the next write of a.txt gives the previous one back before
    # removing the staging folder (it is named as a temporary of a dead process then).
    monkeypatch.setattr(files, "rename", real_rename)
    staging = os.path.dirname(previous)
    dead = staging.replace("-%d." % os.getpid(), "-%d." % dead_pid())
    os.rename(staging, dead)
    assert files.remove_stale_temps(a) == [dead]
    assert open(a).read() == "old" and not os.path.exists(dead)


def test_a_commit_killed_after_setting_the_previous_output_aside_is_undone(tmp_path):
    """Killed between moving the previous output aside and moving the new one in: the next
    write of that output finds the output missing and puts the previous one back."""
    a = str(tmp_path / "a.txt")
    staging = tmp_path / (".a.txt.%s-%d.x1.tmp" % (files._HOST, dead_pid()))
    staging.mkdir()
    (staging / ".previous.a.txt").write_text("old")
    (staging / "a.txt").write_text("new, never committed")
    assert files.remove_stale_temps(a) == [str(staging)]
    assert open(a).read() == "old" and not staging.exists()
    # With the output in place (the commit finished, the clean-up did not), the staging
    # folder is only removed.
    staging.mkdir()
    (staging / ".previous.a.txt").write_text("older")
    assert files.remove_stale_temps(a) == [str(staging)]
    assert open(a).read() == "old"

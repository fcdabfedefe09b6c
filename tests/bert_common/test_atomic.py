"""bert_common/atomic.py: output that appears whole under its final name or not at all
(``atomic_open``, ``AtomicTFRecordWriters``, ``atomic_path(s)``, ``atomic_prefix``), on a local
disk and on a URL (ram:// stands in for gs://), with the permissions of the user's umask.

Fault points and leftovers: a write that fails (a full disk) at any step leaves the previous
output as it was and no temporary; temporaries of killed processes are removed by the next
write of the same output, those of live processes never."""

import errno
import os

import pytest
import tensorflow as tf

from bert_common import atomic, files
from tests.support.features import int64_feature
from tests.support.tools import dead_pid


def test_atomic_open_leaves_nothing_on_error(tmp_path):
    path = tmp_path / "out.txt"
    with pytest.raises(RuntimeError):
        with atomic.atomic_open(str(path)) as f:
            f.write("half")
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_atomic_open_writes(tmp_path):
    path = tmp_path / "out.txt"
    with atomic.atomic_open(str(path)) as f:
        f.write("done")
    assert path.read_text() == "done"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_tfrecord_writers_round_robin(tmp_path):
    paths = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    with atomic.AtomicTFRecordWriters(paths) as w:
        for i in range(5):
            feature = {"x": int64_feature([i])}
            ex = tf.train.Example(features=tf.train.Features(feature=feature))
            w.write(ex.SerializeToString())
    counts = [sum(1 for _ in tf.data.TFRecordDataset(p)) for p in paths]
    assert counts == [3, 2]


def test_tfrecord_writers_abort_on_error(tmp_path):
    paths = [str(tmp_path / "a.tfrecord")]
    with pytest.raises(ValueError):
        with atomic.AtomicTFRecordWriters(paths) as w:
            w.write(b"x")
            raise ValueError("bad")
    assert os.listdir(tmp_path) == []


def test_tfrecord_writers_take_bytes_or_text_only(tmp_path):
    """Text is written as UTF-8 (as TensorFlow's writer did); anything else is refused before
    it reaches the file."""
    path = tmp_path / "a.tfrecord"
    with atomic.AtomicTFRecordWriters([str(path)]) as w:
        w.write("caf\u00e9")
        with pytest.raises(TypeError, match="bytes, not int"):
            w.write(5)
        w.write(b"x")
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(path))] == ["caf\u00e9".encode(),
                                                                       b"x"]
    assert w.num_written == 2


def test_unwritable_folder_is_named(tmp_path):
    with pytest.raises(OSError, match="does not exist"):
        atomic.AtomicTFRecordWriters([str(tmp_path / "missing" / "x.tfrecord")])


# --------------------------------------------------------------------------
# atomic_path / atomic_paths / atomic_prefix: writers that take a path.
# --------------------------------------------------------------------------


def test_atomic_path_renames_on_success_and_temp_is_in_the_same_folder(tmp_path):
    final = tmp_path / "model.keras"
    with atomic.atomic_path(str(final)) as tmp:
        # Same folder (a hidden staging folder inside it), same file name, not created yet.
        assert os.path.dirname(os.path.dirname(tmp)) == str(tmp_path)
        assert os.path.basename(tmp) == "model.keras"
        assert os.path.basename(os.path.dirname(tmp)).startswith(".model.keras.")
        assert not os.path.exists(tmp) and not final.exists()
        with open(tmp, "w") as f:
            f.write("done")
        assert not final.exists()  # nothing under the final name before the block ends
    assert final.read_text() == "done"
    assert os.listdir(tmp_path) == ["model.keras"]


def test_atomic_path_leaves_nothing_on_error(tmp_path):
    final = tmp_path / "out.bin"
    final.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic.atomic_path(str(final)) as tmp:
            with open(tmp, "w") as f:
                f.write("half")
            raise RuntimeError("boom")
    assert final.read_text() == "old"  # the previous output is untouched
    assert os.listdir(tmp_path) == ["out.bin"]


def test_atomic_path_replaces_a_file_and_a_folder(tmp_path):
    final = tmp_path / "f.txt"
    final.write_text("old")
    with atomic.atomic_path(str(final)) as tmp:
        with open(tmp, "w") as f:
            f.write("new")
    assert final.read_text() == "new"
    folder = tmp_path / "export"
    (folder / "stale").mkdir(parents=True)
    with atomic.atomic_path(str(folder)) as tmp:
        os.makedirs(os.path.join(tmp, "variables"))
    assert os.listdir(folder) == ["variables"]
    assert sorted(os.listdir(tmp_path)) == ["export", "f.txt"]


def test_atomic_path_requires_the_writer_to_create_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="did not create"):
        with atomic.atomic_path(str(tmp_path / "never.txt")):
            pass
    assert os.listdir(tmp_path) == []


def test_atomic_path_missing_folder(tmp_path):
    with pytest.raises(OSError, match="does not exist"):
        with atomic.atomic_path(str(tmp_path / "missing" / "x.txt")):
            pass
    with atomic.atomic_path(str(tmp_path / "made" / "x.txt"), make_parents=True) as tmp:
        open(tmp, "w").close()
    assert os.listdir(tmp_path / "made") == ["x.txt"]


def test_atomic_paths_all_or_nothing(tmp_path):
    finals = [str(tmp_path / "a.tfrecord"), str(tmp_path / "sub" / "b.tfrecord")]
    os.makedirs(tmp_path / "sub")
    with pytest.raises(ValueError):
        with atomic.atomic_paths(finals) as temps:
            with open(temps[0], "w") as f:
                f.write("a")
            raise ValueError("second writer failed")
    assert os.listdir(tmp_path) == ["sub"] and os.listdir(tmp_path / "sub") == []
    with atomic.atomic_paths(finals) as temps:
        assert [os.path.dirname(os.path.dirname(t)) for t in temps] == [
            str(tmp_path), str(tmp_path / "sub")]
        for t, text in zip(temps, "ab"):
            with open(t, "w") as f:
                f.write(text)
    assert [open(p).read() for p in finals] == ["a", "b"]
    assert sorted(os.listdir(tmp_path)) == ["a.tfrecord", "sub"]
    with pytest.raises(ValueError, match="twice"):
        with atomic.atomic_paths([finals[0], finals[0]]):
            pass


def test_atomic_prefix_renames_every_suffix(tmp_path):
    prefix = str(tmp_path / "model.ckpt")
    suffixes = (".index", ".data-00000-of-00001")
    with atomic.atomic_prefix(prefix, suffixes) as tmp:
        assert os.path.dirname(os.path.dirname(tmp)) == str(tmp_path)
        for s in suffixes:
            with open(tmp + s, "w") as f:
                f.write(s)
    assert sorted(os.listdir(tmp_path)) == sorted("model.ckpt" + s for s in suffixes)
    with pytest.raises(RuntimeError):
        with atomic.atomic_prefix(str(tmp_path / "other"), suffixes) as tmp:
            open(tmp + ".index", "w").close()
            raise RuntimeError("boom")
    assert sorted(os.listdir(tmp_path)) == sorted("model.ckpt" + s for s in suffixes)


# --------------------------------------------------------------------------
# URLs (ram:// stands in for gs://; test_empty_outputs_exist_on_gcs runs on real GCS code),
# permissions.
# --------------------------------------------------------------------------


def _ram(tmp_path, name):
    # A fresh ram:// folder per test (the filesystem lives as long as the process).
    return "ram://%s/%s" % (tmp_path.name, name)


def test_url_atomic_open_leaves_nothing_on_error(tmp_path):
    root = _ram(tmp_path, "err")
    files.makedirs(root)
    with pytest.raises(RuntimeError):
        with atomic.atomic_open(root + "/out.txt") as f:
            f.write("half")
            raise RuntimeError("boom")
    assert files.listdir(root) == []


def test_url_folder_outputs_move_whole(tmp_path):
    root = _ram(tmp_path, "tree")
    files.makedirs(root)
    with atomic.atomic_path(root + "/model") as tmp:
        files.makedirs(tmp + "/variables")
        with files.open(tmp + "/saved_model.pb", "wb") as f:
            f.write(b"pb")
        with files.open(tmp + "/variables/v.data", "wb") as f:
            f.write(b"v")
    assert files.listdir(root) == ["model"]
    assert files.listdir(root + "/model") == ["saved_model.pb", "variables"]
    assert files.read_text(root + "/model/variables/v.data") == "v"


def test_local_outputs_get_the_umask_mode(tmp_path):
    mask = os.umask(0o022)
    try:
        with atomic.atomic_open(str(tmp_path / "a.txt")) as f:
            f.write("x")
        with atomic.atomic_path(str(tmp_path / "d")) as tmp:
            os.mkdir(tmp)
        with atomic.AtomicTFRecordWriters([str(tmp_path / "r.tfrecord")]) as w:
            w.write(b"x")
    finally:
        os.umask(mask)
    # What open()/mkdir would give: readable by a serving process running as another user.
    assert os.stat(tmp_path / "a.txt").st_mode & 0o777 == 0o644
    assert os.stat(tmp_path / "r.tfrecord").st_mode & 0o777 == 0o644
    assert os.stat(tmp_path / "d").st_mode & 0o777 == 0o755


def test_empty_outputs_exist_on_gcs(gcs):
    """TensorFlow's GCS file uploads an object only after a write: an output with nothing
    written (a step log truncated to no line, a shard with no record) must still be created,
    or its rename into place fails with a 404 (found by a resumed run_pretraining on gs://)."""
    prefix = gcs.unique_prefix("empty")
    root = gcs.url(prefix)
    with atomic.atomic_open(root + "/empty.txt"):
        pass
    with atomic.atomic_open(root + "/empty.bin", "wb"):
        pass
    with atomic.AtomicTFRecordWriters([root + "/a.tfrecord", root + "/b.tfrecord"]) as w:
        w.write(b"one record")  # round-robin: b.tfrecord gets none
    objects = [name for name in gcs.list_objects(prefix) if not name.endswith("/")]
    assert objects == [prefix + "/" + n for n in
                       ("a.tfrecord", "b.tfrecord", "empty.bin", "empty.txt")]
    assert gcs.read_object(prefix + "/empty.txt") == b""
    assert gcs.read_object(prefix + "/b.tfrecord") == b""


# --------------------------------------------------------------------------
# Fault points and leftovers of killed processes.
# --------------------------------------------------------------------------


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
    with atomic.inject_faults(_disk_full_at(event, str(out))):
        with pytest.raises(OSError, match="No space left"):
            with atomic.atomic_open(str(out)) as f:
                f.write("new\n")
    assert out.read_text() == "previous\n" and _listing(tmp_path) == ["results.txt"]


@pytest.mark.parametrize("event", ["write", "commit"])
def test_a_group_of_outputs_is_all_new_or_all_old(tmp_path, event):
    paths = [str(tmp_path / n) for n in ("predictions.json", "nbest_predictions.json")]
    for p in paths:
        with open(p, "w") as f:
            f.write("old")
    with atomic.inject_faults(_disk_full_at(event, paths[1])):
        with pytest.raises(OSError):
            with atomic.atomic_paths(paths) as temps:
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

    with atomic.inject_faults(hook):
        with pytest.raises(OSError):
            with atomic.AtomicTFRecordWriters(paths) as writers:
                for i in range(20):
                    writers.write(b"record %d" % i)
    assert _listing(tmp_path) == []


def test_no_hook_outside_the_block(tmp_path):
    with atomic.inject_faults(_disk_full_at("write", "x")):
        pass
    with atomic.atomic_open(str(tmp_path / "x")) as f:
        f.write("fine")
    assert (tmp_path / "x").read_text() == "fine"


def test_leftovers_of_killed_processes_are_removed_and_only_those(tmp_path):
    out = tmp_path / "train.tf_record"
    host = atomic._HOST
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
    with atomic.atomic_open(str(out)) as f:
        f.write("complete")
    assert not stale_file.exists() and not stale_dir.exists()
    assert all(p.read_text() == "keep" for p in (live, other_host, other_output, users))
    assert out.read_text() == "complete"


def test_temporaries_are_named_by_host_and_pid(tmp_path):
    seen = []

    def hook(event, path):
        seen.extend(os.listdir(tmp_path))

    with atomic.inject_faults(hook):
        with atomic.atomic_open(str(tmp_path / "out.txt")) as f:
            f.write("x")
    temps = [n for n in seen if n.endswith(".tmp")]
    assert temps and all(atomic.TEMP_RE.match(n).group("pid") == str(os.getpid()) for n in temps)


def test_recording_writes_lists_what_is_in_place(tmp_path):
    """``recording_writes``: the outputs put in place, not those a failed group took back."""
    a, b = str(tmp_path / "a.txt"), str(tmp_path / "b.txt")
    with atomic.recording_writes() as written:
        with atomic.atomic_paths([a, b]) as (ta, tb):
            for t in (ta, tb):
                with open(t, "w") as f:
                    f.write("new")
    assert written == [a, b]

    def fail_b(event, path):
        if event == "commit" and path == b:
            raise OSError(errno.ENOSPC, "No space left on device", path)

    with atomic.recording_writes() as written:
        with atomic.inject_faults(fail_b), pytest.raises(OSError):
            with atomic.atomic_paths([a, b]) as (ta, tb):
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
    with atomic.inject_faults(fail_b), pytest.raises(OSError) as info:
        with atomic.atomic_paths([a, b]) as (ta, tb):
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
    assert atomic.remove_stale_temps(a) == [dead]
    assert open(a).read() == "old" and not os.path.exists(dead)


def test_a_commit_killed_after_setting_the_previous_output_aside_is_undone(tmp_path):
    """Killed between moving the previous output aside and moving the new one in: the next
    write of that output finds the output missing and puts the previous one back."""
    a = str(tmp_path / "a.txt")
    staging = tmp_path / (".a.txt.%s-%d.x1.tmp" % (atomic._HOST, dead_pid()))
    staging.mkdir()
    (staging / ".previous.a.txt").write_text("old")
    (staging / "a.txt").write_text("new, never committed")
    assert atomic.remove_stale_temps(a) == [str(staging)]
    assert open(a).read() == "old" and not staging.exists()
    # With the output in place (the commit finished, the clean-up did not), the staging
    # folder is only removed.
    staging.mkdir()
    (staging / ".previous.a.txt").write_text("older")
    assert atomic.remove_stale_temps(a) == [str(staging)]
    assert open(a).read() == "old"


def test_a_reused_pid_or_a_zombie_is_not_the_writer_of_a_temporary(tmp_path):
    """pids wrap at pid_max (32768 in many containers): a killed writer's pid can belong to a
    new process by the time a rerun looks, and a killed writer not yet reaped is a zombie.
    Neither keeps the dead writer's temporary; a live writer's recent one stays."""
    import subprocess
    import sys
    import time

    out = tmp_path / "records"
    ours_old = tmp_path / (".records.%s-%d.a1.tmp" % (atomic._HOST, os.getpid()))
    ours_old.write_text("from a dead writer whose pid this process now has")
    an_hour_ago = time.time() - 3600  # before this test process started
    os.utime(ours_old, (an_hour_ago, an_hour_ago))
    ours_new = tmp_path / (".records.%s-%d.a2.tmp" % (atomic._HOST, os.getpid()))
    ours_new.write_text("this process's own, being written")

    child = subprocess.Popen([sys.executable, "-c", "pass"])  # exits; not reaped yet
    zombie = tmp_path / (".records.%s-%d.a3.tmp" % (atomic._HOST, child.pid))
    zombie.write_text("from a writer that died")
    deadline = time.time() + 30
    while atomic._process_state(child.pid)[0] not in ("Z", "X") and time.time() < deadline:
        time.sleep(0.05)
    try:
        assert atomic._process_state(child.pid)[0] == "Z"
        removed = atomic.remove_stale_temps(str(out))
    finally:
        child.wait()
    assert sorted(removed) == sorted([str(ours_old), str(zombie)])
    assert ours_new.exists()

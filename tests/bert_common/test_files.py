import os

import pytest
import tensorflow as tf

from bert_common import files as io_utils


def test_atomic_open_leaves_nothing_on_error(tmp_path):
    path = tmp_path / "out.txt"
    with pytest.raises(RuntimeError):
        with io_utils.atomic_open(str(path)) as f:
            f.write("half")
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_atomic_open_writes(tmp_path):
    path = tmp_path / "out.txt"
    with io_utils.atomic_open(str(path)) as f:
        f.write("done")
    assert path.read_text() == "done"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_tfrecord_writers_round_robin(tmp_path):
    paths = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    with io_utils.AtomicTFRecordWriters(paths) as w:
        for i in range(5):
            ex = tf.train.Example(features=tf.train.Features(feature={"x": io_utils.int64_feature([i])}))
            w.write(ex.SerializeToString())
    counts = [sum(1 for _ in tf.data.TFRecordDataset(p)) for p in paths]
    assert counts == [3, 2]


def test_tfrecord_writers_abort_on_error(tmp_path):
    paths = [str(tmp_path / "a.tfrecord")]
    with pytest.raises(ValueError):
        with io_utils.AtomicTFRecordWriters(paths) as w:
            w.write(b"x")
            raise ValueError("bad")
    assert os.listdir(tmp_path) == []


def test_unwritable_folder_is_named(tmp_path):
    with pytest.raises(OSError, match="does not exist"):
        io_utils.AtomicTFRecordWriters([str(tmp_path / "missing" / "x.tfrecord")])


# --------------------------------------------------------------------------
# atomic_path / atomic_paths / atomic_prefix: writers that take a path.
# --------------------------------------------------------------------------


def test_atomic_path_renames_on_success_and_temp_is_in_the_same_folder(tmp_path):
    final = tmp_path / "model.keras"
    with io_utils.atomic_path(str(final)) as tmp:
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
        with io_utils.atomic_path(str(final)) as tmp:
            with open(tmp, "w") as f:
                f.write("half")
            raise RuntimeError("boom")
    assert final.read_text() == "old"  # the previous output is untouched
    assert os.listdir(tmp_path) == ["out.bin"]


def test_atomic_path_replaces_a_file_and_a_folder(tmp_path):
    final = tmp_path / "f.txt"
    final.write_text("old")
    with io_utils.atomic_path(str(final)) as tmp:
        with open(tmp, "w") as f:
            f.write("new")
    assert final.read_text() == "new"
    folder = tmp_path / "export"
    (folder / "stale").mkdir(parents=True)
    with io_utils.atomic_path(str(folder)) as tmp:
        os.makedirs(os.path.join(tmp, "variables"))
    assert os.listdir(folder) == ["variables"]
    assert sorted(os.listdir(tmp_path)) == ["export", "f.txt"]


def test_atomic_path_requires_the_writer_to_create_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="did not create"):
        with io_utils.atomic_path(str(tmp_path / "never.txt")):
            pass
    assert os.listdir(tmp_path) == []


def test_atomic_path_missing_folder(tmp_path):
    with pytest.raises(OSError, match="does not exist"):
        with io_utils.atomic_path(str(tmp_path / "missing" / "x.txt")):
            pass
    with io_utils.atomic_path(str(tmp_path / "made" / "x.txt"), make_parents=True) as tmp:
        open(tmp, "w").close()
    assert os.listdir(tmp_path / "made") == ["x.txt"]


def test_atomic_paths_all_or_nothing(tmp_path):
    finals = [str(tmp_path / "a.tfrecord"), str(tmp_path / "sub" / "b.tfrecord")]
    os.makedirs(tmp_path / "sub")
    with pytest.raises(ValueError):
        with io_utils.atomic_paths(finals) as temps:
            with open(temps[0], "w") as f:
                f.write("a")
            raise ValueError("second writer failed")
    assert os.listdir(tmp_path) == ["sub"] and os.listdir(tmp_path / "sub") == []
    with io_utils.atomic_paths(finals) as temps:
        assert [os.path.dirname(os.path.dirname(t)) for t in temps] == [
            str(tmp_path), str(tmp_path / "sub")]
        for t, text in zip(temps, "ab"):
            with open(t, "w") as f:
                f.write(text)
    assert [open(p).read() for p in finals] == ["a", "b"]
    assert sorted(os.listdir(tmp_path)) == ["a.tfrecord", "sub"]
    with pytest.raises(ValueError, match="twice"):
        with io_utils.atomic_paths([finals[0], finals[0]]):
            pass


def test_atomic_prefix_renames_every_suffix(tmp_path):
    prefix = str(tmp_path / "model.ckpt")
    suffixes = (".index", ".data-00000-of-00001")
    with io_utils.atomic_prefix(prefix, suffixes) as tmp:
        assert os.path.dirname(os.path.dirname(tmp)) == str(tmp_path)
        for s in suffixes:
            with open(tmp + s, "w") as f:
                f.write(s)
    assert sorted(os.listdir(tmp_path)) == sorted("model.ckpt" + s for s in suffixes)
    with pytest.raises(RuntimeError):
        with io_utils.atomic_prefix(str(tmp_path / "other"), suffixes) as tmp:
            open(tmp + ".index", "w").close()
            raise RuntimeError("boom")
    assert sorted(os.listdir(tmp_path)) == sorted("model.ckpt" + s for s in suffixes)


# --------------------------------------------------------------------------
# Paths of any filesystem: ram:// (TensorFlow's in-process filesystem) stands in for gs://
# here; tests/bert_common/test_gcs_loopback.py runs the same calls against real GCS code.
# --------------------------------------------------------------------------


def _ram(tmp_path, name):
    # A fresh ram:// folder per test (the filesystem lives as long as the process).
    return "ram://%s/%s" % (tmp_path.name, name)


def test_url_paths_go_through_gfile(tmp_path):
    root = _ram(tmp_path, "paths")
    io_utils.makedirs(root + "/sub")
    with io_utils.atomic_open(root + "/a.txt") as f:
        f.write("héllo\n")
    with io_utils.atomic_open(root + "/sub/b.bin", "wb") as f:
        f.write(b"\x00\x01")
    assert io_utils.is_url(root) and not io_utils.is_url(str(tmp_path))
    assert io_utils.abspath(root + "/a.txt") == root + "/a.txt"  # never <cwd>/ram:/...
    assert io_utils.read_text(root + "/a.txt") == "héllo\n"
    assert io_utils.isfile(root + "/a.txt") and not io_utils.isfile(root + "/sub")
    assert io_utils.isdir(root + "/sub") and io_utils.exists(root + "/sub/b.bin")
    assert io_utils.getsize(root + "/sub/b.bin") == 2
    assert io_utils.listdir(root) == ["a.txt", "sub"]  # no temporary left behind
    assert io_utils.glob(root + "/*.txt") == [root + "/a.txt"]
    io_utils.copy(root + "/a.txt", root + "/c.txt")
    io_utils.rename(root + "/c.txt", root + "/a.txt")  # replaces
    assert io_utils.listdir(root) == ["a.txt", "sub"]
    io_utils.remove(root + "/a.txt")
    io_utils.rmtree(root + "/sub")
    assert not io_utils.exists(root + "/a.txt") and not io_utils.exists(root + "/sub/b.bin")
    assert not os.path.exists("ram:")  # nothing landed in a local folder named after the scheme


def test_url_atomic_open_leaves_nothing_on_error(tmp_path):
    root = _ram(tmp_path, "err")
    io_utils.makedirs(root)
    with pytest.raises(RuntimeError):
        with io_utils.atomic_open(root + "/out.txt") as f:
            f.write("half")
            raise RuntimeError("boom")
    assert io_utils.listdir(root) == []


def test_url_folder_outputs_move_whole(tmp_path):
    root = _ram(tmp_path, "tree")
    io_utils.makedirs(root)
    with io_utils.atomic_path(root + "/model") as tmp:
        io_utils.makedirs(tmp + "/variables")
        with io_utils.open(tmp + "/saved_model.pb", "wb") as f:
            f.write(b"pb")
        with io_utils.open(tmp + "/variables/v.data", "wb") as f:
            f.write(b"v")
    assert io_utils.listdir(root) == ["model"]
    assert io_utils.listdir(root + "/model") == ["saved_model.pb", "variables"]
    assert io_utils.read_text(root + "/model/variables/v.data") == "v"


def test_saved_model_export_to_a_url(tmp_path):
    root = _ram(tmp_path, "export")

    class Plus(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def serve(self, x):
            return {"y": x + 1.0}

    module = Plus()
    io_utils.save_saved_model(module, root + "/1", lambda: {"serving_default": module.serve})
    assert io_utils.listdir(root) == ["1"]
    loaded = tf.saved_model.load(root + "/1")
    assert loaded.signatures["serving_default"](tf.constant([1.0]))["y"].numpy().tolist() == [2.0]


def test_local_outputs_get_the_umask_mode(tmp_path):
    mask = os.umask(0o022)
    try:
        with io_utils.atomic_open(str(tmp_path / "a.txt")) as f:
            f.write("x")
        with io_utils.atomic_path(str(tmp_path / "d")) as tmp:
            os.mkdir(tmp)
        with io_utils.AtomicTFRecordWriters([str(tmp_path / "r.tfrecord")]) as w:
            w.write(b"x")

        class Empty(tf.Module):
            pass

        io_utils.save_saved_model(Empty(), str(tmp_path / "export"), lambda: None)
    finally:
        os.umask(mask)
    # What open()/mkdir would give: readable by a serving process running as another user.
    assert os.stat(tmp_path / "a.txt").st_mode & 0o777 == 0o644
    assert os.stat(tmp_path / "r.tfrecord").st_mode & 0o777 == 0o644
    assert os.stat(tmp_path / "export").st_mode & 0o777 == 0o755
    assert os.stat(tmp_path / "d").st_mode & 0o777 == 0o755


def test_read_utf8_one_line_errors_and_bom(tmp_path):
    class Bad(ValueError):
        pass

    path = tmp_path / "in.txt"
    path.write_bytes(b"\xef\xbb\xbfok\nline two \xff\n")
    with pytest.raises(Bad, match=r"in.txt:2: not valid UTF-8 \(byte offset 15\)$"):
        io_utils.read_utf8(str(path), Bad)
    path.write_bytes(b"\xef\xbb\xbfok\n")
    assert io_utils.read_utf8(str(path), Bad) == "ok\n"
    assert io_utils.read_utf8(str(path), Bad, strip_bom=False) == "\ufeffok\n"
    path.write_bytes(b"\xef\xbb\xbfa\n\xff")  # the line counts the BOM's bytes too
    with pytest.raises(Bad, match=r"in.txt:2: not valid UTF-8 \(byte offset 5\)$"):
        io_utils.read_utf8(str(path), Bad)
    with pytest.raises(Bad, match=r"missing.txt: no such file$"):
        io_utils.read_utf8(str(tmp_path / "missing.txt"), Bad)


def test_empty_outputs_exist_on_gcs(gcs):
    """TensorFlow's GCS file uploads an object only after a write: an output with nothing
    written (a step log truncated to no line, a shard with no record) must still be created,
    or its rename into place fails with a 404 (found by a resumed run_pretraining on gs://)."""
    prefix = gcs.unique_prefix("empty")
    root = gcs.url(prefix)
    with io_utils.atomic_open(root + "/empty.txt"):
        pass
    with io_utils.atomic_open(root + "/empty.bin", "wb"):
        pass
    with io_utils.AtomicTFRecordWriters([root + "/a.tfrecord", root + "/b.tfrecord"]) as w:
        w.write(b"one record")  # round-robin: b.tfrecord gets none
    objects = [name for name in gcs.list_objects(prefix) if not name.endswith("/")]
    assert objects == [prefix + "/" + n for n in
                       ("a.tfrecord", "b.tfrecord", "empty.bin", "empty.txt")]
    assert gcs.read_object(prefix + "/empty.txt") == b""
    assert gcs.read_object(prefix + "/b.tfrecord") == b""

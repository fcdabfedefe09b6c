"""bert_tasks/exports/saved_model.py: ``save_saved_model`` replaces only a SavedModel
(all new or all old, several together with ``save_saved_models``); ``save_saved_model_version``
adds the next version of a TF Serving model base path, never replacing one, and refuses a base
holding anything else (``check_export_base``); a failed write leaves what was there."""

import errno
import os

import pytest
import tensorflow as tf

from bert_common import atomic, files
from bert_tasks.exports import saved_model
from bert_common.errors import InputError
from tests.support.tools import dead_pid, snapshot


class Plus(tf.Module):
    def __init__(self, k=1.0):
        super().__init__()
        self.k = tf.Variable(k)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def serve(self, x):
        return {"y": x + self.k}


def _save(path, k=1.0, **kwargs):
    module = Plus(k)
    return saved_model.save_saved_model(module, str(path),
                                        lambda: {"serving_default": module.serve})


def _version(base, k=1.0, flag="--export_dir"):
    module = Plus(k)
    return saved_model.save_saved_model_version(module, str(base),
                                                lambda: {"serving_default": module.serve}, flag)


def _served(path):
    loaded = tf.saved_model.load(str(path))
    return loaded.signatures["serving_default"](tf.constant([1.0]))["y"].numpy().tolist()


def _disk_full(event, under):
    def hook(ev, path):
        if ev == event and os.path.abspath(path).startswith(os.path.abspath(str(under))):
            raise OSError(errno.ENOSPC, "No space left on device", path)
    return hook


# ------------------------------------------------------------------------ save_saved_model


def test_replaces_a_saved_model_and_an_empty_folder(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    assert _save(out, 1.0) == str(out) and _served(out) == [2.0]
    assert _save(out, 2.0) == str(out) and _served(out) == [3.0]
    assert os.listdir(tmp_path) == ["model"]  # nothing set aside or staged is left


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_refuses_anything_but_a_saved_model_and_leaves_it(tmp_path, kind):
    out = tmp_path / "model"
    if kind == "folder":
        out.mkdir()
        (out / "model.ckpt-4.index").write_bytes(b"\x00checkpoint")
    else:
        out.write_bytes(b"not a folder")
    before = snapshot(tmp_path, folders=True)
    with pytest.raises(InputError, match="not a SavedModel") as error:
        _save(out)
    assert "\n" not in str(error.value) and str(out) in str(error.value)
    if kind == "folder":
        assert "model.ckpt-4.index" in str(error.value)
    assert snapshot(tmp_path, folders=True) == before


@pytest.mark.parametrize("event", ["write", "commit"])
def test_a_failed_replace_keeps_the_previous_saved_model(tmp_path, event):
    out = tmp_path / "model"
    _save(out, 1.0)
    before = snapshot(tmp_path, folders=True)
    with atomic.inject_faults(_disk_full(event, out)):
        with pytest.raises(OSError, match="No space left"):
            _save(out, 5.0)
    assert snapshot(tmp_path, folders=True) == before and _served(out) == [2.0]


def test_several_saved_models_are_all_new_or_all_old(tmp_path):
    a, b = tmp_path / "encoder", tmp_path / "preprocessor"
    _save(a, 1.0)
    _save(b, 1.0)
    before = snapshot(tmp_path, folders=True)
    modules = [Plus(7.0), Plus(7.0)]
    exports = [(m, str(p), (lambda m=m: {"serving_default": m.serve}))
               for m, p in zip(modules, (a, b))]
    with atomic.inject_faults(_disk_full("commit", b)):  # a is already in place by then
        with pytest.raises(OSError, match="No space left"):
            saved_model.save_saved_models(exports)
    assert snapshot(tmp_path, folders=True) == before
    # A destination that is not a SavedModel: refused before either is written.
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="other exists and is not a SavedModel"):
        saved_model.save_saved_models(exports[:1] + [(modules[1], str(tmp_path / "other"),
                                                      exports[1][2])])
    assert {k: v for k, v in snapshot(tmp_path, folders=True).items() if not k.startswith("other")} == before
    saved_model.save_saved_models(exports)
    assert _served(a) == _served(b) == [8.0]
    assert sorted(os.listdir(tmp_path)) == ["encoder", "other", "preprocessor"]


# --------------------------------------------------------------- TF Serving's versioned layout


def test_versions_are_added_side_by_side(tmp_path):
    base = tmp_path / "models" / "plus"  # created, parents too
    assert _version(base, 1.0) == str(base / "1")
    assert _version(base, 2.0) == str(base / "2")
    assert sorted(os.listdir(base)) == ["1", "2"]
    assert _served(base / "1") == [2.0] and _served(base / "2") == [3.0]
    assert saved_model.saved_model_versions(str(base)) == [1, 2]
    (base / "9").mkdir()  # the next is 1 + the largest, gaps are kept
    assert _version(base) == str(base / "10")


def test_a_version_taken_meanwhile_is_never_replaced(tmp_path):
    base = tmp_path / "plus"
    _version(base, 1.0)
    taken = []

    def another_export(event, path):  # another process commits version 2 first
        if event == "commit" and not taken:
            os.makedirs(os.path.join(str(base), "2"))
            with open(os.path.join(str(base), "2", "saved_model.pb"), "wb") as f:
                f.write(b"theirs")
            taken.append(path)

    with atomic.inject_faults(another_export):
        assert _version(base, 5.0) == str(base / "3")
    assert taken == [str(base / "2")]
    assert (base / "2" / "saved_model.pb").read_bytes() == b"theirs"
    assert _served(base / "3") == [6.0]


@pytest.mark.parametrize("event", ["write", "commit"])
def test_a_failed_version_leaves_the_base_as_it_was(tmp_path, event):
    base = tmp_path / "plus"
    _version(base)
    before = snapshot(tmp_path, folders=True)
    with atomic.inject_faults(_disk_full(event, base)):
        with pytest.raises(OSError, match="No space left"):
            _version(base)
    assert snapshot(tmp_path, folders=True) == before


def test_leftovers_of_killed_exports_do_not_block_and_are_removed(tmp_path):
    base = tmp_path / "plus"
    dead = base / (".1.%s-%d.abc123.tmp" % (atomic._HOST, dead_pid()))
    live = base / (".1.%s-%d.def456.tmp" % (atomic._HOST, os.getppid()))
    for leftover in (dead, live):
        leftover.mkdir(parents=True)
        (leftover / "saved_model.pb").write_bytes(b"partial")
    saved_model.check_export_base(str(base))  # this layer's temporaries are allowed
    assert _version(base) == str(base / "1")
    assert not dead.exists()
    assert (live / "saved_model.pb").read_bytes() == b"partial"  # a live run's: left alone
    assert sorted(os.listdir(base)) == [live.name, "1"]


@pytest.mark.parametrize("content,shown", [
    ({"model.ckpt-4.index": b"ckpt", "1/saved_model.pb": b"pb"}, "model.ckpt-4.index"),
    ({"2": b"a file named like a version"}, "2"),
    ({".notes.tmp": b"a hidden file of the user"}, ".notes.tmp"),
    ({"a/x": b"", "b/x": b"", "c/x": b"", "d/x": b""}, "a, b, c, ..."),
])
def test_a_base_holding_other_files_is_refused_and_left(tmp_path, content, shown):
    base = tmp_path / "models"
    for name, data in content.items():
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_bytes(data)
    before = snapshot(tmp_path, folders=True)
    with pytest.raises(InputError) as error:
        _version(base, flag="--export_dir")
    message = str(error.value)
    assert message.startswith("--export_dir=%s holds other files than SavedModel versions (%s)"
                              % (base, shown)), message
    assert "\n" not in message
    assert snapshot(tmp_path, folders=True) == before


def test_check_export_base(tmp_path):
    saved_model.check_export_base(str(tmp_path / "new" / "base"))  # created at export
    saved_model.check_export_base(str(tmp_path))  # empty
    (tmp_path / "1").mkdir()
    saved_model.check_export_base(str(tmp_path))
    with pytest.raises(InputError, match=r"^--export_dir=\S+ is a file"):
        (tmp_path / "f").write_text("x")
        saved_model.check_export_base(str(tmp_path / "f"))
    out = str(tmp_path / "out")
    for base in (out, str(tmp_path)):  # the output folder itself, or a folder holding it
        with pytest.raises(InputError, match=r"is --output_dir=\S+ or holds it"):
            saved_model.check_export_base(base, "--export_dir", {"--output_dir": out})
    saved_model.check_export_base(out + "/export", "--export_dir", {"--output_dir": out})
    saved_model.check_export_base(out + "-export", "--export_dir", {"--output_dir": out})
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(InputError, match="cannot be created: .*locked is not a writable"):
            saved_model.check_export_base(str(locked / "models" / "mrpc"))


def test_versions_on_a_url(tmp_path):
    base = "ram://%s/models/plus" % tmp_path.name
    assert _version(base, 1.0) == base + "/1"
    assert _version(base, 2.0) == base + "/2"
    assert files.listdir(base) == ["1", "2"]
    assert _served(base + "/2") == [3.0]
    with files.open(base + "/notes.txt", "w") as f:
        f.write("x")
    with pytest.raises(InputError, match="notes.txt"):
        _version(base)


def test_saved_model_export_to_a_url(tmp_path):
    root = "ram://%s/export" % tmp_path.name

    class Plus(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def serve(self, x):
            return {"y": x + 1.0}

    module = Plus()
    saved_model.save_saved_model(module, root + "/1", lambda: {"serving_default": module.serve})
    assert files.listdir(root) == ["1"]
    loaded = tf.saved_model.load(root + "/1")
    assert loaded.signatures["serving_default"](tf.constant([1.0]))["y"].numpy().tolist() == [2.0]


def test_a_saved_model_gets_the_umask_mode(tmp_path):
    mask = os.umask(0o022)
    try:
        class Empty(tf.Module):
            pass

        saved_model.save_saved_model(Empty(), str(tmp_path / "export"), lambda: None)
    finally:
        os.umask(mask)
    # What mkdir would give: readable by a serving process running as another user.
    assert os.stat(tmp_path / "export").st_mode & 0o777 == 0o755

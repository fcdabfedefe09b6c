"""bert_common/files.py, the file-system layer: the same calls for a local path and a URL
(ram://, TensorFlow's in-process filesystem, stands in for gs:// here;
tests/bert_common/test_gcs_loopback.py runs the same calls against real GCS code), and
``read_utf8``'s one-line errors, ``split_lines``."""

import os

import pytest

from bert_common import atomic, files


def _ram(tmp_path, name):
    # A fresh ram:// folder per test (the filesystem lives as long as the process).
    return "ram://%s/%s" % (tmp_path.name, name)


def test_url_paths_go_through_gfile(tmp_path):
    root = _ram(tmp_path, "paths")
    files.makedirs(root + "/sub")
    with atomic.atomic_open(root + "/a.txt") as f:
        f.write("héllo\n")
    with atomic.atomic_open(root + "/sub/b.bin", "wb") as f:
        f.write(b"\x00\x01")
    assert files.is_url(root) and not files.is_url(str(tmp_path))
    assert files.abspath(root + "/a.txt") == root + "/a.txt"  # never <cwd>/ram:/...
    assert files.read_text(root + "/a.txt") == "héllo\n"
    assert files.isfile(root + "/a.txt") and not files.isfile(root + "/sub")
    assert files.isdir(root + "/sub") and files.exists(root + "/sub/b.bin")
    assert files.getsize(root + "/sub/b.bin") == 2
    assert files.listdir(root) == ["a.txt", "sub"]  # no temporary left behind
    assert files.glob(root + "/*.txt") == [root + "/a.txt"]
    files.copy(root + "/a.txt", root + "/c.txt")
    files.rename(root + "/c.txt", root + "/a.txt")  # replaces
    assert files.listdir(root) == ["a.txt", "sub"]
    files.remove(root + "/a.txt")
    files.rmtree(root + "/sub")
    assert not files.exists(root + "/a.txt") and not files.exists(root + "/sub/b.bin")
    assert not os.path.exists("ram:")  # nothing landed in a local folder named after the scheme


def test_read_utf8_one_line_errors_and_bom(tmp_path):
    class Bad(ValueError):
        pass

    path = tmp_path / "in.txt"
    path.write_bytes(b"\xef\xbb\xbfok\nline two \xff\n")
    with pytest.raises(Bad, match=r"in.txt:2: not valid UTF-8 \(byte offset 15\)$"):
        files.read_utf8(str(path), Bad)
    path.write_bytes(b"\xef\xbb\xbfok\n")
    assert files.read_utf8(str(path), Bad) == "ok\n"
    assert files.read_utf8(str(path), Bad, strip_bom=False) == "\ufeffok\n"
    path.write_bytes(b"\xef\xbb\xbfa\n\xff")  # the line counts the BOM's bytes too
    with pytest.raises(Bad, match=r"in.txt:2: not valid UTF-8 \(byte offset 5\)$"):
        files.read_utf8(str(path), Bad)
    with pytest.raises(Bad, match=r"missing.txt: no such file$"):
        files.read_utf8(str(tmp_path / "missing.txt"), Bad)
    path.write_bytes(b"\xef\xbb\xbf \n\t\n")  # only whitespace: an error if text is required
    assert files.read_utf8(str(path), Bad) == " \n\t\n"
    with pytest.raises(Bad, match=r"in.txt: the file is empty$"):
        files.read_utf8(str(path), Bad, require_text=True)


def test_split_lines_at_newline_only():
    assert files.split_lines("a\nb\r\n\x0cc\u2028d\n") == ["a", "b\r", "\x0cc\u2028d"]
    assert files.split_lines("a\n\n") == ["a", ""] and files.split_lines("a") == ["a"]
    assert files.split_lines("") == [] and files.split_lines("\n") == [""]

"""TensorFlow's own gs:// filesystem against the loopback GCS of tests/support/gcs_loopback.py.

Every test works under its own object prefix in the shared session bucket, and checks what landed
in the bucket by reading the emulator directly (gcs.read_object / gcs.list_objects), not only by
reading it back through TensorFlow.
"""

import hashlib
import http.client
import os
import socket
import ssl
import subprocess
import sys
import textwrap
import urllib.parse

import numpy as np
import pytest
import tensorflow as tf


MiB = 1 << 20


def _write(path, data, mode="wb"):
    with tf.io.gfile.GFile(path, mode) as f:
        f.write(data)


def _read(path, mode="rb"):
    with tf.io.gfile.GFile(path, mode) as f:
        return f.read()


def _names(listing):
    """listdir on gs:// names sub-directories with a trailing slash."""
    return sorted(name.rstrip("/") for name in listing)


def test_gfile_text_directories_listing_and_glob(gcs):
    prefix = gcs.unique_prefix("gfile")
    root = gcs.url(prefix)
    tf.io.gfile.makedirs(root + "/notes/deep")
    assert tf.io.gfile.isdir(root + "/notes") and tf.io.gfile.isdir(root + "/notes/deep")
    # makedirs leaves zero-byte "dir/" marker objects (the emulator needed a patch for them).
    assert gcs.list_objects(prefix) == [prefix + "/", prefix + "/notes/", prefix + "/notes/deep/"]
    assert gcs.read_object(prefix + "/notes/") == b""

    text = "héllo\nworld\n"
    _write(root + "/notes/hello.txt", text, "w")
    _write(root + "/notes/deep/more.txt", "more", "w")
    _write(root + "/top.txt", "top", "w")
    assert _read(root + "/notes/hello.txt", "r") == text
    assert gcs.read_object(prefix + "/notes/hello.txt") == text.encode("utf-8")
    assert tf.io.gfile.exists(root + "/notes/hello.txt")
    assert not tf.io.gfile.isdir(root + "/notes/hello.txt")
    assert not tf.io.gfile.exists(root + "/notes/absent.txt")
    assert tf.io.gfile.stat(root + "/notes/hello.txt").length == len(text.encode("utf-8"))

    assert _names(tf.io.gfile.listdir(root)) == ["notes", "top.txt"]
    assert _names(tf.io.gfile.listdir(root + "/notes")) == ["deep", "hello.txt"]
    assert tf.io.gfile.glob(root + "/*/*.txt") == [root + "/notes/hello.txt"]
    assert tf.io.gfile.glob(root + "/*.txt") == [root + "/top.txt"]
    assert tf.io.gfile.glob(root + "/notes/*/m?re.txt") == [root + "/notes/deep/more.txt"]


def test_gfile_binary_stat_and_ranged_reads(gcs):
    prefix = gcs.unique_prefix("binary")
    path = gcs.url(prefix, "blob.bin")
    data = np.random.default_rng(0).bytes(3 * MiB + 123)
    _write(path, data)
    assert tf.io.gfile.stat(path).length == len(data)
    assert _read(path) == data
    with tf.io.gfile.GFile(path, "rb") as f:
        f.seek(2 * MiB + 5)
        assert f.read(1000) == data[2 * MiB + 5:2 * MiB + 1005]
    assert gcs.read_object(path) == data


def test_gfile_rename_remove_rmtree(gcs):
    prefix = gcs.unique_prefix("rename")
    root = gcs.url(prefix)
    _write(root + "/a.txt", b"first")
    _write(root + "/b.txt", b"second")
    with pytest.raises(tf.errors.AlreadyExistsError):
        tf.io.gfile.rename(root + "/b.txt", root + "/a.txt")
    tf.io.gfile.rename(root + "/b.txt", root + "/a.txt", overwrite=True)
    assert _read(root + "/a.txt") == b"second"
    assert not tf.io.gfile.exists(root + "/b.txt")
    assert gcs.list_objects(prefix) == [prefix + "/a.txt"]
    assert gcs.read_object(prefix + "/a.txt") == b"second"

    tf.io.gfile.remove(root + "/a.txt")
    assert not tf.io.gfile.exists(root + "/a.txt")
    assert gcs.list_objects(prefix) == []

    tf.io.gfile.makedirs(root + "/tree/sub")
    _write(root + "/tree/sub/x.bin", b"x" * 10)
    _write(root + "/tree/y.bin", b"y")
    tf.io.gfile.rmtree(root + "/tree")
    assert not tf.io.gfile.exists(root + "/tree")
    assert [name for name in gcs.list_objects(prefix) if "/tree" in name] == []


def test_multi_chunk_upload_lands_byte_for_byte(gcs):
    """A multi-MB object written in several pieces is sent by libcurl with Transfer-Encoding:
    chunked next to TensorFlow's Content-Length; the emulator alone would store the chunk
    framing. The bytes in the bucket must equal what was written."""
    prefix = gcs.unique_prefix("chunked")
    path = gcs.url(prefix, "payload.bin")
    data = np.random.default_rng(1).bytes(6 * MiB + 7)
    piece = MiB - 3  # pieces that do not line up with any buffer size
    first_request = len(gcs.requests)
    with tf.io.gfile.GFile(path, "wb") as f:
        for start in range(0, len(data), piece):
            f.write(data[start:start + piece])

    uploads = [r for r in gcs.requests[first_request:] if r.method == "PUT" and prefix in r.path]
    # The test only means something if the body really came chunked (else nothing to undo).
    assert uploads and all(r.chunked for r in uploads)
    stored = gcs.read_object(path)
    assert len(stored) == len(data)
    assert hashlib.sha256(stored).hexdigest() == hashlib.sha256(data).hexdigest()
    assert tf.io.gfile.stat(path).length == len(data)


def test_tfrecord_write_and_read(gcs):
    root = gcs.url(gcs.unique_prefix("tfrecord"))
    rng = np.random.default_rng(2)
    records = [rng.bytes(int(n)) for n in rng.integers(0, 20_000, size=300)]
    for compression in ("", "GZIP"):
        path = "%s/data-%s.tfrecord" % (root, compression or "plain")
        with tf.io.TFRecordWriter(path, options=compression or None) as writer:
            for record in records:
                writer.write(record)
        read = [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type=compression)]
        assert read == records
        assert gcs.read_object(path)  # the file landed in the bucket, not somewhere else


def test_checkpoint_save_restore(gcs):
    prefix = gcs.unique_prefix("ckpt")
    root = gcs.url(prefix)
    weights = tf.Variable(tf.random.stateless_uniform([64, 32], seed=[1, 2]))
    step = tf.Variable(7, dtype=tf.int64)
    saved = tf.train.Checkpoint(weights=weights, step=step).save(root + "/model")
    assert saved == root + "/model-1"
    assert tf.train.latest_checkpoint(root) == saved
    names = gcs.list_objects(prefix)
    assert prefix + "/checkpoint" in names and prefix + "/model-1.index" in names

    restored_weights = tf.Variable(tf.zeros([64, 32]))
    restored_step = tf.Variable(0, dtype=tf.int64)
    status = tf.train.Checkpoint(weights=restored_weights, step=restored_step).restore(saved)
    status.assert_consumed()
    np.testing.assert_array_equal(restored_weights.numpy(), weights.numpy())
    assert int(restored_step) == 7


class _Tiny(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable([[1.0], [2.0]])

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32)])
    def __call__(self, x):
        return tf.matmul(x, self.w)


def test_saved_model_save_and_load(gcs):
    prefix = gcs.unique_prefix("saved")
    export_dir = gcs.url(prefix, "tiny")
    tf.saved_model.save(_Tiny(), export_dir)
    assert prefix + "/tiny/saved_model.pb" in gcs.list_objects(prefix)
    loaded = tf.saved_model.load(export_dir)
    np.testing.assert_allclose(loaded(tf.constant([[1.0, 1.0], [2.0, 0.5]])).numpy(),
                               [[3.0], [3.0]])


def _run_child(code, *args, **kwargs):
    """A fresh interpreter with this process's environment (the fixture's variables included)."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args],
                            env=dict(os.environ), text=True, **kwargs)


def test_child_process_reads_and_writes(gcs):
    prefix = gcs.unique_prefix("child")
    from_parent = gcs.url(prefix, "from-parent.bin")
    from_child = gcs.url(prefix, "from-child.txt")
    data = np.random.default_rng(3).bytes(MiB + 1)
    _write(from_parent, data)
    child = _run_child("""
        import hashlib, sys
        import tensorflow as tf
        with tf.io.gfile.GFile(sys.argv[1], "rb") as f:
            print(hashlib.sha256(f.read()).hexdigest())
        with tf.io.gfile.GFile(sys.argv[2], "w") as f:
            f.write("written by the child")
        """, from_parent, from_child, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err[-3000:]
    assert out.split()[-1] == hashlib.sha256(data).hexdigest()
    assert gcs.read_object(from_child) == b"written by the child"
    assert _read(from_child) == b"written by the child"


def test_second_process_sees_no_stale_data(gcs):
    """A process that stat()ed an object sees it change at once: the fixture's environment
    turns TensorFlow's stat cache off (by default a stat is cached for 5 s, and a read stops at
    the cached length). The child imports TensorFlow with the variables already set."""
    name = gcs.unique_prefix("stale") + "/object.bin"
    gcs.write_object(name, b"1234")
    child = _run_child("""
        import sys
        import tensorflow as tf
        path = sys.argv[1]
        print(tf.io.gfile.stat(path).length, flush=True)
        sys.stdin.readline()
        with tf.io.gfile.GFile(path, "rb") as f:
            print(tf.io.gfile.stat(path).length, f.read().decode(), flush=True)
        """, gcs.url(name), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    try:
        assert child.stdout.readline().split() == ["4"], child.stderr.read()[-3000:]
        gcs.write_object(name, b"123456789")  # behind the child's back, straight into the bucket
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().split() == ["9", "123456789"]
        assert child.wait(timeout=60) == 0
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()


def test_nothing_lands_in_the_local_filesystem(gcs, tmp_path, monkeypatch):
    repo_cwd = os.getcwd()
    monkeypatch.chdir(tmp_path)
    prefix = gcs.unique_prefix("local")
    root = gcs.url(prefix)
    tf.io.gfile.makedirs(root + "/dir")
    _write(root + "/dir/file.txt", b"data")
    with tf.io.TFRecordWriter(root + "/dir/records.tfrecord") as writer:
        writer.write(b"record")
    assert os.listdir(tmp_path) == []
    assert not os.path.exists(os.path.join(repo_cwd, "gs:"))
    assert gcs.list_objects(prefix) == [
        prefix + "/", prefix + "/dir/", prefix + "/dir/file.txt", prefix + "/dir/records.tfrecord"]


def _proxy_says(gcs, request):
    host, port = gcs.proxy_url.rsplit("/", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        return sock.makefile("rb").readline()


@pytest.mark.parametrize("request_bytes", [
    b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
    b"CONNECT www.googleapis.com:80 HTTP/1.1\r\nHost: www.googleapis.com:80\r\n\r\n",
    b"GET http://www.googleapis.com/storage/v1/b HTTP/1.1\r\nHost: www.googleapis.com\r\n\r\n",
], ids=["other-host", "other-port", "plain-http"])
def test_proxy_tunnels_only_to_the_google_storage_hosts(gcs, request_bytes):
    assert _proxy_says(gcs, request_bytes).split()[1] == b"403"


def _tunnel(gcs, host="www.googleapis.com"):
    """An HTTPS connection through the proxy, trusting only the harness's CA (as TensorFlow)."""
    proxy = urllib.parse.urlsplit(gcs.proxy_url)
    connection = http.client.HTTPSConnection(
        proxy.hostname, proxy.port, timeout=10,
        context=ssl.create_default_context(cafile=gcs.ca_path))
    connection.set_tunnel(host, 443)
    return connection


def test_proxy_answers_expect_100_continue(gcs):
    """libcurl holds an upload body back until "100 Continue" (or ~1 s); the emulator never sends
    it, the proxy must."""
    name = gcs.unique_prefix("expect") + "/object"
    connection = _tunnel(gcs)
    connection.connect()
    head = ("POST /upload/storage/v1/b/%s/o?uploadType=media&name=%s HTTP/1.1\r\n"
            "Host: www.googleapis.com\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"
            % (gcs.bucket, urllib.parse.quote(name, safe="")))
    connection.sock.sendall(head.encode())
    reader = connection.sock.makefile("rb")
    assert reader.readline().split()[1] == b"100"  # before any byte of the body was sent
    assert reader.readline() == b"\r\n"
    connection.sock.sendall(b"hello")
    assert reader.readline().split()[1] == b"200"
    connection.close()
    assert gcs.read_object(name) == b"hello"


def test_resumable_upload_location_leads_back_through_the_proxy(gcs):
    name = gcs.unique_prefix("location") + "/object"
    connection = _tunnel(gcs)
    connection.request("POST", "/upload/storage/v1/b/%s/o?uploadType=resumable&name=%s"
                       % (gcs.bucket, urllib.parse.quote(name, safe="")), body=b"")
    response = connection.getresponse()
    response.read()
    location = urllib.parse.urlsplit(response.getheader("Location"))
    assert (location.scheme, location.netloc) == ("https", "www.googleapis.com")
    connection.request("PUT", location.path + "?" + location.query, body=b"resumed")
    response = connection.getresponse()
    response.read()
    assert response.status == 200
    connection.close()
    assert gcs.read_object(name) == b"resumed"

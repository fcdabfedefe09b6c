"""A loopback Google Cloud Storage for testing TensorFlow's own ``gs://`` filesystem offline.

TensorFlow's GCS filesystem (``tf.io.gfile``, TFRecord readers and writers, ``tf.train.Checkpoint``,
``tf.saved_model`` on ``gs://`` paths) speaks HTTPS to hard-coded endpoints and has no emulator
switch::

    https://www.googleapis.com/storage/v1/         metadata, listing, copy ("rename"), delete
    https://www.googleapis.com/upload/storage/v1/  uploads (resumable and media)
    https://storage.googleapis.com/                object reads (ranged GETs)

Its HTTP client is libcurl, which honours ``https_proxy``/``HTTPS_PROXY``, and TensorFlow hands
``CURL_CA_BUNDLE`` to libcurl as its CA file. So the harness is, all on 127.0.0.1::

    TensorFlow --CONNECT www.googleapis.com:443--> TLS-terminating proxy (threads)
        the proxy completes the TLS handshake with a certificate for the two Google host names,
        issued by a throwaway CA (``trustme``) whose PEM file is CURL_CA_BUNDLE; it then reads
        each decrypted HTTP request, repairs what the emulator gets wrong, and forwards it as
        plain HTTP to
    gcp-storage-emulator (pure Python, in-memory storage)

Both servers run in ONE HELPER PROCESS (this file run as a script), not as threads of the test
process: some TensorFlow calls keep the GIL while their HTTP requests are in flight (seen with
``tf.io.TFRecordWriter`` and ``tf.data.TFRecordDataset`` iteration), which deadlocks a Python
server living in the same process. The helper exits when the test process closes its stdin or
dies. Loopback only: both servers bind 127.0.0.1, the proxy refuses CONNECT to anything but
``www.googleapis.com:443`` / ``storage.googleapis.com:443`` and refuses plain (non-tunnelled)
proxy requests, so no request can leave the machine through it.

Emulator quirks (version pinned in requirements-dev.txt), and where each is handled:

* Chunked uploads -- PROXY. libcurl sends TensorFlow's upload bodies with
  ``Transfer-Encoding: chunked`` *and* TensorFlow's own ``Content-Length``; the emulator trusts
  Content-Length and stores the raw chunk framing (size lines included, tail cut off): a silently
  corrupt object of the right length. The proxy de-chunks every request body and forwards it with
  one exact Content-Length.
* ``Expect: 100-continue`` -- PROXY. libcurl asks for it before upload bodies and waits ~1 s for
  the interim response, which the HTTP/1.0 emulator never sends. The proxy's HTTP/1.1 request
  parser answers ``100 Continue`` itself (flushed at once), and the header is not forwarded.
* Upload URLs built from the Host header -- PROXY. The resumable-upload ``Location`` the emulator
  returns is ``http://<Host header>/upload/...``. The proxy forwards TensorFlow's own Host header
  (``www.googleapis.com``), so the URL names the right host, and rewrites ``http`` to ``https``,
  so that TensorFlow's follow-up PUT goes back through the tunnel (a plain-http URL would go to
  ``http_proxy``, which the proxy refuses, or, without that guard, to the network).
* Zero-byte media uploads -- EMULATOR, patched in the helper process. TensorFlow creates
  directory markers (``dir/`` objects) with an empty ``uploadType=media`` POST; the emulator turns
  an empty body into ``None``, crashes on ``len(None)`` and drops the connection.
  ``_patch_emulator`` makes an empty media-upload body read as ``b""``.
* No ``x-goog-generation`` header on object reads -- EMULATOR, patched in the helper process
  (``_add_generation_headers``). TensorStore (Orbax's arrays on ``gs://``) reads an object's
  generation from it. TensorStore and google-cloud-storage (which Orbax asks for the bucket's
  layout) speak to the emulator directly, plain HTTP on loopback (``env``: their own endpoint
  variables); the emulator ignores ``ifGenerationMatch`` preconditions, which only matters to
  writers racing for one object (none here).
* Object names ending in ``/`` (the markers) only work with the emulator's in-memory store (on
  disk, ``dir/`` and ``dir/file`` would need a file and a folder of the same name); in-memory
  storage also leaves nothing behind.
* Requests the emulator cannot serve (it drops the connection, or answers 501) -- PROXY. They are
  answered 400 with an explanation: TensorFlow retries 5xx answers up to 10 times with backoff
  (minutes) in a process that imported it before the retry variables were set (below).
* Speed -- the emulator writes a response's headers and body in two sends; with Nagle's algorithm
  every response then waited for a delayed ACK (~40 ms). Its sockets get TCP_NODELAY.
* Speed -- EMULATOR, patched in the helper process. After every change the emulator rewrote its
  whole metadata (every object in the bucket) as one JSON file, which only a restart reads back:
  uploads took time quadratic in the objects stored. ``_skip_metadata_snapshots`` drops that.

When TensorFlow reads the environment (measured with tensorflow 2.21):

* proxy variables and ``CURL_CA_BUNDLE``: on every request (libcurl / TensorFlow's curl wrapper);
* ``GOOGLE_AUTH_TOKEN_FOR_TESTING`` (and ``NO_GCE_CHECK``): at the first ``gs://`` request, which
  then keeps its token for the process. The emulator accepts any token, even none: the variables
  only keep TensorFlow away from credential files and the GCE metadata server;
* the ``GCS_*`` cache and retry settings: once, when the GCS filesystem object is built, which
  is during ``import tensorflow``: setting ``GCS_STAT_CACHE_MAX_AGE=0`` after the import, even
  before the first ``gs://`` access, leaves the default 5 s stat cache on.

So ``env`` works fully for processes that start with it (children of a test inherit
``os.environ``), while a test process that imported TensorFlow before the fixture ran (the usual
case under pytest) keeps the default retries and caches: the 5 s stat cache (TensorFlow's block
and glob caches are off by default). TensorFlow's own writes, renames and deletes invalidate it, so
this only matters for objects changed behind that process's back (by a child process, or by
``GcsLoopback.write_object``) within 5 s of a stat of them.

Use from a test module::

    from tests.support.gcs_loopback import gcs  # noqa: F401  (the session-scoped fixture)

    def test_something(gcs):
        path = gcs.url(gcs.unique_prefix("something"), "file.txt")  # gs://<bucket>/something-.../
        with tf.io.gfile.GFile(path, "w") as f:
            f.write("x")
        assert gcs.read_object(path) == b"x"  # straight from the emulator, not through TensorFlow
"""

from __future__ import annotations

import argparse
import functools
import http.client
import http.server
import json
import logging
import os
import select
import shutil
import socket
import socketserver
import ssl
import subprocess
import sys
import tempfile
import threading
import urllib.parse
import uuid
from dataclasses import asdict, dataclass
from typing import Iterator

import pytest

# The host names TensorFlow's GCS filesystem uses (its three endpoints share two hosts).
GOOGLE_HOSTS = frozenset({"www.googleapis.com", "storage.googleapis.com"})
_LOOPBACK = "127.0.0.1"
_REQUEST_LOG = "requests.jsonl"  # in the work folder: one ProxiedRequest per line
_SERVER_LOG = "servers.log"  # in the work folder: the helper process's stderr

# Headers that describe one hop (client <-> proxy, proxy <-> emulator) and are never forwarded;
# Content-Length is recomputed from the de-chunked body. Server and Date are set by the proxy.
_HOP_BY_HOP = frozenset({
    "connection", "proxy-connection", "keep-alive", "transfer-encoding", "te", "trailer",
    "upgrade", "expect", "content-length", "proxy-authorization", "proxy-authenticate",
})
_RESPONSE_DROPPED = _HOP_BY_HOP | {"server", "date"}


@dataclass(frozen=True)
class ProxiedRequest:
    """One request that went through the proxy (``GcsLoopback.requests``)."""
    method: str
    host: str
    path: str
    status: int
    chunked: bool  # the client sent the body with Transfer-Encoding: chunked
    body_length: int  # after de-chunking


# ============================================================================================
# Helper-process side: the emulator and the proxy
# ============================================================================================

def _patch_emulator() -> None:
    """Let the emulator store zero-byte media uploads (TensorFlow's ``dir/`` markers).

    ``gcp_storage_emulator.server._read_data`` returns ``None`` for an empty body and the media
    upload handler then takes ``len(None)``: the request dies without a response. For media
    uploads only, an empty body is returned as ``b""`` instead. Called in the helper process only.
    """
    from gcp_storage_emulator import server as emulator_server

    original = getattr(emulator_server, "_read_data", None)
    if original is None:  # a different emulator version than the one pinned in requirements-dev
        raise RuntimeError("gcp_storage_emulator.server._read_data is gone: update _patch_emulator")

    def read_data_keeping_empty_media(request_handler, query):
        data = original(request_handler, query)
        if data is None and query.get("uploadType") == ["media"]:
            return b""
        return data

    emulator_server._read_data = read_data_keeping_empty_media
    _add_generation_headers()


def _add_generation_headers() -> None:
    """Object reads answer with the object's ``x-goog-generation`` / ``x-goog-metageneration``
    headers, as GCS does. TensorStore's GCS client (Orbax's arrays) takes an object's
    generation from them and fails a read without them ("Malformed StorageGeneration"). The
    emulator's media download handler is wrapped, where its routes and ``objects.get`` find it.
    """
    from gcp_storage_emulator import server as emulator_server
    from gcp_storage_emulator.handlers import objects

    original = objects.download

    def download_with_generation(request, response, storage, *args, **kwargs):
        result = original(request, response, storage, *args, **kwargs)
        if int(response.status) in (200, 206):
            try:
                obj = storage.get_file_obj(request.params["bucket_name"],
                                           request.params["object_id"])
            except Exception:  # noqa: BLE001 - answered already; no headers to add
                return result
            response["x-goog-generation"] = str(obj["generation"])
            response["x-goog-metageneration"] = str(obj["metageneration"])
        return result

    objects.download = download_with_generation
    for _, handlers in emulator_server.HANDLERS:
        for method, handler in list(handlers.items()):
            if handler is original:
                handlers[method] = download_with_generation


def _skip_metadata_snapshots(storage) -> None:
    """Speed -- EMULATOR, patched in the helper process. After every change (each upload, delete,
    copy) ``Storage`` writes ALL its metadata, every object of the bucket, as one indented JSON
    file ``.meta``, which it reads back only when a ``Storage`` is built: a cost per upload that
    grows with the objects stored, so the session's uploads took quadratic time (2,000 small
    uploads: ~45 s). With the in-memory store that file is never read again (this ``Storage``
    already exists, and the helper makes no other), so the snapshot is skipped; the objects and
    their metadata are the same dicts in memory as before."""
    if not hasattr(storage, "_write_config_to_file"):  # another emulator version than pinned
        raise RuntimeError("Storage._write_config_to_file is gone: update "
                           "_skip_metadata_snapshots")
    storage._write_config_to_file = lambda: None


class _EmulatorServer(http.server.HTTPServer):
    """The emulator's request handler on a single-threaded server (its storage is not
    thread-safe, so requests are served one at a time, as the emulator's own server does). A deep
    listen queue keeps concurrent proxy connections from being refused."""
    request_queue_size = 128

    def server_bind(self) -> None:
        # HTTPServer.server_bind would also look the address up with socket.getfqdn(): not needed.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


class _ProxyServer(socketserver.ThreadingTCPServer):
    daemon_threads = True  # a stuck connection never blocks the helper's exit
    request_queue_size = 128

    def __init__(self, tls_context: ssl.SSLContext, emulator_port: int, log_path: str) -> None:
        super().__init__((_LOOPBACK, 0), _TunnelHandler)
        self.tls_context = tls_context
        self.emulator_port = emulator_port
        self._log = open(log_path, "a", encoding="utf-8")
        self._log_lock = threading.Lock()
        self._live: set[socket.socket] = set()
        self._live_lock = threading.Lock()

    def record(self, request: ProxiedRequest) -> None:
        with self._log_lock:
            self._log.write(json.dumps(asdict(request)) + "\n")
            self._log.flush()

    def track(self, old: socket.socket | None, new: socket.socket | None) -> None:
        with self._live_lock:
            self._live.discard(old)
            if new is not None:
                self._live.add(new)

    def close_live_connections(self) -> None:
        """Wake the handler threads blocked on idle connections so that they end now."""
        with self._live_lock:
            live, self._live = list(self._live), set()
        for sock in live:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def server_close(self) -> None:
        super().server_close()
        with self._log_lock:
            self._log.close()


class _TunnelHandler(http.server.BaseHTTPRequestHandler):
    """Serves one client connection: a CONNECT, then HTTP/1.1 requests inside the TLS tunnel.

    Speaking HTTP/1.1 makes the base class answer ``Expect: 100-continue`` before the body is
    read, and allows keep-alive inside the tunnel.
    """
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small interim writes (200 to CONNECT, 100 Continue) go at once
    timeout = 120  # an idle connection is closed after this; libcurl reconnects if it needs to
    server: _ProxyServer

    def setup(self) -> None:
        super().setup()
        self.tunnel_host: str | None = None
        self.server.track(None, self.connection)

    def handle(self) -> None:
        try:
            super().handle()
        except OSError:  # ssl.SSLError included: the client went away mid-request
            pass

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        self.server.track(self.connection, None)
        if self.tunnel_host is not None:
            self.connection.close()  # the TLS socket; socketserver closes only the original one

    def log_message(self, format: str, *args: object) -> None:
        pass  # forwarded requests are recorded in the request log instead

    def handle_expect_100(self) -> bool:
        # The base class writes "100 Continue" into wfile, which is buffered inside the tunnel:
        # flush it, or libcurl waits ~1 s before sending the body.
        answered = super().handle_expect_100()
        self.wfile.flush()
        return answered

    # -- the tunnel ----------------------------------------------------------------------------

    def do_CONNECT(self) -> None:
        host, _, port = self.path.rpartition(":")
        if self.tunnel_host is not None or host.lower() not in GOOGLE_HOSTS or port != "443":
            # Loopback only: nothing but the Google storage hosts is tunnelled, and those end here.
            self.send_error(403, "loopback GCS proxy tunnels only %s on port 443"
                            % ", ".join(sorted(GOOGLE_HOSTS)))
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self.wfile.flush()
        self.rfile.close()
        self.wfile.close()
        try:
            tls = self.server.tls_context.wrap_socket(self.connection, server_side=True)
        except OSError:  # handshake failed (e.g. the client does not trust the test CA)
            self.close_connection = True
            return
        self.server.track(self.connection, tls)
        self.connection = tls
        self.rfile = tls.makefile("rb")
        self.wfile = tls.makefile("wb")
        self.tunnel_host = host.lower()
        self.close_connection = False  # go on reading requests, now from the TLS stream

    # -- requests inside the tunnel ------------------------------------------------------------

    def _forward(self) -> None:
        if self.tunnel_host is None:
            # A plain-HTTP proxy request ("GET http://host/..."): never fetched from anywhere.
            self.send_error(403, "loopback GCS proxy: plain HTTP is not proxied")
            return
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        body = self._read_chunked_body() if chunked else self.rfile.read(
            int(self.headers.get("Content-Length") or 0))

        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP]
        if body or self.command in ("POST", "PUT", "PATCH"):
            # The emulator reads exactly Content-Length bytes: give it the de-chunked length.
            headers.append(("Content-Length", str(len(body))))
        headers.append(("Connection", "close"))
        status, reason, response_headers, data = self._ask_emulator(headers, body)

        # Recorded before the answer goes out, so a test that got its answer finds it logged.
        self.server.record(ProxiedRequest(
            self.command, self.tunnel_host, self.path, status, chunked, len(body)))
        self.send_response(status, reason)
        for name, value in response_headers:
            if name.lower() in _RESPONSE_DROPPED:
                continue
            if name.lower() == "location":
                value = self._back_through_proxy(value)
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

    def _read_chunked_body(self) -> bytes:
        """Decode a ``Transfer-Encoding: chunked`` body (RFC 9112, section 7.1)."""
        parts = []
        while True:
            size_line = self.rfile.readline(65537)
            if not size_line:
                raise ConnectionError("client closed the connection inside a chunked body")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                    pass  # trailer fields: none that matter here
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline(3)  # the CRLF after the chunk data

    def _ask_emulator(
        self, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(_LOOPBACK, self.server.emulator_port, timeout=120)
        try:
            connection.putrequest(self.command, self.path, skip_host=True,
                                  skip_accept_encoding=True)
            for name, value in headers:  # Host is among them: the emulator builds URLs from it
                connection.putheader(name, value)
            connection.endheaders(body or None)
            response = connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as error:
            # The emulator crashed on this request: it drops the connection without an answer.
            return self._harness_failure("the emulator failed on this request: %r" % (error,))
        finally:
            connection.close()
        if response.status == 501:
            return self._harness_failure("the emulator does not implement this request")
        return response.status, response.reason, response.getheaders(), data

    def _harness_failure(self, why: str) -> tuple[int, str, list[tuple[str, str]], bytes]:
        """Answer 400, which TensorFlow does not retry: it retries 5xx up to 10 times with
        exponential backoff (minutes), and the GCS_RETRY_CONFIG_* variables only apply to a
        process that imports TensorFlow after they are set. A harness gap should fail fast."""
        message = "loopback GCS harness: %s: %s %s (see GcsLoopback.server_log())" % (
            why, self.command, self.path)
        return 400, "Bad Request", [("Content-Type", "text/plain")], message.encode()

    def _back_through_proxy(self, url: str) -> str:
        """``http://<host>/upload/...?upload_id=...`` from the emulator -> ``https://...``, so that
        TensorFlow's follow-up request comes back through this proxy's tunnel."""
        parts = urllib.parse.urlsplit(url)
        emulator = "%s:%d" % (_LOOPBACK, self.server.emulator_port)
        if parts.scheme == "http" and (parts.hostname in GOOGLE_HOSTS or parts.netloc == emulator):
            netloc = parts.netloc if parts.hostname in GOOGLE_HOSTS else self.tunnel_host
            return urllib.parse.urlunsplit(("https", netloc) + tuple(parts[2:]))
        return url


def _serve(bucket: str, workdir: str) -> None:
    """The helper process: start the emulator and the proxy, print their addresses as one JSON
    line, serve until stdin reaches end of file (the test process closed it, or died)."""
    import trustme
    from gcp_storage_emulator.handlers import buckets
    from gcp_storage_emulator.server import RequestHandler
    from gcp_storage_emulator.storage import Storage

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    _patch_emulator()

    # The throwaway CA: only processes given CURL_CA_BUNDLE=<this file> trust it.
    ca = trustme.CA()
    ca_path = os.path.join(workdir, "loopback-ca.pem")
    ca.cert_pem.write_to_path(ca_path)
    tls_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert(*sorted(GOOGLE_HOSTS)).configure_cert(tls_context)
    tls_context.set_alpn_protocols(["http/1.1"])  # the proxy speaks HTTP/1.1 only, never h2

    # data_dir only has to be an absolute path; the in-memory store writes nothing there.
    storage = Storage(use_memory_fs=True, data_dir=workdir)
    _skip_metadata_snapshots(storage)
    buckets.create_bucket(bucket, storage)

    class EmulatorHandler(RequestHandler):
        # The emulator writes a response's headers and body in two sends: with Nagle's algorithm
        # on, the body waits for the proxy's delayed ACK (~40 ms on Linux) on every request.
        disable_nagle_algorithm = True

    emulator = _EmulatorServer((_LOOPBACK, 0), functools.partial(EmulatorHandler, storage))
    proxy = _ProxyServer(tls_context, emulator.server_address[1],
                         os.path.join(workdir, _REQUEST_LOG))
    threads = [threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                name=name, daemon=True)
               for name, server in (("gcs-emulator", emulator), ("gcs-proxy", proxy))]
    for thread in threads:
        thread.start()
    print(json.dumps({"emulator_port": emulator.server_address[1],
                      "proxy_port": proxy.server_address[1], "ca_path": ca_path}), flush=True)
    try:
        sys.stdin.read()
    except KeyboardInterrupt:
        pass
    for server in (proxy, emulator):
        server.shutdown()
        server.server_close()
    proxy.close_live_connections()
    for thread in threads:
        thread.join(timeout=5)
    # Also when the test process died without cleaning up: nothing stays behind in the temp dir.
    shutil.rmtree(workdir, ignore_errors=True)


# ============================================================================================
# Test-process side
# ============================================================================================

class GcsLoopback:
    """A GCS emulator behind a TLS-terminating loopback proxy (in a helper process), one bucket.

    ``start()`` (or ``with GcsLoopback() as gcs:``) starts the helper; ``env`` is what a process
    needs in its environment for TensorFlow's ``gs://`` filesystem to land there (see the module
    docstring for when TensorFlow reads it); ``list_objects``/``read_object``/``write_object``
    talk to the emulator directly (plain HTTP on 127.0.0.1, neither through TensorFlow nor through
    the proxy) to check what really is in the bucket.
    """

    def __init__(self, bucket: str = "loopback-test-bucket", start_timeout: float = 60.0) -> None:
        self.bucket = bucket
        self._start_timeout = start_timeout
        self._workdir: str | None = None
        self._process: subprocess.Popen[str] | None = None
        self._info: dict[str, object] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> GcsLoopback:
        self._workdir = tempfile.mkdtemp(prefix="gcs-loopback-")
        # The helper needs no proxy: drop any, so that nothing can route its loopback traffic.
        child_env = {name: value for name, value in os.environ.items()
                     if name.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
        with open(os.path.join(self._workdir, _SERVER_LOG), "w") as server_log:
            self._process = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--bucket", self.bucket,
                 "--workdir", self._workdir],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=server_log,
                cwd=self._workdir, env=child_env, text=True)
        assert self._process.stdout is not None
        ready, _, _ = select.select([self._process.stdout], [], [], self._start_timeout)
        line = self._process.stdout.readline() if ready else ""
        if not line:
            log = self.server_log()
            self.stop()
            raise RuntimeError("the loopback GCS helper did not start:\n" + log)
        self._info = json.loads(line)
        return self

    def stop(self) -> None:
        """End the helper process (it shuts both servers down) and delete the work folder."""
        if self._process is not None:
            try:
                if self._process.stdin is not None:
                    self._process.stdin.close()  # end of file: the helper's signal to stop
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            if self._process.stdout is not None:
                self._process.stdout.close()
            self._process = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self) -> GcsLoopback:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _require(self, key: str) -> object:
        if key not in self._info or self._process is None:
            raise RuntimeError("GcsLoopback is not running")
        return self._info[key]

    # -- what a process needs ----------------------------------------------------------------

    @property
    def emulator_address(self) -> tuple[str, int]:
        return _LOOPBACK, int(self._require("emulator_port"))  # type: ignore[arg-type]

    @property
    def emulator_url(self) -> str:
        return "http://%s:%d" % self.emulator_address

    @property
    def proxy_url(self) -> str:
        return "http://%s:%d" % (_LOOPBACK, int(self._require("proxy_port")))  # type: ignore

    @property
    def ca_path(self) -> str:
        return str(self._require("ca_path"))

    @property
    def env(self) -> dict[str, str]:
        """Environment variables that point TensorFlow's ``gs://`` filesystem at this harness.

        Fully effective in a process that starts with them (see the module docstring).
        """
        no_proxy = "localhost,127.0.0.1,::1"
        return {
            # libcurl reads the lower-case name first: both spellings, so that a proxy already
            # set in the environment under either one cannot win.
            "https_proxy": self.proxy_url,
            "HTTPS_PROXY": self.proxy_url,
            # A guard: a plain-http request from libcurl goes to the proxy, which refuses it,
            # instead of to the network. (libcurl ignores upper-case HTTP_PROXY.)
            "http_proxy": self.proxy_url,
            "no_proxy": no_proxy,
            "NO_PROXY": no_proxy,
            "CURL_CA_BUNDLE": self.ca_path,
            # TensorFlow's auth provider returns this token before it looks at any credentials
            # file or at the GCE metadata server; NO_GCE_CHECK keeps the metadata server out
            # should it get that far. The emulator accepts any token.
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "loopback-test-token",
            "NO_GCE_CHECK": "true",
            # No caching of stat results, file blocks or glob results: what another process (or
            # write_object) put in the bucket is seen at once.
            "GCS_STAT_CACHE_MAX_AGE": "0",
            "GCS_READ_CACHE_MAX_SIZE_MB": "0",
            "GCS_MATCHING_PATHS_CACHE_MAX_AGE": "0",
            # Few, short retries of 5xx answers and dropped connections (the default is 10 with
            # exponential backoff): there is no flaky network to ride out here.
            "GCS_RETRY_CONFIG_MAX_RETRIES": "2",
            "GCS_RETRY_CONFIG_INIT_DELAY_TIME_US": "50000",
            # Orbax (JAX's checkpoints) on gs://: its arrays go through TensorStore's own GCS
            # client, and it asks the bucket's layout with google-cloud-storage's; both take
            # an emulator's address as these variables say, plain HTTP on loopback (no_proxy).
            # Orbax's files and folders go through tf.io.gfile (etils.epath): the proxy.
            "TENSORSTORE_GCS_HTTP_URL": self.emulator_url,
            "STORAGE_EMULATOR_HOST": self.emulator_url,
        }

    @property
    def bucket_url(self) -> str:
        return "gs://" + self.bucket

    def url(self, *parts: str) -> str:
        """``gs://<bucket>/<parts joined by '/'>``."""
        return "/".join((self.bucket_url,) + tuple(part.strip("/") for part in parts))

    @staticmethod
    def unique_prefix(label: str) -> str:
        """A fresh object-name prefix, so that tests sharing the bucket never collide."""
        return "%s-%s" % (label, uuid.uuid4().hex[:12])

    @property
    def requests(self) -> list[ProxiedRequest]:
        """The requests the proxy forwarded so far, oldest first."""
        self._require("proxy_port")
        assert self._workdir is not None
        try:
            with open(os.path.join(self._workdir, _REQUEST_LOG), encoding="utf-8") as log:
                lines = log.read().splitlines()
        except FileNotFoundError:
            return []
        return [ProxiedRequest(**json.loads(line)) for line in lines if line]

    def server_log(self) -> str:
        """What the helper process wrote to stderr (emulator errors and tracebacks)."""
        if self._workdir is None:
            return ""
        try:
            with open(os.path.join(self._workdir, _SERVER_LOG), encoding="utf-8") as log:
                return log.read()
        except FileNotFoundError:
            return ""

    # -- straight to the emulator (neither through TensorFlow nor through the proxy) ----------

    def _object_name(self, name: str) -> str:
        """An object name, from a name or a ``gs://<bucket>/<name>`` URL."""
        prefix = self.bucket_url + "/"
        return name[len(prefix):] if name.startswith(prefix) else name

    def _emulator_request(self, method: str, path: str, body: bytes | None = None,
                          headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        # http.client reads no proxy variables: this goes to the emulator's port, nowhere else.
        connection = http.client.HTTPConnection(*self.emulator_address, timeout=60)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def list_objects(self, prefix: str = "") -> list[str]:
        """Names of the objects under ``prefix`` (a name prefix or a gs:// URL), sorted."""
        query = urllib.parse.urlencode({"prefix": self._object_name(prefix)})
        status, data = self._emulator_request(
            "GET", "/storage/v1/b/%s/o?%s" % (self.bucket, query))
        if status != 200:
            raise RuntimeError("emulator listing failed: %d %r" % (status, data[:200]))
        return sorted(item["name"] for item in json.loads(data).get("items") or [])

    def read_object(self, name: str) -> bytes:
        """The stored bytes of one object (a name or a gs:// URL); FileNotFoundError if absent."""
        quoted = urllib.parse.quote(self._object_name(name), safe="")
        status, data = self._emulator_request(
            "GET", "/download/storage/v1/b/%s/o/%s?alt=media" % (self.bucket, quoted))
        if status == 404:
            raise FileNotFoundError(name)
        if status != 200:
            raise RuntimeError("emulator read failed: %d %r" % (status, data[:200]))
        return data

    def write_object(self, name: str, data: bytes) -> None:
        """Store one object directly in the emulator (a media upload with a plain body)."""
        query = urllib.parse.urlencode({"uploadType": "media", "name": self._object_name(name)})
        status, reply = self._emulator_request(
            "POST", "/upload/storage/v1/b/%s/o?%s" % (self.bucket, query), body=data,
            headers={"Content-Type": "application/octet-stream"})
        if status != 200:
            raise RuntimeError("emulator write failed: %d %r" % (status, reply[:200]))


# One harness per test session, however many test modules import the fixture: pytest makes a
# separate session fixture of each module's import, so they share this one instance.
_shared: GcsLoopback | None = None
_shared_users = 0
_saved_environ: dict[str, str | None] = {}


@pytest.fixture(scope="session")
def gcs() -> Iterator[GcsLoopback]:
    """A running ``GcsLoopback`` whose ``env`` is set in ``os.environ`` for the rest of the
    session (the previous values come back at its end).

    The proxy and CA variables take effect in this process at once (the token ones if no
    ``gs://`` path was touched before); the ``GCS_*`` cache and retry settings only in processes
    that import TensorFlow afterwards, such as the children of a test, which inherit
    ``os.environ`` (see the module docstring).
    """
    global _shared, _shared_users
    if _shared is None:
        _shared = GcsLoopback().start()
        _saved_environ.update({name: os.environ.get(name) for name in _shared.env})
        os.environ.update(_shared.env)
    _shared_users += 1
    try:
        yield _shared
    finally:
        _shared_users -= 1
        if _shared_users == 0:
            for name, value in _saved_environ.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            _saved_environ.clear()
            _shared.stop()
            _shared = None


if __name__ == "__main__":
    _arguments = argparse.ArgumentParser(description="Serve the loopback GCS (helper process).")
    _arguments.add_argument("--bucket", required=True)
    _arguments.add_argument("--workdir", required=True)
    _options = _arguments.parse_args()
    _serve(_options.bucket, _options.workdir)

"""A loopback Google Cloud Storage for testing TensorFlow's own ``gs://`` filesystem offline.

TensorFlow's GCS filesystem (``tf.io.gfile``, TFRecord readers and writers, ``tf.train.Checkpoint``,
``tf.saved_model`` on ``gs://`` paths) speaks HTTPS to hard-coded endpoints and has no emulator
switch::

    https://www.googleapis.com/storage/v1/         metadata, listing, copy ("rename"), delete
    https://www.googleapis.com/upload/storage/v1/  uploads (resumable and media)
    https://storage.googleapis.com/                object reads (ranged GETs)

Its HTTP client is libcurl, which honours ``https_proxy``/``HTTPS_PROXY``, and TensorFlow hands
``CURL_CA_BUNDLE`` to libcurl as the CA file. So the harness is, all on 127.0.0.1::

    TensorFlow --CONNECT www.googleapis.com:443--> TLS-terminating proxy (threads, this module)
        the proxy answers the TLS handshake with a certificate for the two Google host names,
        issued by a throwaway CA (``trustme``) whose PEM file is CURL_CA_BUNDLE; it then reads
        each decrypted HTTP request, repairs what the emulator gets wrong, and forwards it as
        plain HTTP to
    gcp-storage-emulator (pure Python, in-memory storage, served by a thread of this process)

Loopback only: both servers bind 127.0.0.1, the proxy refuses CONNECT to anything but
``www.googleapis.com:443`` / ``storage.googleapis.com:443`` and refuses plain (non-tunnelled)
proxy requests, so no request can leave the machine through it.

Emulator quirks handled (pinned emulator version in requirements-dev.txt), and where:

* Chunked uploads (PROXY). libcurl sends TensorFlow's uploads with ``Transfer-Encoding: chunked``
  *and* TensorFlow's own ``Content-Length`` header; the emulator trusts Content-Length and stores
  the raw chunk framing (size lines included, tail cut off): a silently corrupt object of the
  right length. The proxy de-chunks every request body and forwards it with one exact
  Content-Length.
* ``Expect: 100-continue`` (PROXY). libcurl asks for it on large bodies and waits ~1 s for the
  interim response, which the HTTP/1.0 emulator never sends. The proxy's HTTP/1.1 request parser
  answers ``100 Continue`` itself, and the header is not forwarded.
* Upload URLs built from the Host header (PROXY). The emulator's resumable-upload ``Location`` is
  ``http://<Host header>/upload/...``. The proxy forwards TensorFlow's own Host header
  (``www.googleapis.com``), so the URL points at the right host, and rewrites the scheme to
  ``https`` so that TensorFlow's next PUT goes back through this proxy (over plain http, libcurl
  would use ``http_proxy`` instead, and without the guard below, connect directly).
* Zero-byte media uploads (EMULATOR, patched in-process). TensorFlow creates a directory marker
  (``dir/``) with an empty ``uploadType=media`` POST; the emulator turns an empty body into
  ``None`` and crashes on ``len(None)``, dropping the connection. ``_patch_emulator`` makes an empty
  media-upload body read as ``b""``.
* Object names ending in ``/`` (directory markers) only work with the emulator's in-memory
  store (on disk, ``dir/`` and ``dir/file`` would need a file and a folder of the same name), so the
  storage is in memory, which also leaves nothing on disk.

Environment (``GcsLoopback.env``): TensorFlow's libcurl reads the proxy variables and
``CURL_CA_BUNDLE`` on every request, and the auth provider reads ``GOOGLE_AUTH_TOKEN_FOR_TESTING``
when it first needs a token, but the cache and retry settings (``GCS_STAT_CACHE_MAX_AGE`` ...) are
read once, when TensorFlow constructs its GCS filesystem object. That happens on the first
``gs://`` access in the process (not at ``import tensorflow``), so the variables must be in
``os.environ`` before any ``gs://`` path is touched; setting them after ``import tensorflow`` is
fine. Child processes inherit ``os.environ`` and construct their own filesystem object, so they
start with empty caches; with the caches off (``GCS_STAT_CACHE_MAX_AGE=0`` ...), the parent also
sees what a child wrote at once. (See ``tests/bert_common/test_gcs_loopback.py``.)

Use from a test module::

    from tests.support.gcs_loopback import gcs  # noqa: F401  (the session-scoped fixture)

    def test_something(gcs):
        path = gcs.url(gcs.unique_prefix("something"), "file.txt")   # gs://<bucket>/something-.../file.txt
        tf.io.gfile.GFile(path, "w").write("x")
        assert gcs.read_object(path) == b"x"      # straight from the emulator, not through TF
"""

from __future__ import annotations

import collections
import functools
import http.client
import http.server
import json
import os
import shutil
import socket
import socketserver
import ssl
import tempfile
import threading
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Iterator

import pytest

# The host names TensorFlow's GCS filesystem uses (the three endpoints share two hosts).
GOOGLE_HOSTS = frozenset({"www.googleapis.com", "storage.googleapis.com"})
_LOOPBACK = "127.0.0.1"

# Headers that describe one hop (client <-> proxy, proxy <-> emulator) and are never forwarded;
# Content-Length is recomputed from the de-chunked body. Server and Date are set by the proxy.
_HOP_BY_HOP = frozenset({
    "connection", "proxy-connection", "keep-alive", "transfer-encoding", "te", "trailer",
    "upgrade", "expect", "content-length", "proxy-authorization", "proxy-authenticate",
})
_RESPONSE_DROPPED = _HOP_BY_HOP | {"server", "date"}


@dataclass(frozen=True)
class ProxiedRequest:
    """One request that went through the proxy (for tests and debugging)."""
    method: str
    host: str
    path: str
    status: int
    chunked: bool  # the client sent the body with Transfer-Encoding: chunked
    body_length: int  # after de-chunking


# --------------------------------------------------------------------------------------------
# The emulator, in-process
# --------------------------------------------------------------------------------------------

_patch_lock = threading.Lock()
_patched = False


def _patch_emulator() -> None:
    """Let the emulator store zero-byte media uploads (TensorFlow's ``dir/`` markers).

    ``gcp_storage_emulator.server._read_data`` returns ``None`` for an empty body, and the media
    upload handler then computes ``len(None)``: the request dies without a response. For media
    uploads only, an empty body is returned as ``b""`` instead. Idempotent, process-wide; the
    emulator is only used by tests.
    """
    global _patched
    with _patch_lock:
        if _patched:
            return
        from gcp_storage_emulator import server as emulator_server

        original = emulator_server._read_data

        def read_data_keeping_empty_media(request_handler, query):
            data = original(request_handler, query)
            if data is None and query.get("uploadType") == ["media"]:
                return b""
            return data

        emulator_server._read_data = read_data_keeping_empty_media
        _patched = True


class _EmulatorServer(http.server.HTTPServer):
    """The emulator's request handler on a single-threaded server: its storage is not
    thread-safe, so requests are served one at a time. A deep listen queue keeps concurrent
    proxy connections from being dropped (and retried by the kernel a second later)."""
    request_queue_size = 128

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the bind address with socket.getfqdn(): not needed.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


# --------------------------------------------------------------------------------------------
# The TLS-terminating CONNECT proxy
# --------------------------------------------------------------------------------------------

class _ProxyServer(socketserver.ThreadingTCPServer):
    daemon_threads = True  # a stuck client never blocks interpreter exit
    request_queue_size = 128

    def __init__(self, tls_context: ssl.SSLContext, emulator_port: int) -> None:
        super().__init__((_LOOPBACK, 0), _TunnelHandler)
        self.tls_context = tls_context
        self.emulator_port = emulator_port
        self.log: collections.deque[ProxiedRequest] = collections.deque(maxlen=10_000)
        self._live: set[socket.socket] = set()
        self._live_lock = threading.Lock()

    def track(self, old: socket.socket | None, new: socket.socket | None) -> None:
        with self._live_lock:
            self._live.discard(old)
            if new is not None:
                self._live.add(new)

    def close_live_connections(self) -> None:
        """Wake the handler threads blocked on idle keep-alive connections so they end now."""
        with self._live_lock:
            live, self._live = list(self._live), set()
        for sock in live:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _TunnelHandler(http.server.BaseHTTPRequestHandler):
    """Serves one client connection: a CONNECT, then HTTP/1.1 requests inside the TLS tunnel.

    HTTP/1.1 gives keep-alive inside the tunnel (libcurl reuses connections), and makes the base
    class answer ``Expect: 100-continue`` with ``100 Continue`` before the body is read.
    """
    protocol_version = "HTTP/1.1"
    timeout = 120  # an idle pooled connection is closed after this; libcurl reconnects
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
            self.connection.close()  # the TLS socket; socketserver closes only the original

    def log_message(self, format: str, *args: object) -> None:
        pass  # requests are recorded in server.log instead of printed

    def handle_expect_100(self) -> bool:
        # The base class answers "100 Continue" but leaves it in wfile's buffer; inside the
        # tunnel wfile is buffered, so flush, or libcurl waits ~1 s before sending the body.
        answered = super().handle_expect_100()
        self.wfile.flush()
        return answered

    # -- the tunnel --------------------------------------------------------------------------

    def do_CONNECT(self) -> None:
        host, _, port = self.path.rpartition(":")
        if self.tunnel_host is not None or host.lower() not in GOOGLE_HOSTS or port != "443":
            # Loopback only: nothing but the Google storage hosts is tunnelled (and those end here).
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
        except OSError:  # handshake failed (e.g. the client did not trust the test CA)
            self.close_connection = True
            return
        self.server.track(self.connection, tls)
        self.connection = tls
        self.rfile = tls.makefile("rb")
        self.wfile = tls.makefile("wb")
        self.tunnel_host = host.lower()
        self.close_connection = False  # go on reading requests, now from the TLS stream

    # -- requests inside the tunnel ----------------------------------------------------------

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
        self.server.log.append(ProxiedRequest(
            self.command, self.tunnel_host, self.path, status, chunked, len(body)))

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

    def _read_chunked_body(self) -> bytes:
        """Decode a ``Transfer-Encoding: chunked`` body (RFC 9112 section 7.1)."""
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
            return response.status, response.reason, response.getheaders(), response.read()
        except (OSError, http.client.HTTPException) as error:
            # The emulator crashed on this request (it drops the connection): say so to the client.
            message = ("loopback GCS proxy: emulator failed: %r" % (error,)).encode()
            return 502, "Bad Gateway", [("Content-Type", "text/plain")], message
        finally:
            connection.close()

    def _back_through_proxy(self, url: str) -> str:
        """``http://<host>/upload/...?upload_id=...`` from the emulator -> ``https://`` so that
        TensorFlow's follow-up request goes through this proxy's tunnel again."""
        parts = urllib.parse.urlsplit(url)
        emulator = "%s:%d" % (_LOOPBACK, self.server.emulator_port)
        if parts.scheme == "http" and (parts.hostname in GOOGLE_HOSTS or parts.netloc == emulator):
            netloc = parts.netloc if parts.hostname in GOOGLE_HOSTS else self.tunnel_host
            return urllib.parse.urlunsplit(("https", netloc) + tuple(parts[2:]))
        return url


# --------------------------------------------------------------------------------------------
# The harness
# --------------------------------------------------------------------------------------------

class GcsLoopback:
    """An in-memory GCS emulator behind a TLS-terminating loopback proxy, with one bucket.

    ``start()`` (or ``with GcsLoopback() as gcs:``) starts both servers; ``env`` is what a process
    needs in its environment for TensorFlow's ``gs://`` filesystem to land here;
    ``list_objects``/``read_object``/``write_object`` talk to the emulator directly (plain HTTP on
    127.0.0.1, not through TensorFlow or the proxy) to check what really is in the bucket.
    """

    def __init__(self, bucket: str = "loopback-test-bucket") -> None:
        self.bucket = bucket
        self._workdir: str | None = None
        self._emulator: _EmulatorServer | None = None
        self._proxy: _ProxyServer | None = None
        self._threads: list[threading.Thread] = []

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> GcsLoopback:
        import trustme
        from gcp_storage_emulator.handlers import buckets
        from gcp_storage_emulator.server import RequestHandler
        from gcp_storage_emulator.storage import Storage

        _patch_emulator()
        self._workdir = tempfile.mkdtemp(prefix="gcs-loopback-")
        # The throwaway CA: only processes given CURL_CA_BUNDLE=<this file> trust it.
        ca = trustme.CA()
        self.ca_path = os.path.join(self._workdir, "loopback-ca.pem")
        ca.cert_pem.write_to_path(self.ca_path)
        tls_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ca.issue_cert(*sorted(GOOGLE_HOSTS)).configure_cert(tls_context)
        tls_context.set_alpn_protocols(["http/1.1"])  # the proxy speaks HTTP/1.1 only, not h2

        # data_dir only has to be absolute; the in-memory store writes nothing there.
        storage = Storage(use_memory_fs=True, data_dir=self._workdir)
        buckets.create_bucket(self.bucket, storage)
        self._emulator = _EmulatorServer(
            (_LOOPBACK, 0), functools.partial(RequestHandler, storage))
        self._proxy = _ProxyServer(tls_context, self._emulator.server_address[1])
        for name, server in (("gcs-emulator", self._emulator), ("gcs-proxy", self._proxy)):
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                      name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stop both servers, end the proxy's connection threads, delete the CA file."""
        for server in (self._proxy, self._emulator):
            if server is not None:
                server.shutdown()
                server.server_close()
        if self._proxy is not None:
            self._proxy.close_live_connections()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []
        self._proxy = self._emulator = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self) -> GcsLoopback:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- what a process needs ----------------------------------------------------------------

    @property
    def emulator_address(self) -> tuple[str, int]:
        assert self._emulator is not None, "GcsLoopback not started"
        return _LOOPBACK, self._emulator.server_address[1]

    @property
    def proxy_url(self) -> str:
        assert self._proxy is not None, "GcsLoopback not started"
        return "http://%s:%d" % (_LOOPBACK, self._proxy.server_address[1])

    @property
    def env(self) -> dict[str, str]:
        """Environment variables that point TensorFlow's ``gs://`` filesystem at this harness.

        Set them before the process first touches a ``gs://`` path (see the module docstring).
        """
        no_proxy = "localhost,127.0.0.1,::1"
        return {
            # libcurl reads the lower-case names first; both spellings, so a proxy already set
            # in the environment under either one cannot win.
            "https_proxy": self.proxy_url,
            "HTTPS_PROXY": self.proxy_url,
            # A guard: any plain-http request libcurl makes goes to the proxy, which refuses it,
            # instead of leaving the machine. (libcurl ignores upper-case HTTP_PROXY.)
            "http_proxy": self.proxy_url,
            "no_proxy": no_proxy,
            "NO_PROXY": no_proxy,
            "CURL_CA_BUNDLE": self.ca_path,
            # TensorFlow's auth provider returns this token before looking at any credentials
            # file or the GCE metadata server; NO_GCE_CHECK keeps the metadata server out anyway.
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "loopback-test-token",
            "NO_GCE_CHECK": "true",
            # No caching of stat results, file blocks or glob results: what another process wrote
            # (or write_object put in the bucket) is seen at once.
            "GCS_STAT_CACHE_MAX_AGE": "0",
            "GCS_READ_CACHE_MAX_SIZE_MB": "0",
            "GCS_MATCHING_PATHS_CACHE_MAX_AGE": "0",
            # A broken harness fails in seconds, not after TensorFlow's 10 retries with backoff.
            "GCS_RETRY_CONFIG_MAX_RETRIES": "2",
            "GCS_RETRY_CONFIG_INIT_DELAY_TIME_US": "50000",
        }

    @property
    def bucket_url(self) -> str:
        return "gs://" + self.bucket

    def url(self, *parts: str) -> str:
        """``gs://<bucket>/<parts joined by />``."""
        return "/".join((self.bucket_url,) + tuple(p.strip("/") for p in parts))

    @staticmethod
    def unique_prefix(label: str) -> str:
        """A fresh object-name prefix, so that tests sharing the bucket never collide."""
        return "%s-%s" % (label, uuid.uuid4().hex[:12])

    @property
    def requests(self) -> list[ProxiedRequest]:
        """The requests the proxy forwarded so far, oldest first."""
        assert self._proxy is not None, "GcsLoopback not started"
        return list(self._proxy.log)

    # -- straight to the emulator (not through TensorFlow, not through the proxy) ------------

    def _object_name(self, name: str) -> str:
        """Accepts an object name or a ``gs://<bucket>/<name>`` URL."""
        prefix = self.bucket_url + "/"
        return name[len(prefix):] if name.startswith(prefix) else name

    def _emulator_request(self, method: str, path: str, body: bytes | None = None,
                          headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection(*self.emulator_address, timeout=60)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def list_objects(self, prefix: str = "") -> list[str]:
        """Names of the objects in the bucket under ``prefix`` (a name or a gs:// URL), sorted."""
        query = urllib.parse.urlencode({"prefix": self._object_name(prefix)})
        status, data = self._emulator_request(
            "GET", "/storage/v1/b/%s/o?%s" % (self.bucket, query))
        if status != 200:
            raise RuntimeError("emulator list failed: %d %r" % (status, data[:200]))
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
        """Store one object directly in the emulator (a simple media upload)."""
        query = urllib.parse.urlencode({"uploadType": "media", "name": self._object_name(name)})
        status, reply = self._emulator_request(
            "POST", "/upload/storage/v1/b/%s/o?%s" % (self.bucket, query), body=data,
            headers={"Content-Type": "application/octet-stream"})
        if status != 200:
            raise RuntimeError("emulator write failed: %d %r" % (status, reply[:200]))


@pytest.fixture(scope="session")
def gcs() -> Iterator[GcsLoopback]:
    """A started ``GcsLoopback`` whose ``env`` is set in ``os.environ`` for the rest of the
    session (and restored at its end).

    TensorFlow reads the cache/retry variables when it first touches a ``gs://`` path in the
    process, so a test session must not touch ``gs://`` before this fixture runs. Child processes
    started by tests inherit ``os.environ``.
    """
    with GcsLoopback() as loopback:
        saved = {name: os.environ.get(name) for name in loopback.env}
        os.environ.update(loopback.env)
        try:
            yield loopback
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

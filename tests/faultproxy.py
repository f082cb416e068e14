"""A small HTTP proxy in front of the S3 server that injects real faults.

Real boto3 talks to a real S3 API through it; every `every`-th request gets the next fault of
`faults`: "503" (SlowDown), "500" (InternalError), "reset" (connection closed without an
answer), "slow" (answer delayed past the client's read timeout). `deny_puts` answers every
PUT with 403 AccessDenied, a permanent failure. `lose(method, path, body)`, when it says True,
loses the request as a broken network would: never forwarded, never answered (`lost` counts them). `drop_conditions` forwards writes without their
If-None-Match and If-Match headers, as stores that ignore them behave: "all" on every request,
"multipart" only on CompleteMultipartUpload (the POST that completes an upload in parts).
"""

from __future__ import annotations

import http.client
import itertools
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import urlparse

ERROR_BODY = (
    '<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>injected</Message>'
    "<RequestId>tv</RequestId></Error>"
)


class FaultProxy:
    """`with FaultProxy(upstream, every=3) as proxy: proxy.url` — counts requests and faults."""

    def __init__(self, upstream: str, every: int = 0, faults=("503", "500", "reset", "slow"),
                 slow_s: float = 3.0, deny_puts: bool = False, drop_conditions: str = "",
                 lose: Callable[[str, str, bytes], bool] | None = None) -> None:
        self.upstream = urlparse(upstream)
        self.every = every
        self.faults = itertools.cycle(faults)
        self.slow_s = slow_s
        self.deny_puts = deny_puts
        self.drop_conditions = drop_conditions
        self.lose = lose
        self.lost = 0  # requests lost (see `lose`)
        self._closing = threading.Event()
        self.dropped = 0  # conditions dropped
        self.requests = 0
        self.injected: dict[str, int] = {}
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "FaultProxy":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()

    def next_fault(self, method: str) -> str | None:
        with self.lock:
            self.requests += 1
            if self.deny_puts and method == "PUT":
                fault = "403"
            elif self.every and self.requests % self.every == 0:
                fault = next(self.faults)
            else:
                return None
            self.injected[fault] = self.injected.get(fault, 0) + 1
            return fault

    def drops_conditions_of(self, method: str, path: str) -> bool:
        """Whether this request is forwarded without its conditions (see drop_conditions)."""
        if self.drop_conditions == "all":
            return True
        return self.drop_conditions == "multipart" and method == "POST" and "uploadId=" in path

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _error(self, status: int, code: str) -> None:
                body = ERROR_BODY.format(code=code).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _forward(self) -> None:
                body = self._body()
                if proxy.lose is not None and proxy.lose(self.command, self.path, body):
                    with proxy.lock:
                        proxy.lost += 1
                    proxy._closing.wait()  # no answer: the client's read timeout is what ends it
                    self.close_connection = True
                    return
                fault = proxy.next_fault(self.command)
                if fault == "reset":
                    self.close_connection = True
                    self.connection.close()
                    return
                if fault == "503":
                    return self._error(503, "SlowDown")
                if fault == "500":
                    return self._error(500, "InternalError")
                if fault == "403":
                    return self._error(403, "AccessDenied")
                if fault == "slow":
                    time.sleep(proxy.slow_s)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("transfer-encoding", "connection")}
                if proxy.drops_conditions_of(self.command, self.path):
                    kept = {k: v for k, v in headers.items() if k.lower() not in ("if-none-match", "if-match")}
                    with proxy.lock:
                        proxy.dropped += len(headers) - len(kept)
                    headers = kept
                headers["Content-Length"] = str(len(body))
                upstream = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=60)
                try:
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    data = response.read()
                    self.send_response(response.status)
                    for name, value in response.getheaders():
                        if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                            self.send_header(name, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    upstream.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        return Handler

"""The smallest stand-in for a schema registry that honours explicit ids (Confluent's and Redpanda's
IMPORT mode), for the id-preserving restore: no such registry runs here (docs/testing.md).

It speaks only the calls source.cluster_restore.registry_restore makes, as Confluent's API reference describes them:
GET/PUT /mode, PUT /config[/S], GET /subjects, GET /subjects/S/versions, POST /subjects/S/versions (with `id` honoured in IMPORT mode, 422
otherwise), POST /subjects/S (lookup), DELETE /subjects/S[/versions/N]. It records every request.
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator


class StandinRegistry:
    """The state: subjects -> [(id, schema)], ids, configs, mode, and the requests made."""

    def __init__(self) -> None:
        self.mode = "READWRITE"
        self.configs: dict[str, str] = {}
        self.subjects: dict[str, list[tuple[int, str]]] = {}
        self.deleted: set[str] = set()
        self.next_id = 1
        self.requests: list[tuple[str, str, dict | None]] = []

    def answer(self, method: str, path: str, body: dict | None) -> tuple[int, object]:
        self.requests.append((method, path, body))
        parts = path.partition("?")[0].strip("/").split("/")
        if parts[0] == "mode":
            if method == "PUT":
                self.mode = body["mode"]
            return 200, {"mode": self.mode}
        if parts[0] == "config":
            self.configs[parts[1] if len(parts) > 1 else ""] = body["compatibility"]
            return 200, {"compatibility": body["compatibility"]}
        if len(parts) == 1:  # GET /subjects
            return 200, [name for name, held in self.subjects.items() if held]
        subject = parts[1]
        if method == "GET":  # the versions a subject holds
            held = self.subjects.get(subject)
            return (200, list(range(1, len(held) + 1))) if held else (404, {"error_code": 40401})
        versions = self.subjects.setdefault(subject, [])
        if method == "DELETE":
            self.deleted.add(subject if len(parts) == 2 else f"{subject}/{parts[3]}")
            return 200, [1]
        found = next((i for i, (_, schema) in enumerate(versions) if schema == body["schema"]), None)
        if len(parts) == 2:  # lookup
            return (200, {"version": found + 1, "id": versions[found][0]}) if found is not None else (404, {})
        if found is not None:
            return 200, {"id": versions[found][0]}
        if "id" in body and self.mode != "IMPORT":
            return 422, {"message": "an id is accepted in IMPORT mode only"}
        schema_id = body.get("id", self.next_id)
        self.next_id = max(self.next_id, schema_id + 1)
        versions.append((schema_id, body["schema"]))
        return 200, {"id": schema_id}


@contextmanager
def standin_registry() -> Iterator[tuple[str, StandinRegistry]]:
    """A StandinRegistry served on a loopback port: (its URL, its state); stopped on leaving."""
    registry = StandinRegistry()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            status, answer = registry.answer(self.command, self.path, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = _serve

        def log_message(self, *args) -> None:  # requests are recorded, not printed
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", registry
    finally:
        server.shutdown()
        server.server_close()
        thread.join(30)

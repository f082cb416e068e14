"""Prometheus metrics of `backup --follow --metrics-port N`, served from the driver.

Built only from what the follower holds anyway, so serving them costs no store or Kafka
request: the commit records it reads forward after each micro-batch (records, bytes, lag,
committed ends), Spark's progress of that micro-batch (its duration) and Spark's status
tracker (failed task attempts). Each follower has a registry of its own (not the process-wide
default), so tests and embedding applications can run several.

Topic names come from the archive's commit records, which whoever can write the bucket
controls: only the first MAX_LABELLED_TOPICS topics seen get series of their own; the rest are
counted under the topic label OTHER_TOPICS (records, bytes) and left out of the per-partition
gauges, and `topicvault_topics_unlabelled` says how many there are. The server answers
`/metrics` only (404 elsewhere) and listens on 127.0.0.1 unless `--metrics-address` says
otherwise.
"""

from __future__ import annotations

import errno
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterable, Iterator
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from ..core.archive.commits import BackupState, CommitRecord
from ..core.errors import TopicvaultError

# Micro-batch durations from sub-second (a few records) to the flush intervals people use.
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# Topics with series of their own; the label set (and a scrape's size) stays bounded however
# many topic names the commit records hold.
MAX_LABELLED_TOPICS = 200
OTHER_TOPICS = "_other"
DEFAULT_ADDRESS = "127.0.0.1"
METRICS_PATH = "/metrics"


class FollowMetrics:
    """The metrics of one followed backup; `observe_*` update them, a scrape reads them."""

    def __init__(self, clock: Callable[[], float] = time.time, max_topics: int = MAX_LABELLED_TOPICS) -> None:
        self.registry = CollectorRegistry()
        self._clock = clock
        self._max_topics = max_topics
        self._labelled: set[str] = set()
        self._unlabelled: set[str] = set()
        # Until the first commit, "since the last commit" counts from the follower's start:
        # a follower that never commits must still show up as late.
        self._last_commit_s = clock()
        labels = ["topic"]
        self.records = Counter("topicvault_backup_records", "Records committed by this follower.", labels,
                               registry=self.registry)
        self.bytes = Counter("topicvault_backup_object_bytes", "Bytes of objects committed by this follower "
                             "(as stored: compressed, encrypted).", labels, registry=self.registry)
        self.commits = Counter("topicvault_commits", "Commit records written by this follower (one per "
                               "micro-batch that had records).", registry=self.registry)
        self.lag = Gauge("topicvault_lag_records", "Records behind the partition's end when this follower last "
                         "committed it.", ["topic", "partition"], registry=self.registry)
        self.committed_end = Gauge("topicvault_committed_end_offset", "The location's committed end of the "
                                   "partition: every offset below it is backed up.", ["topic", "partition"],
                                   registry=self.registry)
        self.duration = Histogram("topicvault_commit_duration_seconds", "Seconds from a micro-batch's trigger to "
                                  "its commit (read, objects written, commit record).", buckets=DURATION_BUCKETS,
                                  registry=self.registry)
        self.errors = Counter("topicvault_errors", "Errors: failed Spark task attempts of the stream (retried "
                              "by Spark) and failed micro-batches (which restart the follower's query).", ["kind"],
                              registry=self.registry)
        for kind in ("task_attempt", "micro_batch"):
            self.errors.labels(kind)  # present at 0: an alert on increase() needs the series to exist
        self.unlabelled = Gauge("topicvault_topics_unlabelled", f"Topics beyond the first {max_topics} seen: "
                                f"counted under topic=\"{OTHER_TOPICS}\", without per-partition series.",
                                registry=self.registry)
        self.restarts = Counter("topicvault_restarts", "Times this follower started its query again from the "
                                "last commit after it failed (a worker crashed in every attempt of a task, ...).",
                                registry=self.registry)
        self.registry.register(_SinceLastCommit(self))

    def topic_label(self, topic: str) -> str | None:
        """The label `topic` is counted under: itself if it is among the first max_topics topics
        seen, else OTHER_TOPICS."""
        if topic in self._labelled:
            return topic
        if len(self._labelled) < self._max_topics and topic not in self._unlabelled:
            self._labelled.add(topic)
            return topic
        if topic not in self._unlabelled:
            self._unlabelled.add(topic)
            self.unlabelled.set(len(self._unlabelled))
        return OTHER_TOPICS

    def seconds_since_last_commit(self) -> float:
        """Seconds since this follower's last commit (or since it started, before its first)."""
        return max(self._clock() - self._last_commit_s, 0.0)

    def observe_state(self, state: BackupState) -> None:
        """The committed end of every partition of the location, as the follower's state holds it."""
        for (topic, partition), ps in sorted(state.partitions.items()):
            if self.topic_label(topic) != OTHER_TOPICS:  # a partition of "other topics" means nothing
                self.committed_end.labels(topic, str(partition)).set(ps.end)

    def observe_commit(self, record: CommitRecord, duration_s: float | None) -> None:
        """Count one commit record this follower wrote; `duration_s` is its micro-batch's, if known."""
        for entry in record.objects:
            label = self.topic_label(entry.topic)
            self.records.labels(label).inc(entry.records)
            self.bytes.labels(label).inc(entry.bytes)
        for key, behind in (record.stream or {}).get("lag", {}).items():
            topic, _, partition = key.rpartition(":")
            if self.topic_label(topic) != OTHER_TOPICS:
                self.lag.labels(topic, partition).set(behind)
        self.commits.inc()
        if duration_s is not None:
            self.duration.observe(duration_s)
        self._last_commit_s = max(self._last_commit_s, record.created_ms / 1000)

    def observe_errors(self, kind: str, count: int = 1) -> None:
        """Count `count` errors of `kind` (task_attempt or micro_batch)."""
        if count > 0:
            self.errors.labels(kind).inc(count)

    def observe_restart(self) -> None:
        """Count one restart of the follower's query."""
        self.restarts.inc()

    def exposition(self) -> bytes:
        """The metrics in Prometheus' text format, as a scrape gets them."""
        return generate_latest(self.registry)


class _SinceLastCommit:
    """Computed at scrape time, so it grows while the follower is idle or stuck."""

    def __init__(self, metrics: FollowMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("topicvault_seconds_since_last_commit", "Seconds since this follower's last "
                                "commit (since its start before the first).",
                                value=self.metrics.seconds_since_last_commit())


def batch_durations(progresses: Iterable[dict]) -> dict[int, float]:
    """Seconds each micro-batch that read records took, by batch id, from Spark's progress
    reports (`query.recentProgress`); reports of idle triggers read no records and are left out."""
    return {int(p["batchId"]): p.get("durationMs", {}).get("triggerExecution", 0) / 1000
            for p in progresses if p.get("numInputRows", 0) > 0}


def own_commits(records: Iterable[CommitRecord], stream_id: str) -> list[CommitRecord]:
    """The commit records this follower's stream wrote (not other runs' backups, compactions or expiries)."""
    return [r for r in records if r.stream is not None and r.stream.get("id") == stream_id]


class MetricsServer:
    """An HTTP server of a follower's metrics at `/metrics` only; stops (and frees its port) on `close()`."""

    def __init__(self, metrics: FollowMetrics, port: int, address: str = DEFAULT_ADDRESS) -> None:
        if not 0 < port < 65536:
            raise TopicvaultError(f"bad --metrics-port {port}: give a TCP port 1-65535 (0: no metrics)")
        try:
            self._server = _server_for(address, port, metrics)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise TopicvaultError(f"--metrics-port {port} is in use by another process: pick a free port "
                                      "(or 0 for no metrics)") from None
            raise TopicvaultError(f"cannot serve metrics on {address!r} port {port}: {exc.strerror or exc}; "
                                  "give --metrics-address an address of this machine (default 127.0.0.1)") from None
        self.address = address
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="topicvault-metrics", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving and close the listening socket."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def __enter__(self) -> "MetricsServer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _server_for(address: str, port: int, metrics: FollowMetrics) -> ThreadingHTTPServer:
    """A threading HTTP server bound to (address, port), IPv6 too, answering only METRICS_PATH."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if urlsplit(self.path).path != METRICS_PATH:
                self.send_error(404, f"only {METRICS_PATH} is served")
                return
            body = metrics.exposition()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:  # scrapes are not news
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in address else socket.AF_INET

    return Server((address, port), Handler)

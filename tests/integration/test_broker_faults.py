"""Broker faults: the broker goes away mid-restore and comes back, or stays away past a deadline.

A TCP proxy sits between clients and a broker of the test's own (the broker advertises the
proxy's port), so the outage is real to every client: connections dropped, new ones refused.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from clitools import CLI, run_cli
from kafkatools import consume_all, create_topic, produce_records
from nasty import nasty_records
from tcpproxy import TcpProxy
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.local.embedded_broker import broker_binary, free_port, wait_for_broker
from topicvault.sink.kafka_reader import OffsetRange, read_range


@pytest.fixture
def proxied_broker(tmp_path):
    """(bootstrap through the proxy, proxy) for a tansu broker advertising the proxy's port."""
    broker_port, proxy_port = free_port(), free_port()
    proxy = TcpProxy(proxy_port, broker_port).start()
    with open(tmp_path / "tansu.log", "wb") as log:
        broker = subprocess.Popen(
            [broker_binary(), "broker", "--listener-url", f"tcp://127.0.0.1:{broker_port}",
             "--advertised-listener-url", f"tcp://127.0.0.1:{proxy_port}", "--storage-engine", "memory://tansu/"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    try:
        wait_for_broker(f"127.0.0.1:{proxy_port}", 30)
        yield f"127.0.0.1:{proxy_port}", proxy
    finally:
        proxy.close()
        broker.kill()  # in-memory storage, nothing to flush; SIGTERM takes tansu 5 s
        broker.wait(10)


def start_cli(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen([CLI, *args, "--master", "local[2]"], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                env=dict(os.environ), start_new_session=True)


def wait_for_traffic(proxy: TcpProxy, extra_bytes: int, timeout_s: float = 120) -> None:
    start, deadline = proxy.bytes, time.monotonic() + timeout_s
    while proxy.bytes - start < extra_bytes:
        if time.monotonic() >= deadline:  # a hang detector, not a speed check
            raise TimeoutError("the restore never started producing")
        time.sleep(0.02)


def strip(partitions):
    return {p: [(r.key, r.value, r.headers, r.timestamp_ms) for r in rs] for p, rs in partitions.items()}


def read_all(bootstrap: str, topic: str) -> dict:
    """Every record of the proxied tansu broker's topic, read to EOF (its high watermark lies)."""
    return consume_all(bootstrap, topic, to_eof=True)


def backed_up_topic(bootstrap: str, name: str, location: str) -> str:
    """A 2-partition topic of 80,000 records, backed up to `location`."""
    topic = create_topic(bootstrap, name, 2)
    produce_records(bootstrap, topic, nasty_records(topic, 2, 40_000, big_values=0))
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic)
    return topic


def test_restore_survives_a_broker_outage(spark, proxied_broker, tmp_path):
    bootstrap, proxy = proxied_broker
    location = str(tmp_path / "b")
    topic = backed_up_topic(bootstrap, "outage", location)
    restore = start_cli(["restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-r"],
                            tmp_path / "cli.log")
    wait_for_traffic(proxy, 2_000_000)  # mid-produce
    proxy.outage()
    time.sleep(4)
    proxy.restore()
    assert restore.wait(300) == 0, (tmp_path / "cli.log").read_text()[-3000:]
    assert strip(read_all(bootstrap, f"{topic}-r")) == strip(read_all(bootstrap, topic))


def test_outage_past_the_deadline_fails_clearly_and_resumes_exactly_once(spark, proxied_broker, tmp_path):
    bootstrap, proxy = proxied_broker
    location = str(tmp_path / "b")
    topic = backed_up_topic(bootstrap, "deadline", location)
    args = ["restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-r",
            "--restore-id", "deadline", "-X", "message.timeout.ms=3000"]
    log = tmp_path / "cli.log"
    restore = start_cli(args, log)
    wait_for_traffic(proxy, 2_000_000)
    proxy.outage()
    status = restore.wait(120)
    proxy.restore()
    errors = [line for line in log.read_text().splitlines() if line.startswith("error:")]
    assert status == 1 and len(errors) == 1, log.read_text()[-3000:]
    assert "deadline-r" in errors[0] or "timed out" in errors[0].lower(), errors[0]
    assert "Traceback" not in log.read_text()

    assert start_cli(args, log).wait(300) == 0, log.read_text()[-3000:]
    assert strip(read_all(bootstrap, f"{topic}-r")) == strip(read_all(bootstrap, topic))


def test_backup_survives_a_broker_outage(spark, proxied_broker, tmp_path):
    bootstrap, proxy = proxied_broker
    topic = create_topic(bootstrap, "backup-outage", 2)
    produce_records(bootstrap, topic, nasty_records(topic, 2, 40_000, big_values=0))
    root, log = tmp_path / "b", tmp_path / "cli.log"
    backup = start_cli(["backup", "-b", bootstrap, "--to", str(root), "-t", topic, "--max-records", "5000"], log)
    wait_for_traffic(proxy, 2_000_000)  # mid-consume
    proxy.outage()
    time.sleep(4)
    proxy.restore()
    assert backup.wait(300) == 0, log.read_text()[-3000:]
    committed = [entry for commit in (root / "_topicvault" / "commits").glob("*.json")
                 for entry in json.loads(commit.read_text())["objects"]]
    offsets = {p: [] for p in (0, 1)}
    for entry in committed:
        offsets[entry["partition"]] += pq.read_table(root / entry["key"]).column("metadata").combine_chunks() \
            .field("offset").to_pylist()
    source = read_all(bootstrap, topic)
    assert {p: sorted(o) for p, o in offsets.items()} == {p: [r.offset for r in rs] for p, rs in source.items()}


def test_a_read_survives_connections_that_go_silent(proxied_broker, monkeypatch):
    """The flaky outage: a fetch sent on a connection that then goes silent is abandoned only
    after the consumer's socket.timeout.ms (librdkafka's default 60 s equalled the read's idle
    limit). The consumer's timeouts must end it, and the idle limit must outlast them."""
    from observetools import record_new_clients
    from topicvault.sink import kafka_reader

    bootstrap, proxy = proxied_broker
    clients = record_new_clients(monkeypatch, kafka_reader)
    topic = create_topic(bootstrap, "silent", 1)
    produce_records(bootstrap, topic, nasty_records(topic, 1, 20_000, big_values=0))
    # Small fetches and read-ahead, so the read needs fetches after the stall.
    settings = KafkaSettings.of(bootstrap, {"max.partition.fetch.bytes": "4096", "fetch.max.bytes": "4096",
                                            "message.max.bytes": "4096",
                                            "queued.max.messages.kbytes": "1"})
    batches = read_range(settings, OffsetRange(topic, 0, 0, 20_000), batch_records=500)
    offsets = next(batches).column("offset").to_pylist()
    proxy.stall()
    time.sleep(4)
    proxy.restore()
    for batch in batches:
        offsets += batch.column("offset").to_pylist()
    assert offsets == [r.offset for r in read_all(bootstrap, topic)[0]]
    # The fetch lost in the stall is abandoned after the consumer's socket.timeout.ms: ours, not
    # librdkafka's 60 s (the read took that long, or failed on its 60 s idle limit; the limit
    # derived from the timeouts is checked in tests/unit/test_broker_faults_logic.py).
    [config] = clients.configs
    assert int(config.get("socket.timeout.ms", 60_000)) < 60_000, config  # 60 000: librdkafka's default

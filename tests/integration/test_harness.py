"""The harness itself: the broker, the stores and Spark are real and behave."""
from __future__ import annotations

import os
import time
from pathlib import Path

from clitools import run_cli
from kafkatools import consume_all, produce_records
from nasty import nasty_records
from topicvault.core.envelope import Record
from topicvault.core.local.embedded_broker import EmbeddedBroker
from topicvault.core.stores.locations import open_store


def test_broker_round_trips_awkward_records(bootstrap, topic_factory):
    topic = topic_factory(2, prefix="smoke")
    records = [
        Record(topic, 0, 0, None, b"null key", 1_700_000_000_000, 0, (("a", b"1"), ("a", b"2"), ("n", None))),
        Record(topic, 0, 0, b"", None, 1_700_000_000_001, 0, ()),
        Record(topic, 1, 0, b"\xff\x00", b"", 1_700_000_000_002, 0, (("ü", b""),)),
    ]
    produce_records(bootstrap, topic, records)
    found = consume_all(bootstrap, topic)
    strip = lambda r: (r.key, r.value, r.headers, r.timestamp_ms, r.timestamp_type)  # noqa: E731
    assert [strip(r) for r in found[0]] == [strip(r) for r in records[:2]]
    assert [strip(r) for r in found[1]] == [strip(records[2])]


def test_suite_runs_on_the_broker_asked_for(broker_kind):
    # A silently broken Kafka or podman path must fail here, not fall back unnoticed.
    if os.environ.get("TOPICVAULT_TEST_BOOTSTRAP"):
        assert broker_kind == "external"
    elif os.environ.get("TOPICVAULT_TEST_BROKER", "apache-kafka") == "apache-kafka":
        assert broker_kind == "apache-kafka"
    elif os.environ.get("TOPICVAULT_ALLOW_EMBEDDED") != "1":
        assert broker_kind == "testcontainers"


def test_both_stores_write_and_read(store_uri):
    store = open_store(store_uri)
    store.put("a/b.bin", b"\x00payload")
    assert store.get("a/b.bin") == b"\x00payload"
    assert [o.key for o in store.list("a/")] == ["a/b.bin"]


def test_spark_session(spark):
    assert spark.range(10).count() == 10


def test_testcontainers_kafka_round_trips_a_backup(spark, tmp_path):
    """The container path (testcontainers through podman) with Apache Kafka in it, the image built
    locally by ci/kafka-image.sh: a backup of a topic in the container's broker, restored there
    under a new name, gives back the same records. `ci/test.sh` starts podman, builds the image
    and sets DOCKER_HOST."""
    import pytest
    from harness_broker import _like_tansu, start_kafka_container, stop_container
    from kafkatools import create_topic
    from topicvault.core.cluster.cluster_admin import broker_configs
    from topicvault.core.cluster.kafka import KafkaSettings

    if not os.environ.get("DOCKER_HOST"):
        if os.environ.get("CI"):
            raise AssertionError("CI runs without DOCKER_HOST: ci/broker-engine.sh did not start podman")
        pytest.skip("no container engine: run through ci/test.sh (it starts podman and sets DOCKER_HOST)")
    container, servers = start_kafka_container(tmp_path)
    try:
        # Apache Kafka describes its broker configs; tansu describes none.
        assert (broker_configs(KafkaSettings.of(servers)) or {}).get("process.roles") == "broker,controller"
        topic = create_topic(servers, "container-round-trip", 2, _like_tansu(servers))
        records = [Record(topic, 0, 0, None, b"v0", 1_700_000_000_000, 0, (("a", b"1"), ("a", None))),
                   Record(topic, 0, 0, b"", b"", 1_700_000_000_001, 0, ()),
                   Record(topic, 1, 0, b"\xff\x00", None, 1_700_000_000_002, 0, (("\u00fc", b""),)),
                   *nasty_records(topic, 2, 40, big_values=0)]
        # Compressed batches: the broker decompresses them to validate, with the native codecs the
        # image must carry (zstd-jni, snappy-java) and the libraries they load.
        for partition, codec in ((0, "zstd"), (1, "snappy")):
            produce_records(servers, topic, [r for r in records if r.partition == partition],
                            {"compression.type": codec})
        location = str(tmp_path / "backup")
        run_cli("backup", "-b", servers, "--to", location, "-t", topic)
        run_cli("restore", "--from", location, "-b", servers, "--rename", f"{topic}={topic}-restored")

        def fields(partitions: dict) -> dict:
            return {p: [(r.offset, r.key, r.value, r.headers, r.timestamp_ms, r.timestamp_type) for r in rs]
                    for p, rs in partitions.items()}

        original = consume_all(servers, topic, to_eof=True)
        assert sum(map(len, original.values())) == len(records)
        assert fields(consume_all(servers, f"{topic}-restored", to_eof=True)) == fields(original)
    finally:
        stop_container(container, tmp_path)


def test_embedded_broker_starts_and_stops():
    with EmbeddedBroker() as broker:
        pid = broker.process.pid
        assert broker.bootstrap.startswith("127.0.0.1:")
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_a_killed_owner_takes_its_broker_and_s3_server_with_it(tmp_path):
    """SIGKILL leaves no chance to clean up: a broker or S3 server outliving a killed pytest (or
    demo) kept its port and, under CI, could keep CI's pipe open past its limit."""
    import signal
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "owner.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        from pathlib import Path
        from harness_s3 import moto_server
        from topicvault.core.local.embedded_broker import EmbeddedBroker
        broker = EmbeddedBroker(log_dir={str(tmp_path)!r}).start()
        with moto_server(Path({str(tmp_path)!r})):
            print(broker.process.pid, flush=True)
            time.sleep(600)
    """))
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    broker_pid = int(owner.stdout.readline())
    servers = [int(p) for p in subprocess.run(["pgrep", "-P", str(owner.pid)], capture_output=True, text=True)
               .stdout.split()]
    assert broker_pid in servers and len(servers) == 2, servers
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait(30)

    def running() -> list[int]:
        alive = []
        for pid in servers:
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(pid)
            except OSError:
                pass
        return alive

    deadline = time.monotonic() + 20
    try:
        while running():
            if time.monotonic() >= deadline:  # a hang detector, not a speed check
                raise TimeoutError(f"still running after their owner was killed: {running()}")
            time.sleep(0.2)
    finally:
        for pid in running():  # never leave them behind, even when the test fails
            os.kill(pid, signal.SIGKILL)

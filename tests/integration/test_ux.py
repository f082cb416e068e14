"""User experience: config profiles and precedence, secret redaction, --json, inspect, progress, local[4]."""
from __future__ import annotations

import base64
import json
import subprocess

from clitools import CLI, run_cli, run_cli_stdout
from kafkatools import consume_all, produce_records
from nasty import nasty_records
from profiletools import write_profile
from topicvault.core.envelope import Record

BASE = 1_700_000_000_000


def test_backup_and_restore_with_profiles_json_and_progress(bootstrap, spark, topic_factory, s3_endpoint, s3_uri,
                                                            tmp_path, monkeypatch):
    topic = topic_factory(2, prefix="profile")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 300, seed=9, big_values=0))
    path = str(write_profile(tmp_path, bootstrap, s3_uri, s3_endpoint))
    monkeypatch.setenv("KAFKA_SECRET", "unused-by-plaintext")
    monkeypatch.setenv("TOPICVAULT_PROGRESS_INTERVAL_S", "0.05")
    profile = ["--config", path, "--cluster", "prod", "--store", "archive"]

    out = run_cli("backup", *profile, "-t", topic, "-X", "sasl.password=", "--max-records", "50")
    assert f"{topic}  " in out or topic in out.splitlines()[-2]  # the summary table names the topic
    assert "records/s" in out and "tasks " in out, "no progress lines"

    listing = json.loads(run_cli("ls", "--config", path, "--store", "archive", "--json"))
    assert listing["records"] == 600 and {p["partition"] for p in listing["partitions"]} == {0, 1}
    report = json.loads(run_cli("verify", *profile, "--json"))
    assert report["ok"] and report["partitions_compared"] == 2
    plan = json.loads(run_cli_stdout("restore", *profile, "--rename", f"{topic}={topic}-p", "--dry-run", "--json"))
    assert plan["records_at_most"] == 600 and plan["topics_to_create"] == {f"{topic}-p": 2}
    done = json.loads(run_cli_stdout("restore", *profile, "--rename", f"{topic}={topic}-p", "--json", "-q"))
    assert done["produced"] == 600
    assert consume_all(bootstrap, f"{topic}-p") == {
        p: [r.__class__(**{**r.__dict__, "topic": f"{topic}-p"}) for r in records]
        for p, records in consume_all(bootstrap, topic).items()
    }
    again = json.loads(run_cli("backup", *profile, "-t", topic, "--json"))
    assert again["tasks"] == 0 and again["dry_run"] is False


def test_inspect_prints_records_safely(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="inspect")
    records = [
        Record(topic, 0, 0, None, b"plain text", BASE, 0, (("h", b"1"), ("h", None))),
        Record(topic, 0, 0, b"\x00\xff\xfe", None, BASE + 1, 0, ()),
        Record(topic, 0, 0, "ключ".encode(), b"line\nbreak\x1b[31m", BASE + 2, 0, ()),
    ] + [Record(topic, 0, 0, b"k", b"v%d" % i, BASE + 3 + i, 0, ()) for i in range(10)]
    produce_records(bootstrap, topic, records)
    location = tmp_path / "b"
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, "--max-records", "5")

    lines = run_cli("inspect", str(location), "--topic", topic, "--limit", "3").splitlines()
    assert len(lines) == 3
    assert "key=null" in lines[0] and "headers=[h=1,h=null]" in lines[0] and "value=plain text" in lines[0]
    assert r"key=b'\x00\xff\xfe'" in lines[1] and "value=null" in lines[1]
    assert "key=ключ" in lines[2] and r"value=line\nbreak\x1b[31m" in lines[2] and "\x1b" not in lines[2]

    as_json = [json.loads(line) for line in run_cli("inspect", str(location), "--topic", topic, "--partition", "0",
                                                     "--offset", "1", "--limit", "100", "--json").splitlines()]
    source = consume_all(bootstrap, topic)[0]
    assert [r["offset"] for r in as_json] == [r.offset for r in source if r.offset >= 1]
    decoded = [(None if r["key"] is None else base64.b64decode(r["key"]),
                None if r["value"] is None else base64.b64decode(r["value"])) for r in as_json]
    assert decoded == [(r.key, r.value) for r in source if r.offset >= 1]

    key = json.loads((location / "_topicvault" / "commits" / "0000000000000000001.json").read_text())["objects"][1]["key"]
    one = run_cli("inspect", str(location), "--object", key).splitlines()
    assert len(one) == 5 and all(f"{topic}[0]@" in line for line in one)
    assert "not both" in run_cli("inspect", str(location), "--topic", topic, "--object", key, expect_exit=1)


def test_jobs_run_with_four_parallel_tasks(bootstrap, spark, topic_factory, tmp_path):
    # The same CLI with --master local[4] (as on a cluster: more executors than partitions' tasks).
    topic = topic_factory(4, prefix="four")
    produce_records(bootstrap, topic, nasty_records(topic, 4, 200, seed=4, big_values=0))
    location = str(tmp_path / "b")
    for args in (["backup", "-b", bootstrap, "--to", location, "-t", topic, "--records-per-task", "60"],
                 ["restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-4"]):
        done = subprocess.run([CLI, *args, "--master", "local[4]", "-q"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        # Nothing nobody asked for: the JVM's incubator-modules warning and Spark's log-level lines.
        noise = ("WARNING: Using incubator modules", "Setting default log level", "sc.setLogLevel")
        assert not [line for line in done.stderr.splitlines() if line.startswith(noise) or noise[2] in line], done.stderr
    source, restored = consume_all(bootstrap, topic), consume_all(bootstrap, f"{topic}-4")
    assert {p: [(r.key, r.value, r.headers, r.timestamp_ms) for r in rs] for p, rs in restored.items()} == \
           {p: [(r.key, r.value, r.headers, r.timestamp_ms) for r in rs] for p, rs in source.items()}

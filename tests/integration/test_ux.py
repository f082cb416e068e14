"""User experience: config profiles and precedence, secret redaction, --json, inspect, progress, local[4]."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import run_cli, run_cli_stdout
from kafkatools import consume_all, produce_records
from nasty import nasty_records
from topicvault.core.envelope import Record
from topicvault.core.errors import TopicvaultError
from topicvault.core.profiles import resolve

BASE = 1_700_000_000_000
CLI = str(Path(sys.executable).with_name("topicvault"))

PROFILE = """
[clusters.prod]
bootstrap_servers = "{bootstrap}"
[clusters.prod.properties]
"client.id" = "from-profile"
"sasl.password" = "${{KAFKA_SECRET}}"

[stores.archive]
uri = "{uri}"
endpoint_url = "{endpoint}"
region = "us-east-1"
path_style = true
"""


def write_profile(tmp_path: Path, bootstrap: str = "profile:9092", uri: str = "s3://profile-bucket/p",
                  endpoint: str = "http://profile:9000") -> Path:
    path = tmp_path / "topicvault.toml"
    path.write_text(PROFILE.format(bootstrap=bootstrap, uri=uri, endpoint=endpoint))
    return path


def test_precedence_is_flags_then_environment_then_profile(tmp_path):
    path = str(write_profile(tmp_path))
    env = {"KAFKA_SECRET": "s3cr3t"}
    from_profile = resolve(config_file=path, cluster="prod", store="archive", env=env)
    assert from_profile.bootstrap_servers == "profile:9092"
    assert from_profile.kafka_properties == {"client.id": "from-profile", "sasl.password": "s3cr3t"}
    assert from_profile.store_uri == "s3://profile-bucket/p"
    assert from_profile.store_options == {"endpoint_url": "http://profile:9000", "region": "us-east-1", "path_style": "true"}

    env.update({"TOPICVAULT_BOOTSTRAP_SERVERS": "env:9092", "TOPICVAULT_KAFKA_CLIENT_ID": "from-env",
                "TOPICVAULT_STORE_URI": "s3://env-bucket/e", "TOPICVAULT_STORE_REGION": "eu-west-1"})
    from_env = resolve(config_file=path, cluster="prod", store="archive", env=env)
    assert (from_env.bootstrap_servers, from_env.kafka_properties["client.id"]) == ("env:9092", "from-env")
    assert (from_env.store_uri, from_env.store_options["region"]) == ("s3://env-bucket/e", "eu-west-1")

    from_flags = resolve(config_file=path, cluster="prod", store="archive", env=env, bootstrap_servers="flag:9092",
                         kafka_properties={"client.id": "from-flag"}, store_uri="/tmp/flag",
                         store_options={"region": "ap-south-1"})
    assert (from_flags.bootstrap_servers, from_flags.kafka_properties["client.id"]) == ("flag:9092", "from-flag")
    assert (from_flags.store_uri, from_flags.store_options["region"]) == ("/tmp/flag", "ap-south-1")
    assert from_flags.kafka_properties["sasl.password"] == "s3cr3t"  # untouched layers still apply


def test_profile_errors_are_one_clear_line(tmp_path):
    path = str(write_profile(tmp_path))
    with pytest.raises(TopicvaultError, match=r"KAFKA_SECRET\}, which is not set"):
        resolve(config_file=path, cluster="prod", env={})
    with pytest.raises(TopicvaultError, match="no cluster named 'staging'.*defined: prod"):
        resolve(config_file=path, cluster="staging", env={"KAFKA_SECRET": "x"})
    (tmp_path / "bad.toml").write_text("[clusters.prod\n")
    with pytest.raises(TopicvaultError, match="not valid TOML"):
        resolve(config_file=str(tmp_path / "bad.toml"), cluster="prod", env={})
    out = run_cli("backup", "--topic", "x", "--to", str(tmp_path / "b"), expect_exit=1)
    assert "no Kafka cluster given" in out


def test_secrets_are_never_printed(tmp_path, monkeypatch):
    path = str(write_profile(tmp_path))
    monkeypatch.setenv("KAFKA_SECRET", "hunter2-very-secret")
    monkeypatch.setenv("TOPICVAULT_STORE_SECRET_ACCESS_KEY", "aws-secret-value")
    out = run_cli("config", "--config", path, "--cluster", "prod", "--store", "archive",
                  "-X", "ssl.key.password=keypass-value")
    shown = json.loads(out)
    assert shown["kafka_properties"]["sasl.password"] == "***"
    assert shown["kafka_properties"]["ssl.key.password"] == "***"
    assert shown["store_options"]["secret_access_key"] == "***"
    assert shown["kafka_properties"]["client.id"] == "from-profile"
    for secret in ("hunter2-very-secret", "aws-secret-value", "keypass-value"):
        assert secret not in out


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

"""Client-side encryption end to end (issue #22): real broker, local directory and the S3
server, KMS through moto's KMS on the same endpoint. Nothing of a record's key, value or
headers may appear in the stored bytes; with the key a restore is byte-exact; without it (or
with a wrong one) restore stops with one line naming the object before anything is produced."""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from clitools import assert_one_line_error, run_cli
from kafkatools import consume_all, produce_records, topic_exists
from legacy_archive import MALLORY_ACL, as_written_before_authentication, downgrade_with_decoys, edit_commit
from nasty import nasty_records
from topicvault.core.crypto import write_key_file
from topicvault.core.envelope import Record
from topicvault.core.stores.local_store import LOCK_NAME

MARKER = b"ZZ-SECRET-MARKER"


def without_offsets(partitions: dict) -> dict:
    return {p: [(r.key, r.value, r.headers, r.timestamp_ms, r.timestamp_type) for r in rs] for p, rs in partitions.items()}


def marked(topic: str, partitions: int, count: int, seed: int) -> list[Record]:
    """Nasty records, then records carrying the marker in key, value, header name and header value."""
    records = nasty_records(topic, partitions, count, seed=seed, big_values=0)
    for p in range(partitions):
        records += [Record(topic, p, 0, MARKER + b"k%d" % i, b"v-" + MARKER * 2, 1_700_000_100_000 + i, 0,
                           (("h" + MARKER.decode(), MARKER + b"h"), ("dup", None))) for i in range(5)]
    return records


def stored_bytes(location: str) -> dict[str, bytes]:
    """Every object under the location's bucket or directory (commit records included)."""
    if location.startswith("s3://"):
        import boto3

        bucket = location[len("s3://"):].split("/", 1)[0]
        client = boto3.session.Session().client("s3")
        keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
                for o in page.get("Contents", [])]
        return {k: client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}
    # Not the directory store's own lock file (empty; a lease's delete takes the lock).
    return {str(p): p.read_bytes() for p in Path(location).rglob("*") if p.is_file() and p.name != LOCK_NAME}


def assert_no_plaintext(location: str) -> None:
    found = stored_bytes(location)
    assert len(found) >= 2  # a commit record and at least one object
    leaking = [name for name, data in found.items() if MARKER in data or MARKER.decode().encode("utf-16-le") in data]
    assert not leaking, f"plaintext marker in {leaking}"
    data_objects = [d for n, d in found.items() if "_topicvault" not in n]  # a lease holds a time, no record
    assert data_objects and all(d.startswith(b"TVENC") for d in data_objects)


def key_file(tmp_path, name: str) -> str:
    write_key_file(str(tmp_path / name))
    return f"file://{tmp_path / name}"


def committed_objects(location: str) -> list[dict]:
    return [o for name, data in sorted(stored_bytes(location).items()) if "_topicvault/commits/" in name
            for o in json.loads(data)["objects"]]


def test_encrypted_backup_hides_records_and_restores_exactly(bootstrap, spark, topic_factory, store_uri, tmp_path):
    topic = topic_factory(2, prefix="enc")
    produce_records(bootstrap, topic, marked(topic, 2, 60, seed=3))
    key = key_file(tmp_path, "key")
    run_cli("backup", "-b", bootstrap, "--to", store_uri, "-t", topic, "--max-records", "20", "--encryption-key", key)
    assert_no_plaintext(store_uri)
    assert {o.get("key_id") for o in committed_objects(store_uri)} == {_key_id(key)}
    out = run_cli("verify", store_uri, "--encryption-key", key, "-b", bootstrap)
    assert "ok:" in out and "2 partitions match the live topics" in out and "checksum only" not in out
    out = run_cli("verify", store_uri)
    assert "ok:" in out and "checksum only" in out
    target = f"{topic}-restored"
    run_cli("restore", "--from", store_uri, "-b", bootstrap, "--rename", f"{topic}={target}", "--encryption-key", key,
            "--state", str(tmp_path / "state"))
    assert without_offsets(consume_all(bootstrap, target)) == without_offsets(consume_all(bootstrap, topic))


def _key_id(spec: str) -> str:
    from topicvault.core.crypto import file_key_id, read_key_file

    return file_key_id(read_key_file(spec[len("file://"):]))


def test_without_or_with_a_wrong_key_nothing_is_produced(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="enc-nokey")
    produce_records(bootstrap, topic, marked(topic, 1, 30, seed=4))
    location = str(tmp_path / "b")
    key, wrong = key_file(tmp_path, "key"), key_file(tmp_path, "wrong")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--encryption-key", key)
    first_object = committed_objects(location)[0]["key"]
    for extra in ([], ["--encryption-key", wrong]):
        target = f"{topic}-{uuid.uuid4().hex[:6]}"
        out = run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}",
                      "--state", str(tmp_path / "state"), *extra, expect_exit=1)
        lines = out.strip().splitlines()
        # Without a key its first object is named; with a wrong one, the commit record it authenticates first.
        named = first_object if not extra else "commit record _topicvault/commits/0000000000000000001.json"
        assert len(lines) == 1 and lines[0].startswith("error:") and named in lines[0], out
        assert "Traceback" not in out and not topic_exists(bootstrap, target)
        assert Path(wrong[len("file://"):]).read_text().strip() not in out
    out = run_cli("inspect", location, "--topic", topic, expect_exit=1)
    assert first_object in out and len(out.strip().splitlines()) == 1
    out = run_cli("inspect", location, "--object", first_object, "--encryption-key", key, "--offset", "30")
    assert MARKER.decode() in out and len(out.strip().splitlines()) == 5


def test_key_rotation_two_keys_in_one_location(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="enc-rot")
    location = str(tmp_path / "b")
    old, new = key_file(tmp_path, "old"), key_file(tmp_path, "new")
    produce_records(bootstrap, topic, marked(topic, 2, 20, seed=5))
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--encryption-key", old)
    produce_records(bootstrap, topic, marked(topic, 2, 20, seed=6))
    # The new key seals; the old one vouches for the commits it authenticated (issue #39).
    out = run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--encryption-key", new, expect_exit=1)
    assert "commit record _topicvault/commits/0000000000000000001.json is authenticated with key " + _key_id(old) in out
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--encryption-key", new, "--encryption-key", old)
    entries = committed_objects(location)
    assert {e["key_id"] for e in entries} == {_key_id(old), _key_id(new)}
    assert_no_plaintext(location)
    target = f"{topic}-r"
    out = run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}",
                  "--state", str(tmp_path / "state"), "--encryption-key", new, expect_exit=1)
    assert _key_id(old) in out and not topic_exists(bootstrap, target)
    assert "ok:" in run_cli("verify", location, "--encryption-key", new, "--encryption-key", old)
    listed = run_cli("ls", location)
    assert f"with key {_key_id(old)}" in listed and f"with key {_key_id(new)}" in listed
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}",
            "--state", str(tmp_path / "state"), "--encryption-key", new, "--encryption-key", old)
    assert without_offsets(consume_all(bootstrap, target)) == without_offsets(consume_all(bootstrap, topic))


def commit_bodies(location: str) -> list[dict]:
    return [json.loads(p.read_bytes()) for p in sorted((Path(location) / "_topicvault" / "commits").glob("*.json"))]


def test_an_encrypted_archive_from_before_authentication_restores_and_is_appended_to(bootstrap, spark, topic_factory,
                                                                                      tmp_path):
    # Commit records without authentication and objects bound to their name only, as
    # topicvault wrote them before issue #39: they keep restoring, and backups keep appending.
    topic = topic_factory(2, prefix="enc-old")
    location, key = str(tmp_path / "b"), key_file(tmp_path, "key")
    produce_records(bootstrap, topic, marked(topic, 2, 20, seed=11))
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--encryption-key", key)
    as_written_before_authentication(Path(location), key)
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-r1", "--encryption-key", key,
            "--state", str(tmp_path / "state"))
    assert without_offsets(consume_all(bootstrap, f"{topic}-r1")) == without_offsets(consume_all(bootstrap, topic))
    produce_records(bootstrap, topic, marked(topic, 2, 20, seed=12))
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--encryption-key", key)
    bodies = commit_bodies(location)
    assert len(bodies) == 2 and "authentication" not in bodies[0] and bodies[1]["authenticated_from"] == 2
    assert "ok:" in run_cli("verify", location, "--encryption-key", key, "-b", bootstrap)
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-r2", "--encryption-key", key,
            "--state", str(tmp_path / "state"))
    assert without_offsets(consume_all(bootstrap, f"{topic}-r2")) == without_offsets(consume_all(bootstrap, topic))


def test_a_downgrade_with_decoys_is_refused_by_restore_and_verify(bootstrap, spark, topic_factory, tmp_path):
    # #50.1: authentication stripped from every commit of an archive authenticated from its first,
    # a decoy entry (real key id, missing object) first in each, an expire removing the decoys:
    # then one real object dropped and an ACL injected. Both commands refuse, naming a commit.
    topic = topic_factory(2, prefix="enc-downgrade")
    location, key = str(tmp_path / "b"), key_file(tmp_path, "key")
    for seed in (21, 22):
        produce_records(bootstrap, topic, marked(topic, 2, 10, seed=seed))
        run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--encryption-key", key)
    downgrade_with_decoys(Path(location))
    edit_commit(Path(location), 2, lambda body: body["objects"].pop(-1))
    edit_commit(Path(location), 1, lambda body: body.update(access={"acls": [MALLORY_ACL]}))
    for command in (["verify", location], ["restore", "--from", location, "-b", bootstrap, "--rename",
                                           f"{topic}={topic}-r", "--state", str(tmp_path / "state")]):
        out = run_cli(*command, "--encryption-key", key, expect_exit=1)
        assert_one_line_error(out, "commit record _topicvault/commits/000000000000000000", "is not authenticated")
    assert not topic_exists(bootstrap, f"{topic}-r")


def test_damage_to_an_encrypted_object_is_found_without_the_key(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="enc-damage")
    produce_records(bootstrap, topic, marked(topic, 1, 30, seed=7))
    location = str(tmp_path / "b")
    key = key_file(tmp_path, "key")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--encryption-key", key, "--max-records", "10")
    damaged = committed_objects(location)[1]["key"]
    path = Path(location) / damaged
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    for extra in ([], ["--encryption-key", key]):
        out = run_cli("verify", location, *extra, expect_exit=1)
        assert damaged in out and "checksum" in out


def test_kms_key_through_moto(bootstrap, spark, topic_factory, s3_uri, tmp_path):
    import boto3

    kms = boto3.session.Session().client("kms")  # AWS_ENDPOINT_URL points at moto, which serves KMS too
    alias = f"alias/tv-{uuid.uuid4().hex[:8]}"
    kms.create_alias(AliasName=alias, TargetKeyId=kms.create_key()["KeyMetadata"]["KeyId"])
    other = kms.create_key()["KeyMetadata"]["KeyId"]
    assert os.environ.get("AWS_ENDPOINT_URL")
    topic = topic_factory(2, prefix="enc-kms")
    produce_records(bootstrap, topic, marked(topic, 2, 40, seed=8))
    run_cli("backup", "-b", bootstrap, "--to", s3_uri, "-t", topic, "--max-records", "25",
            "--encryption-key", f"kms://{alias}")
    assert_no_plaintext(s3_uri)
    assert {e["key_id"].split(":key/")[0] for e in committed_objects(s3_uri)} == {"kms:arn:aws:kms:us-east-1:123456789012"}
    target = f"{topic}-r"
    out = run_cli("restore", "--from", s3_uri, "-b", bootstrap, "--rename", f"{topic}={target}",
                  "--state", str(tmp_path / "state"), "--encryption-key", f"kms://{other}", expect_exit=1)
    assert "with key kms:arn:" in out and not topic_exists(bootstrap, target)  # its commit's, first
    assert "ok:" in run_cli("verify", s3_uri, "--encryption-key", f"kms://{alias}")
    run_cli("restore", "--from", s3_uri, "-b", bootstrap, "--rename", f"{topic}={target}",
            "--state", str(tmp_path / "state"), "--encryption-key", f"kms://{alias}")
    assert without_offsets(consume_all(bootstrap, target)) == without_offsets(consume_all(bootstrap, topic))


def test_a_bad_key_is_one_line_before_anything_is_written(bootstrap, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="enc-bad")
    location = tmp_path / "b"
    for spec, words in ((str(tmp_path / "absent"), "bad --encryption-key"),
                        (f"file://{tmp_path / 'absent'}", "cannot be read")):
        out = run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, "--encryption-key", spec,
                      expect_exit=1)
        assert words in out and len(out.strip().splitlines()) == 1
    assert not location.exists()


def test_dataframe_writer_and_reader_take_the_key(bootstrap, spark, topic_factory, tmp_path):
    from topicvault.datasources import register

    register(spark)
    topic = topic_factory(2, prefix="enc-df")
    produce_records(bootstrap, topic, marked(topic, 2, 30, seed=9))
    location, key = str(tmp_path / "b"), key_file(tmp_path, "key")
    rows = spark.read.format("topicvault-kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load()
    rows.write.format("topicvault").option("encryptionKey", key).option("maxRecords", "10").mode("append").save(location)
    assert_no_plaintext(location)
    columns = ["partition", "offset", "key", "value", "headers", "timestamp"]
    back = spark.read.format("topicvault").option("encryptionKey", key).load(location).select(*columns).collect()
    assert sorted(map(tuple, back)) == sorted(map(tuple, rows.select(*columns).collect()))
    # On the driver, before any task; in options, not the CLI's flags (issue 38).
    with pytest.raises(Exception, match=r'no option\("encryptionKey"\) was given') as caught:
        spark.read.format("topicvault").load(location).collect()
    assert "Failed to generate Python data source read partitions" in str(caught.value)
    assert "--encryption-key" not in str(caught.value)


def test_follow_passes_the_key_to_the_streaming_writer(bootstrap, spark, topic_factory, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    topic = topic_factory(1, prefix="enc-follow")
    produce_records(bootstrap, topic, marked(topic, 1, 30, seed=10))
    location, key = str(tmp_path / "b"), key_file(tmp_path, "key")
    log = tmp_path / "follow.log"
    cli = str(Path(sys.executable).with_name("topicvault"))
    with open(log, "ab") as out:
        follower = subprocess.Popen([cli, "backup", "--follow", "-b", bootstrap, "--to", location, "-t", topic,
                                     "--flush-interval", "1", "--encryption-key", key],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while sum(o["records"] for o in committed_objects(location)) < 35 if Path(location).exists() else True:
            assert follower.poll() is None, log.read_text()
            if time.monotonic() >= deadline:  # a hang detector, not a speed check
                raise TimeoutError(log.read_text())
            time.sleep(0.5)
    finally:
        follower.send_signal(signal.SIGTERM)
        follower.wait(120)
    assert {e["key_id"] for e in committed_objects(location)} == {_key_id(key)}
    assert_no_plaintext(location)
    target = f"{topic}-r"
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}",
            "--state", str(tmp_path / "state"), "--encryption-key", key)
    assert without_offsets(consume_all(bootstrap, target)) == without_offsets(consume_all(bootstrap, topic))


def test_spark_task_retries_of_an_encrypted_backup_end_exactly_once(bootstrap, spark, topic_factory, tmp_path):
    # Every first task attempt fails after storing its 2nd object; the retry encrypts the same
    # records under fresh data keys, so its bytes differ: it must accept the stored objects.
    import subprocess
    import sys

    topic = topic_factory(2, prefix="enc-retry")
    produce_records(bootstrap, topic, marked(topic, 2, 600, seed=11))
    location, key, log = str(tmp_path / "b"), key_file(tmp_path, "key"), tmp_path / "cli.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOPICVAULT_CRASH_AT")}
    env.update(TOPICVAULT_FAIL_FIRST_ATTEMPT_AT="backup.object:2", TOPICVAULT_FAULT_LOG=str(tmp_path / "faults"))
    with open(log, "ab") as out:
        status = subprocess.run([str(Path(sys.executable).with_name("topicvault")), "backup", "-b", bootstrap,
                                 "--to", location, "-t", topic, "--max-records", "100", "--encryption-key", key,
                                 "--master", "local[2,4]"], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                env=env, timeout=300).returncode
    assert status == 0, log.read_text()[-3000:]
    assert len((tmp_path / "faults").read_text().splitlines()) == 2, "every first attempt must have failed"
    assert "ok:" in run_cli("verify", location, "--encryption-key", key, "-b", bootstrap)
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-r",
            "--state", str(tmp_path / "state"), "--encryption-key", key)
    assert without_offsets(consume_all(bootstrap, f"{topic}-r")) == without_offsets(consume_all(bootstrap, topic))


def test_a_store_profile_carries_the_key(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="enc-profile")
    produce_records(bootstrap, topic, marked(topic, 1, 20, seed=12))
    key = key_file(tmp_path, "key")
    config = tmp_path / "topicvault.toml"
    config.write_text(f'[stores.vault]\nuri = "{tmp_path / "b"}"\nencryption_key = "{key}"\n')
    run_cli("backup", "-b", bootstrap, "-t", topic, "--config", str(config), "--store", "vault")
    assert_no_plaintext(str(tmp_path / "b"))
    out = run_cli("verify", "--config", str(config), "--store", "vault")
    assert "ok:" in out and "checksum only" not in out
    shown = run_cli("config", "--config", str(config), "--store", "vault")
    assert key in shown and Path(key[len("file://"):]).read_text().strip() not in shown

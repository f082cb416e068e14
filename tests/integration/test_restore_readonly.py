"""Issue #19 item 1: restore from an archive it may only read; its state lives elsewhere.

Archives here are really read-only: a local one is made immutable (`chattr -R +i`: the tests
run as root, for whom a read-only mode bit stops nothing), an S3 one is read with credentials
whose IAM policy allows only reads (moto's server enforces IAM once told to).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
import uuid
from pathlib import Path

import boto3
import pytest
from clitools import run_cli, run_cli_process
from harness_s3 import moto_server
from kafkatools import commit_offsets, committed, consume_all, produce_records, strip, topic_exists
from nasty import nasty_records
from peertools import FIELDS, aiven_csv, archive_records, assert_restored, write_chunks
from topicvault.core.envelope import Record
from topicvault.core.errors import TopicvaultError
from topicvault.core.stores.locations import open_store
from topicvault.source.restore.offset_map import load_offset_maps
from topicvault.source.restore.restore_state import RestoreRecords, default_state_uri


def immutable(path: Path) -> None:
    result = subprocess.run(["chattr", "-R", "+i", str(path)], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"chattr +i is not supported here ({result.stderr.strip()}), and as root a read-only "
                    "directory would not stop writes")


def mutable(path: Path) -> None:
    subprocess.run(["chattr", "-R", "-i", str(path)], check=False, capture_output=True)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def frozen(tmp_path):
    """Make directories immutable with frozen(path); they are made mutable again afterwards."""
    paths: list[Path] = []

    def freeze(path: Path) -> Path:
        paths.append(path)
        immutable(path)
        return path

    yield freeze
    for path in paths:
        mutable(path)


@pytest.fixture
def local_backup(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="ro")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 1_000, big_values=0))
    group = f"ro-{uuid.uuid4().hex[:6]}"
    commit_offsets(bootstrap, group, {(topic, 0): 400, (topic, 1): 999})
    location = tmp_path / "archive"
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, "--max-records", "300")
    return topic, location, group


def test_restore_from_an_immutable_local_archive_is_killed_and_resumes(bootstrap, local_backup, frozen, tmp_path,
                                                                        restore_state_dir):
    topic, location, group = local_backup
    before = snapshot(location)
    frozen(location)
    target = f"{topic}-r"
    args = ["restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}",
            "--restore-id", "ro-local"]
    log = tmp_path / "cli.log"

    assert run_cli_process(args, log, "restore.produce:700") == -9, log.read_text()[-2000:]
    assert sum(map(len, consume_all(bootstrap, target).values())) < 2_000
    assert run_cli_process([*args, "--groups"], log) == 0, log.read_text()[-2000:]
    assert "restore id ro-local (resuming)" in log.read_text()  # its state was saved, outside the archive

    source = consume_all(bootstrap, topic)
    assert {p: strip(r) for p, r in consume_all(bootstrap, target).items()} == {p: strip(r) for p, r in source.items()}
    assert committed(bootstrap, group, target, 2) == {0: 400, 1: 999}
    mutable(location)
    assert snapshot(location) == before, "the archive was written to"
    records = RestoreRecords(open_store(str(restore_state_dir)), open_store(str(location)))
    assert sum(m.records for m in load_offset_maps(records, "ro-local").values()) == 2_000


def test_state_store_that_cannot_be_written_is_one_line_before_anything_is_created(bootstrap, local_backup, frozen,
                                                                                    tmp_path):
    topic, location, _ = local_backup
    state = tmp_path / "state"
    state.mkdir()
    frozen(state)
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={topic}-x",
                  "--state", str(state), expect_exit=1)
    [line] = [line for line in out.splitlines() if line.startswith("error:")]
    assert "Traceback" not in out and "cannot save restore state" in line and "--state" in line, out
    assert not topic_exists(bootstrap, f"{topic}-x"), "a topic was created before the state was saved"


def test_restore_started_by_an_older_version_resumes_once_its_state_is_imported(bootstrap, local_backup, frozen,
                                                                                restore_state_dir):
    topic, location, group = local_backup
    rid = f"legacy-{topic}"  # the session's state store is shared: another test may have a restore "legacy"
    target = f"{topic}-old"
    args = ["restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}",
            "--restore-id", rid]
    run_cli(*args)
    # Where an older version kept its records: in the archive. Move them there, then freeze the archive.
    legacy = location / "_topicvault" / "restores" / rid
    legacy.mkdir(parents=True)
    for record in restore_state_dir.glob(f"restores/*/{rid}/*.json"):
        shutil.move(record, legacy / record.name)
    frozen(location)
    records = RestoreRecords(open_store(str(restore_state_dir)), open_store(str(location)))
    with pytest.raises(TopicvaultError, match="has no offset map"):  # issue #39: never read from the archive
        load_offset_maps(records, rid)

    # A re-run without the id does not go looking in the archive (anyone who can write it could plant one) ...
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}",
                  expect_exit=1)
    assert "already holds records" in out and rid not in out, out
    # ... with it, the restore says the archive holds one and how to take it ...
    assert "--import-state" in run_cli(*args, expect_exit=1)
    # A dry run, one-shot or --follow, writes nothing (issue #50 item 14): the next run still imports.
    out = run_cli(*args, "--import-state", str(legacy), "--dry-run")
    assert records.names(rid) == [], f"a dry run wrote into the state store:\n{out}"
    assert "would import" in out and "nothing was written" in out, out
    out = run_cli(*args, "--import-state", str(legacy), "--dry-run", "--follow", expect_exit=1)
    assert "--dry-run" in out and records.names(rid) == [], out
    # ... and once imported, it resumes (nothing left to write) without writing into the archive.
    out = run_cli(*args, "--groups", "--import-state", str(legacy))
    assert "imported" in out and "restored 0 records" in out, out
    source = consume_all(bootstrap, topic)
    assert {p: strip(r) for p, r in consume_all(bootstrap, target).items()} == {p: strip(r) for p, r in source.items()}
    assert committed(bootstrap, group, target, 2) == {0: 400, 1: 999}
    assert sorted(p.name for p in legacy.iterdir()) == ["offset-map.json", "state.json"]
    assert sum(m.records for m in load_offset_maps(records, rid).values()) == 2_000  # now in the state store


READ_ONLY_POLICY = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket", "s3:GetBucketLocation"], "Resource": "*"}]}


@pytest.fixture
def read_only_s3(tmp_path):
    """A moto server holding a bucket, and the keys of an IAM user who may only read it (auth enforced)."""
    with moto_server(tmp_path) as endpoint:
        admin = {"endpoint_url": endpoint, "region_name": "us-east-1", "aws_access_key_id": "admin",
                 "aws_secret_access_key": "admin"}
        bucket = f"ro-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", **admin).create_bucket(Bucket=bucket)
        iam = boto3.client("iam", **admin)
        iam.create_user(UserName="reader")
        arn = iam.create_policy(PolicyName="read-only", PolicyDocument=json.dumps(READ_ONLY_POLICY))["Policy"]["Arn"]
        iam.attach_user_policy(UserName="reader", PolicyArn=arn)
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        yield endpoint, bucket, key["AccessKeyId"], key["SecretAccessKey"]


def enforce_auth(endpoint: str) -> None:
    """From now on every request must be signed by a known IAM user and allowed by its policy."""
    request = urllib.request.Request(f"{endpoint}/moto-api/reset-auth", data=b"0", method="POST",
                                     headers={"Content-Type": "text/plain"})  # a form body would be parsed away
    with urllib.request.urlopen(request, timeout=10):
        pass


def test_restore_from_s3_with_read_only_credentials_is_killed_and_resumes(bootstrap, spark, topic_factory,
                                                                         read_only_s3, tmp_path):
    endpoint, bucket, key_id, secret = read_only_s3
    topic = topic_factory(2, prefix="ros3")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 1_000, big_values=0))
    uri = f"s3://{bucket}/archive"
    endpoint_option = ["-S", f"endpoint_url={endpoint}", "-S", "region=us-east-1"]
    run_cli("backup", "-b", bootstrap, "--to", uri, "-t", topic, "--max-records", "300", *endpoint_option)
    enforce_auth(endpoint)
    reader = [*endpoint_option, "-S", f"access_key_id={key_id}", "-S", f"secret_access_key={secret}"]
    archive = open_store(uri, dict(option.split("=", 1) for option in reader[1::2]))
    listed = sorted((i.key, i.etag) for i in archive.list())
    with pytest.raises(TopicvaultError, match="denied"):  # the credentials really may only read
        archive.put("_topicvault/restores/probe", b"x")

    target = f"{topic}-r"
    args = ["restore", "--from", uri, "-b", bootstrap, "--rename", f"{topic}={target}", "--restore-id", "ro-s3",
            *reader]
    log = tmp_path / "cli.log"
    assert run_cli_process(args, log, "restore.produce:900") == -9, log.read_text()[-2000:]
    assert run_cli_process(args, log) == 0, log.read_text()[-2000:]
    source = consume_all(bootstrap, topic)
    assert {p: strip(r) for p, r in consume_all(bootstrap, target).items()} == {p: strip(r) for p, r in source.items()}
    assert sorted((i.key, i.etag) for i in archive.list()) == listed


def test_peer_archive_is_restored_read_only_and_skip_is_refused_for_it(bootstrap, spark, frozen, tmp_path):
    topic = f"peer-ro-{uuid.uuid4().hex[:6]}"
    records = {p: [Record(topic, p, r.offset, r.key, r.value, r.timestamp_ms, 0,
                          tuple((k, v if v is not None else b"") for k, v in r.headers))
                   for r in rows] for p, rows in archive_records(topic).items()}
    archive = tmp_path / "aiven"
    write_chunks(archive, records, lambda p, r: f"{topic}-{p}-{r.offset}", aiven_csv)
    before = snapshot(archive)
    frozen(archive)
    args = ["restore", "--from", str(archive), "-b", bootstrap, "--peer-fields", FIELDS,
            "--rename", f"{topic}={topic}-r"]
    out = run_cli(*args, "--on-error", "skip", expect_exit=1)
    assert "--on-error skip works with topicvault archives only" in out and not topic_exists(bootstrap, f"{topic}-r")
    run_cli(*args)
    assert_restored(bootstrap, f"{topic}-r", records)
    mutable(archive)
    assert snapshot(archive) == before


def test_state_goes_to_the_state_uri_given_or_the_default_directory(bootstrap, local_backup, s3_uri, monkeypatch,
                                                                    tmp_path):
    topic, location, _ = local_backup
    run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={topic}-s3state",
            "--restore-id", "on-s3", "--state", s3_uri)
    keys = sorted(info.key.split("/", 2)[2] for info in open_store(s3_uri).list("restores/"))
    assert keys == ["on-s3/offset-map.json", "on-s3/state.json"]

    monkeypatch.delenv("TOPICVAULT_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_state_uri() == str(tmp_path / "xdg" / "topicvault")
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_state_uri() == str(tmp_path / "home" / ".local" / "state" / "topicvault")


def test_an_s3_state_gets_the_store_options_of_the_archive_without_aws_endpoint_url(bootstrap, spark, topic_factory,
                                                                                    s3_endpoint, s3_uri, monkeypatch):
    # Issue #50 item 15: a state on a store other than AWS (MinIO, here moto) must not need
    # AWS_ENDPOINT_URL when -S (or a store profile) already says where the store is.
    topic = topic_factory(1, prefix="s3state")
    produce_records(bootstrap, topic, nasty_records(topic, 1, 50, big_values=0))
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    options = ["-S", f"endpoint_url={s3_endpoint}", "-S", "region=us-east-1", "-S", "max_attempts=1"]
    state = s3_uri.rsplit("/", 2)[0] + "/restore-state"
    run_cli("backup", "-b", bootstrap, "--to", s3_uri, "-t", topic, *options)
    out = run_cli("restore", "--from", s3_uri, "-b", bootstrap, "--rename", f"{topic}={topic}-r", "--restore-id",
                  "on-minio", "--state", state, *options)
    assert "restored 50 records" in out, out
    held = open_store(state, {"endpoint_url": s3_endpoint}).list("restores/")
    assert sorted(info.key.split("/", 2)[2] for info in held) == ["on-minio/offset-map.json", "on-minio/state.json"]
    held_state = next(open_store(state, {"endpoint_url": s3_endpoint}).list("restores/")).key
    out = run_cli("verify", s3_uri, "--state", state, "--json", *options)
    assert json.loads(out)["damaged"] == [] and json.loads(out)["ok"]
    # verify does read that state: damaged, it is named.
    open_store(state, {"endpoint_url": s3_endpoint}).put(held_state, b"{")
    assert held_state.split("/", 1)[1] in json.loads(run_cli("verify", s3_uri, "--state", state, "--json",
                                                             *options))["damaged"][0]

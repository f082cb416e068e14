"""An encrypted archive authenticates what it holds (issue #39 item 4): whoever can write the
bucket but holds no key must not be able to swap objects between topics, put plaintext in, or
edit commit records, checkpoints or restore state unnoticed. No broker: the archive is written
by the same writer a backup uses (sink.objects) and committed the way a backup commits."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from clitools import assert_one_line_error, run_cli
from legacy_archive import (
    MALLORY_ACL,
    as_written_before_authentication,
    downgrade_with_decoys,
    strip_authentication,
)
from legacy_archive import edit_commit as edit_commit_record
from topicvault.core.archive import commit_log
from topicvault.core.archive.checkpoints import CHECKPOINTS_PREFIX, checkpoint_json, load_state
from topicvault.core.archive.commit_log import backup_record
from topicvault.core.archive.commits import (
    COMMITS_PREFIX,
    BackupState,
    PartitionRange,
    fold_commits,
    warn_unauthenticated,
)
from topicvault.core.crypto import keyring_of, write_key_file
from topicvault.core.envelope import Record, records_to_batch
from topicvault.core.rotation import Rotation
from topicvault.core.stores.local_store import LocalStore
from topicvault.formats import resolve_format
from topicvault.keys import default_codec
from topicvault.sink.objects import write_objects


def key_spec(tmp_path: Path, name: str = "key") -> str:
    write_key_file(str(tmp_path / name))
    return f"file://{tmp_path / name}"


def backed_up(tmp_path: Path, spec: str | None, topics: dict[str, list[bytes]], commit_keyed: bool = True) -> Path:
    """A location holding one commit of `topics` (partition 0 each: key i, the given values),
    committed as a backup commits (with its key, unless not `commit_keyed`: as before #39)."""
    location = tmp_path / "archive"
    store = LocalStore(str(location))
    keyring = keyring_of((spec,)) if spec else None
    entries, ranges = [], []
    for topic, values in topics.items():
        records = [Record(topic, 0, i, b"k%d" % i, value, 1_700_000_000_000 + i) for i, value in enumerate(values)]
        entries += write_objects([records_to_batch(records)], store, default_codec(), resolve_format("parquet"),
                                 Rotation(), run_id="r000000000001", keyring=keyring)
        ranges.append(PartitionRange(topic, 0, 0, len(values)))
    commit_log.append(store, BackupState(), lambda state: backup_record(state, ranges, entries, topics={}),
                      keyring if commit_keyed else None)
    return location


def commit_path(location: Path, sequence: int = 1) -> Path:
    return location / COMMITS_PREFIX / f"{sequence:019d}.json"


def swap_public_for_salaries(location: Path) -> None:
    """The attack of the issue: public[0] is made of the salaries object (same key, checksum)."""
    path = commit_path(location)
    body = json.loads(path.read_bytes())
    salaries = next(o for o in body["objects"] if o["topic"] == "salaries")
    body["objects"] = [o for o in body["objects"] if o["topic"] != "public"] + [dict(salaries, topic="public")]
    path.write_text(json.dumps(body, sort_keys=True, indent=1))


TOPICS = {"public": [b"hello", b"world"], "salaries": [b"alice: 250000", b"bob: 240000"]}


def test_an_object_swapped_between_topics_is_refused(tmp_path):
    spec = key_spec(tmp_path)
    location = backed_up(tmp_path, spec, TOPICS)
    assert "hello" in run_cli("inspect", str(location), "--topic", "public", "--encryption-key", spec)
    swap_public_for_salaries(location)
    out = run_cli("inspect", str(location), "--topic", "public", "--encryption-key", spec, expect_exit=1)
    assert "alice" not in out and "salaries[0]" not in out
    assert_one_line_error(out)
    out = run_cli("verify", str(location), "--encryption-key", spec, expect_exit=1)
    assert "alice" not in out and "ok" not in out.lower().split()


def test_an_unencrypted_archive_finds_records_of_another_topic(tmp_path):
    location = backed_up(tmp_path, None, TOPICS)
    swap_public_for_salaries(location)
    out = run_cli("inspect", str(location), "--topic", "public", expect_exit=1)
    assert_one_line_error(out, "holds records of salaries[0]", "names it as public[0]")
    assert "alice" not in out


def test_a_plaintext_object_is_refused_when_keys_are_given(tmp_path):
    spec = key_spec(tmp_path)
    # Written by someone without the key: an unauthenticated commit naming a plaintext object
    # (read as a commit from before #39, there being no authenticated one)...
    location = backed_up(tmp_path, None, {"public": [b"forged"]})
    out = run_cli("inspect", str(location), "--topic", "public", "--encryption-key", spec, expect_exit=1)
    assert_one_line_error(out, "is not encrypted", "--encryption-key")  # ...whose object is refused
    assert "forged" not in out
    assert "forged" in run_cli("inspect", str(location), "--topic", "public")  # without keys: as before


def edit_commit(location: Path, change) -> None:
    path = commit_path(location)
    body = json.loads(path.read_bytes())
    change(body)
    path.write_text(json.dumps(body, sort_keys=True, indent=1))


def test_a_commit_record_edited_without_the_key_is_refused(tmp_path):
    spec = key_spec(tmp_path)
    location = backed_up(tmp_path, spec, TOPICS)
    assert "authentication" in json.loads(commit_path(location).read_bytes())
    # A config a restore would apply to the topic it creates.
    edit_commit(location, lambda body: body["topics"].update({"public": {"configs": {"cleanup.policy": "compact"}}}))
    for command in (["inspect", str(location), "--topic", "salaries"], ["verify", str(location)]):
        out = run_cli(*command, "--encryption-key", spec, expect_exit=1)
        assert_one_line_error(out, "commit record _topicvault/commits/0000000000000000001.json fails authentication")
    assert "public" in run_cli("ls", str(location))  # without keys nothing is checked (docs say so)


def test_a_commit_record_added_without_the_key_is_refused(tmp_path):
    spec = key_spec(tmp_path)
    location = backed_up(tmp_path, spec, TOPICS)
    body = json.loads(commit_path(location).read_bytes())
    del body["authentication"]
    body.update(sequence=2, ranges=[{"topic": "public", "partition": 0, "start": 2, "end": 3}], objects=[])
    commit_path(location, 2).write_text(json.dumps(body, sort_keys=True, indent=1))
    out = run_cli("inspect", str(location), "--topic", "public", "--encryption-key", spec, expect_exit=1)
    assert_one_line_error(out, "commit record _topicvault/commits/0000000000000000002.json is not authenticated",
                          "commit 1 and later are")


def unauthenticated_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "not authenticated" in r.getMessage()]


def test_an_encrypted_archive_from_before_authentication_reads_with_one_warning(tmp_path, caplog):
    spec = key_spec(tmp_path)
    location = backed_up(tmp_path, spec, TOPICS)
    append(location, spec, {"public": [b"again"]})
    as_written_before_authentication(location, spec)  # two commit records as topicvault wrote them before #39
    with caplog.at_level("WARNING"):
        out = run_cli("inspect", str(location), "--topic", "public", "--encryption-key", spec)
    assert "hello" in out and "again" in out
    [warning] = unauthenticated_warnings(caplog)
    assert "2 commit records" in warning and "object lists cannot be checked" in warning
    caplog.clear()
    warn_unauthenticated.cache_clear()  # once per process: each CLI command is one
    with caplog.at_level("WARNING"):
        assert "ok:" in run_cli("verify", str(location), "--encryption-key", spec)
    assert len(unauthenticated_warnings(caplog)) == 1


def append(location: Path, spec: str | None, topics: dict[str, list[bytes]]) -> None:
    """Commit one more object per topic (partition 0, after what is there) as a backup with
    `spec` (None: without a key) commits."""
    store = LocalStore(str(location))
    keyring = keyring_of((spec,)) if spec else None
    state = load_state(store, keyring)
    entries, ranges = [], []
    for topic, values in topics.items():
        start = state.end_offset(topic, 0)
        records = [Record(topic, 0, start + i, b"k%d" % i, value, 1_700_000_100_000 + i)
                   for i, value in enumerate(values)]
        entries += write_objects([records_to_batch(records)], store, default_codec(), resolve_format("parquet"),
                                 Rotation(), run_id=f"r{state.last_sequence + 1:012d}", keyring=keyring)
        ranges.append(PartitionRange(topic, 0, start, start + len(values)))
    commit_log.append(store, state, lambda state: backup_record(state, ranges, entries, topics={}), keyring)


def test_a_keyed_commit_onto_an_archive_from_before_is_authenticated(tmp_path, caplog):
    spec = key_spec(tmp_path)
    location = backed_up(tmp_path, spec, TOPICS)
    as_written_before_authentication(location, spec)
    append(location, spec, {"public": [b"after"]})  # as a backup with the key does
    assert "authentication" not in json.loads(commit_path(location, 1).read_bytes())
    assert json.loads(commit_path(location, 2).read_bytes())["authenticated_from"] == 2
    warn_unauthenticated.cache_clear()
    caplog.clear()
    with caplog.at_level("WARNING"):  # read from the checkpoint that commit wrote: commit 1 is not read
        assert "after" in run_cli("inspect", str(location), "--topic", "public", "--encryption-key", spec)
    assert not unauthenticated_warnings(caplog)
    assert "ok:" in run_cli("verify", str(location), "--encryption-key", spec)


def test_an_unauthenticated_commit_after_an_authenticated_one_is_refused(tmp_path):
    spec = key_spec(tmp_path)
    location = backed_up(tmp_path, spec, TOPICS)
    as_written_before_authentication(location, spec)
    append(location, spec, {"public": [b"after"]})
    added = json.loads(commit_path(location, 2).read_bytes())
    del added["authentication"], added["authenticated_from"]
    added.update(sequence=3, ranges=[{"topic": "public", "partition": 0, "start": 3, "end": 3}], objects=[],
                 topics={"public": {"configs": {"cleanup.policy": "compact"}}})
    commit_path(location, 3).write_text(json.dumps(added, sort_keys=True, indent=1))
    for command in (["inspect", str(location), "--topic", "public"], ["verify", str(location)]):
        out = run_cli(*command, "--encryption-key", spec, expect_exit=1)
        assert_one_line_error(out, "commit record _topicvault/commits/0000000000000000003.json is not authenticated",
                              "commit 2 and later are")


def test_authentication_stripped_from_a_commit_before_an_authenticated_one_is_refused(tmp_path):
    spec = key_spec(tmp_path)
    keyring = keyring_of((spec,))
    location = backed_up(tmp_path, spec, TOPICS)
    as_written_before_authentication(location, spec)
    store = LocalStore(str(location))
    for _ in range(2):  # two authenticated commits that name no object
        state = load_state(store, keyring)
        commit_log.append(store, state, lambda state: backup_record(state, [PartitionRange("public", 0, 2, 2)], [],
                                                                    topics={}), keyring)
    strip_authentication(commit_path(location, 2))  # and edited at will: commit 3 says 2 was authenticated
    out = run_cli("inspect", str(location), "--topic", "public", "--encryption-key", spec, expect_exit=1)
    assert_one_line_error(out, "commit record _topicvault/commits/0000000000000000003.json",
                          "commit 2 is not authenticated")


def test_authentication_stripped_from_every_commit_of_a_new_archive_is_refused(tmp_path):
    # Looks like an archive from before #39, but its objects are sealed as only a topicvault
    # that authenticates every commit it writes seals them (container version 2).
    spec = key_spec(tmp_path)
    location = backed_up(tmp_path, spec, TOPICS)
    append(location, spec, {"public": [b"again"]})
    for sequence in (1, 2):
        strip_authentication(commit_path(location, sequence))
    out = run_cli("inspect", str(location), "--topic", "salaries", "--encryption-key", spec, expect_exit=1)
    assert_one_line_error(out, "commit record _topicvault/commits/0000000000000000001.json is not authenticated",
                          "container version 2")


def test_a_checkpoint_written_without_the_key_is_not_read_with_it(tmp_path):
    spec = key_spec(tmp_path)
    keyring = keyring_of((spec,))
    location = backed_up(tmp_path, spec, TOPICS)
    store = LocalStore(str(location))
    truth = fold_commits(store, keyring)
    forged = fold_commits(store)
    forged.partitions[("public", 0)].objects.clear()  # public's records gone
    commit_sha = hashlib.sha256(commit_path(location).read_bytes()).hexdigest()
    store.put(f"{CHECKPOINTS_PREFIX}{1:019d}.json", checkpoint_json(forged, commit_sha))
    assert load_state(store) == forged  # a reader without keys cannot tell
    assert load_state(store, keyring) == truth
    assert "hello" in run_cli("inspect", str(location), "--topic", "public", "--encryption-key", spec)


def test_expire_of_an_encrypted_location_needs_the_key(tmp_path):
    spec = key_spec(tmp_path)
    location = backed_up(tmp_path, spec, TOPICS)
    time.sleep(1.5)  # expire drops only what was committed before TIME (its commits cannot be backdated: authenticated)
    out = run_cli("expire", str(location), "--before", "1s", expect_exit=1)
    assert_one_line_error(out, "is encrypted: pass its --encryption-key")
    run_cli("expire", str(location), "--before", "1s", "--encryption-key", spec)
    assert len(fold_commits(LocalStore(str(location)), keyring_of((spec,))).partitions[("public", 0)].objects) == 0


def test_a_commit_with_group_offsets_keyed_by_partition_authenticates(tmp_path):
    # Integer dict keys sort differently once JSON made them strings: the MAC must not care.
    from topicvault.core.archive.commits import CommitRecord, write_commit

    keyring = keyring_of((key_spec(tmp_path),))
    store = LocalStore(str(tmp_path / "archive"))
    groups = {"g": {"read_ms": 1, "offsets": {"t": {2: 5, 10: 7}}}}
    write_commit(store, CommitRecord(1, 0, (PartitionRange("t", 2, 0, 0), PartitionRange("t", 10, 0, 0)), (), {},
                                     groups=groups), keyring)
    assert load_state(store, keyring).groups["g"]["offsets"]["t"] == {"2": 5, "10": 7}


def test_a_commit_without_the_key_onto_an_authenticated_location_is_refused(tmp_path):
    # A backup or compact run without --encryption-key would append a commit no key vouches for,
    # after which every reader given the key refuses the whole location: refused before writing.
    spec = key_spec(tmp_path)
    location = backed_up(tmp_path, spec, TOPICS)
    store = LocalStore(str(location))
    state = load_state(store)  # read without the key, as an unkeyed run reads it
    import pytest
    from topicvault.core.errors import TopicvaultError

    with pytest.raises(TopicvaultError, match="pass its --encryption-key"):
        commit_log.append(store, state, lambda current: backup_record(
            current, [PartitionRange("public", 0, 2, 2)], [], topics={}))
    assert sorted(p.name for p in (location / COMMITS_PREFIX).iterdir()) == [commit_path(location).name]
    assert len(fold_commits(store, keyring_of((spec,))).partitions[("public", 0)].objects) == 1


def drop_again(body: dict) -> None:
    """Commit 2 of the archives below loses the object holding public's record "again"."""
    body["objects"] = [o for o in body["objects"] if not (o["topic"] == "public" and "decoy" not in o["key"])]


def test_a_downgrade_with_decoys_of_an_archive_authenticated_from_its_first_commit_is_refused(tmp_path):
    # #50.1: a decoy (real key id, missing object) first in each stripped commit hid the version 2
    # objects from the "written before authentication" check; an expire removed the decoys.
    spec = key_spec(tmp_path)
    location = backed_up(tmp_path, spec, TOPICS)
    append(location, spec, {"public": [b"again"]})
    downgrade_with_decoys(location)
    edit_commit_record(location, 2, drop_again)  # a record gone, and the cluster's access in
    edit_commit_record(location, 1, lambda body: body.update(access={"acls": [MALLORY_ACL]}))
    for command in (["verify", str(location)], ["inspect", str(location), "--topic", "public"]):
        warn_unauthenticated.cache_clear()
        out = run_cli(*command, "--encryption-key", spec, expect_exit=1)
        assert_one_line_error(out, "commit record _topicvault/commits/000000000000000000", "is not authenticated",
                              "container version 2")


def test_an_unauthenticated_commit_naming_a_missing_or_plaintext_object_as_encrypted_is_refused(tmp_path):
    spec = key_spec(tmp_path)
    keyring = keyring_of((spec,))
    for damage in ("missing", "plaintext"):
        location = backed_up(tmp_path / damage, spec, TOPICS)
        as_written_before_authentication(location, spec)
        key = next(o["key"] for o in json.loads(commit_path(location).read_bytes())["objects"]
                   if o["topic"] == "public")
        if damage == "missing":
            (location / key).unlink()
        else:
            (location / key).write_bytes(b"PAR1 anything but a sealed container")
        import pytest
        from topicvault.core.crypto import Unauthenticated

        with pytest.raises(Unauthenticated, match=f"commit record {COMMITS_PREFIX}0000000000000000001.json is not "
                                                  f"authenticated.*{key}"):
            load_state(LocalStore(str(location)), keyring)


def test_an_unauthenticated_commit_carries_no_cluster_access_when_read_with_keys(tmp_path, caplog):
    spec = key_spec(tmp_path)
    location = backed_up(tmp_path, spec, TOPICS)
    as_written_before_authentication(location, spec)
    edit_commit_record(location, 1, lambda body: body.update(access={"acls": [MALLORY_ACL]}))
    store = LocalStore(str(location))
    with caplog.at_level("WARNING"):
        state = load_state(store, keyring_of((spec,)))
    assert state.access == {} and state.access_at(None) is None
    assert any("ACLs and SCRAM users" in r.getMessage() and "0000000000000000001.json" in r.getMessage()
               for r in caplog.records)
    assert load_state(store).access == {"acls": [MALLORY_ACL]}  # without keys nothing is authenticated

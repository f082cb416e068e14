"""Schema registry in the backup (issue #52), pure parts: the saved form, schema ids in records, the
commit record and state that carry them, and what a backup plan saves."""

from __future__ import annotations

import json

import pytest
from topicvault.core.archive.checkpoints import _decode, _encode
from topicvault.core.archive.commit_log import backup_record
from topicvault.core.archive.commits import BackupState, CommitRecord, ObjectEntry, PartitionRange, read_commit
from topicvault.core.cluster.registry_client import RegistryClient, shown_url
from topicvault.core.crypto import FileKey, Keyring, file_key_id
from topicvault.core.envelope import Record, records_to_batch
from topicvault.core.errors import TopicvaultError
from topicvault.core.profiles import resolve, scrub
from topicvault.formats.saved_registry import (
    check_saved,
    count_schema_ids,
    describe_ids,
    differing_ids,
    ids_lacking,
    registration_order,
    registry_summary,
    renamed_subjects,
    renumbered_references,
    rewrite_batch,
    rewrite_schema_id,
    schema_id,
    wire_format_fields,
)
from topicvault.sink.plan import ClusterRead, plan_backup
from topicvault.source.cluster_restore.registry_restore import check_schema_id_mode

SAVED = {
    "config": "BACKWARD", "mode": "READWRITE",
    "subjects": {
        "orders-value": {"deleted": False, "config": "FULL", "mode": None, "versions": [
            {"version": 1, "id": 1, "schemaType": "AVRO", "schema": '"string"', "references": [], "deleted": False},
            {"version": 2, "id": 4, "schemaType": "AVRO", "schema": '"int"', "references": [
                {"name": "x", "subject": "x-value", "version": 1}], "deleted": False}]},
        "gone-value": {"deleted": True, "config": None, "mode": None, "versions": [
            {"version": 1, "id": 2, "schemaType": "JSON", "schema": "{}", "references": [], "deleted": True}]},
    },
}


def wire(schema: int, payload: bytes = b"payload") -> bytes:
    return b"\x00" + schema.to_bytes(4, "big") + payload


def test_schema_id_reads_the_wire_format_and_nothing_else():
    assert schema_id(wire(7)) == 7
    assert schema_id(wire(2**31 - 1, b"")) == 2**31 - 1
    for other in (None, b"", b"\x00\x00\x00\x07", b"\x01\x00\x00\x00\x07x", b"plain text"):
        assert schema_id(other) is None


def test_rewrite_changes_only_the_four_id_bytes_of_mapped_ids():
    assert rewrite_schema_id(wire(7, b"\x00\xff rest"), {7: 70_000}) == wire(70_000, b"\x00\xff rest")
    for untouched in (wire(8), b"\x00\x00\x00", b"text", None, b"\x01" + wire(7)[1:]):
        assert rewrite_schema_id(untouched, {7: 9}) is untouched  # byte-exact: the same object
    assert rewrite_schema_id(wire(7), {7: 7}) == wire(7)


def test_count_schema_ids_counts_keys_and_values_of_a_batch():
    pairs = [(wire(1), wire(4)), (None, wire(4)), (b"k", b"\x00\x00"), (wire(2), None), (b"\x05" + wire(9)[1:], b"")]
    records = [Record("t", 0, offset, key, value, 0) for offset, (key, value) in enumerate(pairs)]
    assert dict(count_schema_ids(records_to_batch(records))) == {1: 1, 4: 2, 2: 1}
    assert count_schema_ids(records_to_batch([Record("t", 0, 0, b"k", b"v", 0)])) == {}


def test_check_saved_accepts_the_saved_form_and_names_what_is_wrong():
    assert check_saved(SAVED) is SAVED
    assert registry_summary(SAVED) == {"subjects": 2, "deleted_subjects": 1, "versions": 3, "ids": 3}
    bad_cases = [
        ([], "not an object"),
        ({**SAVED, "config": "SOMETIMES"}, "global compatibility"),
        ({**SAVED, "subjects": {"s": {"versions": [{"version": 1, "id": -1, "schemaType": "AVRO", "schema": ""}]}}},
         "valid version number and id"),
        ({**SAVED, "subjects": {"s": {"versions": [{"version": 1, "id": 3, "schemaType": "XML", "schema": ""}]}}},
         "schema type"),
        ({**SAVED, "subjects": {"s": {"versions": [{"version": 1, "id": 3, "schemaType": "AVRO", "schema": "",
                                                    "references": [{"name": "n"}]}]}}}, "malformed reference"),
    ]
    for body, needle in bad_cases:
        with pytest.raises(ValueError, match=needle):
            check_saved(body)


def test_a_saved_id_standing_for_two_schemas_is_damage():
    """Else a restore would give records of one schema the target id of the other."""
    twin = {"version": 1, "id": 1, "schemaType": "AVRO", "schema": '"string"', "references": []}
    assert check_saved({"subjects": {"a": {"versions": [twin]}, "b": {"versions": [{**twin, "schemaType": None}]}}})
    for other in ({"schema": '"int"'}, {"schemaType": "JSON"}, {"references": [{"name": "x", "subject": "x",
                                                                                "version": 1}]}):
        with pytest.raises(ValueError, match="saved schema id 1 stands for two different schemas"):
            check_saved({"subjects": {"a": {"versions": [twin]}, "b": {"versions": [{**twin, **other}]}}})


def test_ids_lacking_names_the_used_ids_the_saved_registry_does_not_hold():
    assert ids_lacking({1: 5, 3: 2, 4: 1, 99: 1}, SAVED) == [3, 99]
    assert ids_lacking({5: 1}, None) == [5]


def _entry(offset: int, schema_ids=()) -> ObjectEntry:
    return ObjectEntry(f"t/{offset}", "t", 0, offset, offset + 9, 10, 100, 0, 0, "00", schema_ids=schema_ids)


def test_a_backup_commit_sums_its_objects_schema_ids_and_carries_them_through_json_and_checkpoints():
    record = backup_record(BackupState(), (PartitionRange("t", 0, 0, 20),),
                           (_entry(0, ((1, 3), (4, 7))), _entry(10, ((4, 1),))), schema_registry=SAVED)
    assert record.schema_ids == {1: 3, 4: 8}
    # An entry's JSON is what a topicvault before schema ids reads (it refuses unknown entry fields).
    assert set(record.objects[0].to_json()) == {"key", "topic", "partition", "first_offset", "last_offset", "records",
                                                "bytes", "min_timestamp_ms", "max_timestamp_ms", "sha256"}
    back = CommitRecord.from_json(record.to_json(), record.key)
    assert (back.schema_ids, back.schema_registry) == ({1: 3, 4: 8}, SAVED)
    state = BackupState()
    state.apply(back, back.key)
    state.apply(backup_record(state, (PartitionRange("t", 0, 20, 30),), (_entry(20, ((4, 2), (9, 1))),)), "k2")
    assert state.schema_ids == {1: 3, 4: 10, 9: 1}
    assert _decode(_encode(state, BackupState), BackupState) == state


def test_registry_as_of_a_time_is_the_newest_saved_by_then():
    state = BackupState()
    newer = {**SAVED, "config": "NONE"}
    for sequence, (created, registry) in enumerate([(1_000, SAVED), (2_000, None), (3_000, newer)], start=1):
        state.apply(CommitRecord(sequence, created, (), (), schema_registry=registry), "k")
    assert state.registry_at(None) == newer
    assert state.registry_at(2_999) == SAVED
    assert state.registry_at(999) is None


def test_a_backup_plan_saves_the_registry_only_when_it_changed():
    state = BackupState()
    state.apply(CommitRecord(1, 1_000, (PartitionRange("t", 0, 0, 5),), (), schema_registry=SAVED), "k")
    offsets = {("t", 0): (0, 5)}
    same = plan_backup(ClusterRead({"t": 1}, offsets, schema_registry=SAVED), state)
    assert same.schema_registry is None and not same.needs_commit
    changed = {**SAVED, "mode": "READONLY"}
    plan = plan_backup(ClusterRead({"t": 1}, offsets, schema_registry=changed), state)
    assert plan.schema_registry == changed and plan.needs_commit
    assert plan_backup(ClusterRead({"t": 1}, offsets), state).schema_registry is None  # not read: nothing saved


def test_a_malformed_saved_registry_or_schema_ids_make_the_commit_unreadable():
    record = CommitRecord(1, 1_000, (PartitionRange("t", 0, 0, 20),), (_entry(0),))
    bad_registry = {**json.loads(record.to_json()), "schema_registry": []}
    bad = [bad_registry, *({**json.loads(record.to_json()), "schema_ids": ids} for ids in
                           ({"x": 1}, {"1": 0}, {"-1": 2}, {str(2**31): 1}, [1]))]
    for body in bad:
        with pytest.raises(TopicvaultError, match="unreadable"):
            CommitRecord.from_json(json.dumps(body).encode(), record.key)


def test_an_unauthenticated_commit_read_with_a_key_carries_no_registry():
    keyring = Keyring((FileKey("k", b"k" * 32, file_key_id(b"k" * 32)),))
    record = CommitRecord(1, 1_000, (), (), schema_registry=SAVED)
    assert read_commit(BackupState(), record.to_json(keyring), record.key, keyring).schema_registry == SAVED
    assert read_commit(BackupState(), record.to_json(), record.key, keyring).schema_registry is None


def test_registration_order_puts_references_and_earlier_versions_first():
    saved = {"subjects": {
        "a": {"versions": [{"version": 2, "id": 5, "references": [{"name": "z", "subject": "z", "version": 1}]},
                           {"version": 1, "id": 1}]},
        "z": {"versions": [{"version": 1, "id": 9, "references": [{"name": "a", "subject": "a", "version": 1}]}]}}}
    assert [(s, v["version"]) for s, v in registration_order(saved)] == [("a", 1), ("z", 1), ("a", 2)]
    saved["subjects"]["a"]["versions"][1]["references"] = [{"name": "z", "subject": "z", "version": 1}]
    with pytest.raises(ValueError, match="cycle"):
        registration_order(saved)
    with pytest.raises(ValueError, match="not saved"):
        registration_order({"subjects": {"a": {"versions": [
            {"version": 1, "id": 1, "references": [{"name": "q", "subject": "q", "version": 3}]}]}}})


def test_renamed_topics_take_their_key_and_value_subjects_and_the_references_to_them():
    """restore --rename a=b: a TopicNameStrategy client of b looks up b-key / b-value."""
    saved = {"subjects": {
        "a-value": {"versions": [{"version": 1, "id": 1, "references": [{"name": "k", "subject": "a-key", "version": 1}]}]},
        "a-key": {"versions": [{"version": 1, "id": 2, "references": []}]},
        "a-extra": {"versions": [{"version": 1, "id": 3, "references": []}]},  # another strategy's: kept
        "c-value": {"versions": [{"version": 1, "id": 4, "references": [{"name": "v", "subject": "a-value", "version": 1}]}]},
    }}
    renamed = renamed_subjects(saved, {"a": "b", "c": "c", "gone": "elsewhere"})
    assert sorted(renamed["subjects"]) == ["a-extra", "b-key", "b-value", "c-value"]
    assert renamed["subjects"]["b-value"]["versions"][0]["references"] == [{"name": "k", "subject": "b-key", "version": 1}]
    assert renamed["subjects"]["c-value"]["versions"][0]["references"][0]["subject"] == "b-value"
    assert saved["subjects"]["c-value"]["versions"][0]["references"][0]["subject"] == "a-value"  # not changed in place
    assert renamed_subjects(saved, {"a": "a"}) == saved
    # a=c, c=a swaps the subjects; a=c alone would make two c-value subjects: refused
    assert renamed_subjects(saved, {"a": "c", "c": "a"})["subjects"]["a-value"]["versions"][0]["id"] == 4
    with pytest.raises(ValueError, match="c-value"):
        renamed_subjects(saved, {"a": "c"})


def test_renumbered_references_and_differing_ids():
    version = {"references": [{"name": "n", "subject": "s", "version": 2}, {"name": "m", "subject": "t", "version": 1}]}
    assert renumbered_references(version, {("s", 2): 1}) == [{"name": "n", "subject": "s", "version": 1},
                                                              {"name": "m", "subject": "t", "version": 1}]
    assert differing_ids({1: 1, 4: 2, 3: 7}) == {3: 7, 4: 2}
    assert describe_ids({i: i + 100 for i in range(12)}, limit=2) == "0→100, 1→101, … (12 in all)"


def test_rewrite_batch_changes_only_records_carrying_a_mapped_id():
    pairs = [(wire(1), wire(4, b"v")), (b"plain", wire(4)), (None, None), (wire(2), b"\x00"), (b"k", wire(9))]
    batch = records_to_batch([Record("t", 0, offset, key, value, 5) for offset, (key, value) in enumerate(pairs)])
    rewritten, changed = rewrite_batch(batch, {1: 11, 4: 44})
    assert changed == 2
    assert rewritten.column("key").to_pylist() == [wire(11), b"plain", None, wire(2), b"k"]
    assert rewritten.column("value").to_pylist() == [wire(44, b"v"), wire(44), None, b"\x00", wire(9)]
    for name in ("topic", "partition", "offset", "timestamp", "timestampType", "headers"):
        assert rewritten.column(name).equals(batch.column(name))
    assert rewrite_batch(batch, {}) == (batch, 0)
    assert rewrite_batch(batch, {77: 78})[1] == 0


def test_a_remap_rewrites_only_the_keys_and_values_a_saved_subject_names():
    """An 8-byte big-endian long key starts with byte 0 and reads as a schema id (20,000,000 holds id 1):
    rewriting every record that looks like the wire format turned it into 120,663,296 (the adversarial
    review of #52). Only `<topic>-key` / `<topic>-value` subjects say a field carries the format."""
    saved = {"subjects": {"orders-value": {}, "users-key": {}, "users-value": {}, "-key": {}, "audit": {}}}
    assert wire_format_fields(saved) == (("orders", "value"), ("users", "key"), ("users", "value"))
    long_key = (20_000_000).to_bytes(8, "big")
    assert long_key[:5] == wire(1)[:5]
    batch = records_to_batch([Record("orders", 0, 0, long_key, wire(1, b"payload"), 5)])
    rewritten, changed = rewrite_batch(batch, {1: 7}, ("value",))
    assert changed == 1
    assert rewritten.column("key").to_pylist() == [long_key]
    assert rewritten.column("value").to_pylist() == [wire(7, b"payload")]
    assert rewrite_batch(batch, {1: 7}, ()) == (batch, 0)


def test_schema_id_modes():
    assert check_schema_id_mode("remap") == "remap"
    with pytest.raises(TopicvaultError, match="bad --schema-ids 'keep'"):
        check_schema_id_mode("keep")


def test_registry_settings_come_from_the_cluster_profile_or_the_environment_and_are_redacted(tmp_path):
    path = tmp_path / "topicvault.toml"
    path.write_text('[clusters.prod]\nbootstrap_servers = "b:9092"\n[clusters.prod.schema_registry]\n'
                    'url = "https://registry:8081"\nbasic_auth_user = "backup"\nbasic_auth_password = "${RP}"\n')
    settings = resolve(config_file=str(path), cluster="prod", env={"RP": "reg-pw-1"})
    assert settings.schema_registry_url == "https://registry:8081"
    assert settings.schema_registry_settings == {"basic_auth_user": "backup", "basic_auth_password": "reg-pw-1"}
    assert settings.redacted()["schema_registry_settings"] == {"basic_auth_user": "backup", "basic_auth_password": "***"}
    assert scrub("refused reg-pw-1") == "refused ***"
    env = {"TOPICVAULT_SCHEMA_REGISTRY_URL": "http://r:8081", "TOPICVAULT_SCHEMA_REGISTRY_BEARER_TOKEN": "tok-2"}
    settings = resolve(env=env, schema_registry_url="http://flag:8081")
    assert settings.schema_registry_url == "http://flag:8081"  # the flag first
    assert settings.redacted()["schema_registry_settings"] == {"bearer_token": "***"}


def test_a_registry_url_with_a_password_is_shown_without_it():
    assert shown_url("https://user:pw-3@registry:8081/apis") == "https://***@registry:8081/apis"
    assert shown_url("http://registry:8081") == "http://registry:8081"
    with pytest.raises(TopicvaultError, match="unknown schema-registry setting"):
        RegistryClient("http://r", {"password": "x"})


def test_a_resumed_restore_must_get_the_same_id_map(tmp_path):
    from topicvault.core.stores.local_store import LocalStore
    from topicvault.source.cluster_restore.registry_restore import SCHEMA_IDS_NAME, save_id_map
    from topicvault.source.restore.restore_state import RestoreRecords

    records = RestoreRecords(LocalStore(str(tmp_path / "state")), LocalStore(str(tmp_path / "archive")))
    save_id_map(records, "r1", {5: 6, 1: 2})
    assert records.read("r1", SCHEMA_IDS_NAME) == {"restore_id": "r1", "ids": [[1, 2], [5, 6]]}
    save_id_map(records, "r1", {1: 2, 5: 6})  # the same map: the resume goes on
    with pytest.raises(TopicvaultError, match="restore r1 rewrote schema ids with another map"):
        save_id_map(records, "r1", {1: 3, 5: 6})


def test_a_saved_registry_changed_in_an_authenticated_commit_is_refused():
    from topicvault.core.crypto import Unauthenticated

    keyring = Keyring((FileKey("k", b"k" * 32, file_key_id(b"k" * 32)),))
    record = CommitRecord(1, 1_000, (), (), schema_registry=SAVED)
    body = json.loads(record.to_json(keyring))
    body["schema_registry"]["subjects"]["orders-value"]["versions"][0]["schema"] = '"bytes"'
    with pytest.raises(Unauthenticated):
        read_commit(BackupState(), json.dumps(body).encode(), record.key, keyring)


def test_rewrite_batch_matches_rewriting_record_by_record_on_a_large_batch():
    import random

    rng = random.Random(52)
    id_map = {1: 1001, 3: 3, 7: 70}

    def data() -> bytes | None:
        kind = rng.randrange(5)
        if kind == 0:
            return None
        if kind == 1:
            return bytes(rng.randrange(256) for _ in range(rng.randrange(7)))
        return b"\x00" + rng.choice([1, 3, 7, 9]).to_bytes(4, "big") + rng.randbytes(rng.randrange(300))

    records = [Record("t", 0, offset, data(), data(), 0) for offset in range(120_000)]
    rewritten, changed = rewrite_batch(records_to_batch(records), id_map)
    expected = [(rewrite_schema_id(r.key, id_map), rewrite_schema_id(r.value, id_map)) for r in records]
    assert list(zip(rewritten.column("key").to_pylist(), rewritten.column("value").to_pylist())) == expected
    assert changed == sum(pair != (r.key, r.value) for pair, r in zip(expected, records)) > 0


def test_bytes_after_a_zero_byte_that_are_no_schema_id_are_not_counted_and_the_commit_reads():
    # A binary key such as b"\x00\xff..." (the nasty records have them) is no wire-format record:
    # ids are signed 32-bit ints, never above 2^31-1. Counted, they made every commit of such a
    # topic unreadable ("schema_ids holds an id ... out of range": seen in the wheel test's restore).
    pairs = [(b"\x00\xff\xff\xff\xff-key", wire(3)), (b"\x00\x80\x00\x00\x00", None), (wire(2**31 - 1), None)]
    records = [Record("t", 0, offset, key, value, 0) for offset, (key, value) in enumerate(pairs)]
    counts = count_schema_ids(records_to_batch(records))
    assert dict(counts) == {3: 1, 2**31 - 1: 1}
    assert schema_id(b"\x00\xff\xff\xff\xff-key") is None
    record = CommitRecord(1, 1_000, (PartitionRange("t", 0, 0, 20),), (_entry(0),), schema_ids=dict(counts))
    assert CommitRecord.from_json(record.to_json(), record.key).schema_ids == dict(counts)


@pytest.mark.parametrize("name", ["", ".", ".."])
def test_a_saved_subject_named_as_a_dot_segment_or_nothing_is_refused(name):
    # "" reached PUT /config (the global level) through set_compatibility(level, ""); "." and ".."
    # are resolved away by the HTTP client (/config/. -> /config/), naming another resource.
    with pytest.raises(ValueError, match="no subject a registry can hold"):
        check_saved({**SAVED, "subjects": {**SAVED["subjects"], name: SAVED["subjects"]["gone-value"]}})
    with pytest.raises(TopicvaultError, match="cannot be named in a URL"):
        RegistryClient("http://127.0.0.1:9").set_compatibility("NONE", name)


def test_check_id_map_takes_a_saved_map_and_names_what_is_wrong():
    from topicvault.formats.saved_registry import check_id_map

    assert check_id_map({"restore_id": "r", "ids": [[1, 2], [5, 6]]}) == {1: 2, 5: 6}
    for body, wrong in [([], "no list of ids"), ({"ids": "1,2"}, "no list of ids"), ({"ids": [[1]]}, "no pair"),
                        ({"ids": [[1, True]]}, "no pair"), ({"ids": [[1, 2**31]]}, "no pair"),
                        ({"ids": [[-1, 2]]}, "no pair"), ({"ids": [[1, 2], [1, 3]]}, "mapped twice")]:
        with pytest.raises(ValueError, match=wrong):
            check_id_map(body)


def _restore_into(records, restore_id: str, bootstrap: str, topic_map: dict, id_map: dict | None) -> None:
    from topicvault.source.cluster_restore.registry_restore import save_id_map
    from topicvault.source.restore.restore_state import STATE_NAME

    records.write(restore_id, STATE_NAME, {"restore_id": restore_id, "target_bootstrap": bootstrap,
                                           "topic_map": topic_map, "start_offsets": {}})
    if id_map is not None:
        save_id_map(records, restore_id, id_map)


def test_verify_finds_the_id_maps_of_remap_restores_into_that_topic_on_that_cluster(tmp_path):
    from topicvault.core.stores.local_store import LocalStore
    from topicvault.source.cluster_restore.registry_restore import SCHEMA_IDS_NAME, id_maps_into
    from topicvault.source.restore.restore_state import RestoreRecords

    records = RestoreRecords(LocalStore(str(tmp_path / "state")), LocalStore(str(tmp_path / "archive")))
    _restore_into(records, "a-remap", "new:9092", {"orders": "orders"}, {1: 7})
    _restore_into(records, "b-preserve", "new:9092", {"orders": "orders"}, None)
    _restore_into(records, "c-no-change", "new:9092", {"orders": "orders"}, {})
    _restore_into(records, "d-other-cluster", "old:9092", {"orders": "orders"}, {1: 8})
    _restore_into(records, "e-renamed", "new:9092", {"orders": "orders.restored"}, {1: 9})
    _restore_into(records, "f-other-topic", "new:9092", {"payments": "payments"}, {1: 10})

    assert id_maps_into(records, "new:9092") == ({"orders": [("a-remap", {1: 7})], "payments": [("f-other-topic",
                                                                                                   {1: 10})]}, [])
    _restore_into(records, "g-two-servers", "New:9092, other:9092", {"pay": "pay"}, {1: 11})
    assert id_maps_into(records, "other:9092,new:9092")[0] == {"pay": [("g-two-servers", {1: 11})]}  # any order

    records.write("a-remap", SCHEMA_IDS_NAME, {"restore_id": "a-remap", "ids": [[1, 7], [1, 8]]})
    maps, damaged = id_maps_into(records, "new:9092")
    assert "orders" not in maps and len(damaged) == 1 and "schema-ids.json of restore 'a-remap'" in damaged[0]
    assert "mapped twice" in damaged[0]


def test_verify_digests_archive_records_through_a_remap_restores_id_map():
    import pyarrow as pa
    from topicvault.core.envelope import RecordDigest
    from topicvault.source.verify import ArchiveDigests

    archived = [Record("t", 0, 0, b"\x00\x00\x00\x00\x01k", b"\x00\x00\x00\x00\x02v", 5),
                Record("t", 0, 1, b"plain", None, 6), Record("t", 0, 2, None, b"\x00\x00\x00\x00\x03v", 7)]
    id_map = {1: 11, 2: 12}
    batch = records_to_batch(archived)
    live_plain, live_remapped = RecordDigest(), RecordDigest()
    live_plain.update(batch)
    live_remapped.update(rewrite_batch(batch, id_map)[0])

    digests = ArchiveDigests([("r0", {1: 99}), ("r1", id_map)])
    digests.update(pa.Table.from_batches([batch]))  # verify reads objects as tables
    assert digests.matching(live_plain.result()) == ""  # the archive's own bytes: no map needed
    assert digests.matching(live_remapped.result()) == "r1"
    other = RecordDigest()
    other.update(rewrite_batch(batch, {3: 13})[0])
    assert digests.matching(other.result()) is None
    assert ArchiveDigests().matching(live_remapped.result()) is None  # without a map: a difference

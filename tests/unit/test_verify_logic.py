"""The pure-logic half of tests/integration/test_verify.py: every record a restore keeps under
--state carries its own check (issue #47 item 1). Damaged at fixed places, each kind is refused
by the reader a resume uses and named by verify; one without a check (an older version's) is
still read, and verify calls it unchecked; an import checks what it takes.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from damagetools import PLACES, flipped
from topicvault.core.crypto import Unauthenticated, keyring_of, write_key_file
from topicvault.core.errors import TopicvaultError
from topicvault.core.integrity import CHECKSUM_FIELD
from topicvault.core.stores.local_store import LocalStore
from topicvault.source.object_reader import SkippedObject
from topicvault.source.restore.offset_map import OffsetMap, save_hole, save_offset_maps, saved_holes, saved_offset_maps
from topicvault.source.restore.restore_state import (
    PEER_OBJECTS_NAME,
    RECORD_FIELD,
    STATE_NAME,
    RestoreRecords,
    RestoreState,
    damaged_restore_states,
    import_restore_records,
    load_peer_objects_seen,
    load_restore_state,
    save_peer_objects_seen,
    save_restore_state,
)

HOLE_NAME = "holes/orders-0-0000000000000000300.json"


def records_in(tmp_path: Path, keyring=None) -> RestoreRecords:
    return RestoreRecords(LocalStore(str(tmp_path / "state")), LocalStore(str(tmp_path / "archive")), keyring)


def save_every_kind(records: RestoreRecords, restore_id: str = "r1") -> None:
    """One record of each kind a restore keeps: state, offset map, a hole, a peer object list."""
    save_restore_state(records, RestoreState(restore_id, "broker:9092", {"orders": "orders-r"},
                                             {"orders-r:0": 0}, {}, {"orders-r": {"retention.ms": "-1"}},
                                             {"orders:0": 0}))
    save_offset_maps(records, restore_id, [OffsetMap("orders", 0, "orders-r", 0, [(0, 0, 500)], 500)])
    save_hole(records, restore_id, SkippedObject("topics/orders/0/x.parquet", "orders", 0, 300, 399, 100, "checksum"))
    save_peer_objects_seen(records, restore_id, {("orders/0/00000.json", 1234)}, [])


# The reader a resume uses for each kind.
READERS = {
    STATE_NAME: lambda records: load_restore_state(records, "r1"),
    "offset-map.json": lambda records: saved_offset_maps(records, "r1"),
    HOLE_NAME: lambda records: saved_holes(records, "r1"),
    PEER_OBJECTS_NAME: lambda records: load_peer_objects_seen(records, "r1"),
}


def as_before_the_check(body: dict) -> dict:
    """`body` as topicvault wrote it before records carried a check: no check, and none of the
    fields added since (a state's created_topics, #50.2; which record it is)."""
    body = dict(body)
    del body[CHECKSUM_FIELD]
    body.pop("created_topics", None)
    body.pop(RECORD_FIELD)
    return body


def json_of(name: str, data: bytes) -> bytes:
    return gzip.decompress(data) if name.endswith(".gz") else data


def stored_as(name: str, text: bytes) -> bytes:
    return gzip.compress(text, mtime=0) if name.endswith(".gz") else text


@pytest.mark.parametrize("where", PLACES)
@pytest.mark.parametrize("name", list(READERS))
def test_each_record_damaged_at_a_fixed_place_is_refused_by_a_resume_and_named_by_verify(tmp_path, name, where):
    records = records_in(tmp_path)
    save_every_kind(records)
    assert damaged_restore_states(records.archive, records.state) == ([], [])
    for read in READERS.values():
        read(records)  # all intact
    path = tmp_path / "state" / records.key("r1", name)
    path.write_bytes(stored_as(name, flipped(json_of(name, path.read_bytes()), where)))

    with pytest.raises(TopicvaultError) as refused:
        READERS[name](records)
    message = str(refused.value)
    assert "\n" not in message and "restore 'r1'" in message and name in message, message
    assert "damaged" in message and "new --restore-id" in message, message
    damaged, unchecked = damaged_restore_states(records.archive, records.state)
    assert len(damaged) == 1 and name in damaged[0] and "restore 'r1'" in damaged[0], damaged
    assert unchecked == []


@pytest.mark.parametrize("offset", [0, 10, -8, -4])  # the gzip header, its first block, the CRC, the size
def test_a_peer_object_list_damaged_in_its_packed_bytes_is_refused(tmp_path, offset):
    records = records_in(tmp_path)
    save_every_kind(records)
    path = tmp_path / "state" / records.key("r1", PEER_OBJECTS_NAME)
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(TopicvaultError, match="damaged"):
        load_peer_objects_seen(records, "r1")
    assert len(damaged_restore_states(records.archive, records.state)[0]) == 1


def test_records_without_a_check_are_read_and_verify_calls_them_unchecked(tmp_path):
    records = records_in(tmp_path)
    save_every_kind(records)
    for name in READERS:  # as topicvault before the check wrote them
        path = tmp_path / "state" / records.key("r1", name)
        body = as_before_the_check(json.loads(json_of(name, path.read_bytes())))
        path.write_bytes(stored_as(name, json.dumps(body).encode()))
    assert load_restore_state(records, "r1").topic_configs == {"orders-r": {"retention.ms": "-1"}}
    assert saved_offset_maps(records, "r1")[("orders", 0)].target_end == 500
    assert [h.first_offset for h in saved_holes(records, "r1")[("orders", 0)]] == [300]
    assert load_peer_objects_seen(records, "r1") == ({("orders/0/00000.json", 1234)}, [])
    damaged, unchecked = damaged_restore_states(records.archive, records.state)
    assert damaged == [] and len(unchecked) == len(READERS)
    assert all("carries no check" in line and "restore 'r1'" in line for line in unchecked)


def test_a_keyed_record_changed_and_its_checksum_recomputed_is_refused_with_the_key(tmp_path):
    write_key_file(str(tmp_path / "key"))
    keyring = keyring_of((f"file://{tmp_path / 'key'}",))
    records = records_in(tmp_path, keyring)
    save_every_kind(records)
    assert load_restore_state(records, "r1").topic_configs == {"orders-r": {"retention.ms": "-1"}}
    # Whoever can write the state store, without the key: new configs, a checksum that matches them.
    from topicvault.core.integrity import sealed

    path = tmp_path / "state" / records.key("r1", STATE_NAME)
    body = json.loads(path.read_bytes())
    body.pop("authentication")
    body["topic_configs"] = {"orders-r": {"cleanup.policy": "compact"}}
    path.write_bytes(json.dumps(sealed(body, None)).encode())
    load_restore_state(records_in(tmp_path), "r1")  # without the key, only the checksum can be checked
    with pytest.raises(Unauthenticated, match="not authenticated.*new --restore-id"):
        load_restore_state(records, "r1")
    damaged, _ = damaged_restore_states(records.archive, records.state, keyring)
    assert len(damaged) == 1 and STATE_NAME in damaged[0]


@pytest.mark.parametrize("where", ["syntax", "number", "string", "check"])
def test_an_import_checks_every_record_and_writes_none_if_one_is_damaged(tmp_path, where):
    exported = records_in(tmp_path / "old")
    save_every_kind(exported)
    source = LocalStore(str(tmp_path / "old" / "state" / exported.key("r1", "")))
    path = Path(source.root) / "offset-map.json"
    path.write_bytes(flipped(path.read_bytes(), where))
    records = records_in(tmp_path)
    with pytest.raises(TopicvaultError, match=r"offset-map\.json is damaged .*nothing was imported"):
        import_restore_records(records, "r1", source)
    assert records.names("r1") == []


def test_an_import_takes_records_without_a_check_and_writes_them_with_one(tmp_path):
    exported = records_in(tmp_path / "old")
    save_every_kind(exported)
    source = LocalStore(str(tmp_path / "old" / "state" / exported.key("r1", "")))
    for name in (STATE_NAME, "offset-map.json"):
        body = as_before_the_check(json.loads((Path(source.root) / name).read_bytes()))
        (Path(source.root) / name).write_bytes(json.dumps(body).encode())
    records = records_in(tmp_path)
    assert import_restore_records(records, "r1", source, dry_run=True) == sorted(READERS)
    assert records.names("r1") == []  # a dry run writes nothing
    import_restore_records(records, "r1", source)
    assert sorted(records.names("r1")) == sorted(READERS)
    assert damaged_restore_states(records.archive, records.state) == ([], [])  # every one now carries its check


@pytest.mark.parametrize("name", list(READERS))
def test_a_keyed_resume_refuses_a_record_stripped_of_its_check(tmp_path, name):
    # Review of #47.1: whoever can write the state store, without the key, drops the check and the
    # MAC (a record "as an older version wrote it") and writes what they like: a keyed reader
    # must not trust it (old code: read as unchecked, new start offsets and all).
    write_key_file(str(tmp_path / "key"))
    keyring = keyring_of((f"file://{tmp_path / 'key'}",))
    records = records_in(tmp_path, keyring)
    save_every_kind(records)
    path = tmp_path / "state" / records.key("r1", name)
    body = as_before_the_check(json.loads(json_of(name, path.read_bytes())))
    body.pop("authentication")
    path.write_bytes(stored_as(name, json.dumps(body).encode()))
    READERS[name](records_in(tmp_path))  # without the key it is an older version's record
    with pytest.raises(Unauthenticated, match="carries no authentication.*new --restore-id"):
        READERS[name](records)
    damaged, _ = damaged_restore_states(records.archive, records.state, keyring)
    assert len(damaged) == 1 and name in damaged[0]


def test_an_imported_state_names_no_topic_as_created_by_the_restore(tmp_path):
    # Review of #50.2: which topics a restore created is known only to the run that created them;
    # an imported state (from the archive, which a bucket writer can edit) naming the target's
    # topics with their real ids would have the restore set configs on them (old code: kept).
    exported = records_in(tmp_path / "old")
    save_restore_state(exported, RestoreState("r1", "broker:9092", {"orders": "orders-r"}, {"orders-r:0": 0},
                                              created_topics={"orders-r": "AAAAAAAAAAAAAAAAAAAAAA"}))
    assert load_restore_state(exported, "r1").created_topics == {"orders-r": "AAAAAAAAAAAAAAAAAAAAAA"}
    records = records_in(tmp_path)
    import_restore_records(records, "r1", LocalStore(str(tmp_path / "old" / "state" / exported.key("r1", ""))))
    assert load_restore_state(records, "r1").created_topics == {}


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
@pytest.mark.parametrize("name", list(READERS))
def test_a_record_moved_from_another_restore_is_refused(tmp_path, name, keyed):
    # Review of #47.1: a record's check (and its MAC) covered its body, not which record it is, so
    # whoever can write the state store could put restore r2's authentic record where r1's belongs
    # (another target's start offsets, another offset map) and a keyed resume trusted it.
    keyring = None
    if keyed:
        write_key_file(str(tmp_path / "key"))
        keyring = keyring_of((f"file://{tmp_path / 'key'}",))
    records = records_in(tmp_path, keyring)
    save_every_kind(records, "r1")
    save_every_kind(records, "r2")
    state = tmp_path / "state"
    (state / records.key("r1", name)).write_bytes((state / records.key("r2", name)).read_bytes())
    with pytest.raises(TopicvaultError, match=r"is the saved .*restore 'r2'.*new --restore-id"):
        READERS[name](records)
    damaged, _ = damaged_restore_states(records.archive, records.state, keyring)
    assert len(damaged) == 1 and name in damaged[0] and "'r1'" in damaged[0]


def test_a_hole_moved_under_another_hole_name_is_refused(tmp_path):
    records = records_in(tmp_path)
    save_every_kind(records)
    other = "holes/orders-0-0000000000000000900.json"
    (tmp_path / "state" / records.key("r1", other)).write_bytes(
        (tmp_path / "state" / records.key("r1", HOLE_NAME)).read_bytes())
    with pytest.raises(TopicvaultError, match=r"is the saved .*holes/orders-0-0000000000000000300\.json"):
        saved_holes(records, "r1")

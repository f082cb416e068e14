"""Client-side encryption, pure logic (issue #22): the container, key files, keyrings and the
object writer/reader with every format, on a real local store (no broker, no Spark)."""

from __future__ import annotations

import base64
import json
import os
import stat
from dataclasses import replace

import pytest
from legacy_archive import seal_v1
from topicvault.core.archive.commits import CommitRecord, ObjectEntry
from topicvault.core.crypto import (
    FileKey,
    Keyring,
    KeyUnavailable,
    ObjectBinding,
    PlaintextRefused,
    file_key_id,
    is_sealed,
    keyring_of,
    read_key_file,
    require_keys,
    seal,
    unseal,
    write_key_file,
)
from topicvault.core.envelope import Record, batch_to_records, records_to_batch
from topicvault.core.errors import CorruptObject, TopicvaultError
from topicvault.core.rotation import Rotation
from topicvault.core.stores.locations import open_store
from topicvault.formats import resolve_format
from topicvault.keys import default_codec
from topicvault.sink.objects import write_objects
from topicvault.source.object_reader import read_partition

MARKER = b"PLAINTEXT-MARKER"
BINDING = ObjectBinding("t", 0, 1, 1, 1)


def file_key(tmp_path, name: str = "k") -> FileKey:
    path = tmp_path / name
    write_key_file(str(path))
    return keyring_of((f"file://{path}",)).sealing


def marked_records(topic: str = "secret-topic", count: int = 40) -> list[Record]:
    return [Record(topic, 0, 100 + i, MARKER + b"-key-%d" % i if i % 5 else None, MARKER + b"-value-%d" % i * 3,
                   1_700_000_000_000 + i, 0, (("h-" + MARKER.decode(), MARKER + b"-header"), ("dup", None)))
            for i in range(count)]


def test_seal_round_trip_hides_the_plaintext_and_binds_the_object_key(tmp_path):
    key = file_key(tmp_path)
    sealed = seal(MARKER * 10, "t/p=0/1.parquet", key, BINDING)
    assert is_sealed(sealed) and MARKER not in sealed
    assert unseal(sealed, "t/p=0/1.parquet", Keyring((key,)), BINDING) == MARKER * 10
    with pytest.raises(CorruptObject, match="t/p=0/2.parquet"):  # the same bytes under another key
        unseal(sealed, "t/p=0/2.parquet", Keyring((key,)), BINDING)
    flipped = bytearray(sealed)
    flipped[-5] ^= 1
    with pytest.raises(CorruptObject, match="changed, damaged"):
        unseal(bytes(flipped), "t/p=0/1.parquet", Keyring((key,)), BINDING)


def test_a_missing_or_wrong_key_names_the_object_and_never_the_key(tmp_path):
    right, wrong = file_key(tmp_path, "right"), file_key(tmp_path, "wrong")
    sealed = seal(b"records", "obj.avro", right, BINDING)
    for keyring in (None, Keyring((wrong,))):
        with pytest.raises(KeyUnavailable) as caught:
            unseal(sealed, "obj.avro", keyring, BINDING)
        message = str(caught.value)
        assert "obj.avro" in message and right.key_id in message and "\n" not in message
        for secret in (right.key, wrong.key):
            assert base64.b64encode(secret).decode() not in message and secret.hex() not in message
    assert "key=" not in repr(right) and base64.b64encode(right.key).decode() not in repr(right)


def test_keygen_writes_an_owner_only_key_and_never_overwrites(tmp_path):
    path = tmp_path / "key"
    key_id = write_key_file(str(path))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert file_key_id(read_key_file(str(path))) == key_id and len(read_key_file(str(path))) == 32
    with pytest.raises(TopicvaultError, match="never overwrites"):
        write_key_file(str(path))
    (tmp_path / "short").write_text(base64.b64encode(b"x" * 16).decode())
    with pytest.raises(KeyUnavailable, match="32 bytes"):
        read_key_file(str(tmp_path / "short"))
    with pytest.raises(TopicvaultError, match="bad --encryption-key"):
        keyring_of(("/no/scheme",))


def test_commit_entries_keep_old_bytes_and_load_the_key_id():
    plain = ObjectEntry("k", "t", 0, 0, 1, 2, 10, 1, 2, "ab")
    sealed = ObjectEntry("k2", "t", 0, 2, 3, 2, 10, 1, 2, "cd", key_id="file:0123")
    record = CommitRecord(1, 5, (), (plain, sealed))
    body = json.loads(record.to_json())
    assert "key_id" not in body["objects"][0] and body["objects"][1]["key_id"] == "file:0123"
    assert CommitRecord.from_json(record.to_json(), "c").objects == (plain, sealed)
    with pytest.raises(KeyUnavailable, match="k2"):
        require_keys([plain, sealed], None)
    require_keys([plain], None)


@pytest.mark.parametrize("format_name,compression", [
    ("parquet", None), ("avro", "deflate"), ("jsonl", "gzip"), ("jsonl", "none"), ("csv", "gzip"),
])
def test_every_format_is_encrypted_whole_and_reads_back_exactly(tmp_path, format_name, compression):
    key = file_key(tmp_path)
    store = open_store(str(tmp_path / "store"))
    records = marked_records()
    entries = write_objects([records_to_batch(records)], store, default_codec(),
                            resolve_format(format_name, compression), Rotation(max_records=15),
                            run_id="r000000000001", keyring=Keyring((key,)))
    assert len(entries) == 3 and {e.key_id for e in entries} == {key.key_id}
    stored = [p for p in (tmp_path / "store").rglob("*") if p.is_file()]
    assert len(stored) == 3
    for path in stored:
        data = path.read_bytes()
        assert is_sealed(data) and MARKER not in data and b"secret-topic" not in data
    back = [r for b in read_partition(store, entries, keyring=Keyring((key,))) for r in batch_to_records(b)]
    assert back == records
    with pytest.raises(KeyUnavailable, match=entries[0].key):
        list(read_partition(store, entries))


def test_a_retried_task_accepts_its_earlier_encrypted_objects(tmp_path):
    # Each attempt encrypts under a fresh data key: the retry's bytes differ, its records do not.
    key = file_key(tmp_path)
    store = open_store(str(tmp_path / "store"))
    write = lambda records: write_objects([records_to_batch(records)], store, default_codec(),  # noqa: E731
                                          resolve_format("parquet"), Rotation(), run_id="r000000000002",
                                          keyring=Keyring((key,)))
    first = write(marked_records())
    again = write(marked_records())
    assert again == first  # same key, same checksum: the stored object's
    with pytest.raises(TopicvaultError, match="other content"):
        write(marked_records()[:-1] + [replace(marked_records()[-1], value=b"changed")])


def test_a_store_profile_holds_the_key_and_flags_override_it(tmp_path):
    from topicvault.core.profiles import resolve

    config = tmp_path / "topicvault.toml"
    config.write_text('[stores.vault]\nuri = "/tmp/x"\nencryption_key = ["file:///new", "file:///old"]\n'
                      '[stores.one]\nuri = "/tmp/y"\nencryption_key = "kms://alias/a"\n'
                      '[stores.env]\nuri = "/tmp/z"\nencryption_key = "kms://alias/${KEY_ALIAS}"\n')
    vault = resolve(config_file=str(config), store="vault", env={})
    assert vault.encryption_keys == ("file:///new", "file:///old") and vault.store_options == {}
    assert resolve(config_file=str(config), store="one", env={}).encryption_keys == ("kms://alias/a",)
    with pytest.raises(TopicvaultError, match="secret settings only"):  # a key's name is printed: not from ${VAR}
        resolve(config_file=str(config), store="env", env={"KEY_ALIAS": "a"})
    assert resolve(config_file=str(config), store="vault", encryption_keys=("file:///flag",),
                   env={}).encryption_keys == ("file:///flag",)
    assert resolve(env={"TOPICVAULT_ENCRYPTION_KEY": "file:///a,file:///b"}).encryption_keys == ("file:///a", "file:///b")


class DeniedKms:
    """Stands for a KMS key that DescribeKey finds but Decrypt refuses (key policy, disabled key):
    moto's KMS does not enforce either, so the refusal is simulated."""

    def __init__(self, key_id: str) -> None:
        self.key_id = key_id

    def unwrap(self, wrapped: bytes) -> bytes:
        raise KeyUnavailable("KMS Decrypt with key alias/x failed: AccessDeniedException: not allowed")


def test_restore_checks_each_key_opens_before_producing(tmp_path):
    from topicvault.source.object_reader import check_keys_open

    key = file_key(tmp_path)
    store = open_store(str(tmp_path / "store"))
    entries = write_objects([records_to_batch(marked_records())], store, default_codec(), resolve_format("avro"),
                            Rotation(max_records=15), run_id="r000000000003", keyring=Keyring((key,)))
    check_keys_open(store, entries, Keyring((key,)))
    with pytest.raises(KeyUnavailable, match=f"object {entries[-1].key}: KMS Decrypt") as caught:
        check_keys_open(store, entries, Keyring((DeniedKms(key.key_id),)))  # the smallest object is tried
    assert "\n" not in str(caught.value)


def test_mixed_locations_read_and_a_plaintext_substitute_is_refused(tmp_path):
    from topicvault.core.stores.locations import open_store as store_of

    key = file_key(tmp_path)
    store = store_of(str(tmp_path / "store"))
    records = marked_records()
    plain = write_objects([records_to_batch(records[:20])], store, default_codec(), resolve_format("parquet"),
                          Rotation(), run_id="r000000000004")
    sealed = write_objects([records_to_batch(records[20:])], store, default_codec(), resolve_format("parquet"),
                           Rotation(), run_id="r000000000005", keyring=Keyring((key,)))
    both = plain + sealed  # a location backed up without a key first, then with one
    # With keys, its unencrypted objects are refused (anyone can write one); compact encrypts them.
    with pytest.raises(PlaintextRefused, match=f"object {plain[0].key} is not encrypted, but --encryption-key"):
        list(read_partition(store, both, keyring=Keyring((key,))))
    assert [r for b in read_partition(store, sealed, keyring=Keyring((key,))) for r in batch_to_records(b)] == records[20:]
    # A plaintext object put in place of an encrypted one (commit checksum edited to match) is refused.
    forged = replace(sealed[0], sha256=plain[0].sha256, key=plain[0].key, first_offset=100, last_offset=119)
    with pytest.raises(CorruptObject, match="committed encrypted"):
        list(read_partition(store, [forged], keyring=Keyring((key,))))


def test_new_objects_are_bound_to_their_commit_entry_and_old_ones_still_open(tmp_path):
    key = file_key(tmp_path)
    sealed = seal(b"records", "k.parquet", key, BINDING)
    assert sealed.startswith(b"TVENC\x00\x00\x02")
    for other in (replace(BINDING, topic="salaries"), replace(BINDING, partition=1), replace(BINDING, first_offset=0),
                  replace(BINDING, last_offset=2), replace(BINDING, records=2)):
        with pytest.raises(CorruptObject, match="named by a commit entry of other records"):
            unseal(sealed, "k.parquet", Keyring((key,)), other)
    with pytest.raises(CorruptObject, match="bound to the commit entry that names it"):
        unseal(sealed, "k.parquet", Keyring((key,)), None)
    old = seal_v1(b"old records", "k.parquet", key)
    assert unseal(old, "k.parquet", Keyring((key,)), BINDING) == b"old records"
    assert unseal(old, "k.parquet", Keyring((key,)), None) == b"old records"
    with pytest.raises(CorruptObject, match="container version 3"):
        unseal(b"TVENC\x00\x00\x03" + old[8:], "k.parquet", Keyring((key,)), BINDING)

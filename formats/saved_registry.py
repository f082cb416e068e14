"""A schema registry's saved form, and the schema ids in records (issue #52). Pure: no HTTP, Spark or Kafka.

The saved form (what `backup --schema-registry` keeps in a commit record, `schema_registry`),
read over the Confluent-compatible REST API (core.cluster.registry_client):

    {"config": "BACKWARD" | null,          # global compatibility (GET /config)
     "mode": "READWRITE" | null,            # global mode (GET /mode)
     "subjects": {name: {"deleted": bool,   # soft-deleted (listed only with ?deleted=true)
                         "config": str | null, "mode": str | null,
                         "versions": [{"version": int, "id": int, "schemaType": "AVRO" | "PROTOBUF" | "JSON",
                                       "schema": str, "references": [{"name", "subject", "version"}],
                                       "deleted": bool}]}}}

An archive is untrusted input: `check_saved` accepts only that shape.

The wire format (Confluent's "wire format", docs.confluent.io, Schema Registry > Fundamentals >
Serializers: magic byte 0, then the schema id as a 4-byte big-endian integer, then the payload)
is what `schema_id` reads and `rewrite_schema_id` rewrites. A key or value that starts with byte
0 and is at least 5 bytes long is taken for one; any other stays as it is.
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping

import pyarrow as pa
import pyarrow.compute as pc

WIRE_MAGIC = 0
WIRE_HEADER_BYTES = 5
MAX_SCHEMA_ID = 2**31 - 1  # the id is a signed 32-bit int in every client
SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSON")
COMPATIBILITY_LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
                        "FULL_TRANSITIVE")
NOT_SUBJECT_NAMES = ("", ".", "..")  # empty, or dot segments a URL resolves away (RFC 3986 5.2.4)
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")


def check_saved(body: object) -> dict:
    """`body` (a saved registry from an archive) when it has the shape above; ValueError naming
    the first part that does not."""
    if not isinstance(body, dict) or not isinstance(body.get("subjects"), dict):
        raise ValueError("the saved schema registry is not an object with `subjects`")
    _check_choice(body.get("config"), COMPATIBILITY_LEVELS, "global compatibility")
    _check_choice(body.get("mode"), MODES, "global mode")
    for name, subject in body["subjects"].items():
        if name in NOT_SUBJECT_NAMES:  # the REST API's paths would name another resource (the global config)
            raise ValueError(f"saved subject name {name!r} is no subject a registry can hold")
        if not isinstance(subject, dict) or not isinstance(subject.get("versions"), list):
            raise ValueError(f"saved subject {name!r} has no list of versions")
        _check_choice(subject.get("config"), COMPATIBILITY_LEVELS, f"compatibility of subject {name!r}")
        _check_choice(subject.get("mode"), MODES, f"mode of subject {name!r}")
        for version in subject["versions"]:
            _check_version(name, version)
    _check_one_schema_per_id(body)
    return body


def _check_one_schema_per_id(body: dict) -> None:
    """A schema id names one schema (its type, text and references; Confluent's Schema Registry
    API reference, "GET /schemas/ids/{int: id}"). A saved id standing for two schemas would let a
    restore give records of one schema the target id of the other."""
    schemas: dict[int, tuple] = {}
    for name, subject in body["subjects"].items():
        for version in subject["versions"]:
            schema = (version.get("schemaType") or "AVRO", version["schema"],
                      tuple(sorted((r["name"], r["subject"], r["version"]) for r in version.get("references", []))))
            if schemas.setdefault(version["id"], schema) != schema:
                raise ValueError(f"saved schema id {version['id']} stands for two different schemas (one in "
                                 f"subject {name!r} version {version['version']})")


def _check_choice(value: object, allowed: tuple[str, ...], what: str) -> None:
    if value is not None and value not in allowed:
        raise ValueError(f"saved {what} {value!r} is not one of {', '.join(allowed)}")


def _check_version(subject: str, version: object) -> None:
    if not isinstance(version, dict):
        raise ValueError(f"a saved version of subject {subject!r} is not an object")
    number, schema_id = version.get("version"), version.get("id")
    if not isinstance(number, int) or number < 1 or not isinstance(schema_id, int) or not 0 <= schema_id <= MAX_SCHEMA_ID:
        raise ValueError(f"saved version {number!r} of subject {subject!r} has no valid version number and id")
    _check_choice(version.get("schemaType"), SCHEMA_TYPES, f"schema type of {subject!r} version {number}")
    if not isinstance(version.get("schema"), str):
        raise ValueError(f"saved version {number} of subject {subject!r} has no schema text")
    for reference in version.get("references", []):
        if not (isinstance(reference, dict) and isinstance(reference.get("name"), str)
                and isinstance(reference.get("subject"), str) and isinstance(reference.get("version"), int)):
            raise ValueError(f"saved version {number} of subject {subject!r} has a malformed reference")


def changed_registry(saved: dict | None, read: dict | None) -> dict | None:
    """What a commit saves: `read` when it differs from the registry the archive `saved` last
    (None when it is the same, or was not read)."""
    return read if read is not None and read != saved else None


def registry_ids(saved: dict) -> set[int]:
    """Every schema id the saved registry holds (soft-deleted versions too)."""
    return {v["id"] for subject in saved["subjects"].values() for v in subject["versions"]}


def registry_summary(saved: dict) -> dict:
    """Counts for `ls`: subjects, soft-deleted subjects, versions, distinct ids."""
    subjects = saved["subjects"].values()
    return {"subjects": len(saved["subjects"]), "deleted_subjects": sum(1 for s in subjects if s.get("deleted")),
            "versions": sum(len(s["versions"]) for s in subjects), "ids": len(registry_ids(saved))}


def schema_id(data: bytes | None) -> int | None:
    """The schema id of a key or value in the wire format (magic byte 0, 4-byte big-endian id of at
    most MAX_SCHEMA_ID); None for anything else."""
    if data is None or len(data) < WIRE_HEADER_BYTES or data[0] != WIRE_MAGIC:
        return None
    found = int.from_bytes(data[1:WIRE_HEADER_BYTES], "big")
    return found if found <= MAX_SCHEMA_ID else None


def _carries_wire_format(data: pa.Array) -> pa.Array:
    """Per key or value: whether it starts with the magic byte and is long enough for an id (False for null)."""
    starts = pc.starts_with(data, pattern=bytes([WIRE_MAGIC]))
    return pc.fill_null(pc.and_(starts, pc.greater_equal(pc.binary_length(data), WIRE_HEADER_BYTES)), False)


def count_schema_ids(batch: pa.RecordBatch | pa.Table) -> Counter:
    """How many keys and values of an envelope batch carry each schema id (a record whose key
    and value both carry one counts twice). Vectorised: no per-record Python; a column with no
    key or value starting with byte 0 costs one pass (about 15-30 ns a record here)."""
    counts: Counter = Counter()
    for column in ("key", "value"):
        data = batch.column(column)
        carries = _carries_wire_format(data)
        if not pc.any(carries).as_py():
            continue
        headers = pc.binary_slice(pc.filter(data, carries), 1, WIRE_HEADER_BYTES)
        for entry in pc.value_counts(headers).to_pylist():
            found = int.from_bytes(entry["values"], "big")
            if found <= MAX_SCHEMA_ID:  # above it: binary bytes after a zero byte, not an id
                counts[found] += entry["counts"]
    return counts


def rewrite_schema_id(data: bytes | None, id_map: Mapping[int, int]) -> bytes | None:
    """`data` with its schema id replaced from `id_map` when it carries the wire format and its
    id is in the map; otherwise `data` itself (byte-exact)."""
    old = schema_id(data)
    if old is None or old not in id_map or id_map[old] == old:
        return data
    return bytes([WIRE_MAGIC]) + id_map[old].to_bytes(4, "big") + data[WIRE_HEADER_BYTES:]


def ids_lacking(used: Mapping[int, int], saved: dict | None) -> list[int]:
    """The schema ids records use (`used`: id -> keys and values) that the saved registry lacks, ascending."""
    held = registry_ids(saved) if saved is not None else set()
    return sorted(i for i in used if i not in held)


def registration_order(saved: dict) -> list[tuple[str, dict]]:
    """Every saved (subject, version) in an order a registry accepts: each subject's versions in
    version order, and every version after the versions it references. ValueError on a reference
    to a version the saved registry lacks, or a cycle."""
    versions = {(name, v["version"]): v for name, subject in saved["subjects"].items() for v in subject["versions"]}
    order: list[tuple[str, dict]] = []
    placed: set[tuple[str, int]] = set()
    visiting: set[tuple[str, int]] = set()

    def place(where: tuple[str, int]) -> None:
        if where in placed:
            return
        if where in visiting or where not in versions:
            raise ValueError(f"saved subject {where[0]!r} version {where[1]} is referenced but "
                             f"{'part of a reference cycle' if where in visiting else 'not saved'}")
        visiting.add(where)
        earlier = [n for (name, n) in versions if name == where[0] and n < where[1]]
        for reference in versions[where].get("references", []):
            place((reference["subject"], reference["version"]))
        for number in sorted(earlier):
            place((where[0], number))
        visiting.discard(where)
        placed.add(where)
        order.append((where[0], versions[where]))

    for where in sorted(versions):
        place(where)
    return order


def renumbered_references(version: dict, target_versions: Mapping[tuple[str, int], int]) -> list[dict]:
    """A saved version's references with each version number as the target registry gave it."""
    return [{**r, "version": target_versions.get((r["subject"], r["version"]), r["version"])}
            for r in version.get("references", [])]


def differing_ids(id_map: Mapping[int, int]) -> dict[int, int]:
    """The saved ids the target registry gave another id (saved -> target)."""
    return {old: new for old, new in sorted(id_map.items()) if old != new}


def check_id_map(body: object) -> dict[int, int]:
    """The saved id -> target id map of a restore's `schema-ids.json` (`{"ids": [[saved, target], ...]}`,
    source.cluster_restore.registry_restore.save_id_map) when it has that shape, each id a schema id and each saved
    id once; ValueError naming what is wrong otherwise (it is read from a state store: untrusted)."""
    pairs = body.get("ids") if isinstance(body, dict) else None
    if not isinstance(pairs, list):
        raise ValueError("it holds no list of ids")
    id_map: dict[int, int] = {}
    for pair in pairs:
        if not (isinstance(pair, list) and len(pair) == 2
                and all(type(i) is int and 0 <= i <= MAX_SCHEMA_ID for i in pair)):
            raise ValueError(f"{pair!r} is no pair of schema ids")
        if id_map.setdefault(pair[0], pair[1]) != pair[1]:
            raise ValueError(f"saved id {pair[0]} is mapped twice")
    return id_map


def describe_ids(changed: Mapping[int, int], limit: int = 10) -> str:
    """`12→3, 14→4, …` for a message."""
    shown = ", ".join(f"{old}→{new}" for old, new in list(changed.items())[:limit])
    return shown + (f", … ({len(changed)} in all)" if len(changed) > limit else "")


# The subject suffixes of Confluent's default subject name strategy (TopicNameStrategy:
# io.confluent.kafka.serializers.subject.TopicNameStrategy, subject = topic + "-key" / "-value").
SUBJECT_SUFFIXES = {"-key": "key", "-value": "value"}


def wire_format_fields(saved: dict) -> tuple[tuple[str, str], ...]:
    """The (topic, "key" | "value") pairs whose records the saved registry says carry the wire
    format: those with a subject `<topic>-key` / `<topic>-value` (soft-deleted ones included: records
    were written while they lived), sorted.

    Bytes alone cannot tell: an 8-byte big-endian long key below 2^32 * 2^24 also starts with byte 0
    and reads as a schema id, so a remap rewrites only what a subject names (docs/recovery-runbook.md)."""
    subjects = saved.get("subjects") if isinstance(saved, dict) else None
    fields = set()
    for subject in subjects if isinstance(subjects, dict) else ():
        for suffix, field in SUBJECT_SUFFIXES.items() if isinstance(subject, str) else ():
            if subject.endswith(suffix) and len(subject) > len(suffix):
                fields.add((subject[: -len(suffix)], field))
    return tuple(sorted(fields))


def renamed_subjects(saved: dict, topic_map: Mapping[str, str]) -> dict:
    """The saved registry with the `<topic>-key` / `<topic>-value` subjects of each topic
    `topic_map` (source -> target topic, as restore --rename makes it) renames named after the
    target topic, and every reference to them renamed with them; the other subjects as saved.
    A TopicNameStrategy client of the renamed topic (io.confluent.kafka.serializers.subject.
    TopicNameStrategy) looks its schemas up there. A new dict; ValueError when two subjects would
    get one name (--rename a=b where b's subjects are saved and stay)."""
    names = {}
    for source, target in topic_map.items():
        for suffix in SUBJECT_SUFFIXES if source != target else ():
            if source + suffix in saved["subjects"]:
                names[source + suffix] = target + suffix
    if not names:
        return saved
    renamed: dict[str, dict] = {}
    for name, subject in saved["subjects"].items():
        new_name = names.get(name, name)
        if new_name in renamed:
            raise ValueError(f"subjects {name!r} and another would both be named {new_name!r} after --rename")
        versions = [{**v, "references": [{**r, "subject": names.get(r["subject"], r["subject"])}
                                         for r in v.get("references", [])]} for v in subject["versions"]]
        renamed[new_name] = {**subject, "versions": versions}
    return {**saved, "subjects": renamed}


# In a list of (topic, field) pairs: every topic (restore --schema-ids remap-all).
EVERY_TOPIC = "*"


def fields_of_topic(pairs: tuple[tuple[str, str], ...], topic: str) -> tuple[str, ...]:
    """"key" and/or "value": the fields `pairs` ((topic, field), as wire_format_fields gives, or
    with EVERY_TOPIC) names for `topic`."""
    return tuple(field for named, field in pairs if named in (topic, EVERY_TOPIC))


def rewrite_batch(batch: pa.RecordBatch, id_map: Mapping[int, int], fields: tuple[str, ...] = ("key", "value")
                  ) -> tuple[pa.RecordBatch, int]:
    """`batch` with the schema id of every key and value (of `fields`: "key", "value") carrying a
    mapped one rewritten (as rewrite_schema_id does one), and how many records changed. Other bytes
    stay as they are. Vectorised: the ids are matched and replaced column by column, no per-record
    Python."""
    changed_ids = {old: new for old, new in id_map.items() if old != new}
    if not changed_ids or not fields:
        return batch, 0
    olds = pa.array([old.to_bytes(4, "big") for old in changed_ids], pa.binary())
    news = pa.array([b"\x00" + new.to_bytes(4, "big") for new in changed_ids.values()], pa.binary())
    columns, changed = {}, None
    for name in fields:
        data = batch.column(name)
        carries = _carries_wire_format(data)
        where = pc.index_in(pc.binary_slice(data, 1, WIRE_HEADER_BYTES), value_set=olds)
        mapped = pc.fill_null(pc.and_(carries, pc.is_valid(where)), False)
        if not pc.any(mapped).as_py():
            continue
        # An explicit end: without one, binary_slice failed on 100,000 records here ("Negative buffer resize", pyarrow 26).
        end = max(pc.max(pc.binary_length(data)).as_py() or 0, WIRE_HEADER_BYTES)
        rest = pc.binary_slice(data, WIRE_HEADER_BYTES, end)
        rewritten = pc.binary_join_element_wise(pc.take(news, where), rest, b"")
        columns[name] = pc.if_else(mapped, rewritten, data)
        changed = mapped if changed is None else pc.or_(changed, mapped)
    if changed is None:
        return batch, 0
    arrays = [columns.get(field.name, batch.column(i)) for i, field in enumerate(batch.schema)]
    return pa.RecordBatch.from_arrays(arrays, schema=batch.schema), pc.sum(changed.cast(pa.int64())).as_py()

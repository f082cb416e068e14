"""`restore --schema-registry URL`: the saved registry brought back before any record (issue #52).

Every saved version is registered on the target (formats.saved_registry.registration_order:
referenced versions first, each subject's in version order), soft-deleted ones deleted again,
then the saved compatibility levels set: the global one only on a registry that was empty (the
one being recovered), soft deletes and a subject's level only on a subject this run created. A
saved subject the target holds with a schema the archive did not save is refused before anything
is written (refuse_foreign_subjects). A topic restored under another name (--rename) has its
`<topic>-key` / `<topic>-value` subjects registered under the new name (renamed_subjects). Each
id the target answers is compared with the saved one, never assumed:

- `--schema-ids preserve` (the default): the target is put in IMPORT mode and asked for each
  saved id (Confluent's and Redpanda's registries honour it). Any id that comes back different
  stops the restore before a record is produced, naming the ids.
- `--schema-ids remap`: registered as new versions; the map of the ids that changed is saved
  with the restore's records (SCHEMA_IDS_NAME, beside the offset map) and every record key and
  value carrying a mapped id in the wire format is rewritten (source.restore.restore_job). A resumed restore
  must find the same map.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from ...core.cluster.registry_client import RegistryClient
from ...core.errors import TopicvaultError
from ...core.local.faults import crash_after, crash_now
from ...formats.saved_registry import (
    EVERY_TOPIC,
    check_id_map,
    check_saved,
    describe_ids,
    differing_ids,
    ids_lacking,
    registration_order,
    renamed_subjects,
    renumbered_references,
    wire_format_fields,
)
from ..restore.restore_state import RestoreRecords, same_servers

SCHEMA_IDS_NAME = "schema-ids.json"
REGISTRY_RECORD_NAME = "registry-restore.json"  # RegistryRecord
# remap rewrites the keys and values a saved `<topic>-key` / `<topic>-value` subject names
# (formats.saved_registry.wire_format_fields); remap-all every key and value in the wire format,
# for topics serialized under another subject name strategy (its operator knows no other bytes
# start with byte 0 there).
SCHEMA_ID_MODES = ("preserve", "remap", "remap-all")


@dataclass(frozen=True)
class RegistryRestored:
    """What the registry restore did: versions registered, and saved id -> target id for those that differ."""

    versions: int
    changed: dict[int, int]
    global_left: str | None = None  # the saved global compatibility, not set: the target holds subjects of its own
    subjects_left: tuple[str, ...] = ()  # saved subjects the target held already: soft deletes and levels not set
    ids_lacking: tuple[int, ...] = ()  # schema ids the archive's records use that the saved registry lacks
    import_left: bool = False  # the target was in IMPORT mode before (a killed restore of another id?) and stays so


@dataclass(frozen=True)
class RegistryRequest:
    """`restore --schema-registry URL [--schema-ids MODE]`: where to register the saved registry, how."""

    url: str
    settings: dict[str, str]
    mode: str

    @classmethod
    def of(cls, url: str | None, settings: dict[str, str], mode: str) -> "RegistryRequest | None":
        """None without a URL; a one-line error for a bad mode (before anything is read)."""
        return None if not url else cls(url, dict(settings), check_schema_id_mode(mode))


def check_schema_id_mode(mode: str) -> str:
    """`mode` when it is one of SCHEMA_ID_MODES; a one-line error otherwise."""
    if mode not in SCHEMA_ID_MODES:
        raise TopicvaultError(f"bad --schema-ids {mode!r}: use preserve (ids kept, or the restore stops), remap "
                              "(new ids, rewritten in <topic>-key/-value subjects' records) or remap-all")
    return mode


def restore_registry(client: RegistryClient, saved: dict | None, mode: str,
                     record: "RegistryRecord | None" = None) -> RegistryRestored:
    """Register the saved registry on the target (see the module doc); TopicvaultError before any
    record is produced when the archive saved none, or (preserve) when an id came back different.
    `record`: where the run notes what a rerun must know (see RegistryRecord)."""
    if saved is None:
        raise TopicvaultError("--schema-registry: the archive saved no schema registry (as of --until): back up "
                              "with --schema-registry URL first, or restore without it")
    try:
        saved = check_saved(saved)
        order = registration_order(saved)
    except ValueError as exc:
        raise TopicvaultError(f"the saved schema registry is damaged ({exc}): nothing was restored") from None
    existing = refuse_foreign_subjects(client, saved)
    empty = not client.subjects()  # the registry being recovered
    earlier, was_empty = record.created_earlier() if record else (set(), None)
    empty = empty if was_empty is None else was_empty
    created = earlier | (set(saved["subjects"]) - set(existing))
    if mode == "preserve":
        mode_before = record.before_import(client) if record else client.mode()
        client.set_mode("IMPORT")
        try:
            id_map, target_versions = _register_all(client, order, existing, ask_ids=True)
            if record:
                record.registered(created, empty)
            if crash_after("registry.import") is not None:  # test hook: killed while the target is in IMPORT mode
                crash_now()
        finally:  # the target's own mode back, whatever came of it
            if mode_before not in (None, "IMPORT"):
                client.set_mode(mode_before)
                if record:
                    record.put_back()
    else:
        if record:
            record.recover(client)
        id_map, target_versions = _register_all(client, order, existing, ask_ids=False)
        if record:
            record.registered(created, empty)
    if crash_after("registry.registered") is not None:  # test hook: killed before the soft deletes
        crash_now()
    # The subjects this restore created get their saved state even when preserve stops below: a
    # rerun (remap) finds them as they will stay.
    left = {name: held for name, held in existing.items() if name not in created}
    _restore_state(client, saved, target_versions, left, again=set(existing) & created)
    if saved.get("config") and empty:  # a registry with subjects of its own keeps its global level
        client.set_compatibility(saved["config"])
    changed = differing_ids(id_map)
    if changed and mode == "preserve":
        raise TopicvaultError(f"the target schema registry {client.url} gave other ids than the saved ones "
                              f"({describe_ids(changed)}: saved→given), so restored records would name other "
                              "schemas; nothing was produced. Use a registry that registers under a given id "
                              "(IMPORT mode), or --schema-ids remap to rewrite the ids in the records")
    return RegistryRestored(len(order), changed, None if empty else saved.get("config"), tuple(sorted(left)),
                            import_left=mode == "preserve" and client.mode() == "IMPORT")


@dataclass(frozen=True)
class RegistryRecord:
    """What a registry restore does to the target that a rerun of it must know, kept in the
    restore's records (REGISTRY_RECORD_NAME, in the state store, trusted as its created topics
    are):

    - the global mode before a preserve restore put the target in IMPORT mode, noted before the
      change. A run killed then leaves it so (the registry refuses producers' registrations); its
      rerun (the same --restore-id) finds IMPORT there and puts READWRITE back (only READWRITE is
      taken from a record: a state store writer cannot make it set another mode);
    - the subjects it created, and whether the target was empty, once their versions are
      registered. A run killed after registering left them live with no soft delete or
      compatibility; its rerun finds them held already and would leave them so (it changes no
      subject it did not write), so it takes them as its own."""

    records: RestoreRecords
    restore_id: str

    def _read(self) -> dict:
        found = self.records.read(self.restore_id, REGISTRY_RECORD_NAME)
        return found if isinstance(found, dict) else {}

    def _write(self, **fields: object) -> None:
        self.records.write(self.restore_id, REGISTRY_RECORD_NAME,
                           {**self._read(), **fields, "restore_id": self.restore_id})

    def before_import(self, client: RegistryClient) -> str | None:
        """The mode to put back: READWRITE when a run of this restore left the target in IMPORT
        mode, else the target's (recorded now, before it changes)."""
        found = self._read()
        if "before" in found and not found.get("put_back") and client.mode() == "IMPORT":
            return "READWRITE" if found["before"] == "READWRITE" else None
        before = client.mode()
        self._write(before=before, put_back=False)
        return before

    def recover(self, client: RegistryClient) -> None:
        """For a rerun that does not use IMPORT mode (remap): put back the mode a killed preserve
        run of this restore left in IMPORT."""
        found = self._read()
        if "before" in found and not found.get("put_back") and client.mode() == "IMPORT":
            if found["before"] == "READWRITE":
                client.set_mode("READWRITE")
                self.put_back()

    def put_back(self) -> None:
        """Note that the mode was put back: a later rerun reads the target's mode again."""
        self._write(put_back=True)

    def created_earlier(self) -> tuple[set[str], bool | None]:
        """The subjects earlier runs of this restore registered, and whether the target was empty
        at the first (None: no run got that far)."""
        found = self._read()
        created = found.get("created")
        earlier = {name for name in created if isinstance(name, str)} if isinstance(created, list) else set()
        return earlier, (found["was_empty"] is True) if "was_empty" in found else None

    def registered(self, created: Collection[str], was_empty: bool) -> None:
        """Note, once their versions are registered, the subjects this restore created (and
        whether the target was empty): noted before, a run that failed or was killed before
        registering would have named subjects someone else created meanwhile."""
        self._write(created=sorted(created), was_empty=was_empty)


def refuse_foreign_subjects(client: RegistryClient, saved: dict) -> dict[str, dict[int, tuple[int, int]]]:
    """TopicvaultError, before anything is written, when a saved subject exists on the target
    holding a version (live or soft-deleted) whose schema the saved subject lacks: registering
    there would add the archive's schema as that subject's latest version, open its compatibility,
    soft-delete it. A subject holding only saved schemas (an earlier run of this restore) passes.
    The saved subjects the target holds already, each saved version there as (target version, id):
    those are not registered again (that would bring a soft-deleted subject back), and their
    subjects' compatibility and soft deletes are left alone."""
    existing: dict[str, dict[int, tuple[int, int]]] = {}
    for name, subject in sorted(saved["subjects"].items()):
        held = client.versions(name)
        if not held:
            continue
        found = {v["version"]: client.lookup(name, v, v.get("references", [])) for v in subject["versions"]}
        existing[name] = {number: there for number, there in found.items() if there is not None}
        others = sorted(set(held) - {target_version for target_version, _ in existing[name].values()})
        if others:
            raise TopicvaultError(f"the target schema registry {client.url} holds subject {name!r} with version(s) "
                                  f"{', '.join(map(str, others[:10]))} the archive did not save: the restore changes "
                                  "no subject it did not write; nothing was registered. Restore into a registry "
                                  "without that subject, or delete it there first")
    return existing


def _register_all(client: RegistryClient, order: list[tuple[str, dict]],
                  existing: dict[str, dict[int, tuple[int, int]]], ask_ids: bool
                  ) -> tuple[dict[int, int], dict[tuple[str, int], int]]:
    """Register each version in `order` the target does not hold already (`existing`, from
    refuse_foreign_subjects): saved id -> given id, and (subject, saved version) -> target version.

    One saved schema (one id) saved under several subjects can get several ids on the target (an
    Apicurio that gives a new content id per subject it is registered under, or a subject the
    target held already): each names that schema there, so the saved id itself is kept when it is
    one of them (the records stay byte-exact), else the smallest."""
    given_ids: dict[int, set[int]] = {}
    target_versions: dict[tuple[str, int], int] = {}
    opened: set[str] = set()
    for subject, version in order:
        if subject not in opened and subject not in existing:  # levels are set at the end: old versions need not pass today's
            client.set_compatibility("NONE", subject)
            opened.add(subject)
        references = renumbered_references(version, target_versions)
        there = existing.get(subject, {}).get(version["version"])
        if there is not None:
            target_versions[(subject, version["version"])], given = there
        else:
            given = client.register(subject, version, references, version["id"] if ask_ids else None)
            target_versions[(subject, version["version"])] = client.version_of(subject, version, references)
        given_ids.setdefault(version["id"], set()).add(given)
    id_map = {saved: saved if saved in ids else min(ids) for saved, ids in given_ids.items()}
    return id_map, target_versions


def _restore_state(client: RegistryClient, saved: dict, target_versions: dict[tuple[str, int], int],
                   left: Collection[str], again: Collection[str]) -> None:
    """Soft-delete what was soft-deleted, then set the saved subjects' compatibility levels: on
    the subjects this restore created only (not those `left`), as a restore sets topic configs.
    Those in `again` an earlier run of it created: what it deleted already is not deleted twice
    (a registry answers 404 to that)."""
    live = set(client.call("GET", "/subjects")) if again else set()
    for name, subject in sorted(saved["subjects"].items()):
        if name in left:
            continue
        if subject.get("deleted"):
            if name not in again or name in live:
                client.soft_delete(name)
            continue
        live_versions = set(client.versions(name, deleted=False) or ()) if name in again else None
        for version in subject["versions"]:
            number = target_versions[(name, version["version"])]
            if version.get("deleted") and (live_versions is None or number in live_versions):
                client.soft_delete(name, number)
    for name, subject in sorted(saved["subjects"].items()):
        if subject.get("config") and not subject.get("deleted") and name not in left:
            client.set_compatibility(subject["config"], name)


def save_id_map(records: RestoreRecords, restore_id: str, changed: dict[int, int]) -> None:
    """Keep the restore's id map beside its offset map; a resumed restore must find the same one
    (its records already on the target carry the ids it gave)."""
    body = {"restore_id": restore_id, "ids": [[old, new] for old, new in sorted(changed.items())]}
    found = records.read(restore_id, SCHEMA_IDS_NAME)
    if found is not None:
        if found != body:
            raise TopicvaultError(f"restore {restore_id} rewrote schema ids with another map "
                                  f"({records.describe(restore_id, SCHEMA_IDS_NAME)}) than the target registry gives "
                                  "now: the records restored so far name other ids; restore into new topics with a new "
                                  "--restore-id")
        return
    records.write(restore_id, SCHEMA_IDS_NAME, body)


def id_maps_into(records: RestoreRecords, target_bootstrap: str
                 ) -> tuple[dict[str, list[tuple[str, dict[int, int]]]], list[str]]:
    """Per archive topic, the schema id maps (saved id -> target id, SCHEMA_IDS_NAME) of this
    archive's restores that wrote it into the topic of that name on `target_bootstrap` (as their
    states name both), each with its restore id, in restore id order; and a line for each such map
    that cannot be read or is no map (check_id_map). Restores that changed no id are left out. For
    `verify -b`: the target's records hold the ids a remap restore gave them. Reads each state once."""
    maps: dict[str, list[tuple[str, dict[int, int]]]] = {}
    damaged = []
    for body in sorted(records.states(), key=lambda b: str(b.get("restore_id"))):
        topic_map = body.get("topic_map")
        kept = sorted(t for t, target in topic_map.items() if t == target) if isinstance(topic_map, dict) else []
        if not same_servers(body.get("target_bootstrap"), target_bootstrap) or not kept:
            continue
        restore_id = str(body["restore_id"])
        try:
            found = records.read(restore_id, SCHEMA_IDS_NAME)
            id_map = check_id_map(found) if found is not None else {}
        except (TopicvaultError, ValueError) as exc:
            what = records.describe(restore_id, SCHEMA_IDS_NAME)
            damaged.append(f"{exc}" if isinstance(exc, TopicvaultError) else f"{what} is damaged ({exc})")
            continue
        for topic in kept if id_map else ():
            maps.setdefault(topic, []).append((restore_id, id_map))
    return maps, damaged


def saved_registry(job, until_ms: int | None) -> dict | None:
    """The registry the archive saved as of `until_ms` (None: none), checked (TopicvaultError when damaged)."""
    return _archive_registry(job, until_ms)[0]


def _archive_registry(job, until_ms: int | None) -> tuple[dict | None, dict[int, int]]:
    """saved_registry's, and the schema ids the archive's records use (id -> records carrying it)."""
    from ...core.archive.checkpoints import load_state

    state = load_state(job.open_store(), job.keyring())
    saved = state.registry_at(until_ms)
    try:
        return (check_saved(saved) if saved is not None else None), state.schema_ids
    except ValueError as exc:
        raise TopicvaultError(f"the saved schema registry is damaged ({exc}): nothing was restored") from None


def registry_before_data(job, plan, until_ms: int | None, request: RegistryRequest | None
                         ) -> tuple[object, RegistryRestored | None]:
    """Restore the archive's registry (as of `until_ms`) into the target `request` names before any
    record of `plan` (a RestorePlan; see restore_registry), the subjects of the topics it renames
    named after their new names (formats.saved_registry.renamed_subjects); with remap, save the id
    map (save_id_map). The restore job with its schema_id_map set, and what was done (without a
    request: the job as it is, and None)."""
    if request is None:
        return job, None
    client = RegistryClient(request.url, request.settings)
    saved, used_ids = _archive_registry(job, until_ms)
    try:
        to_register = saved and renamed_subjects(saved, plan.topic_map)
    except ValueError as exc:
        raise TopicvaultError(f"--rename with --schema-registry: {exc}: nothing was restored. Rename to a topic "
                              "whose subjects the archive did not save") from None
    remap = request.mode.startswith("remap")
    restored = restore_registry(client, to_register, "remap" if remap else request.mode,
                                RegistryRecord(job.restore_records(), plan.restore_id))
    if remap:
        save_id_map(job.restore_records(), plan.restore_id, restored.changed)
    fields = ((EVERY_TOPIC, "key"), (EVERY_TOPIC, "value")) if request.mode == "remap-all" else \
        wire_format_fields(saved or {})
    restored = replace(restored, ids_lacking=tuple(ids_lacking(used_ids, saved)))
    return replace(job, schema_id_map=tuple(sorted(restored.changed.items())), schema_id_fields=fields), restored

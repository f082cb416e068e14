"""`restore --schema-registry` given an archive written by someone else (docs/threat-model.md):
it changes no subject it did not write, and reaches no resource but a subject's. A real Apicurio
Registry (harness_registry), one per module; every test names its own subjects."""

from __future__ import annotations

import json
import uuid

import pytest
import requests
from topicvault.core.cluster.registry_client import RegistryClient
from topicvault.core.errors import TopicvaultError
from topicvault.source.cluster_restore.registry_restore import restore_registry

HEADERS = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
AVRO_OWN = json.dumps({"type": "record", "name": "Own", "fields": [{"name": "x", "type": "int"}]})
AVRO_ARCHIVE = json.dumps({"type": "record", "name": "Archive", "fields": [{"name": "y", "type": "string"}]})


def call(url: str, method: str, path: str, body: dict | None = None) -> object:
    answer = requests.request(method, url + path, json=body, headers=HEADERS, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def saved_subject(schema: str, schema_id: int, deleted: bool = False, config: str | None = None) -> dict:
    return {"deleted": deleted, "config": config, "mode": None, "versions": [
        {"version": 1, "id": schema_id, "schemaType": "AVRO", "schema": schema, "references": [], "deleted": deleted}]}


def test_a_saved_subject_the_target_holds_with_other_schemas_is_left_alone(schema_registry):
    subject = f"u{uuid.uuid4().hex[:6]}-orders-value"
    own_id = call(schema_registry, "POST", f"/subjects/{subject}/versions", {"schema": AVRO_OWN})["id"]
    call(schema_registry, "PUT", f"/config/{subject}", {"compatibility": "FULL"})
    # The archive names the target's subject with another schema, soft-deleted, compatibility NONE.
    saved = {"config": None, "mode": None,
             "subjects": {subject: saved_subject(AVRO_ARCHIVE, 7, deleted=True, config="NONE")}}

    with pytest.raises(TopicvaultError, match=f"holds subject '{subject}' with version\\(s\\) 1 the archive did not save"):
        restore_registry(RegistryClient(schema_registry), saved, "remap")

    assert call(schema_registry, "GET", f"/subjects/{subject}/versions?deleted=true") == [1]
    assert call(schema_registry, "GET", f"/subjects/{subject}/versions/1")["id"] == own_id
    assert subject in call(schema_registry, "GET", "/subjects")  # not soft-deleted
    assert call(schema_registry, "GET", f"/config/{subject}")["compatibilityLevel"] == "FULL"


def test_a_rerun_finds_only_its_own_schemas_in_the_subjects_it_wrote(schema_registry):
    prefix = f"u{uuid.uuid4().hex[:6]}"
    saved = {"config": None, "mode": None,
             "subjects": {f"{prefix}-a-value": saved_subject(AVRO_OWN, 8, config="FULL"),
                          f"{prefix}-gone-value": saved_subject(AVRO_ARCHIVE, 9, deleted=True)}}
    client = RegistryClient(schema_registry)
    first = restore_registry(client, saved, "remap")
    again = restore_registry(client, saved, "remap")  # a rerun: the subjects hold the saved schemas only

    assert first.versions == again.versions == 2 and first.changed == again.changed
    assert call(schema_registry, "GET", f"/subjects/{prefix}-a-value/versions") == [1]
    assert f"{prefix}-gone-value" not in call(schema_registry, "GET", "/subjects")


@pytest.mark.parametrize("name", ["", "."])
def test_a_saved_subject_named_as_no_subject_leaves_the_global_compatibility_alone(schema_registry, name):
    call(schema_registry, "PUT", "/config", {"compatibility": "BACKWARD"})  # not NONE, what the old code set
    saved = {"config": None, "mode": None, "subjects": {name: saved_subject(AVRO_OWN, 10, config="NONE")}}

    with pytest.raises(TopicvaultError) as refused:
        restore_registry(RegistryClient(schema_registry), saved, "remap")

    assert call(schema_registry, "GET", "/config")["compatibilityLevel"] == "BACKWARD"  # was NONE: PUT /config
    assert "no subject a registry can hold" in str(refused.value)  # before any call


def test_a_registry_with_subjects_of_its_own_keeps_its_global_compatibility(schema_registry):
    call(schema_registry, "POST", f"/subjects/u{uuid.uuid4().hex[:6]}-own-value/versions", {"schema": '"long"'})
    call(schema_registry, "PUT", "/config", {"compatibility": "FULL_TRANSITIVE"})
    subject = f"u{uuid.uuid4().hex[:6]}-archive-value"
    saved = {"config": "NONE", "mode": None, "subjects": {subject: saved_subject(AVRO_OWN, 11, config="FORWARD")}}

    restored = restore_registry(RegistryClient(schema_registry), saved, "remap")

    assert call(schema_registry, "GET", "/config")["compatibilityLevel"] == "FULL_TRANSITIVE"
    assert restored.global_left == "NONE"  # reported (report.registry_restored)
    assert call(schema_registry, "GET", f"/config/{subject}")["compatibilityLevel"] == "FORWARD"  # its own subject


def test_a_subject_the_target_held_with_the_saved_schema_is_not_soft_deleted_or_reconfigured(schema_registry):
    # Whoever writes the bucket can read the target's schemas and save them, soft-deleted.
    subject = f"u{uuid.uuid4().hex[:6]}-orders-value"
    own_id = call(schema_registry, "POST", f"/subjects/{subject}/versions", {"schema": AVRO_OWN})["id"]
    call(schema_registry, "PUT", f"/config/{subject}", {"compatibility": "FULL"})
    saved = {"config": None, "mode": None,
             "subjects": {subject: saved_subject(AVRO_OWN, 12, deleted=True, config="NONE")}}

    restored = restore_registry(RegistryClient(schema_registry), saved, "remap")

    assert subject in call(schema_registry, "GET", "/subjects")  # not soft-deleted
    assert call(schema_registry, "GET", f"/config/{subject}")["compatibilityLevel"] == "FULL"
    assert restored.changed == ({12: own_id} if own_id != 12 else {})
    assert restored.subjects_left == (subject,)  # reported (report.registry_restored)

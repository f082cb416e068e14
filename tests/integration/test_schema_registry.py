"""Schema registry in the backup (issue #52) against a real Apicurio Registry, a real Kafka and Spark.

One Apicurio per module (harness_registry; 13-40 s to start): every test names its own subjects.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest
import requests
from clitools import assert_one_line_error, run_cli, run_cli_process
from harness_s3 import free_port
from kafkatools import consume_all, produce_records, recreate_topic
from topicvault.core.archive.checkpoints import load_state
from topicvault.core.envelope import Record
from topicvault.core.stores.locations import open_store

HEADERS = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
AVRO_A1 = {"type": "record", "name": "A", "fields": [{"name": "x", "type": "int"}]}
AVRO_A2 = {**AVRO_A1, "fields": [*AVRO_A1["fields"], {"name": "y", "type": "string", "default": ""}]}
JSON_SCHEMA = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
               "properties": {"n": {"type": "string"}}}
AVRO_D = {"type": "record", "name": "D", "fields": [{"name": "a", "type": "A"}]}
PROTO = 'syntax = "proto3";\nmessage C { int32 x = 1; }\n'


def register(url: str, subject: str, schema: str, schema_type: str = "AVRO", references: list | None = None) -> int:
    body = {"schema": schema, "schemaType": schema_type, "references": references or []}
    answer = requests.post(f"{url}/subjects/{subject}/versions", json=body, headers=HEADERS, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()["id"]


# confluent-kafka's registry client waits without limit by default (httpx timeout None): a
# registry that stops answering would hold the test without a word.
REGISTRY_CLIENT_CONF = {"timeout": 30}


def call(url: str, method: str, path: str, body: dict | None = None) -> object:
    answer = requests.request(method, url + path, json=body, headers=HEADERS, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def populate(url: str, prefix: str) -> dict[str, int]:
    """Three live subjects (two Avro versions, a reference, Protobuf), one soft-deleted JSON Schema
    subject, a per-subject compatibility: the ids by name."""
    ids = {"a1": register(url, f"{prefix}-a-value", json.dumps(AVRO_A1)),
           "a2": register(url, f"{prefix}-a-value", json.dumps(AVRO_A2))}
    ids["d"] = register(url, f"{prefix}-d-value", json.dumps(AVRO_D),
                        references=[{"name": "A", "subject": f"{prefix}-a-value", "version": 1}])
    ids["c"] = register(url, f"{prefix}-c-key", PROTO, "PROTOBUF")
    ids["j"] = register(url, f"{prefix}-j-value", json.dumps(JSON_SCHEMA), "JSON")
    call(url, "DELETE", f"/subjects/{prefix}-j-value")
    call(url, "PUT", f"/config/{prefix}-a-value", {"compatibility": "FULL"})
    return ids


def wire(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


def test_backup_saves_the_registry_when_it_changes_and_ls_names_missing_ids(bootstrap, topic_factory, schema_registry,
                                                                          tmp_path: Path):
    prefix = f"s{uuid.uuid4().hex[:6]}"
    ids = populate(schema_registry, prefix)
    topic = topic_factory(1)
    unknown = max(ids.values()) + 1000
    pairs = [(None, wire(ids["a1"], b"\x02")), (None, wire(ids["a2"], b"\x02\x00")), (wire(ids["c"], b"\x00\x08\x01"),
             wire(ids["a2"], b"\x04\x00")), (b"plain", b"not in the wire format"), (None, wire(unknown, b"?")),
             (None, None)]
    produce_records(bootstrap, topic, [Record(topic, 0, i, k, v, 1_700_000_000_000 + i) for i, (k, v) in enumerate(pairs)])
    location = str(tmp_path / "archive")

    run_cli("backup", "-b", bootstrap, "--to", location, "--topic", topic, "--schema-registry", schema_registry)

    state = load_state(open_store(location))
    saved = state.registry_at(None)
    subjects = {name: s for name, s in saved["subjects"].items() if name.startswith(prefix)}
    assert sorted(subjects) == sorted(f"{prefix}-{s}" for s in ("a-value", "d-value", "c-key", "j-value"))
    a = subjects[f"{prefix}-a-value"]
    assert [(v["version"], v["id"], v["schemaType"]) for v in a["versions"]] == [(1, ids["a1"], "AVRO"),
                                                                                 (2, ids["a2"], "AVRO")]
    assert json.loads(a["versions"][1]["schema"]) == AVRO_A2 and a["config"] == "FULL"
    assert subjects[f"{prefix}-d-value"]["versions"][0]["references"] == [
        {"name": "A", "subject": f"{prefix}-a-value", "version": 1}]
    assert subjects[f"{prefix}-c-key"]["versions"][0]["schemaType"] == "PROTOBUF"
    j = subjects[f"{prefix}-j-value"]
    assert j["deleted"] and [(v["id"], v["schemaType"], v["deleted"]) for v in j["versions"]] == [(ids["j"], "JSON", True)]
    assert json.loads(j["versions"][0]["schema"]) == JSON_SCHEMA
    assert state.schema_ids == {ids["a1"]: 1, ids["a2"]: 2, ids["c"]: 1, unknown: 1}

    listing = run_cli("ls", location)
    assert f"schema ids used by records that the saved schema registry lacks: {unknown} " in listing
    assert "soft-deleted" in listing and "saved 1 time" in listing

    # Unchanged registry, no new records: nothing is committed. A new version: saved again.
    run_cli("backup", "-b", bootstrap, "--to", location, "--topic", topic, "--schema-registry", schema_registry)
    assert load_state(open_store(location)).last_sequence == 1
    avro_a3 = {**AVRO_A2, "fields": [*AVRO_A2["fields"], {"name": "z", "type": "long", "default": 0}]}
    ids["a3"] = register(schema_registry, f"{prefix}-a-value", json.dumps(avro_a3))
    run_cli("backup", "-b", bootstrap, "--to", location, "--topic", topic, "--schema-registry", schema_registry)
    state = load_state(open_store(location))
    assert state.last_sequence == 2 and len(state.registry_history) == 2
    assert [v["id"] for v in state.registry_at(None)["subjects"][f"{prefix}-a-value"]["versions"]][-1] == ids["a3"]
    first_saved_ms = state.registry_history[0]["read_ms"]
    assert state.registry_at(first_saved_ms) == saved  # as of --until before the change: the first


def test_an_unreachable_registry_stops_the_backup_before_anything_is_written(bootstrap, topic_factory, tmp_path: Path):
    topic = topic_factory(1)
    produce_records(bootstrap, topic, [Record(topic, 0, 0, None, wire(1, b"x"), 1_700_000_000_000)])
    location = tmp_path / "archive"
    url = f"http://user:s3cr3t@127.0.0.1:{free_port()}/apis/ccompat/v7"

    output = run_cli("backup", "-b", bootstrap, "--to", str(location), "--topic", topic, "--schema-registry", url,
                     expect_exit=1)

    assert_one_line_error(output, "schema registry http://***@127.0.0.1", "GET /subjects")
    assert "s3cr3t" not in output
    assert not list(location.rglob("*.json"))


@pytest.mark.parametrize("url", ["registry:8081", "ftp://registry/"])
def test_a_registry_url_that_is_no_http_url_is_refused(bootstrap, topic_factory, tmp_path: Path, url: str):
    topic = topic_factory(1)
    output = run_cli("backup", "-b", bootstrap, "--to", str(tmp_path / "a"), "--topic", topic, "--schema-registry", url,
                     expect_exit=1)
    assert_one_line_error(output, f"--schema-registry {url} is no http:// or https:// URL")


STANDIN_SAVED = {
    "config": "BACKWARD", "mode": "READWRITE",
    "subjects": {
        "a-value": {"deleted": False, "config": "FULL", "mode": None, "versions": [
            {"version": 1, "id": 21, "schemaType": "AVRO", "schema": json.dumps(AVRO_A1), "references": [],
             "deleted": False},
            {"version": 2, "id": 23, "schemaType": "AVRO", "schema": json.dumps(AVRO_A2), "references": [],
             "deleted": False}]},
        "d-value": {"deleted": False, "config": None, "mode": None, "versions": [
            {"version": 1, "id": 22, "schemaType": "AVRO", "schema": '{"type":"record","name":"D","fields":[]}',
             "references": [{"name": "A", "subject": "a-value", "version": 1}], "deleted": False}]},
        "j-value": {"deleted": True, "config": None, "mode": None, "versions": [
            {"version": 1, "id": 30, "schemaType": "JSON", "schema": json.dumps(JSON_SCHEMA), "references": [],
             "deleted": True}]},
    },
}


@pytest.mark.network
def test_preserve_keeps_every_id_on_a_registry_that_honours_them():
    from registry_standin import standin_registry
    from topicvault.core.cluster.registry_client import RegistryClient
    from topicvault.source.cluster_restore.registry_restore import restore_registry

    with standin_registry() as (url, registry):
        restored = restore_registry(RegistryClient(url), STANDIN_SAVED, "preserve")

    assert restored.changed == {} and restored.versions == 4
    assert {s: [i for i, _ in v] for s, v in registry.subjects.items()} == {"a-value": [21, 23], "d-value": [22],
                                                                          "j-value": [30]}
    registered = [(path, body["id"]) for method, path, body in registry.requests if path.endswith("/versions")]
    assert registered == [("/subjects/a-value/versions", 21), ("/subjects/a-value/versions", 23),
                          ("/subjects/d-value/versions", 22), ("/subjects/j-value/versions", 30)]
    modes = [body["mode"] for method, path, body in registry.requests if path == "/mode" and method == "PUT"]
    assert modes == ["IMPORT", "READWRITE"] and registry.mode == "READWRITE"
    assert registry.deleted == {"j-value"}
    assert registry.configs == {"a-value": "FULL", "d-value": "NONE", "j-value": "NONE", "": "BACKWARD"}


def decoded(url: str, data: bytes) -> object:
    """A wire-format key or value decoded as a registry-aware consumer does: the schema fetched by
    the id in its header from the registry at `url`, the payload read with it (Avro: fastavro; JSON
    Schema: parsed and validated; Protobuf: no decoder here, so its schema text and payload bytes)."""
    import io

    import fastavro
    import jsonschema

    schema_id = int.from_bytes(data[1:5], "big")
    schema = call(url, "GET", f"/schemas/ids/{schema_id}")
    kind = schema.get("schemaType", "AVRO")
    if kind == "AVRO":
        named = {}
        for reference in schema.get("references", []):
            referenced = call(url, "GET", f"/subjects/{reference['subject']}/versions/{reference['version']}")
            fastavro.parse_schema(json.loads(referenced["schema"]), named_schemas=named)
        parsed = fastavro.parse_schema(json.loads(schema["schema"]), named_schemas=named)
        return fastavro.schemaless_reader(io.BytesIO(data[5:]), parsed)
    if kind == "JSON":
        value = json.loads(data[5:])
        jsonschema.validate(value, json.loads(schema["schema"]))
        return value
    return kind, schema["schema"], data[5:]


def avro(schema: dict, value: dict, *referenced: dict) -> bytes:
    import io

    import fastavro

    named: dict = {}
    for schema_referenced in referenced:
        fastavro.parse_schema(schema_referenced, named_schemas=named)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema, named_schemas=named), value)
    return out.getvalue()


def test_remap_restores_a_lost_registry_and_rewrites_the_ids_records_carry(bootstrap, topic_factory, schema_registry,
                                                                          tmp_path: Path):
    from harness_registry import apicurio

    prefix = f"r{uuid.uuid4().hex[:6]}"
    ids = populate(schema_registry, prefix)
    topic = topic_factory(1)
    pairs = [(None, wire(ids["a1"], avro(AVRO_A1, {"x": 1}))),
             (None, wire(ids["a2"], avro(AVRO_A2, {"x": 2, "y": "two"}))),
             (wire(ids["c"], b"\x00\x08\x07"), wire(ids["j"], json.dumps({"n": "deleted subject"}).encode())),
             (b"plain key", b"\x00\x00"), (None, None),
             (None, wire(ids["d"], avro(AVRO_D, {"a": {"x": 5}}, AVRO_A1)))]  # through a reference
    records = [Record(topic, 0, i, k, v, 1_700_000_000_000 + i) for i, (k, v) in enumerate(pairs)]
    produce_records(bootstrap, topic, records)
    expected = [tuple(decoded(schema_registry, d) if d and len(d) >= 5 and d[0] == 0 else d for d in pair)
                for pair in pairs]
    location = str(tmp_path / "archive")
    run_cli("backup", "-b", bootstrap, "--to", location, "--topic", topic, "--schema-registry", schema_registry)

    # The source registry is lost; the new one already holds a schema, so it gives other ids. The
    # topic's records name several subjects (no `<topic>-value` subject): remap-all rewrites them.
    with apicurio(tmp_path) as target:
        register(target, "decoy-value", '"string"')
        restored = f"{topic}.restored"
        planned = run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={restored}",
                          "--schema-registry", target, "--schema-ids", "remap-all", "--dry-run")
        assert re.search(r"schema registry: would register \d+ versions of \d+ subjects \(remap-all\)", planned)
        assert call(target, "GET", "/subjects?deleted=true") == ["decoy-value"]  # a dry run asks the target nothing
        refused = run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={restored}",
                          "--schema-registry", target, expect_exit=1)
        assert_one_line_error(refused, "gave other ids than the saved ones", f"{ids['a1']}→", "nothing was produced")
        output = run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={restored}",
                         "--schema-registry", target, "--schema-ids", "remap-all")
        rewritten = int(re.search(r"schema ids rewritten in (\d+) records?", output).group(1))

        got = consume_all(bootstrap, restored)[0]
        assert len(got) == len(records)
        # The target gave some schemas other ids (the decoy took one): those records, and only they, changed.
        assert rewritten == sum((r.key, r.value) != (s.key, s.value) for r, s in zip(got, records)) > 0
        for record, source, want in zip(got, records, expected):
            for data, original, value in zip((record.key, record.value), (source.key, source.value), want):
                if original is None or len(original) < 5 or original[0] != 0:
                    assert data == original  # not in the wire format: byte-exact
                else:
                    assert data[5:] == original[5:]
                    assert decoded(target, data) == value  # Protobuf: the same schema text and payload
        # Run again with its id (a resume): the target's records, rewritten, are found to be the archive's.
        restore_id = re.search(r"restore id (\S+):", output).group(1)
        again = run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={restored}",
                        "--schema-registry", target, "--schema-ids", "remap-all", "--restore-id", restore_id)
        assert "restored 0 records" in again and f"{len(records)} were already there" in again
        assert [(r.key, r.value) for r in consume_all(bootstrap, restored)[0]] == [(r.key, r.value) for r in got]
        assert call(target, "GET", f"/config/{prefix}-a-value")["compatibilityLevel"] == "FULL"
        assert f"{prefix}-j-value" not in call(target, "GET", "/subjects")
        assert f"{prefix}-j-value" in call(target, "GET", "/subjects?deleted=true")


# The done-when of issue #52: records made by confluent-kafka's own serializers, a lost cluster and
# registry, a new cluster and a new Apicurio brought back with the runbook's commands
# (docs/recovery-runbook.md, "The schema registry"), every record read back by its deserializers.
MONEY = {"type": "record", "name": "Money", "namespace": "shop",
         "fields": [{"name": "cents", "type": "long"}, {"name": "currency", "type": "string"}]}
ORDER_1 = {"type": "record", "name": "Order", "namespace": "shop",
           "fields": [{"name": "id", "type": "long"}, {"name": "total", "type": "shop.Money"}]}
ORDER_2 = {**ORDER_1, "fields": [*ORDER_1["fields"], {"name": "note", "type": "string", "default": ""}]}
EVENT = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Event", "type": "object",
         "properties": {"kind": {"type": "string"}, "n": {"type": "integer"}}, "required": ["kind"]}


def order_key_class() -> type:
    """A Protobuf message class `shop.OrderKey {string region = 1; int64 id = 2;}`, compiled at run time
    from a FileDescriptorProto built here (no protoc), in a pool of its own."""
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message_factory import GetMessageClass

    proto = descriptor_pb2.FileDescriptorProto(name="shop/order_key.proto", package="shop", syntax="proto3")
    message = proto.message_type.add(name="OrderKey")
    optional = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    message.field.add(name="region", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=optional)
    message.field.add(name="id", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64, label=optional)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return GetMessageClass(pool.FindMessageTypeByName("shop.OrderKey"))


def serialized_records(url: str, prefix: str, orders: str, events: str) -> tuple[list[Record], list[Record]]:
    """Records in both topics made by confluent-kafka's serializers against the registry at `url`:
    `orders` with Protobuf keys and Avro values (two versions of a schema referencing `PREFIX-money`),
    `events` with JSON Schema values; plain keys and values, a null one and a short one starting with
    byte 0 between them. The registry then: a per-subject compatibility, the JSON Schema subject soft-deleted."""
    from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient(REGISTRY_CLIENT_CONF | {"url": url})
    money_subject = f"{prefix}-money"
    client.register_schema(money_subject, Schema(json.dumps(MONEY), "AVRO"))
    reference = [SchemaReference("shop.Money", money_subject, 1)]
    order_key = order_key_class()
    keys = ProtobufSerializer(order_key, client, {"use.deprecated.format": False})
    order_v1 = AvroSerializer(client, Schema(json.dumps(ORDER_1), "AVRO", reference))
    order_v2 = AvroSerializer(client, Schema(json.dumps(ORDER_2), "AVRO", reference))
    event = JSONSerializer(json.dumps(EVENT), client)
    key_of, value_of = SerializationContext(orders, MessageField.KEY), SerializationContext(orders, MessageField.VALUE)
    event_of = SerializationContext(events, MessageField.VALUE)
    order_pairs = [
        (keys(order_key(region="eu", id=1), key_of), order_v1({"id": 1, "total": {"cents": 250, "currency": "EUR"}},
                                                              value_of)),
        (keys(order_key(region="us", id=2), key_of), order_v2({"id": 2, "total": {"cents": 9, "currency": "USD"},
                                                               "note": "gift"}, value_of)),
        (b"plain key", b"plain value"), (keys(order_key(region="eu", id=1), key_of), None), (None, b"\x00\x00\x07"),
        (keys(order_key(id=3), key_of), order_v1({"id": 3, "total": {"cents": 0, "currency": ""}}, value_of)),
    ]
    event_pairs = [(b"e-1", event({"kind": "created", "n": 1}, event_of)), (None, b"{\"kind\": \"raw json\"}"),
                   (b"e-2", event({"kind": "paid"}, event_of))]
    client.set_compatibility(f"{orders}-value", "FULL")
    client.delete_subject(f"{events}-value")  # soft: its records still name its schema
    headers = (("trace", b"\x00\x00\x00\x00\x01"), ("trace", None))
    return ([Record(orders, 0, i, k, v, 1_700_000_000_000 + i, 0, headers) for i, (k, v) in enumerate(order_pairs)],
            [Record(events, 0, i, k, v, 1_700_000_000_000 + i, 0, ()) for i, (k, v) in enumerate(event_pairs)])


def deserialized(url: str, record: Record) -> tuple[object, object]:
    """A record's key and value as a schema-registry-aware consumer reads them: confluent-kafka's
    deserializers (Avro and JSON Schema values) fetching each schema by the id the record carries
    from the registry at `url`; plain bytes as they are. Protobuf keys: its deserializer reads the
    framing and the message, and the schema the id names is fetched beside (Apicurio 3.3.3 answers
    the deserializer's `?format=serialized` with raw descriptor bytes, not base64: docs/testing.md)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf.json_format import MessageToDict

    client = SchemaRegistryClient(REGISTRY_CLIENT_CONF | {"url": url})
    key, value = record.key, record.value
    if in_wire_format(key):
        reader = ProtobufDeserializer(order_key_class(), {"use.deprecated.format": False})
        message = reader(key, SerializationContext(record.topic, MessageField.KEY))
        key = MessageToDict(message), client.get_schema(int.from_bytes(key[1:5], "big")).schema_str
    if in_wire_format(value):
        reader = (AvroDeserializer(client) if "-orders-" in record.topic  # topic_factory: PREFIX-orders-HEX
                  else JSONDeserializer(None, schema_registry_client=client))
        value = reader(value, SerializationContext(record.topic, MessageField.VALUE))
    return key, value


def in_wire_format(data: bytes | None) -> bool:
    return data is not None and len(data) >= 5 and data[0] == 0


def test_a_lost_cluster_and_registry_come_back_with_the_runbook_and_real_deserializers_read_every_record(
        bootstrap, topic_factory, schema_registry, tmp_path: Path):
    from harness_registry import apicurio
    from topicvault.core.local.local_kafka import LocalKafka

    prefix = f"w{uuid.uuid4().hex[:6]}"
    orders, events = topic_factory(1, f"{prefix}-orders"), topic_factory(1, f"{prefix}-events")
    order_records, event_records = serialized_records(schema_registry, prefix, orders, events)
    produce_records(bootstrap, orders, order_records)
    produce_records(bootstrap, events, event_records)
    sources = {orders: consume_all(bootstrap, orders)[0], events: consume_all(bootstrap, events)[0]}
    expected = {topic: [deserialized(schema_registry, r) for r in records] for topic, records in sources.items()}
    assert expected[orders][1][0][0] == {"region": "us", "id": "2"}
    assert expected[orders][1][1] == {"id": 2, "total": {"cents": 9, "currency": "USD"}, "note": "gift"}
    assert expected[events][2] == (b"e-2", {"kind": "paid"})
    location = str(tmp_path / "archive")

    # Before the loss (the runbook's commands; --topics-regex names this test's topics only).
    backed_up = run_cli("backup", "-b", bootstrap, "--to", location, "--topics-regex", f"{prefix}-.*",
                        "--schema-registry", schema_registry)
    listing = run_cli("ls", location)
    print(f"$ topicvault backup ... --schema-registry URL\n{backed_up}\n$ topicvault ls\n{listing}")
    assert re.search(r"schema registry: \d+ subjects \(\d+ soft-deleted\)", listing)
    assert "lacks" not in listing  # every id the records carry was saved

    # The cluster and its registry are lost: a new cluster, a new, empty Apicurio.
    with LocalKafka(folder=tmp_path / "new-cluster") as new_cluster, apicurio(tmp_path / "new-registry") as new_registry:
        restore = ["restore", "--from", location, "-b", new_cluster.bootstrap, "--cluster-state",
                   "--schema-registry", new_registry]
        planned = run_cli(*restore, "--dry-run")
        refused = run_cli(*restore, expect_exit=1)  # Apicurio gives ids of its own: preserve stops first
        assert_one_line_error(refused, "gave other ids than the saved ones", "nothing was produced")
        assert not new_cluster_topics(new_cluster.bootstrap, prefix)
        restored = run_cli(*restore, "--schema-ids", "remap")
        verified = run_cli("verify", location, "-b", new_cluster.bootstrap)
        print(f"$ restore --dry-run\n{planned}\n$ restore\n{refused}\n$ restore --schema-ids remap\n{restored}\n"
              f"$ verify -b NEW\n{verified}")

        rewritten = int(re.search(r"schema ids rewritten in (\d+) records?", restored).group(1))
        changed = 0
        for topic, records in sources.items():
            got = consume_all(new_cluster.bootstrap, topic)[0]
            def kept(rs: list[Record]) -> list[tuple]:
                return [(r.offset, r.timestamp_ms, r.timestamp_type, r.headers) for r in rs]

            assert kept(got) == kept(records)
            for record, source, want in zip(got, records, expected[topic], strict=True):
                assert deserialized(new_registry, record) == want  # the same values, read on the new registry
                for data, original in zip((record.key, record.value), (source.key, source.value)):
                    if in_wire_format(original):
                        assert data[0] == 0 and data[5:] == original[5:]  # only the 4-byte id may differ
                    else:
                        assert data == original  # not in the wire format: byte-exact
                changed += (record.key, record.value) != (source.key, source.value)
        assert rewritten == changed > 0
        assert call(new_registry, "GET", f"/config/{orders}-value")["compatibilityLevel"] == "FULL"
        assert f"{events}-value" not in call(new_registry, "GET", "/subjects")
        assert f"{events}-value" in call(new_registry, "GET", "/subjects?deleted=true")
        assert "differ" not in verified


def new_cluster_topics(bootstrap: str, prefix: str) -> list[str]:
    """The topics of the cluster at `bootstrap` named with `prefix`."""
    from confluent_kafka.admin import AdminClient

    return [t for t in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics if t.startswith(prefix)]


def test_a_renamed_restore_registers_the_topics_subjects_under_its_new_name(bootstrap, topic_factory, schema_registry,
                                                                            tmp_path: Path):
    """restore --rename T=T-copy --schema-registry: a TopicNameStrategy client of T-copy looks up
    T-copy-value. Restored into the registry the backup read, after T-value gained a version the
    archive did not save, the restore was refused (it changes no subject it did not write)."""
    topic = topic_factory(1, prefix=f"r{uuid.uuid4().hex[:6]}")
    first = register(schema_registry, f"{topic}-value", json.dumps(AVRO_A1))
    # The same schema under a second subject: Apicurio gives it another id when registered again
    # under the new name; either names the schema (the restore refused, "two ids", before).
    assert register(schema_registry, f"{topic}-twin", json.dumps(AVRO_A1)) == first
    unknown = first + 100_000  # no schema has it: the restore warns, and restores the record as it is
    produce_records(bootstrap, topic, [Record(topic, 0, 0, None, wire(first, b"\x02"), 1_700_000_000_000),
                                       Record(topic, 0, 1, None, wire(unknown, b"?"), 1_700_000_000_001)])
    location = str(tmp_path / "archive")
    run_cli("backup", "-b", bootstrap, "--to", location, "--topic", topic, "--schema-registry", schema_registry)
    register(schema_registry, f"{topic}-value", json.dumps(AVRO_A2))  # the source moves on
    copy = f"{topic}-copy"

    restored = run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={copy}",
                       "--schema-registry", schema_registry, "--schema-ids", "remap")

    latest = call(schema_registry, "GET", f"/subjects/{copy}-value/versions/latest")
    assert json.loads(latest["schema"]) == AVRO_A1 and latest["version"] == 1
    assert call(schema_registry, "GET", f"/subjects/{topic}-value/versions") == [1, 2]  # the source's, untouched
    record, kept = consume_all(bootstrap, copy)[0]
    assert json.loads(call(schema_registry, "GET", f"/schemas/ids/{int.from_bytes(record.value[1:5], 'big')}")
                      ["schema"]) == AVRO_A1
    assert kept.value == wire(unknown, b"?")
    assert re.search(rf"warning: records of the archive carry schema ids the saved registry lacks \(.*\b{unknown}\b",
                     restored), restored


@pytest.mark.parametrize("rerun", ["preserve", "remap"])
def test_a_preserve_restore_killed_in_import_mode_puts_the_mode_back_when_run_again(bootstrap, topic_factory,
                                                                                    schema_registry, tmp_path: Path,
                                                                                    rerun: str):
    """A preserve restore puts the target registry in IMPORT mode (which refuses producers'
    registrations) while it registers. Killed then, its rerun found IMPORT as "the mode before"
    (preserve) or did not look (remap), and left the registry in IMPORT mode for good."""
    topic = topic_factory(1, prefix=f"k{uuid.uuid4().hex[:6]}")
    first = register(schema_registry, f"{topic}-value", json.dumps(AVRO_A1))
    produce_records(bootstrap, topic, [Record(topic, 0, 0, None, wire(first, b"\x02"), 1_700_000_000_000)])
    location = str(tmp_path / "archive")
    run_cli("backup", "-b", bootstrap, "--to", location, "--topic", topic, "--schema-registry", schema_registry)
    assert call(schema_registry, "GET", "/mode")["mode"] == "READWRITE"
    restore = ["restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-copy",
               "--schema-registry", schema_registry, "--restore-id", f"{topic}-import"]
    log = tmp_path / "restore.log"
    try:
        assert run_cli_process(restore, log, crash_at="registry.import:1", executor="local") == -9, log.read_text()
        assert call(schema_registry, "GET", "/mode")["mode"] == "IMPORT"  # what the kill left

        # Apicurio may give the renamed subject an id of its own (preserve then stops, exit 1) or not.
        status = run_cli_process([*restore, "--schema-ids", rerun], log, executor="local")
        assert status in ((0, 1) if rerun == "preserve" else (0,)), log.read_text()

        assert call(schema_registry, "GET", "/mode")["mode"] == "READWRITE"
    finally:  # the module's registry usable by the next test whatever happened
        call(schema_registry, "PUT", "/mode", {"mode": "READWRITE"})


def test_a_restore_killed_before_its_soft_deletes_makes_them_when_run_again(bootstrap, topic_factory, schema_registry,
                                                                             tmp_path: Path):
    """A saved soft-deleted subject is registered, then deleted again. Killed in between, the
    rerun found the subject held (with saved schemas only), took it for the target's own and left
    it live, and its compatibility level unset."""
    topic = topic_factory(1, prefix=f"d{uuid.uuid4().hex[:6]}")
    first = register(schema_registry, f"{topic}-value", json.dumps(AVRO_A1))
    register(schema_registry, f"{topic}-key", json.dumps(AVRO_A2))
    call(schema_registry, "PUT", f"/config/{topic}-key", {"compatibility": "FULL"})
    call(schema_registry, "DELETE", f"/subjects/{topic}-value")  # soft-deleted, its id still in the records
    produce_records(bootstrap, topic, [Record(topic, 0, 0, None, wire(first, b"\x02"), 1_700_000_000_000)])
    location = str(tmp_path / "archive")
    run_cli("backup", "-b", bootstrap, "--to", location, "--topic", topic, "--schema-registry", schema_registry)
    copy = f"{topic}-copy"
    restore = ["restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={copy}", "--schema-registry",
               schema_registry, "--schema-ids", "remap", "--restore-id", f"{topic}-soft"]
    log = tmp_path / "restore.log"
    assert run_cli_process(restore, log, crash_at="registry.registered:1", executor="local") == -9, log.read_text()
    assert f"{copy}-value" in call(schema_registry, "GET", "/subjects")  # registered, not yet deleted

    assert run_cli_process(restore, log, executor="local") == 0, log.read_text()

    assert f"{copy}-value" not in call(schema_registry, "GET", "/subjects")
    assert f"{copy}-value" in call(schema_registry, "GET", "/subjects?deleted=true")
    assert call(schema_registry, "GET", f"/config/{copy}-key")["compatibilityLevel"] == "FULL"


def test_a_preserve_restore_into_a_registry_left_in_import_mode_says_so(bootstrap, topic_factory, schema_registry,
                                                                        tmp_path: Path):
    """A registry in IMPORT mode (a killed restore of another --restore-id leaves it so) refuses
    producers' registrations. The restore does not change a mode it did not set, and says so
    (it said nothing)."""
    topic = topic_factory(1, prefix=f"i{uuid.uuid4().hex[:6]}")
    first = register(schema_registry, f"{topic}-value", json.dumps(AVRO_A1))
    produce_records(bootstrap, topic, [Record(topic, 0, 0, None, wire(first, b"\x02"), 1_700_000_000_000)])
    location = str(tmp_path / "archive")
    run_cli("backup", "-b", bootstrap, "--to", location, "--topic", topic, "--schema-registry", schema_registry)
    recreate_topic(bootstrap, topic, 1, {})  # empty again: the records go back into it, the subjects are there
    call(schema_registry, "PUT", "/mode", {"mode": "IMPORT"})
    try:
        restored = run_cli("restore", "--from", location, "-b", bootstrap, "--schema-registry", schema_registry)

        assert "warning: the target schema registry was in IMPORT mode before this restore and stays so" in restored
        assert call(schema_registry, "GET", "/mode")["mode"] == "IMPORT"
    finally:
        call(schema_registry, "PUT", "/mode", {"mode": "READWRITE"})

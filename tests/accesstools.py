"""ACLs and SCRAM users on a local Apache Kafka, and what they let real clients do: for the tests of
saving and restoring a cluster's access (issue 37)."""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from topicvault.core.cluster.cluster_access import Acl
from topicvault.core.cluster.cluster_admin import binding_of
from topicvault.core.local.local_kafka import LocalKafka


def acl(name: str, principal: str = "User:alice", operation: str = "READ", *, resource: str = "TOPIC",
        pattern: str = "LITERAL", permission: str = "ALLOW") -> Acl:
    return Acl(resource, name, pattern, principal, "*", operation, permission)


def scram_users(kafka: LocalKafka) -> dict[str, list]:
    """Each SCRAM user of the cluster with its mechanisms."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    return {user: [info.mechanism for info in description.scram_credential_infos]
            for user, description in admin.describe_user_scram_credentials().result(30).items()}


ANY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)


PASSWORDS = {"alice": "alice-pw-1", "bob": "bob-pw-2"}


def admin_settings(kafka: LocalKafka) -> list[str]:
    """topicvault's own flags: it authenticates as the admin over SCRAM, as an operator would."""
    return ["-b", kafka.sasl_bootstrap, "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-512",
            "-X", f"sasl.username={kafka.admin_user}", "-X", f"sasl.password={kafka.admin_password}"]


def as_user(kafka: LocalKafka, user: str, password: str, mechanism: str) -> dict:
    return {"bootstrap.servers": kafka.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def all_acls(kafka: LocalKafka) -> set[tuple]:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})  # kept alive until the answer is in
    found = admin.describe_acls(ANY_ACL).result(30)
    return {(b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host, b.operation.name,
             b.permission_type.name) for b in found}


def set_acls(kafka: LocalKafka, *acls: Acl) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for future in admin.create_acls([binding_of(a) for a in acls]).values():
        future.result(30)


def can_produce(config: dict, topic: str) -> KafkaError | None:
    """None when one record to `topic` is acknowledged, else the error the broker gave."""
    errors = []
    producer = Producer({**config, "message.timeout.ms": 15000, "log_level": 0})
    producer.produce(topic, b"probe", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(30)
    return errors[0] if errors and errors[0] is not None else None if errors else KafkaError(KafkaError._TIMED_OUT)


def can_consume(config: dict, topic: str, group: str) -> KafkaError | None:
    """None when the group may commit on `topic` and reads a record of it, else the error seen.

    The commit comes first: it needs Read on the group and the topic, and a refusal is answered
    at once (a fetch the broker refuses is only logged by librdkafka, and the poll would time out)."""
    # A group the user may not read: librdkafka never finds its coordinator and gives up on the
    # commit after session.timeout.ms (45 s by default). An allowed commit takes ~1 s.
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 10000, "log_level": 0})
    try:
        refused = [tp.error for tp in consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
                   if tp.error is not None]
        if refused:
            return refused[0]
        consumer.assign([TopicPartition(topic, 0, 0)])
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                return message.error()
            consumer.commit(message, asynchronous=False)
            return None
        return KafkaError(KafkaError._TIMED_OUT)
    except KafkaException as exc:  # a refused commit raises
        return exc.args[0]
    finally:
        consumer.close()


# A group the principal may not describe: librdkafka's FindCoordinator is refused and it reports
# the commit as still waiting for a coordinator (one node: the same one serves bob-g at once).
DENIED = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError._WAIT_COORD}


def access_matrix(kafka: LocalKafka, passwords: dict[str, str]) -> dict[str, bool]:
    """What alice and bob may do, tried with real clients authenticating over SCRAM."""
    alice = as_user(kafka, "alice", passwords["alice"], "SCRAM-SHA-256")
    bob = as_user(kafka, "bob", passwords["bob"], "SCRAM-SHA-512")
    outcomes = {
        "alice writes orders": can_produce(alice, "orders"),
        "alice writes payments": can_produce(alice, "payments"),
        "bob reads orders": can_consume(bob, "orders", "bob-g"),
        "bob reads payments": can_consume(bob, "payments", "bob-g"),
        "bob reads orders in another group": can_consume(bob, "orders", "other-g"),
    }
    for what, error in outcomes.items():
        assert error is None or error.code() in DENIED, f"{what}: {error}"
    return {what: error is None for what, error in outcomes.items()}


EXPECTED_MATRIX = {"alice writes orders": True, "alice writes payments": False, "bob reads orders": True,
                   "bob reads payments": False, "bob reads orders in another group": False}


def alice_and_bob(kafka: LocalKafka, *more_acls) -> None:
    """SCRAM users alice (SCRAM-SHA-256, 8192 iterations) and bob (SCRAM-SHA-512, 4096): alice may write
    `orders`, bob read topics named `ord…` in his group bob-g (and `more_acls`)."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    upserts = [UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                            PASSWORDS["alice"].encode()),
               UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                            PASSWORDS["bob"].encode())]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(30)
    set_acls(kafka, acl("orders", "User:alice", "WRITE"), acl("ord", "User:bob", "READ", pattern="PREFIXED"),
             acl("bob-g", "User:bob", "READ", resource="GROUP"), *more_acls)

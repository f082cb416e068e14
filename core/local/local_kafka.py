"""A local Apache Kafka cluster: KRaft JVM processes on loopback, from jars resolved from Maven.

Used by the tests (one node per test worker, three for the fault tests), the benchmarks and
`topicvault sandbox`. The jars come from `ci/kafka-jars.sh` (run by the set-up), found through
`TOPICVAULT_KAFKA_JARS` or the default cache folder. Every node is broker and controller at once,
logs to a file in its own folder and dies with the thread that started it.
"""

from __future__ import annotations

import base64
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TopicvaultError
from . import jvm
from .embedded_broker import wait_for_broker

KAFKA_VERSION = "4.4.0"
DEFAULT_JARS = Path.home() / ".cache" / "topicvault" / f"kafka-{KAFKA_VERSION}" / "jars"

# What every node runs with: small, quick to start, and retention off (the tests' data is from
# 2023; a default 7-day retention would delete it while a test reads it).
BASE_CONFIG = {
    "process.roles": "broker,controller",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.num.partitions": "4",
    "transaction.state.log.min.isr": "1",
    "log.retention.ms": "-1",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "num.partitions": "1",
    # A killed node is noticed in seconds, not the default 9 s (failover tests wait on it).
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "1000",
    "replica.lag.time.max.ms": "5000",
}

# Beside the root logger at INFO: what each node's log leaves out or keeps.
LOG_LEVELS = {"kafka.request.logger": "WARN", "kafka.log.LogCleaner": "INFO"}


def kafka_jars() -> Path:
    """The folder of Apache Kafka's jars, or a one-line error saying how to get them."""
    folder = Path(os.environ.get("TOPICVAULT_KAFKA_JARS") or DEFAULT_JARS)
    if not any(folder.glob("kafka_2.13-*.jar")):
        raise TopicvaultError(f"no Apache Kafka jars in {folder}: run `bash ci/kafka-jars.sh` "
                              "(or set TOPICVAULT_KAFKA_JARS to a folder of them)")
    return folder


def _cluster_id() -> str:
    """A random cluster id as Kafka writes them: one starting with '-' is taken for an option by
    the storage tool (`format -t -x...` failed one start in 64), so Kafka's own never do."""
    while True:
        cluster_id = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass
class KafkaNode:
    """One KRaft node (broker and controller) of a local cluster."""

    node_id: int
    port: int
    controller_port: int
    folder: Path
    process: subprocess.Popen | None = None
    sasl_port: int = 0  # the SASL_PLAINTEXT (SCRAM) listener's port; 0: none

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_address(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def log_path(self) -> Path:
        return self.folder / "server.log"


# Where the kernel picks the local ports of outgoing connections (Linux's default when unknown).
EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")


def node_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports on 127.0.0.1, below the kernel's ephemeral range.

    A node killed and started again binds its old ports. While it is down, a port in the
    ephemeral range can become the local end of any outgoing connection on the machine (a node
    restarted by a fault test on a loaded machine failed: "Address already in use"); the kernel
    never hands out a port below that range, so only a listener chosen on purpose can take it.
    """
    try:
        low = int(EPHEMERAL_PORTS.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    chosen: list[int] = []
    candidates = random.sample(range(max(1024, low - 16384), low), k=max(0, min(4096, low - 1024)))
    for port in candidates:
        if len(chosen) == count:
            break
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use
        chosen.append(port)
    if len(chosen) < count:
        raise TopicvaultError(f"found only {len(chosen)} free ports below {low} on 127.0.0.1; free some and run again")
    return chosen


@dataclass
class LocalKafka:
    """`with LocalKafka(nodes=3) as kafka: kafka.bootstrap` — formatted and started on enter,
    stopped (and its folder removed) on exit. `config` adds to or overrides every node's
    server.properties; `heap` is each JVM's -Xmx. `controllers` (0: every node) makes only the
    first nodes controllers, the rest brokers only: with every node a controller, two of three
    stopped leave no quorum, and a test that stops two replicas of a partition needs one.

    `secured` adds what whole-cluster recovery needs to be tested for real: StandardAuthorizer
    (nothing allowed without an ACL) and a SASL_PLAINTEXT listener taking SCRAM-SHA-256 and -512
    beside PLAINTEXT (`sasl_bootstrap`). The PLAINTEXT listener stays the operators' one: its
    principal, User:ANONYMOUS, is a super user (nodes talk to each other over it), as is
    `admin_user`, whose SCRAM credentials are written when the storage is formatted."""

    nodes: int = 1
    controllers: int = 0
    config: dict[str, str] = field(default_factory=dict)
    heap: str = "512m"
    folder: Path | None = None
    jvm_options: tuple[str, ...] = jvm.JVM_OPTIONS
    members: list[KafkaNode] = field(default_factory=list)
    secured: bool = False
    admin_user: str = "admin"
    admin_password: str = "admin-secret"
    _own_folder: bool = False

    @property
    def bootstrap(self) -> str:
        return ",".join(node.address for node in self.members)

    @property
    def sasl_bootstrap(self) -> str:
        """The SASL_PLAINTEXT (SCRAM) listeners, with `secured`."""
        return ",".join(node.sasl_address for node in self.members)

    def __enter__(self) -> "LocalKafka":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout_s: float = 90.0) -> "LocalKafka":
        """Format every node's storage with one cluster id, start them all, wait until they answer."""
        jars = kafka_jars()
        if self.folder is None:
            self.folder, self._own_folder = Path(tempfile.mkdtemp(prefix="topicvault-kafka-")), True
        ports = iter(node_ports(self.nodes * (3 if self.secured else 2)))
        self.members = [KafkaNode(i + 1, next(ports), next(ports), self.folder / f"node-{i + 1}",
                                  sasl_port=next(ports) if self.secured else 0)
                        for i in range(self.nodes)]
        cluster_id = _cluster_id()
        try:
            for node in self.members:
                self._write_config(node)
                self._format(jars, node, cluster_id)
            for node in self.members:
                self._launch(jars, node)
            self.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Wait until every live node answers a metadata request and the cluster sees them all."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout_s
        for node in self.members:
            if node.process is not None and node.process.poll() is None:
                wait_for_broker(node.address, max(1.0, deadline - time.monotonic()), node.log_path)
        live = {n.node_id for n in self.members if n.process is not None and n.process.poll() is None}
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while True:
            try:
                if {b.id for b in admin.list_topics(timeout=2).brokers.values()} >= live:
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise TopicvaultError(f"Apache Kafka at {self.bootstrap} did not see all its nodes "
                                      f"within {timeout_s:.0f} s; see {self.folder}/node-*/server.log")
            time.sleep(0.2)

    def _is_controller(self, node: KafkaNode) -> bool:
        return self.controllers <= 0 or node.node_id <= self.controllers

    def _write_config(self, node: KafkaNode) -> None:
        node.folder.mkdir(parents=True, exist_ok=True)
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.members if self._is_controller(n))
        replicas = str(min(self.nodes, 3))
        listeners = f"PLAINTEXT://127.0.0.1:{node.port}"
        if self._is_controller(node):
            listeners += f",CONTROLLER://127.0.0.1:{node.controller_port}"
        properties = {
            **BASE_CONFIG,
            "process.roles": "broker,controller" if self._is_controller(node) else "broker",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": listeners,
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "log.dirs": str(node.folder / "data"),
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "default.replication.factor": replicas,
            "min.insync.replicas": "2" if self.nodes >= 3 else "1",
            **(self._security_config(node) if self.secured else {}),
            **self.config,
        }
        (node.folder / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        jvm.write_log_config(node.folder / "log4j2.properties", node.log_path, LOG_LEVELS)

    def _security_config(self, node: KafkaNode) -> dict[str, str]:
        listeners = f"PLAINTEXT://127.0.0.1:{node.port},SASL_PLAINTEXT://127.0.0.1:{node.sasl_port}"
        scram_login = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        return {
            "listeners": listeners + (f",CONTROLLER://127.0.0.1:{node.controller_port}"
                                      if self._is_controller(node) else ""),
            "advertised.listeners": listeners,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": scram_login,
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": scram_login,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:ANONYMOUS;User:{self.admin_user}",
        }

    def _java(self, jars: Path, node: KafkaNode, main: str, *args: str) -> list[str]:
        return jvm.java_command(f"{jars}/*", main, *args, heap=self.heap, options=self.jvm_options,
                                log_config=node.folder / "log4j2.properties",
                                properties={"kafka.logs.dir": str(node.folder)})

    def _format(self, jars: Path, node: KafkaNode, cluster_id: str) -> None:
        command = self._java(jars, node, "kafka.tools.StorageTool", "format", "-t", cluster_id,
                             "-c", str(node.folder / "server.properties"))
        if self.secured:  # the admin can authenticate from the first start on
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                command += ["--add-scram", f"{mechanism}=[name={self.admin_user},password={self.admin_password}]"]
        if jvm.run(command, node.folder / "format.log", timeout_s=120) != 0:
            raise TopicvaultError(f"formatting Kafka node {node.node_id} failed; see {node.folder / 'format.log'}")

    def _launch(self, jars: Path, node: KafkaNode) -> None:
        node.process = jvm.launch(self._java(jars, node, "kafka.Kafka", str(node.folder / "server.properties")),
                                  node.folder / "stdout.log")

    # -- faults ------------------------------------------------------------------------------

    def node(self, node_id: int) -> KafkaNode:
        """The node with this id."""
        return next(n for n in self.members if n.node_id == node_id)

    def kill(self, node_id: int) -> None:
        """SIGKILL a node (no clean shutdown) and reap it."""
        node = self.node(node_id)
        if node.process is not None and node.process.poll() is None:
            node.process.kill()
            node.process.wait(30)

    def pause(self, node_id: int) -> None:
        """SIGSTOP a node: it holds its connections but answers nothing."""
        self._signal(node_id, signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        """SIGCONT a paused node."""
        self._signal(node_id, signal.SIGCONT)

    def _signal(self, node_id: int, signum: int) -> None:
        node = self.node(node_id)
        if node.process is not None and node.process.poll() is None:
            node.process.send_signal(signum)

    def restart(self, node_id: int, timeout_s: float = 90.0) -> None:
        """Start a stopped or killed node again on its own ports and storage, and wait for it."""
        node = self.node(node_id)
        if node.process is not None and node.process.poll() is None:
            self.kill(node_id)
        self._launch(kafka_jars(), node)
        self.wait_ready(timeout_s)

    def leader(self, topic: str, partition: int) -> int:
        """The node id leading a partition now (-1 while it has none)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        return admin.list_topics(topic=topic, timeout=10).topics[topic].partitions[partition].leader

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL after 20 s) and remove the folder if it made one."""
        jvm.stop([node.process for node in self.members if node.process is not None])
        if self._own_folder and self.folder is not None and os.environ.get("TOPICVAULT_KEEP_KAFKA_LOGS") != "1":
            shutil.rmtree(self.folder, ignore_errors=True)

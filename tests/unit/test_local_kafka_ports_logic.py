"""The pure-logic part of the local Apache Kafka harness (core/local/local_kafka.py): the ports its
nodes listen on, which a node restarted by the fault tests binds again."""

from __future__ import annotations

import socket
from pathlib import Path

from topicvault.core.local import local_kafka
from topicvault.core.local.local_kafka import LocalKafka


def _ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_a_nodes_ports_lie_below_the_kernels_ephemeral_range(tmp_path, monkeypatch):
    """Found by the fault tests on a loaded machine: a node killed and started again binds its old
    port, and one in the ephemeral range had meanwhile become the local end of some outgoing
    connection ("Socket server failed to bind to 127.0.0.1:40321: Address already in use"). The
    kernel never picks a port below that range for a connection."""
    for step in ("_write_config", "_format", "_launch", "wait_ready"):
        monkeypatch.setattr(LocalKafka, step, lambda *args, **kwargs: None)
    monkeypatch.setattr(local_kafka, "kafka_jars", lambda: tmp_path)
    kafka = LocalKafka(nodes=3, secured=True, folder=tmp_path).start()
    ports = [port for node in kafka.members for port in (node.port, node.controller_port, node.sasl_port)]
    assert len(set(ports)) == 9
    low = _ephemeral_low()
    assert all(1024 <= port < low for port in ports), (ports, low)
    for port in ports:  # and free when chosen
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))

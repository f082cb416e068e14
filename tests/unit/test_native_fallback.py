"""Issue #51.2: where the native reader cannot be loaded, one line says so and the Python path reads."""

from __future__ import annotations

import sys

import topicvault.sink.native_reader as native_reader
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.sink.kafka_reader import range_consumer_config
from topicvault.sink.native_reader import NATIVE_ENV, librdkafka_config, native_module, open_native_consumer


def _forget_loading(monkeypatch) -> None:
    monkeypatch.setattr(native_reader, "_module", None)
    monkeypatch.setattr(native_reader, "_unavailable", None)


def test_a_module_that_cannot_load_is_said_once_and_the_python_path_reads(monkeypatch, capsys):
    _forget_loading(monkeypatch)
    monkeypatch.delenv(NATIVE_ENV, raising=False)
    # As on a machine where the build failed: importing the module fails.
    monkeypatch.setitem(sys.modules, "topicvault.sink._kafka_arrow", None)

    assert native_module() is None
    assert native_module() is None
    settings = KafkaSettings.of("127.0.0.1:9")
    assert open_native_consumer(settings, range_consumer_config(settings)) is None

    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("note: native Kafka module not loaded") and "make setup" in lines[0]
    assert "Traceback" not in lines[0]


def test_topicvault_native_0_chooses_the_python_path_silently(monkeypatch, capsys):
    _forget_loading(monkeypatch)
    monkeypatch.setenv(NATIVE_ENV, "0")
    assert native_module() is None
    assert capsys.readouterr().err == ""


def test_the_backup_consumer_config_is_one_the_native_reader_takes():
    settings = KafkaSettings.of("127.0.0.1:9", {"fetch.min.bytes": "1"})
    strings = librdkafka_config(range_consumer_config(settings))
    assert strings is not None
    assert strings["enable.partition.eof"] == "true" and strings["isolation.level"] == "read_committed"
    assert strings["fetch.min.bytes"] == "1"


def test_settings_only_confluent_kafka_runs_keep_the_python_path():
    assert librdkafka_config({"bootstrap.servers": "x", "debug": "fetch"}) is None
    assert librdkafka_config({"bootstrap.servers": "x", "oauth_cb": lambda config: ("token", 0)}) is None

"""The pure-logic half of tests/integration/test_ux.py (its docstring covers both halves):
User experience: config profiles and precedence, secret redaction, --json, inspect, progress, local[4].
"""

from __future__ import annotations

import json

import pytest
from clitools import run_cli
from profiletools import write_profile
from topicvault.core.errors import TopicvaultError
from topicvault.core.profiles import resolve


def test_precedence_is_flags_then_environment_then_profile(tmp_path):
    path = str(write_profile(tmp_path))
    env = {"KAFKA_SECRET": "s3cr3t"}
    from_profile = resolve(config_file=path, cluster="prod", store="archive", env=env)
    assert from_profile.bootstrap_servers == "profile:9092"
    assert from_profile.kafka_properties == {"client.id": "from-profile", "sasl.password": "s3cr3t"}
    assert from_profile.store_uri == "s3://profile-bucket/p"
    assert from_profile.store_options == {"endpoint_url": "http://profile:9000", "region": "us-east-1", "path_style": "true"}

    env.update({"TOPICVAULT_BOOTSTRAP_SERVERS": "env:9092", "TOPICVAULT_KAFKA_CLIENT_ID": "from-env",
                "TOPICVAULT_STORE_URI": "s3://env-bucket/e", "TOPICVAULT_STORE_REGION": "eu-west-1"})
    from_env = resolve(config_file=path, cluster="prod", store="archive", env=env)
    assert (from_env.bootstrap_servers, from_env.kafka_properties["client.id"]) == ("env:9092", "from-env")
    assert (from_env.store_uri, from_env.store_options["region"]) == ("s3://env-bucket/e", "eu-west-1")

    from_flags = resolve(config_file=path, cluster="prod", store="archive", env=env, bootstrap_servers="flag:9092",
                         kafka_properties={"client.id": "from-flag"}, store_uri="/tmp/flag",
                         store_options={"region": "ap-south-1"})
    assert (from_flags.bootstrap_servers, from_flags.kafka_properties["client.id"]) == ("flag:9092", "from-flag")
    assert (from_flags.store_uri, from_flags.store_options["region"]) == ("/tmp/flag", "ap-south-1")
    assert from_flags.kafka_properties["sasl.password"] == "s3cr3t"  # untouched layers still apply


def test_profile_errors_are_one_clear_line(tmp_path):
    path = str(write_profile(tmp_path))
    with pytest.raises(TopicvaultError, match=r"KAFKA_SECRET\}, which is not set"):
        resolve(config_file=path, cluster="prod", env={})
    with pytest.raises(TopicvaultError, match="no cluster named 'staging'.*defined: prod"):
        resolve(config_file=path, cluster="staging", env={"KAFKA_SECRET": "x"})
    (tmp_path / "bad.toml").write_text("[clusters.prod\n")
    with pytest.raises(TopicvaultError, match="not valid TOML"):
        resolve(config_file=str(tmp_path / "bad.toml"), cluster="prod", env={})
    out = run_cli("backup", "--topic", "x", "--to", str(tmp_path / "b"), expect_exit=1)
    assert "no Kafka cluster given" in out


def test_secrets_are_never_printed(tmp_path, monkeypatch):
    path = str(write_profile(tmp_path))
    monkeypatch.setenv("KAFKA_SECRET", "hunter2-very-secret")
    monkeypatch.setenv("TOPICVAULT_STORE_SECRET_ACCESS_KEY", "aws-secret-value")
    out = run_cli("config", "--config", path, "--cluster", "prod", "--store", "archive",
                  "-X", "ssl.key.password=keypass-value")
    shown = json.loads(out)
    assert shown["kafka_properties"]["sasl.password"] == "***"
    assert shown["kafka_properties"]["ssl.key.password"] == "***"
    assert shown["store_options"]["secret_access_key"] == "***"
    assert shown["kafka_properties"]["client.id"] == "from-profile"
    for secret in ("hunter2-very-secret", "aws-secret-value", "keypass-value"):
        assert secret not in out

"""The pure-logic half of tests/integration/test_hostile_profile.py (its docstring covers both halves):
Issue #39 items 3 and 7: a profile someone else could write must not run code or leak the environment.
"""

from __future__ import annotations

import os

import pytest
from clitools import assert_one_line_error, run_cli
from profiletools import profile_in_cwd
from topicvault.core.errors import TopicvaultError
from topicvault.core.profiles import CODE_RUNNING_PROPERTIES, resolve


def test_code_running_properties_are_taken_from_the_command_line_only(tmp_path):
    path = tmp_path / "p.toml"
    assert {"plugin.library.paths", "sasl.kerberos.kinit.cmd", "ssl.engine.location", "ssl.providers"} <= set(
        CODE_RUNNING_PROPERTIES)
    for name in sorted(CODE_RUNNING_PROPERTIES):
        path.write_text(f'[clusters.c]\nbootstrap_servers = "b:9092"\n[clusters.c.properties]\n"{name}" = "x"\n')
        with pytest.raises(TopicvaultError, match=f"{name}.*-X"):
            resolve(config_file=str(path), cluster="c", env={})
        with pytest.raises(TopicvaultError, match=f"{name}.*-X"):  # nor from the environment
            resolve(env={f"TOPICVAULT_KAFKA_{name.upper().replace('.', '_')}": "x", "TOPICVAULT_BOOTSTRAP_SERVERS": "b"})
        # Given with -X (the user typed it), it is taken.
        assert resolve(config_file=str(path), kafka_properties={name: "y"}, cluster="c",
                       env={}).kafka_properties[name] == "y"


def test_a_profile_others_may_write_is_not_read_from_the_working_directory(tmp_path, monkeypatch):
    path = profile_in_cwd(tmp_path / "work", monkeypatch, '[stores.s]\nuri = "/tmp/archive-x"\n')
    path.chmod(0o664)
    out = run_cli("config", "--store", "s", expect_exit=1)
    assert_one_line_error(out, "topicvault.toml", "writable by group", "chmod go-w", "--config")
    path.chmod(0o646)
    assert_one_line_error(run_cli("config", "--store", "s", expect_exit=1), "others")
    # Named with --config, the user vouches for it.
    assert "/tmp/archive-x" in run_cli("config", "--store", "s", "--config", str(path))
    path.chmod(0o644)
    assert "/tmp/archive-x" in run_cli("config", "--store", "s")


def test_a_profile_owned_by_someone_else_is_not_read_from_the_working_directory(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    path = profile_in_cwd(tmp_path / "work", monkeypatch, '[stores.s]\nuri = "/tmp/archive-y"\n')
    os.chown(path, 54321, 54321)
    out = run_cli("config", "--store", "s", expect_exit=1)
    assert_one_line_error(out, "topicvault.toml", "owned by uid 54321", "--config")
    assert "/tmp/archive-y" in run_cli("config", "--store", "s", "--config", str(path))


def test_environment_values_go_only_into_secret_settings(tmp_path, monkeypatch):
    path = tmp_path / "p.toml"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "leak-me-8f3a")
    monkeypatch.setenv("KAFKA_PASSWORD", "pw-71c2")
    for setting in ('"client.id" = "${AWS_SECRET_ACCESS_KEY}"', '"sasl.username" = "${AWS_SECRET_ACCESS_KEY}"'):
        path.write_text(f'[clusters.c]\nbootstrap_servers = "b:9092"\n[clusters.c.properties]\n{setting}\n')
        out = run_cli("config", "--config", str(path), "--cluster", "c", expect_exit=1)
        assert_one_line_error(out, "${AWS_SECRET_ACCESS_KEY}", "secret settings only")
        assert "leak-me-8f3a" not in out
    for section in ('[stores.s]\nuri = "s3://b/${AWS_SECRET_ACCESS_KEY}"',
                    '[clusters.c]\nbootstrap_servers = "${AWS_SECRET_ACCESS_KEY}:9092"',
                    '[stores.s]\nuri = "/x"\nencryption_key = "file:///${AWS_SECRET_ACCESS_KEY}"'):
        path.write_text(section + "\n")
        named = ["--cluster", "c"] if section.startswith("[clusters") else ["--store", "s"]
        out = run_cli("config", "--config", str(path), *named, expect_exit=1)
        assert "leak-me-8f3a" not in out and "secret settings only" in out, out
    # Secret settings still take their value from the environment, and it is never printed.
    path.write_text('[clusters.c]\nbootstrap_servers = "b:9092"\n[clusters.c.properties]\n'
                    '"sasl.password" = "${KAFKA_PASSWORD}"\n[stores.s]\nuri = "s3://b/p"\n'
                    'secret_access_key = "${AWS_SECRET_ACCESS_KEY}"\n')
    settings = resolve(config_file=str(path), cluster="c", store="s")
    assert settings.kafka_properties["sasl.password"] == "pw-71c2"
    assert settings.store_options["secret_access_key"] == "leak-me-8f3a"
    out = run_cli("config", "--config", str(path), "--cluster", "c", "--store", "s")
    assert "pw-71c2" not in out and "leak-me-8f3a" not in out and "***" in out

"""Profiles: dotted librdkafka names written without quotes, and errors that never show a secret."""

from __future__ import annotations

from clitools import run_cli
from topicvault.core.profiles import resolve, scrub


def test_unquoted_dotted_property_names_are_kept_whole(tmp_path):
    path = tmp_path / "topicvault.toml"
    path.write_text("""
[clusters.prod]
bootstrap_servers = "b:9092"
[clusters.prod.properties]
security.protocol = "SASL_SSL"
sasl.password = "${PW}"
"api.version.request" = true
[stores.s]
uri = "s3://b/p"
endpoint_url = "http://minio:9000"
""")
    settings = resolve(config_file=str(path), cluster="prod", store="s", env={"PW": "pw-1"})
    assert settings.kafka_properties == {"security.protocol": "SASL_SSL", "sasl.password": "pw-1",
                                         "api.version.request": "true"}
    assert settings.store_options == {"endpoint_url": "http://minio:9000"}
    assert scrub("auth failed with pw-1") == "auth failed with ***"


def test_an_error_quoting_a_secret_value_hides_it(tmp_path, monkeypatch):
    path = tmp_path / "topicvault.toml"
    # The secret also ended up in a non-secret setting by mistake: the environment is not read there
    # (issue #39), and the error naming that setting shows no value.
    path.write_text('[stores.s]\nuri = "s3://b/p"\nsecret_access_key = "${S}"\nmax_attempts = "${S}"\n')
    monkeypatch.setenv("S", "Sup3rSecretValue")
    out = run_cli("ls", "--config", str(path), "--store", "s", expect_exit=1)
    assert "max_attempts" in out and "secret settings only" in out and "Sup3rSecretValue" not in out

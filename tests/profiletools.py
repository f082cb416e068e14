"""Profiles (topicvault.toml) written for a test: a cluster and a store by name."""

from __future__ import annotations

from pathlib import Path

PROFILE = """
[clusters.prod]
bootstrap_servers = "{bootstrap}"
[clusters.prod.properties]
"client.id" = "from-profile"
"sasl.password" = "${{KAFKA_SECRET}}"

[stores.archive]
uri = "{uri}"
endpoint_url = "{endpoint}"
region = "us-east-1"
path_style = true
"""


def write_profile(tmp_path: Path, bootstrap: str = "profile:9092", uri: str = "s3://profile-bucket/p",
                  endpoint: str = "http://profile:9000") -> Path:
    path = tmp_path / "topicvault.toml"
    path.write_text(PROFILE.format(bootstrap=bootstrap, uri=uri, endpoint=endpoint))
    return path


def profile_in_cwd(directory: Path, monkeypatch, text: str) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / "topicvault.toml"
    path.write_text(text)
    path.chmod(0o644)
    monkeypatch.chdir(directory)
    return path

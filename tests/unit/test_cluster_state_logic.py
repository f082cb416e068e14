"""The pure-logic half of tests/integration/test_cluster_state.py (its docstring covers both halves):
Cluster state: consumer groups resume at the same record after a restore, topic settings, selection.
"""

from __future__ import annotations

from confluent_kafka.admin import ConfigEntry, ConfigSource
from topicvault.core.cluster.cluster_admin import topic_overrides


def test_topic_overrides_keep_only_topic_level_configs():
    entries = {
        "cleanup.policy": ConfigEntry("cleanup.policy", "compact", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        "retention.ms": ConfigEntry("retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG, is_default=True),
        "segment.bytes": ConfigEntry("segment.bytes", "1073741824", ConfigSource.STATIC_BROKER_CONFIG),
        "secret": ConfigEntry("secret", None, ConfigSource.DYNAMIC_TOPIC_CONFIG, is_sensitive=True),
    }
    assert topic_overrides(entries) == {"cleanup.policy": "compact"}

"""Options of topicvault's Spark data sources (as Spark passes them) turned into settings.

Shared by the backup (sink/) and restore (source/) data sources; nothing here imports Spark.
"""

from __future__ import annotations

from typing import Mapping

from .cluster.kafka import KafkaSettings
from .crypto import Keyring, keyring_of
from .errors import DATAFRAME_WORDING, TopicvaultError


def lowercase_keys(options: Mapping[str, str]) -> dict[str, str]:
    """Spark passes options case-insensitively; keep them that way in a plain dict."""
    return {k.lower(): v for k, v in options.items()}


def positive_option(options: Mapping[str, str], name: str, default: int) -> int:
    """A whole-number option above zero (options as from lowercase_keys), or a one-line error."""
    value = options.get(name.lower())
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise TopicvaultError(f"option {name} must be a positive whole number, not {value!r}")
    return number


def kafka_settings_from_options(options: Mapping[str, str]) -> KafkaSettings:
    """`kafka.bootstrap.servers` plus every other `kafka.*` option, as in Spark's Kafka source."""
    properties = {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}
    servers = properties.pop("bootstrap.servers", None)
    if not servers:
        raise TopicvaultError("option kafka.bootstrap.servers is required")
    return KafkaSettings.of(servers, properties)


def store_options_from(options: Mapping[str, str]) -> dict[str, str]:
    """Store options are passed as `store.<name>` (e.g. store.endpoint_url)."""
    return {k[len("store."):]: v for k, v in options.items() if k.startswith("store.")}


def keyring_from_options(options: Mapping[str, str]) -> Keyring | None:
    """The keys of option `encryptionKey` (lowercased keys): file:///path or kms://KEY, several
    separated by commas (a reader takes several; a writer encrypts with the first)."""
    return keyring_of(tuple(spec.strip() for spec in options.get("encryptionkey", "").split(",") if spec.strip()),
                      DATAFRAME_WORDING)

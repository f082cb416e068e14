"""Object names other Kafka-to-S3 sinks write, parsed back to (topic, partition, offset).

Evidence (read from the sinks' source):
- Aiven (Aiven-Open/cloud-storage-connectors-for-apache-kafka, commons/.../config/FileNameFragment.java):
  default `file.name.template` is `{{topic}}-{{partition}}-{{start_offset}}`, plus `.avro` for
  the avro format, plus the compression suffix (`.gz`, `.snappy`, `.zst`, CompressionType.java).
  `{{partition:padding=true}}` pads to 10 digits, `{{start_offset:padding=true}}` to 20.
- Confluent (confluentinc/kafka-connect-storage-cloud, DefaultPartitioner + S3 sink docs):
  `topics/<topic>/partition=<p>/<topic>+<p>+<start offset, 10 digits>.<ext>`; with
  `store.kafka.keys` / `store.kafka.headers` a sibling `<same>.keys.<ext>` / `.headers.<ext>`.
  Time- and field-based partitioners replace `partition=<p>` with their own folders, but the
  file name still carries `<topic>+<p>+<start offset>`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .codec import AIVEN_DEFAULT_TEMPLATE, TemplateCodec

COMPRESSION_SUFFIXES = (".gz", ".snappy", ".zst")


@dataclass(frozen=True)
class PeerKey:
    """What a peer object's name says."""

    key: str
    topic: str
    partition: int
    offset_hint: int | None  # the first offset, when the name carries it
    role: str = "data"  # data | keys | headers


class AivenKeys:
    """Aiven names: a file-name template (default `{{topic}}-{{partition}}-{{start_offset}}`)."""

    def __init__(self, template: str = AIVEN_DEFAULT_TEMPLATE) -> None:
        self.template = template
        self._codec = TemplateCodec(template)

    def with_template(self, template: str) -> "AivenKeys":
        """The same layout with a user's `file.name.template`."""
        return AivenKeys(template)

    def parse(self, key: str) -> PeerKey | None:
        """Topic, partition and start offset of an Aiven object, or None."""
        name = key.rsplit("/", 1)[-1] if "/" not in self.template else key
        for suffix in COMPRESSION_SUFFIXES:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        parsed = self._codec.parse(name)
        if parsed is None or (parsed.extension and parsed.extension != "avro"):
            return None
        return PeerKey(key, parsed.topic, parsed.partition, parsed.start_offset)


_CONFLUENT_NAME = re.compile(
    r"(?:.*/)?(?P<topic>[a-zA-Z0-9._-]+)\+(?P<partition>\d+)\+(?P<offset>\d+)(?P<role>\.keys|\.headers)?"
    r"\.(?P<ext>avro|json|snappy\.parquet|gz\.parquet|zstd\.parquet|parquet|bin|json\.gz|bin\.gz)$"
)


class ConfluentKeys:
    """Confluent names: `<topic>+<partition>+<start offset>.<ext>` in any folder layout."""

    def with_template(self, template: str) -> "ConfluentKeys":
        """Confluent names do not take a template (folders may be anything)."""
        return self

    def parse(self, key: str) -> PeerKey | None:
        """Topic, partition, start offset and role (data, keys, headers), or None."""
        match = _CONFLUENT_NAME.fullmatch(key)
        if match is None:
            return None
        role = (match["role"] or ".data")[1:]
        return PeerKey(key, match["topic"], int(match["partition"]), int(match["offset"]), role)

    def sibling(self, key: str, role: str) -> str:
        """The `.keys` or `.headers` file written beside a value file."""
        match = _CONFLUENT_NAME.fullmatch(key)
        if match is None or match["role"]:
            raise ValueError(f"{key} is not a Confluent value file")
        return f"{key[: match.start('ext') - 1]}.{role}.{match['ext']}"




# Lenses Stream Reactor (lensesio/stream-reactor, kafka-connect-cloud-common/.../sink/naming/FileNamer.scala,
# .../config/padding/PaddingService.scala): `<topic>/<partition>/<offset, 12 digits>_<earliest ts>_<latest ts>.<ext>`
# (OffsetFileNamer; older releases: `<offset>.<ext>`), or with PARTITIONBY
# `<folders>/<topic>(<partition>_<offset>).<ext>` (TopicPartitionOffsetFileNamer); an optional suffix before the
# extension. The offset orders the files of a partition.
_LENSES_NAMES = (
    re.compile(r"(?:.*/)?(?P<topic>[a-zA-Z0-9._-]+)/(?P<partition>\d+)/(?P<offset>\d+)(?:_\d+_\d+)?[^/.]*"
               r"\.(?P<ext>avro|parquet|json)"),
    re.compile(r"(?:.*/)?(?P<topic>[a-zA-Z0-9._-]+)\((?P<partition>\d+)_(?P<offset>\d+)\)[^/.]*\.(?P<ext>avro|parquet|json)"),
)
# Quix Streams FileSink (quixio/quix-streams, quixstreams/sinks/community/file/base.py):
# `<directory>/<topic>/<partition>/<start offset, 19 digits><.jsonl | .jsonl.gz | .parquet>`.
_QUIX_NAME = re.compile(r"(?:.*/)?(?P<topic>[a-zA-Z0-9._-]+)/(?P<partition>\d+)/(?P<offset>\d{19})"
                        r"\.(?P<ext>jsonl|jsonl\.gz|parquet)")


class _PatternKeys:
    """Names matched by fixed patterns (no template)."""

    def __init__(self, *patterns: re.Pattern, exclude: re.Pattern | None = None) -> None:
        self.patterns = patterns
        self.exclude = exclude

    def with_template(self, template: str) -> "_PatternKeys":
        """These sinks take no file-name template."""
        return self

    def parse(self, key: str) -> PeerKey | None:
        """Topic, partition and the offset in the name, or None."""
        if self.exclude is not None and self.exclude.fullmatch(key):
            return None
        for pattern in self.patterns:
            match = pattern.fullmatch(key)
            if match:
                return PeerKey(key, match["topic"], int(match["partition"]), int(match["offset"]))
        return None


PEER_KEYS = {
    "aiven": AivenKeys(),
    "confluent": ConfluentKeys(),
    # A 19-digit offset with no timestamps and a Quix extension is a Quix name, not a Lenses one.
    "lenses": _PatternKeys(*_LENSES_NAMES, exclude=_QUIX_NAME),
    "quix": _PatternKeys(_QUIX_NAME),
}

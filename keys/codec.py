"""Object-key codec: render (topic, partition, start offset) into a key and parse it back.

The default codec writes Hive-style keys with the start offset zero-padded to 19 digits, so
lexicographic order equals offset order. Template codecs use the Aiven S3 connector syntax
and compile the template into one anchored regex for parsing.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass
from typing import Iterable, Protocol

from ..core.errors import KeyParseError

TOPIC_PATTERN = re.compile(r"[a-zA-Z0-9._-]{1,249}")
OFFSET_DIGITS = 19
# A backup run's id, written right after the start offset (`<start>-r<12 hex>`): two runs never
# name an object alike, so no run can overwrite an object another run committed. It starts with
# a letter, so it never reads as the digits of a field after it.
RUN_ID_PATTERN = r"r[0-9a-f]{12}"
_RUN = rf"(?:-(?P<run>{RUN_ID_PATTERN}))?"
AIVEN_DEFAULT_TEMPLATE = "{{topic}}-{{partition}}-{{start_offset}}"
# Extensions start with a letter, so they can never be mistaken for the digits of an offset.
_EXTENSION = r"(?:\.(?P<extension>[A-Za-z][A-Za-z0-9]*(?:\.[A-Za-z][A-Za-z0-9]*)?))?"


@dataclass(frozen=True)
class ObjectKey:
    """What a key says about its object."""

    topic: str
    partition: int
    start_offset: int
    extension: str
    run: str = ""  # the writing run's id; "" in keys written before run ids (and by peer sinks)


# --time-partition: folders by each record's UTC hour or day under the Hive-style partition folder.
TIME_PARTITION_FOLDERS = {
    "day": "date={{timestamp:unit=yyyy}}-{{timestamp:unit=MM}}-{{timestamp:unit=dd}}",
    "hour": "date={{timestamp:unit=yyyy}}-{{timestamp:unit=MM}}-{{timestamp:unit=dd}}/hour={{timestamp:unit=HH}}",
}


def key_template_of(key_template: str | None, time_partition: str | None) -> str | None:
    """The object key template of --key-template or --time-partition (not both; neither: None)."""
    if time_partition and key_template:
        raise KeyParseError("--time-partition and --key-template both name objects: give one of them")
    return time_partitioned_template(time_partition) if time_partition else key_template


def time_partitioned_template(unit: str) -> str:
    """The key template of --time-partition `unit` (day or hour)."""
    if unit not in TIME_PARTITION_FOLDERS:
        raise KeyParseError(f"bad --time-partition {unit!r}: use day or hour")
    return f"topic={{{{topic}}}}/partition={{{{partition}}}}/{TIME_PARTITION_FOLDERS[unit]}/{{{{start_offset:padding=true}}}}"


def new_run_id() -> str:
    """A fresh run id for object keys (see RUN_ID_PATTERN)."""
    return "r" + secrets.token_hex(6)


_RUN_ID_AT_END = re.compile(rf"\d-({RUN_ID_PATTERN})(?:\.[A-Za-z][A-Za-z0-9.]*)?$")


def run_id_of(key: str) -> str | None:
    """The run id an object key carries (`<offset>-r<12 hex>[.ext]`), or None (keys written
    before run ids, and other sinks' keys)."""
    found = _RUN_ID_AT_END.search(key)
    return found.group(1) if found else None


def _run_suffix(run: str) -> str:
    if run and not re.fullmatch(RUN_ID_PATTERN, run):
        raise KeyParseError(f"run id {run!r} is not of the form r<12 hex digits>")
    return f"-{run}" if run else ""


class KeyCodec(Protocol):
    """Renders and parses object keys."""

    def render(
        self,
        topic: str,
        partition: int,
        start_offset: int,
        extension: str,
        timestamp_ms: int | None = None,
        run: str = "",
    ) -> str: ...

    def parse(self, key: str) -> ObjectKey | None: ...

    def time_format(self) -> str | None: ...


def _check(topic: str, partition: int, start_offset: int) -> None:
    if not TOPIC_PATTERN.fullmatch(topic):
        raise KeyParseError(f"topic name {topic!r} is not a legal Kafka topic name ([a-zA-Z0-9._-], 1-249 chars)")
    if partition < 0 or partition > 2**31 - 1:
        raise KeyParseError(f"partition {partition} is out of range")
    if start_offset < 0 or start_offset > 2**63 - 1:
        raise KeyParseError(f"offset {start_offset} is out of range (0..2^63-1)")


def _with_extension(stem: str, extension: str) -> str:
    return f"{stem}.{extension}" if extension and not stem.endswith("." + extension) else stem


class HiveCodec:
    """`topic=<topic>/partition=<p>/<start offset, 19 digits>.<ext>`."""

    _pattern = re.compile(
        r"topic=(?P<topic>[a-zA-Z0-9._-]{1,249})/partition=(?P<partition>\d+)/(?P<start_offset>\d{19})" + _RUN + _EXTENSION
    )

    def render(
        self,
        topic: str,
        partition: int,
        start_offset: int,
        extension: str,
        timestamp_ms: int | None = None,
        run: str = "",
    ) -> str:
        """Key of the object of `topic`[`partition`] whose first offset is `start_offset`, written by `run`.

        The run id follows the fixed-width offset, so keys still sort by start offset."""
        _check(topic, partition, start_offset)
        stem = f"topic={topic}/partition={partition}/{start_offset:0{OFFSET_DIGITS}d}{_run_suffix(run)}"
        return _with_extension(stem, extension)

    def parse(self, key: str) -> ObjectKey | None:
        """The key's topic, partition, start offset and extension; None if it is not such a key."""
        match = self._pattern.fullmatch(key)
        if not match:
            return None
        return ObjectKey(
            match["topic"], int(match["partition"]), int(match["start_offset"]), match["extension"] or "", match["run"] or ""
        )

    def time_format(self) -> str | None:
        """Hive-style keys hold no time: objects never need cutting at time boundaries."""
        return None


_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*(?::\s*([a-z]+)\s*=\s*([A-Za-z]+)\s*)?\}\}")
_TIME_UNITS = {"yyyy": ("%Y", r"\d{4}"), "MM": ("%m", r"\d{2}"), "dd": ("%d", r"\d{2}"), "HH": ("%H", r"\d{2}")}


@dataclass(frozen=True)
class _Field:
    name: str  # topic | partition | start_offset | timestamp | utc_date | local_date | key (peer names only)
    padded: bool = False
    unit: str = ""

    def regex(self, group: str | None) -> str:
        if self.name == "topic":
            body = r"[a-zA-Z0-9._-]+"
        elif self.name == "partition":
            body = r"\d{10}" if self.padded else r"\d+"
        elif self.name == "start_offset":
            body = r"\d{20}" if self.padded else r"\d+"
        elif self.name == "timestamp":
            body = _TIME_UNITS[self.unit][1]
        elif self.name == "key":
            body = r"[\s\S]*"  # a record key's text, any characters ('/' and newlines too)
        else:
            body = r"\d{4}-\d{2}-\d{2}"
        return f"(?P<{group}>{body})" if group else f"(?:{body})"

    @property
    def free_text(self) -> bool:
        """Matches a variable amount of text (so adjacency can be ambiguous)."""
        return self.name in ("topic", "key") or (self.name in ("partition", "start_offset") and not self.padded)


class TemplateCodec:
    """Keys from an Aiven-syntax template such as `{{topic}}-{{partition}}-{{start_offset}}`."""

    def __init__(self, template: str, topic: str | None = None) -> None:
        self.template = template
        self.topic = topic
        self.parts: list[str | _Field] = self._split(template)
        names = {p.name for p in self.parts if isinstance(p, _Field)}
        if "key" in names and "start_offset" not in names:
            # Aiven's KeyRecordGrouper / KeyAndTopicPartitionRecordGrouper: one record per key.
            raise KeyParseError(
                f"key template {template!r} groups by {{{{key}}}} without {{{{start_offset}}}}: Aiven's sink then "
                "keeps only each key's latest record (one object per key, written over at every flush), so the "
                "archive is not a copy of the topic and cannot be restored"
            )
        for required in ("partition", "start_offset"):
            if required not in names:
                raise KeyParseError(
                    f"key template {template!r} lacks {{{{{required}}}}}: restore needs it to order objects by offset"
                )
        if "topic" not in names and topic is None:
            raise KeyParseError(
                f"key template {template!r} lacks {{{{topic}}}}: add it, or give the topic these objects belong to"
            )
        self._check_unambiguous()
        self._pattern = re.compile(self._regex())

    @staticmethod
    def _split(template: str) -> list[str | _Field]:
        parts: list[str | _Field] = []
        position = 0
        for match in _PLACEHOLDER.finditer(template):
            if match.start() > position:
                parts.append(template[position : match.start()])
            name, modifier, value = match.groups()
            parts.append(TemplateCodec._field(template, name, modifier, value))
            position = match.end()
        rest = template[position:]
        if "{{" in rest or "}}" in rest:
            raise KeyParseError(f"key template {template!r} has a malformed placeholder near {rest!r}")
        if rest:
            parts.append(rest)
        return parts

    @staticmethod
    def _field(template: str, name: str, modifier: str | None, value: str | None) -> _Field:
        if name in ("partition", "start_offset"):
            if modifier is None:
                return _Field(name)
            if modifier == "padding" and value in ("true", "false"):
                return _Field(name, padded=value == "true")
        elif name == "timestamp":
            if modifier == "unit" and value in _TIME_UNITS:
                return _Field(name, unit=value)
            raise KeyParseError(f"key template {template!r}: use {{{{timestamp:unit=yyyy|MM|dd|HH}}}}")
        elif name in ("topic", "utc_date", "local_date", "key") and modifier is None:
            return _Field(name)
        shown = name + (f":{modifier}={value}" if modifier else "")
        raise KeyParseError(
            f"key template {template!r}: unknown placeholder {{{{{shown}}}}}; known are topic, partition, "
            "start_offset (with :padding=true), timestamp:unit=yyyy|MM|dd|HH, utc_date, local_date"
        )

    def _check_unambiguous(self) -> None:
        previous: str | _Field | None = None
        for part in self.parts:
            if isinstance(part, _Field) and isinstance(previous, _Field) and (part.free_text or previous.free_text):
                raise KeyParseError(
                    f"key template {self.template!r} puts {{{{{previous.name}}}}} and {{{{{part.name}}}}} side by side: "
                    "a key could split between them in more than one way; put a separator such as '/' between them"
                )
            if isinstance(previous, _Field) and previous.free_text and isinstance(part, str) and part[0].isdigit():
                # {{partition}}1{{start_offset}}: partition 1 at offset 123 and partition 11 at offset 23
                # would both be ...11123, two objects under one key.
                raise KeyParseError(
                    f"key template {self.template!r} puts the digit {part[0]!r} right after {{{{{previous.name}}}}}, "
                    "which has no fixed length, so different objects could get the same key; start the text after "
                    "it with a non-digit such as '/' or '-'" + ("" if previous.name == "topic" else ", or pad it (:padding=true)")
                )
            previous = part
        self._check_key_apart_from_topic()
        # Numeric fields cannot contain literal text, so a literal after them is a clean boundary; a topic
        # followed by a literal it may contain is resolved by the numeric fields after it, as long as the
        # same field does not occur twice with different values.
        seen = [p.name for p in self.parts if isinstance(p, _Field) and p.name in ("topic", "partition", "start_offset")]
        if len(seen) != len(set(seen)):
            raise KeyParseError(f"key template {self.template!r} repeats a placeholder; use each of them once")
        last = self.parts[-1]
        if isinstance(last, _Field) and last.name == "topic":
            raise KeyParseError(
                f"key template {self.template!r} ends with {{{{topic}}}}: topic names may contain '.', so the "
                "file extension could be read as part of the topic; end the template with another placeholder"
            )

    def has_field(self, name: str) -> bool:
        """Whether the template has the placeholder `name` (topic, key, timestamp, ...)."""
        return any(isinstance(p, _Field) and p.name == name for p in self.parts)

    def _check_key_apart_from_topic(self) -> None:
        """A key's text may hold anything a topic name does: only a '/' between them (never in a
        topic name) tells where one ends."""
        names = [p.name if isinstance(p, _Field) else p for p in self.parts]
        if "key" not in names or "topic" not in names:
            return
        at, other = sorted((names.index("key"), names.index("topic")))
        between = [p for p in self.parts[at + 1:other] if isinstance(p, str)]
        if not any("/" in text for text in between):
            raise KeyParseError(
                f"key template {self.template!r} has no '/' between {{{{topic}}}} and {{{{key}}}}: a key's text may "
                "hold '-' and digits, so a name could split between topic, partition and key in more than one way"
            )

    def _regex(self) -> str:
        pieces = []
        for part in self.parts:
            if isinstance(part, str):
                pieces.append(re.escape(part))
            else:
                group = part.name if part.name in ("topic", "partition", "start_offset") else None
                pieces.append(part.regex(group) + (_RUN if part.name == "start_offset" else ""))
        return "".join(pieces) + _EXTENSION

    def render(
        self,
        topic: str,
        partition: int,
        start_offset: int,
        extension: str,
        timestamp_ms: int | None = None,
        run: str = "",
    ) -> str:
        """Key for the object; time placeholders use `timestamp_ms` (UTC; local_date in local time).

        A `run` id goes right after the start offset (`{{start_offset}}-r…`), the one place every
        template has and where it cannot run into a neighbouring field."""
        _check(topic, partition, start_offset)
        if self.topic is not None and topic != self.topic:
            raise KeyParseError(f"this key template is bound to topic {self.topic!r}, not {topic!r}")
        seconds = (timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)) / 1000
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            elif part.name == "topic":
                out.append(topic)
            elif part.name == "partition":
                out.append(f"{partition:010d}" if part.padded else str(partition))
            elif part.name == "start_offset":
                out.append((f"{start_offset:020d}" if part.padded else str(start_offset)) + _run_suffix(run))
            elif part.name == "timestamp":
                out.append(time.strftime(_TIME_UNITS[part.unit][0], time.gmtime(seconds)))
            elif part.name == "utc_date":
                out.append(time.strftime("%Y-%m-%d", time.gmtime(seconds)))
            elif part.name == "key":
                raise KeyParseError(f"key template {self.template!r}: {{{{key}}}} cannot be rendered for an object")
            else:
                out.append(time.strftime("%Y-%m-%d", time.localtime(seconds)))
        return _with_extension("".join(out), extension)

    def time_format(self) -> str | None:
        """A UTC strftime format that changes exactly when the key's time placeholders would
        (None without any): a writer cuts objects where it changes, so each object's records
        belong to the folder its key names. local_date is bucketed by the UTC date."""
        formats = []
        for part in self.parts:
            if isinstance(part, _Field) and part.name == "timestamp":
                formats.append(_TIME_UNITS[part.unit][0])
            elif isinstance(part, _Field) and part.name in ("utc_date", "local_date"):
                formats.append("%Y-%m-%d")
        return "|".join(formats) or None

    def parse(self, key: str) -> ObjectKey | None:
        """The key's topic, partition, start offset and extension; None if it does not match."""
        match = self._pattern.fullmatch(key)
        if not match:
            return None
        groups = match.groupdict()
        topic = groups.get("topic") or self.topic
        if self.topic is not None and topic != self.topic:
            return None
        return ObjectKey(
            topic, int(groups["partition"]), int(groups["start_offset"]), groups["extension"] or "", groups["run"] or ""
        )


def default_codec() -> KeyCodec:
    """The Hive-style codec topicvault writes by default."""
    return HiveCodec()


def template_codec(template: str, topic: str | None = None) -> KeyCodec:
    """A codec for topicvault's own objects from an Aiven-syntax template; rejects templates that
    cannot be parsed back, and `{{key}}` (an object holds many keys; only peer names have it)."""
    codec = TemplateCodec(template, topic)
    if codec.has_field("key"):
        raise KeyParseError(f"key template {template!r}: {{{{key}}}} names an Aiven object by its records' key; "
                            "topicvault's objects hold many keys, drop it")
    return codec


def parse_keys(codec: KeyCodec, keys: Iterable[str]) -> tuple[list[tuple[str, ObjectKey]], list[str]]:
    """Parse many keys: (key, ObjectKey) pairs for those that match, and the keys that do not."""
    parsed: list[tuple[str, ObjectKey]] = []
    unmatched: list[str] = []
    for key in keys:
        result = codec.parse(key)
        if result is None:
            unmatched.append(key)
        else:
            parsed.append((key, result))
    return parsed, unmatched

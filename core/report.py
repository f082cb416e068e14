"""What the CLI prints: summaries and listings as plain data, rendered as a table or JSON."""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from typing import Iterable

from .commits import BackupState, ObjectEntry


def iso(millis: int | None) -> str | None:
    """Kafka milliseconds as ISO-8601 UTC."""
    if millis is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(millis / 1000)) + f".{millis % 1000:03d}Z"


def to_json(data: object) -> str:
    """Stable, parseable JSON for --json."""
    return json.dumps(data, indent=1, sort_keys=True)


def table(rows: list[dict], columns: list[str]) -> str:
    """A plain text table with a header; numbers right-aligned with thousands separators."""
    def cell(value: object) -> str:
        if isinstance(value, int) and not isinstance(value, bool):
            return f"{value:,}"
        return "-" if value is None else str(value)

    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [all(isinstance(row.get(c), int) for row in rows) and rows for c in columns]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    for r in cells:
        lines.append("  ".join(v.rjust(w) if numeric[i] else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths))).rstrip())
    return "\n".join(lines)


def topic_summary(objects: Iterable[ObjectEntry], elapsed_s: float) -> list[dict]:
    """Per topic: partitions, records, bytes and the time span of the records."""
    by_topic: dict[str, list[ObjectEntry]] = {}
    for entry in objects:
        by_topic.setdefault(entry.topic, []).append(entry)
    return [
        {
            "topic": topic,
            "partitions": len({e.partition for e in entries}),
            "records": sum(e.records for e in entries),
            "bytes": sum(e.bytes for e in entries),
            "first_time": iso(min(e.min_timestamp_ms for e in entries)),
            "last_time": iso(max(e.max_timestamp_ms for e in entries)),
            "elapsed_s": round(elapsed_s, 1),
        }
        for topic, entries in sorted(by_topic.items())
    ]


def median_size(entries: Iterable[ObjectEntry]) -> int | None:
    """The median stored size of objects in bytes (rounded), or None when there are none."""
    sizes = [e.bytes for e in entries]
    return round(statistics.median(sizes)) if sizes else None


SUMMARY_COLUMNS = ["topic", "partitions", "records", "bytes", "first_time", "last_time", "elapsed_s"]


def listing(state: BackupState) -> dict:
    """`ls` as data: every partition's range, records, objects, bytes and time span."""
    partitions = []
    for (topic, partition), ps in sorted(state.partitions.items()):
        partitions.append({
            "topic": topic,
            "partition": partition,
            "start": ps.start,
            "end": ps.end,
            "records": ps.records,
            "objects": len(ps.objects),
            # Many small objects make a restore slow and a listing long: compact them.
            "median_object_bytes": median_size(ps.objects),
            "bytes": sum(o.bytes for o in ps.objects),
            "first_time": iso(min((o.min_timestamp_ms for o in ps.objects), default=None)),
            "last_time": iso(max((o.max_timestamp_ms for o in ps.objects), default=None)),
            "lost": [[r.start, r.end] for r in ps.lost],  # [start, end) offsets deleted before a backup read them
        })
    return {
        "partitions": partitions,
        "records": sum(p["records"] for p in partitions),
        "objects": sum(p["objects"] for p in partitions),
        "median_object_bytes": median_size(o for ps in state.partitions.values() for o in ps.objects),
        "commits": state.last_sequence,
        "topics": state.topics,
        "groups": sorted(state.groups),
        # Each group's saved snapshots over time: a restore --until TIME gets the one read at or before TIME.
        "group_snapshots": {
            group: dict(zip(("first_time", "last_time", "count"), (iso(first), iso(last), count)))
            for group in sorted(state.group_history)
            for first, last, count in [state.group_span(group)]
        },
        "stream": state.last_stream,
        "topic_ids": state.topic_ids,
        "lost": [note for ps in sorted(state.partitions.values(), key=lambda ps: (ps.topic, ps.partition))
                 for note in ps.lost_notes()],
        # Client-side encryption: how many committed objects each key id wrapped (unencrypted: none).
        "encryption_keys": {key_id: count for key_id, count in sorted(Counter(
            o.key_id for ps in state.partitions.values() for o in ps.objects if o.key_id).items())},
    }

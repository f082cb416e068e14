"""Wording every printed text shares: escaped names, times, numbers with their nouns, tables.

Names in printed text come from the archive (topics, object keys), which whoever writes the
bucket chooses: `show_text` and `terminal_text` escape their control characters.
"""

from __future__ import annotations

import json
import time

from .archive.commits import CommitRecord


def show_text(text: str) -> str:
    """`text` with control and other non-printable characters escaped, so a terminal shows it as is."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def terminal_text(text: str) -> str:
    """A report's text as printed: names in it come from the archive (topics, object keys), which
    whoever writes the bucket chooses, so control characters (escape sequences) are escaped; the
    line breaks of a multi-line report (a table) are kept."""
    return "\n".join(show_text(line) for line in text.split("\n"))


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


def plural(count: int, noun: str) -> str:
    """`count` (thousands separated) and `noun`, plural unless count is 1: "1 commit", "2,002 records"."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def rate(count: float, seconds: float) -> str:
    """Records (or bytes) per second, or "-" when no time passed."""
    return f"{count / seconds:,.0f}/s" if seconds > 0 else "-"


def backup_follow_commit(commits: list[CommitRecord], archive_records: int, lag: dict[str, int]) -> str:
    """A follower's line for the commit records its micro-batches wrote since the last line: the records
    those added, then the archive's total (a sum, not an offset) and the lag behind the topics."""
    first, last = commits[0].sequence, commits[-1].sequence
    added = sum(entry.records for commit in commits for entry in commit.objects)
    which = f"commit {last}" if first == last else f"commits {first}..{last}"
    worst = ""
    if any(lag.values()):
        key, value = max(lag.items(), key=lambda item: item[1])
        worst = f" (most behind: {key} by {value:,})"
    return (f"{which}: {plural(added, 'record')} backed up ({archive_records:,} in the archive); "
            f"lag {plural(sum(lag.values()), 'record')}{worst}")

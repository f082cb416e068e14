"""Errors a user sees as one line: what is wrong and what to do."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Wording:
    """How a message names a setting: as the CLI's flag, or as the DataFrame API's option
    (a DataFrame user has no flags)."""

    dataframe: bool = False

    def setting(self, flag: str, option: str) -> str:
        """`flag` for the CLI, `option("<option>")` for the DataFrame API."""
        return f'option("{option}")' if self.dataframe else flag


CLI_WORDING = Wording()
DATAFRAME_WORDING = Wording(dataframe=True)


class TopicvaultError(Exception):
    """An error the CLI reports as one line, without a traceback (unless --debug)."""


class NoBackup(TopicvaultError):
    """A location holds no backup yet: no commit record (or, read as any layout, no object at all)."""

    def __init__(self, uri: str, why: str = "no commit records under _topicvault/commits/") -> None:
        super().__init__(f"no backup at {uri}: {why}; check the URI")
        self.uri = uri


class ObjectNotFound(TopicvaultError):
    """The object store has no object under that key."""


class PreconditionFailed(TopicvaultError):
    """A conditional write lost: the object exists (If-None-Match) or changed (If-Match)."""


class CorruptObject(TopicvaultError):
    """An object's bytes cannot be read back completely in its format."""


class KeyParseError(TopicvaultError):
    """An object key or a key template cannot be parsed."""


class UnknownTopic(TopicvaultError):
    """The cluster answered that it has no topic of that name (or ID): not that it could not answer."""


class TopicDeleted(TopicvaultError):
    """A topic the location backed up is gone now, or back under another Kafka topic ID."""


class OffsetDeleted(TopicvaultError):
    """A read starts at an offset the partition no longer holds (retention or DeleteRecords)."""

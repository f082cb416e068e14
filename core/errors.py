"""Errors a user sees as one line: what is wrong and what to do."""

from __future__ import annotations


class TopicvaultError(Exception):
    """An error the CLI reports as one line, without a traceback (unless --debug)."""


class ObjectNotFound(TopicvaultError):
    """The object store has no object under that key."""


class PreconditionFailed(TopicvaultError):
    """A conditional write lost: the object exists (If-None-Match) or changed (If-Match)."""


class CorruptObject(TopicvaultError):
    """An object's bytes cannot be read back completely in its format."""


class KeyParseError(TopicvaultError):
    """An object key or a key template cannot be parsed."""


class OffsetDeleted(TopicvaultError):
    """A read starts at an offset the partition no longer holds (retention or DeleteRecords)."""

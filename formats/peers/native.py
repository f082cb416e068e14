"""topicvault's own archive layout: objects named and described by the location's commit records."""

from __future__ import annotations

from .layout import Layout


class NativeLayout(Layout):
    """An archive topicvault wrote: its state is the commit log, whose entries give each object's
    exact offsets, record count and times (so an unreadable object can be left out as a hole)."""

    name = "topicvault"
    keeps = "keeps every record whole: key, value, headers in order, timestamp and its type, partition, offset"
    commit_log = True
    exact_entries = True
    skip_supported = True


LAYOUT = NativeLayout()

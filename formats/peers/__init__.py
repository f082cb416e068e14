"""Archives other Kafka-to-S3 sinks write, read back (one module per sink, one interface).

A new peer is one module here with a `PeerLayout` subclass (see base.py), added to PEERS;
auto-detection, the restore, the DataFrame reader and the CLI help all go through PEERS.
"""

from __future__ import annotations

from ...core.errors import TopicvaultError
from . import aiven, confluent, lenses, quix
from .base import Decoded, PeerKey, PeerLayout, PeerOptions

PEERS: dict[str, PeerLayout] = {layout.name: layout for layout in (aiven.LAYOUT, confluent.LAYOUT, lenses.LAYOUT,
                                                                     quix.LAYOUT)}


def peer_layout(name: str, key_template: str | None = None) -> PeerLayout:
    """The named peer layout, with the user's file-name template if one is given."""
    if name not in PEERS:
        raise TopicvaultError(f"unknown peer layout {name!r}: use one of {', '.join(sorted(PEERS))}")
    return PEERS[name].with_template(key_template) if key_template else PEERS[name]


__all__ = ["PEERS", "Decoded", "PeerKey", "PeerLayout", "PeerOptions", "peer_layout"]

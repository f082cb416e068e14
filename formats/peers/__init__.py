"""Archive layouts: topicvault's own and those other Kafka-to-S3 sinks write (one module each,
one interface, `base.Layout`).

A new peer is one module here with a `PeerLayout` subclass (see base.py), added to PEERS;
auto-detection, the restore, the DataFrame reader and the CLI help all go through PEERS and
LAYOUTS. Callers ask a layout for its capabilities (`Layout.commit_log`, ...), never its name.
"""

from __future__ import annotations

from ...core.errors import TopicvaultError
from . import aiven, confluent, lenses, native, quix
from .layout import Decoded, Layout, PeerKey, PeerLayout, PeerOptions, envelope_setting, peer_options_of

NATIVE: Layout = native.LAYOUT
PEERS: dict[str, PeerLayout] = {layout.name: layout for layout in (aiven.LAYOUT, confluent.LAYOUT, lenses.LAYOUT,
                                                                     quix.LAYOUT)}
# Every layout by name, topicvault's own first.
LAYOUTS: dict[str, Layout] = {NATIVE.name: NATIVE, **PEERS}


def peer_layout(name: str, key_template: str | None = None) -> PeerLayout:
    """The named peer layout, with the user's file-name template if one is given."""
    if name not in PEERS:
        raise TopicvaultError(f"unknown peer layout {name!r}: use one of {', '.join(sorted(PEERS))}")
    return PEERS[name].with_template(key_template) if key_template else PEERS[name]


def layout_named(name: str, key_template: str | None = None) -> Layout:
    """The named layout (topicvault's own or a peer's), with the user's file-name template if one is given."""
    if name not in LAYOUTS:
        raise TopicvaultError(f"unknown layout {name!r}: use one of {', '.join(LAYOUTS)}")
    return LAYOUTS[name].with_template(key_template) if key_template else LAYOUTS[name]


__all__ = ["LAYOUTS", "NATIVE", "PEERS", "Decoded", "Layout", "PeerKey", "PeerLayout", "PeerOptions", "envelope_setting", "peer_options_of",
           "layout_named", "peer_layout"]

"""What the code under test did, for tests that check a mechanism instead of timing it: the
Kafka clients a module made (their config and every call of chosen methods, in order), the
files a block of code opened, the connections it tried.

A wall-clock bound fails on a loaded machine and passes a regression on a fast one; these
record the waits, requests and reads the time stood for, which do not depend on the load.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import pytest


@dataclass
class Call:
    """One call of a recorded client method: which client (index into ClientLog.configs), the
    method, its arguments and what it returned (None when it raised)."""

    client: int
    method: str
    args: tuple
    kwargs: dict
    result: Any = None

    def timeout(self, position: int = 1) -> float:
        """The call's `timeout` argument (keyword, else positional at `position`); 0 when not given."""
        if "timeout" in self.kwargs:
            return float(self.kwargs["timeout"])
        return float(self.args[position]) if len(self.args) > position else 0.0

    def messages(self) -> list:
        """The messages a consume() or poll() returned (an empty list for none)."""
        if self.result is None:
            return []
        return list(self.result) if isinstance(self.result, list) else [self.result]


@dataclass
class ClientLog:
    """The configs of the clients made (in order) and the recorded calls on them (in order)."""

    configs: list[dict] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def of(self, method: str) -> list[Call]:
        """The recorded calls of `method`."""
        return [call for call in self.calls if call.method == method]


def recording(factory: type, log: ClientLog, methods: tuple[str, ...]) -> type:
    """A subclass of the client class `factory` whose instances record their config and every
    call of `methods` in `log` (the calls still go to the real client)."""

    def make(name: str):
        def recorded(self, *args, **kwargs):
            call = Call(self._recorded_index, name, args, kwargs)
            with log._lock:
                log.calls.append(call)
            call.result = getattr(super(subclass, self), name)(*args, **kwargs)
            return call.result
        return recorded

    def __init__(self, config, *args, **kwargs):
        with log._lock:
            self._recorded_index = len(log.configs)
            log.configs.append(dict(config))
        super(subclass, self).__init__(config, *args, **kwargs)

    subclass = type(f"Recorded{factory.__name__}", (factory,),
                    {"__init__": __init__, **{name: make(name) for name in methods}})
    return subclass


def record_new_clients(monkeypatch: pytest.MonkeyPatch, module: Any,
                       methods: tuple[str, ...] = ("consume", "poll", "list_topics")) -> ClientLog:
    """Record every client `module` makes through its `new_client` (core.cluster.kafka.new_client, as
    imported there): the config it gets and its calls of `methods`; and the config of each native
    consumer it opens (sink.native_reader.open_native_consumer: its calls are not recorded)."""
    log = ClientLog()
    real = module.new_client

    def new_client(factory, settings, config, *args):
        return real(recording(factory, log, methods), settings, config, *args)

    monkeypatch.setattr(module, "new_client", new_client)
    if hasattr(module, "open_native_consumer"):  # the backup reader's native record loop: its config too
        real_native = module.open_native_consumer

        def open_native_consumer(settings, config):
            consumer = real_native(settings, config)
            if consumer is not None:
                with log._lock:
                    log.configs.append(dict(config))
            return consumer

        monkeypatch.setattr(module, "open_native_consumer", open_native_consumer)
    return log


# Audit hooks cannot be removed once added: one hook for the whole session reports to whichever
# recorders are active (usually none).
_audit_listeners: list[tuple[str, list]] = []
_audit_hooked = False


def _on_audit(event: str, args: tuple) -> None:
    for wanted, seen in _audit_listeners:
        if event == wanted:
            seen.append(args)


@contextmanager
def audited(event: str) -> Iterator[list[tuple]]:
    """The arguments of every audit `event` (e.g. "open", "socket.connect") raised in the block,
    by any thread of this process."""
    global _audit_hooked
    if not _audit_hooked:
        sys.addaudithook(_on_audit)
        _audit_hooked = True
    seen: list[tuple] = []
    listener = (event, seen)
    _audit_listeners.append(listener)
    try:
        yield seen
    finally:
        _audit_listeners.remove(listener)

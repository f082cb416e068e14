"""Damage at fixed places of a JSON record, so a test of what is caught never depends on where a
byte happens to land (issue #47: a flip of "the middle byte" hit a value or the syntax by chance)."""

from __future__ import annotations

import re

# One bit flipped at each: the syntax (a key's colon), the last digit of a number, a letter of a string
# value, a letter of a field name, a digit of the check and a letter of the check's own name.
PLACES = ("syntax", "number", "string", "field name", "check", "check name")


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')


def place(data: bytes, where: str) -> int:
    """The index of the byte `where` (one of PLACES) names in the JSON text `data`: the first one
    of its kind outside the check field (the check field's own for "check" and "check name")."""
    check = re.search(rb'"sha256": ?"[0-9a-f]{64}"', data)

    def outside(i: int) -> bool:
        return not check or not check.start() <= i < check.end()

    strings = [m for m in _STRING.finditer(data) if outside(m.start())]
    names = [m for m in strings if re.match(rb"\s*:", data[m.end():])]
    values = [m for m in strings if m not in names]
    blanked = _STRING.sub(lambda m: b'"' + b"x" * (len(m.group()) - 2) + b'"', data)  # no digit of a string is found
    if where == "syntax":  # a field name's colon
        return names[0].end() + data[names[0].end():].index(b":")
    if where == "number":  # its last digit: a first digit flipped to 0 could make it invalid JSON
        return next(m.end(1) - 1 for m in re.finditer(rb"[:\[,]\s*(-?\d+)", blanked) if outside(m.start(1)))
    if where == "string":
        return next(m.start() + 1 + i for m in values for i, c in enumerate(m.group()[1:-1]) if chr(c).isalpha())
    if where == "field name":
        return names[0].start() + 1
    if where == "check":
        return check.start() + len(check.group()) - 10
    if where == "check name":
        return check.start() + 4
    raise ValueError(f"no place {where!r}: use one of {PLACES}")


def flipped(data: bytes, where: str) -> bytes:
    """`data` with the low bit of the byte at `where` (see place) flipped."""
    damaged = bytearray(data)
    damaged[place(data, where)] ^= 0x01
    return bytes(damaged)

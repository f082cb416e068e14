"""Typed values a Connect sink stored (Avro, Parquet), rendered back to the bytes Connect wrote.

A peer sink stores a header, key or value with the type Connect gave it; the record's bytes were
text or JSON. Rendering them back must follow Connect's own code, not Python's formatting:

* header values: `org.apache.kafka.connect.storage.SimpleHeaderConverter.fromConnectHeader`
  writes `org.apache.kafka.connect.data.Values.convertToString(schema, value)` as UTF-8
  (apache/kafka, connect/api/src/main/java/org/apache/kafka/connect/data/Values.java: `append`,
  `dateFormatFor`): numbers by their Java `toString`, booleans `true`/`false`, bytes base64,
  lists `[a,b]`, maps and structs `{"k":v}` (strings inside quoted, `\\` and `"` escaped, null
  `null`), a java.util.Date by its value: before 1970-01-02 `HH:mm:ss.SSS'Z'`, at a midnight
  `yyyy-MM-dd`, else `yyyy-MM-dd'T'HH:mm:ss.SSS'Z'` (the worker's time zone: UTC assumed).
* keys and values: as Connect's JsonConverter (schemas.enable=false) writes the typed value
  (apache/kafka, connect/json/.../JsonConverter.java `convertToJson`; Jackson writes a float
  with `Float.toString`, a double with `Double.toString`): Date as epoch days, Time as ms of the
  day, Timestamp as epoch ms, Decimal as base64 of its unscaled two's-complement bytes
  (decimal.format=BASE64, the default), bytes as base64 strings.

Checked against Connect 4.4.0 on JDK 17 (jshell, tests/unit/test_connect_values.py). A float
decodes to a Python float (a double): `Float32` marks those the files typed as 32-bit
(`avro_marked`, `arrow_rows`), so that 19.99f renders `19.99`, not `19.989999771118164`.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import math
import struct
from fractions import Fraction
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

MILLIS_PER_DAY = 24 * 60 * 60 * 1000
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


class Float32(float):
    """A float its file typed as 32-bit (Avro `float`, Parquet FLOAT): rendered as Java's Float.toString."""


def java_float_string(value: float, single: bool = False) -> str:
    """`Double.toString(value)`, or `Float.toString((float) value)` when `single`, as JDK 19+ specify them
    (java.lang.Double/Float javadoc: the shortest decimal that rounds to the value, the closest of them;
    when one digit suffices, the closest of one or two digits; plain from 1e-3 up to 1e7, else
    `d.dddE<n>`). JDK 17 and 18 printed a few values with more digits (2.0E23 as 1.9999999999999998E23);
    their common values agree."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0.0"
    digits, exponent = _shortest_decimal(abs(value), single)  # value = 0.digits * 10**exponent
    return sign + _java_layout(digits, exponent)


def _neighbours(value: float, single: bool) -> tuple[Fraction, Fraction, bool]:
    """The floats next below and above `value` (of its width) and whether its significand is even."""
    pack, unpack = (">f", ">I") if single else (">d", ">Q")
    bits = struct.unpack(unpack, struct.pack(pack, value))[0]
    below = Fraction(struct.unpack(pack, struct.pack(unpack, bits - 1))[0]) if bits > 0 else Fraction(0)
    above_float = struct.unpack(pack, struct.pack(unpack, bits + 1))[0]
    exact = Fraction(value)
    above = Fraction(above_float) if math.isfinite(above_float) else exact + (exact - below)
    return below, above, bits % 2 == 0


def _shortest_decimal(value: float, single: bool) -> tuple[str, int]:
    """Digits (no trailing zeros) and exponent of the decimal Java picks for a positive finite float.

    Fast where the answer is plainly the shortest round-trip decimal: Python's repr for a double;
    for a float32 the correctly rounded decimal of the fewest digits that reads back as the same
    float32, checked exactly. Subnormals (where Java may prefer two digits to one, 4.9E-324) and
    float32 powers of two (whose lower neighbour is closer) take the exact search."""
    bits = struct.unpack(">I", struct.pack(">f", value))[0] if single else 0
    if single and value >= 1.1754943508222875e-38 and bits & 0x7FFFFF:
        # The midpoints to the neighbouring float32s are exact doubles; rounding a decimal to a double
        # is monotone, so a double strictly between them means the decimal is too. On a midpoint: exact check.
        below = struct.unpack(">f", struct.pack(">I", bits - 1))[0]
        low, high = (value + below) / 2, value + (value - below) / 2
        if bits & 0x7FFFFF != 0x7FFFFF:
            high = (value + struct.unpack(">f", struct.pack(">I", bits + 1))[0]) / 2
        for digits in range(1, 10):
            text = f"{value:.{digits - 1}e}"
            read = float(text)
            if low < read < high or (read in (low, high) and _rounds_to(Fraction(decimal.Decimal(text)), value, True)):
                return _digits_of(text)
    elif not single and value >= 2.2250738585072014e-308:
        return _digits_of(repr(value))
    return _exact_shortest(value, single)


def _digits_of(text: str) -> tuple[str, int]:
    """A decimal's text as (digits without trailing zeros, exponent): its value is 0.digits x 10**exponent."""
    _, digits, exponent = decimal.Decimal(text).as_tuple()
    numeral = "".join(map(str, digits))
    stripped = numeral.rstrip("0") or "0"
    return stripped, int(exponent) + len(numeral)


def _rounds_to(candidate: Fraction, value: float, single: bool) -> bool:
    """Whether the decimal `candidate` reads back as `value` under round-half-even (exact arithmetic)."""
    exact = Fraction(value)
    below, above, even = _neighbours(value, single)
    low, high = (exact + below) / 2, (exact + above) / 2
    return low <= candidate <= high if even else low < candidate < high


def _exact_shortest(value: float, single: bool) -> tuple[str, int]:
    """The javadoc's selection, searched with exact fractions (slow: for the few values the fast path leaves)."""
    exact = Fraction(value)
    below, above, even = _neighbours(value, single)
    low, high = (exact + below) / 2, (exact + above) / 2

    def rounds_to_value(candidate: Fraction) -> bool:
        return low <= candidate <= high if even else low < candidate < high

    power = math.floor(math.log10(value))
    while Fraction(10) ** power > exact:
        power -= 1
    while Fraction(10) ** (power + 1) <= exact:
        power += 1
    found: list[tuple[Fraction, int, int]] = []  # (decimal, its integer significand, its exponent)
    for length in range(1, 19):
        scale = power - length + 1
        unit = Fraction(10) ** scale
        middle = math.floor(exact / unit)
        for significand in (middle - 1, middle, middle + 1, middle + 2):
            if significand > 0 and rounds_to_value(significand * unit):
                found.append((significand * unit, significand, scale))
        if found and length >= 2:  # one digit found: the closest of one or two digits (the javadoc's rule)
            break
    best = min(found, key=lambda f: (abs(f[0] - exact), f[1] % 2))
    text = str(best[1]).rstrip("0")
    return text, best[2] + len(str(best[1]))


def _java_layout(digits: str, exponent: int) -> str:
    """0.`digits` x 10**`exponent` laid out as Java's toString: plain in [1e-3, 1e7), else computerized
    scientific notation with at least one digit after the point."""
    if -3 < exponent <= 7:
        if exponent <= 0:
            return "0." + "0" * -exponent + digits
        whole, fraction = digits[:exponent].ljust(exponent, "0"), digits[exponent:]
        return f"{whole}.{fraction or '0'}"
    return f"{digits[0]}.{digits[1:] or '0'}E{exponent - 1}"


def epoch_millis(value: datetime.date | datetime.time) -> int:
    """What java.util.Date holds for a Connect Date, Time or Timestamp: ms since the epoch (UTC)."""
    if isinstance(value, datetime.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=datetime.timezone.utc)
        return (aware - _EPOCH) // datetime.timedelta(milliseconds=1)
    if isinstance(value, datetime.date):
        return (value - datetime.date(1970, 1, 1)).days * MILLIS_PER_DAY
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000


def connect_date_string(millis: int) -> str:
    """`Values.dateFormatFor(date).format(date)` in UTC: the pattern is picked by the value, not its schema."""
    moment = _EPOCH + datetime.timedelta(milliseconds=millis)
    time_text = f"{moment:%H:%M:%S}.{moment.microsecond // 1000:03d}Z"
    if millis < MILLIS_PER_DAY:
        return time_text
    if millis % MILLIS_PER_DAY == 0:
        return f"{moment:%Y-%m-%d}"
    return f"{moment:%Y-%m-%d}T{time_text}"


def connect_header_text(value: Any) -> str | None:
    """`Values.convertToString(schema, value)` of a typed header value as decoded from Avro or Parquet
    (floats typed 32-bit marked `Float32`); None stays None (fromConnectHeader writes no bytes)."""
    if value is None:
        return None
    out: list[str] = []
    _append(out, value, embedded=False)
    return "".join(out)


def _append(out: list[str], value: Any, embedded: bool) -> None:
    """Values.append: one value, quoted and escaped where `embedded` in a list, map or struct."""
    if value is None:
        out.append("null")
    elif isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, float):
        out.append(java_float_string(value, isinstance(value, Float32)))
    elif isinstance(value, (int, decimal.Decimal)):
        out.append(str(value))  # BigDecimal.toString and Python's Decimal share the to-scientific-string rule
    elif isinstance(value, str):
        out.append('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"' if embedded else value)
    elif isinstance(value, (bytes, bytearray)):
        text = base64.b64encode(value).decode()
        out.append(f'"{text}"' if embedded else text)
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            out.append("," if i else "")
            _append(out, item, True)
        out.append("]")
    elif isinstance(value, dict):  # a map or a struct: both `{"name":value,...}`
        out.append("{")
        for i, (name, item) in enumerate(value.items()):
            out.append("," if i else "")
            _append(out, name, True)
            out.append(":")
            _append(out, item, True)
        out.append("}")
    elif isinstance(value, (datetime.date, datetime.time)):
        out.append(connect_date_string(epoch_millis(value)))
    else:
        out.append(str(value))  # a UUID and the like: their text


def connect_json(value: Any) -> bytes:
    """A typed key or value as Connect's JsonConverter (schemas.enable=false) writes it, compact, UTF-8."""
    return _json_text(value).encode()


def _json_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = java_float_string(value, isinstance(value, Float32))
        return text if math.isfinite(value) else f'"{text}"'  # Jackson writes NaN and infinities as strings
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (bytes, bytearray)):
        return f'"{base64.b64encode(value).decode()}"'
    if isinstance(value, decimal.Decimal):
        return f'"{base64.b64encode(_unscaled_bytes(value)).decode()}"'
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_json_text(item) for item in value) + "]"
    if isinstance(value, dict):
        if all(isinstance(name, str) for name in value):
            return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_json_text(v)}" for k, v in value.items()) + "}"
        return "[" + ",".join(f"[{_json_text(k)},{_json_text(v)}]" for k, v in value.items()) + "]"  # non-string keys
    if isinstance(value, datetime.datetime):
        return str(epoch_millis(value))
    if isinstance(value, datetime.date):
        return str(epoch_millis(value) // MILLIS_PER_DAY)
    if isinstance(value, datetime.time):
        return str(epoch_millis(value))
    return json.dumps(str(value), ensure_ascii=False)


def _unscaled_bytes(value: decimal.Decimal) -> bytes:
    """BigDecimal.unscaledValue().toByteArray(): the fewest two's-complement big-endian bytes."""
    sign, digits, _ = value.as_tuple()
    unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return unscaled.to_bytes(length, "big", signed=True)


def avro_marked(value: Any, schema: Any, named: dict[str, Any] | None = None) -> Any:
    """`value` as fastavro decoded it under `schema` (its writer schema), floats typed `float` marked Float32."""
    named = {} if named is None else named
    if isinstance(schema, list):  # a union: the branch the value's Python type fits
        return _avro_union(value, schema, named)
    if isinstance(schema, str):
        if schema in named:
            return avro_marked(value, named[schema], named)
        return Float32(value) if schema == "float" and isinstance(value, float) else value
    kind = schema.get("type")
    if isinstance(kind, (list, dict)):
        return avro_marked(value, kind, named)
    if kind in ("record", "enum", "fixed") and "name" in schema:
        named[schema["name"]] = schema
        if "namespace" in schema:
            named[f"{schema['namespace']}.{schema['name']}"] = schema
    if kind == "record" and isinstance(value, dict):
        return {f["name"]: avro_marked(value.get(f["name"]), f["type"], named) for f in schema["fields"]}
    if kind == "array" and isinstance(value, list):
        return [avro_marked(item, schema["items"], named) for item in value]
    if kind == "map" and isinstance(value, dict):
        return {k: avro_marked(v, schema["values"], named) for k, v in value.items()}
    return avro_marked(value, kind, named) if isinstance(kind, str) else value


def avro_rows(data: bytes) -> list[Any]:
    """The records of an Avro object container, floats its writer schema types `float` marked Float32."""
    reader = fastavro.reader(io.BytesIO(data))
    schema = reader.writer_schema
    return [avro_marked(row, schema) for row in reader]


def _avro_union(value: Any, branches: list[Any], named: dict[str, Any]) -> Any:
    if value is None:
        return None
    for branch in branches:
        kind = branch if isinstance(branch, str) else branch.get("type")
        kind = named.get(kind, {}).get("type", kind) if isinstance(kind, str) else kind
        if kind == "null":
            continue
        fits = {float: ("float", "double"), dict: ("record", "map"), list: ("array",)}.get(type(value))
        if fits is None or kind in fits:
            return avro_marked(value, branch, named)
    return value


def arrow_rows(table: pa.Table) -> list[dict[str, Any]]:
    """A Parquet table's rows as Python values: FLOAT columns marked Float32, maps as dicts (in order)."""
    columns = {name: [_arrow_marked(v, table.schema.field(name).type) for v in table.column(name).to_pylist()]
               for name in table.column_names}
    return [{name: columns[name][i] for name in table.column_names} for i in range(table.num_rows)]


def _arrow_marked(value: Any, kind: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_float32(kind) or pa.types.is_float16(kind):
        return Float32(value)
    if pa.types.is_struct(kind):
        return {kind.field(i).name: _arrow_marked(value.get(kind.field(i).name), kind.field(i).type)
                for i in range(kind.num_fields)}
    if pa.types.is_map(kind):
        return {k: _arrow_marked(v, kind.item_type) for k, v in value}
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return [_arrow_marked(item, kind.value_type) for item in value]
    return value


def typed_fields(data: bytes) -> list[str] | None:
    """The fields of an Avro or Parquet object stored typed, i.e. as other than bytes or text (a whole
    non-record Avro schema is the field `value`); None when the object is neither format."""
    if data[:4] == b"PAR1":
        schema = pq.read_schema(pa.BufferReader(data))  # the footer only
        return [f.name for f in schema if not (pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)
                                               or pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
                                               or pa.types.is_null(f.type))]
    if data[:4] == b"Obj\x01":
        writer = fastavro.reader(io.BytesIO(data)).writer_schema
        if isinstance(writer, dict) and writer.get("type") == "record":
            return [f["name"] for f in writer["fields"] if _avro_typed(f["type"])]
        return ["value"] if _avro_typed(writer) else []
    return None


def _avro_typed(schema: Any) -> bool:
    if isinstance(schema, list):
        return any(_avro_typed(branch) for branch in schema)
    if isinstance(schema, dict):
        return "logicalType" in schema or _avro_typed(schema.get("type"))
    return schema not in ("bytes", "string", "null")

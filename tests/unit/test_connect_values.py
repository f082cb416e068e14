"""Connect's renderings of typed values, pinned to what Connect 4.4.0 itself printed.

Every expected text below was printed by the real classes (jshell on OpenJDK 17.0.15 with
-Duser.timezone=UTC and ~/.cache/topicvault/connect-4.4.0/jars on the class path):
Float.toString / Double.toString of the same bits, Values.dateFormatFor(date).format(date),
Values.convertToString, BigDecimal.toString and JsonConverter(schemas.enable=false). Where JDK 17
differs from the JDK 19+ specification (which topicvault follows) the JDK 19+ text is given and
marked.
"""

from __future__ import annotations

import datetime
import decimal
import struct

import pytest
from topicvault.formats.peers.connect_values import (
    Float32,
    connect_date_string,
    connect_header_text,
    connect_json,
    java_float_string,
)


def _f32(bits: int) -> float:
    return struct.unpack(">f", struct.pack(">I", bits))[0]


def _f64(bits: int) -> float:
    return struct.unpack(">d", struct.pack(">Q", bits))[0]


# (Float.floatToIntBits, Float.toString): the thresholds 1e-3 and 1e7, Java's exponents, the
# smallest subnormal (1.4E-45, Python's shortest repr says 1e-45), the largest float.
FLOATS = [(1100999557, "19.99"), (1036831949, "0.1"), (1259902592, "1.0E7"), (1259902591, "9999999.0"),
          (981668463, "0.001"), (980151802, "9.0E-4"), (1120403456, "100.0"), (1, "1.4E-45"), (5, "7.0E-45"),
          (2139095039, "3.4028235E38"), (1206984794, "123456.7"), (925353388, "1.0E-5"), (1266679808, "1.6777216E7"),
          (1343554297, "1.0E10"), (1050253722, "0.3"),
          (8388608, "1.1754944E-38")]  # JDK 19+ (JDK 17: 1.17549435E-38)

DOUBLES = [(4626319902466574909, "19.99"), (4591870180066957722, "0.1"), (4756540486875873280, "1.0E10"),
           (4711630319722168320, "1.0E7"), (4711630319721631449, "9999999.999"), (4562254508917369340, "0.001"),
           (4562249897231350913, "9.99E-4"), (1, "4.9E-324"), (9218868437227405311, "1.7976931348623157E308"),
           (4728057454355546112, "1.23456789125E8"), (4532020583610935537, "1.0E-5"),
           (4599075939470750516, "0.30000000000000004"), (4503599627370496, "2.2250738585072014E-308"),
           (4846369599423283200, "1.0E16"),
           (4950912855330343670, "1.0E23"), (4955416454957714166, "2.0E23")]  # JDK 19+ (JDK 17: 9.999999999999999E22)


@pytest.mark.parametrize("bits,text", FLOATS)
def test_float32_renders_as_java_float_to_string(bits, text):
    assert java_float_string(_f32(bits), single=True) == text
    assert java_float_string(-_f32(bits), single=True) == "-" + text


@pytest.mark.parametrize("bits,text", DOUBLES)
def test_float64_renders_as_java_double_to_string(bits, text):
    assert java_float_string(_f64(bits)) == text


def test_zero_and_non_finite_floats():
    assert [java_float_string(v) for v in (0.0, -0.0, float("nan"), float("inf"), float("-inf"))] == [
        "0.0", "-0.0", "NaN", "Infinity", "-Infinity"]


# Values.dateFormatFor picks the pattern by the instant, not the schema.
@pytest.mark.parametrize("millis,text", [
    (1775520000000, "2026-04-07"), (45296789, "12:34:56.789Z"), (1775563496789, "2026-04-07T12:04:56.789Z"),
    (-86400000, "00:00:00.000Z"), (0, "00:00:00.000Z"), (86399999, "23:59:59.999Z"), (86400000, "1970-01-02"),
    (-1, "23:59:59.999Z"), (1775563496000, "2026-04-07T12:04:56.000Z")])
def test_dates_render_as_connect_values_date_format_for(millis, text):
    assert connect_date_string(millis) == text


def test_header_text_of_every_type_as_values_convert_to_string():
    assert connect_header_text(Float32(19.99)) == "19.99"
    assert connect_header_text(19.99) == "19.99"
    assert connect_header_text(True) == "true"
    assert connect_header_text(-7) == "-7"
    assert connect_header_text(datetime.date(2026, 4, 7)) == "2026-04-07"
    assert connect_header_text(datetime.time(12, 34, 56, 789000)) == "12:34:56.789Z"
    assert connect_header_text(datetime.datetime(2026, 4, 7, 12, 4, 56, 789000,
                                                 tzinfo=datetime.timezone.utc)) == "2026-04-07T12:04:56.789Z"
    assert connect_header_text(b"\x00\x01\x02") == "AAEC"
    assert connect_header_text("plain \"text\"") == "plain \"text\""
    assert connect_header_text(None) is None
    # BigDecimal.toString: 18446744073709551615, 1E-7, 1.2345E+7, 123.45, 0.000001
    assert [connect_header_text(decimal.Decimal(d)) for d in ("18446744073709551615", "1E-7", "1.2345E+7", "123.45",
                                                             "0.000001")] == [
        "18446744073709551615", "1E-7", "1.2345E+7", "123.45", "0.000001"]
    # A struct {a: float32, s: string, b: bytes, n: optional string}, a map, a list.
    assert connect_header_text({"a": Float32(19.99), "s": 'q"\\x', "b": b"\x00\x01\x02", "n": None}) == \
        '{"a":19.99,"s":"q\\"\\\\x","b":"AAEC","n":null}'
    assert connect_header_text({"k": Float32(1.5), "d": datetime.date(2026, 4, 7)}) == '{"k":1.5,"d":2026-04-07}'
    assert connect_header_text([Float32(0.1), 1e10, "x", None, True]) == '[0.1,1.0E10,"x",null,true]'


def test_json_as_jsonconverter_writes_a_struct():
    # JsonConverter(schemas.enable=false).fromConnectData of {name, price: float32, big: float64,
    # small: float32, d: Date, dec: Decimal(scale 2)}.
    value = {"name": "a", "price": Float32(19.99), "big": 1.0e10, "small": Float32(1.0e-5),
             "d": datetime.date(2026, 4, 7), "dec": decimal.Decimal("123.45")}
    assert connect_json(value) == b'{"name":"a","price":19.99,"big":1.0E10,"small":1.0E-5,"d":20550,"dec":"MDk="}'

"""Object formats: one name table shared by the CLI and the library (no Spark, no Kafka)."""

from __future__ import annotations

from typing import Callable

from ..core.errors import TopicvaultError
from .avro import AvroFormat
from .csv import CsvFormat
from .jsonl import JsonlFormat
from .object_format import ObjectFormat
from .parquet import ParquetFormat

# name -> (constructor, default codec, accepted codecs)
_FORMATS: dict[str, tuple[Callable[[str], ObjectFormat], str, tuple[str, ...]]] = {
    "parquet": (ParquetFormat, "zstd", ("zstd", "snappy", "gzip", "none")),
    "avro": (AvroFormat, "deflate", ("null", "none", "deflate", "snappy", "zstd")),
    "jsonl": (JsonlFormat, "none", ("none", "gzip")),
    "csv": (CsvFormat, "none", ("none", "gzip")),
}
FORMAT_NAMES: tuple[str, ...] = tuple(_FORMATS)
_BY_EXTENSION = {"parquet": ("parquet", None), "avro": ("avro", None), "jsonl": ("jsonl", "none"),
                 "jsonl.gz": ("jsonl", "gzip"), "csv": ("csv", "none"), "csv.gz": ("csv", "gzip")}
EXTENSIONS: tuple[str, ...] = tuple(sorted(_BY_EXTENSION, key=len, reverse=True))


def resolve_format(name: str, compression: str | None = None) -> ObjectFormat:
    """The format called `name` with `compression` (None: the format's default)."""
    if name not in _FORMATS:
        raise TopicvaultError(f"unknown format {name!r}: choose one of {', '.join(FORMAT_NAMES)}")
    constructor, default, codecs = _FORMATS[name]
    codec = compression or default
    if codec not in codecs:
        raise TopicvaultError(f"format {name} has no compression {codec!r}: choose one of {', '.join(codecs)}")
    return constructor(codec)


def format_for_extension(extension: str) -> ObjectFormat:
    """The reader for objects whose names end with `.extension` (any codec inside is self-describing)."""
    if extension not in _BY_EXTENSION:
        raise TopicvaultError(f"unknown object extension .{extension}: expected one of .{', .'.join(EXTENSIONS)}")
    name, compression = _BY_EXTENSION[extension]
    return resolve_format(name, compression)


def extension_of(key: str) -> str:
    """The known format extension an object key ends with."""
    for extension in EXTENSIONS:
        if key.endswith("." + extension):
            return extension
    raise TopicvaultError(f"object {key} has no known format extension (.{', .'.join(EXTENSIONS)})")


__all__ = ["FORMAT_NAMES", "ObjectFormat", "extension_of", "format_for_extension", "resolve_format"]

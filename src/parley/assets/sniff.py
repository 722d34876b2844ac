"""Recognising a file's real type from its bytes, never from its name or the client's Content-Type."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from parley.kit.errors import InvalidFields, UnsupportedMediaType

AssetKind = Literal["audio", "image", "document", "other"]

TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"

# Every content type an asset can have (documented as the media types of the content route).
CONTENT_TYPES: dict[str, tuple[AssetKind, str]] = {
    "audio/wav": ("audio", "wav"),
    "audio/mpeg": ("audio", "mp3"),
    "audio/ogg": ("audio", "ogg"),
    "image/png": ("image", "png"),
    "image/jpeg": ("image", "jpg"),
    "image/webp": ("image", "webp"),
    "image/gif": ("image", "gif"),
    "application/pdf": ("document", "pdf"),
    TEXT_CONTENT_TYPE: ("document", "txt"),
}

_BINARY_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f]")

ACCEPTED = "WAV, MP3, OGG, PNG, JPEG, WebP, GIF, PDF or UTF-8 text"

_EXECUTABLE_MAGIC = (
    b"MZ",  # Windows PE / DOS
    b"\x7fELF",
    b"\xfe\xed\xfa\xce",  # Mach-O
    b"\xfe\xed\xfa\xcf",
    b"\xce\xfa\xed\xfe",
    b"\xcf\xfa\xed\xfe",
    b"\xca\xfe\xba\xbe",  # Mach-O universal / Java class
    b"#!",  # scripts with an interpreter line
    b"\x00asm",  # WebAssembly
    b"dex\n",  # Android
)


@dataclass(frozen=True)
class Sniffed:
    content_type: str
    kind: AssetKind
    extension: str
    label: str


def _known(content_type: str, label: str) -> Sniffed:
    kind, extension = CONTENT_TYPES[content_type]
    return Sniffed(content_type, kind, extension, label)


def _is_mp3_frame(data: bytes) -> bool:
    if len(data) < 4 or data[0] != 0xFF or data[1] & 0xE0 != 0xE0:
        return False
    version = (data[1] >> 3) & 0x03
    layer = (data[1] >> 1) & 0x03
    bitrate = data[2] >> 4
    sample_rate = (data[2] >> 2) & 0x03
    return version != 0x01 and layer != 0x00 and bitrate not in (0x00, 0x0F) and sample_rate != 0x03


def _is_text(data: bytes) -> bool:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    # Control characters other than tab, newlines, form feed and escape mean binary data.
    return _BINARY_CONTROL.search(data) is None


def sniff(data: bytes) -> Sniffed:
    """The file's type by its signature; raises 415 for executables and unrecognised binary data."""
    if data.startswith(_EXECUTABLE_MAGIC):
        raise UnsupportedMediaType("Executable files and scripts are not accepted as assets.")
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return _known("audio/wav", "WAV audio")
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _known("image/webp", "WebP image")
    if data.startswith(b"ID3") or _is_mp3_frame(data):
        return _known("audio/mpeg", "MP3 audio")
    if data.startswith(b"OggS"):
        return _known("audio/ogg", "Ogg audio")
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return _known("image/png", "PNG image")
    if data.startswith(b"\xff\xd8\xff"):
        return _known("image/jpeg", "JPEG image")
    if data.startswith((b"GIF87a", b"GIF89a")):
        return _known("image/gif", "GIF image")
    if data.startswith(b"%PDF-"):
        return _known("application/pdf", "PDF document")
    if _is_text(data):
        return _known(TEXT_CONTENT_TYPE, "text file")
    raise UnsupportedMediaType(f"The file's type is not recognised; accepted are {ACCEPTED} files.")


def invalid_field(field: str, message: str) -> InvalidFields:
    """A 422 in FastAPI's validation shape, as documented for the upload routes."""
    return InvalidFields([{"type": "value_error", "loc": ("body", field), "msg": message, "input": None}])

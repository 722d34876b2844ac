"""Small generated files of every accepted type, and some that must be refused."""

from __future__ import annotations

import io
import struct
import wave
import zlib

from PIL import Image


def wav_bytes(frames: int = 800) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(8000)
        handle.writeframes(b"\x00\x01" * frames)
    return out.getvalue()


def image_bytes(
    fmt: str, size: tuple[int, int] = (64, 48), *, exif: bool = False, mode: str = "RGB"
) -> bytes:
    image = Image.new(mode, size, (200, 30, 30) if mode == "RGB" else (200, 30, 30, 128))
    out = io.BytesIO()
    kwargs: dict[str, object] = {}
    if exif:
        data = Image.Exif()
        data[0x010F] = "SecretCam"  # Make
        data[0x0131] = "secret-software"  # Software
        kwargs["exif"] = data.tobytes()
    image.save(out, format=fmt, **kwargs)
    return out.getvalue()


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def png_bomb(width: int = 100_000, height: int = 100_000) -> bytes:
    """A tiny PNG whose header declares a huge image (10 gigapixels by default)."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    row = b"\x00" + b"\x00" * 3 * 16
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(row * 16))
        + _png_chunk(b"IEND", b"")
    )


PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
MP3 = b"ID3\x03\x00\x00\x00\x00\x00\x00" + b"\xff\xfb\x90\x00" + b"\x00" * 400
OGG = b"OggS\x00\x02" + b"\x00" * 200
EXE = b"MZ\x90\x00\x03\x00\x00\x00" + b"\x00" * 200
ELF = b"\x7fELF\x02\x01\x01" + b"\x00" * 200
SCRIPT = b"#!/bin/sh\nrm -rf /\n"
ZIP = b"PK\x03\x04\x14\x00\x00\x00\x08\x00" + bytes(range(256))

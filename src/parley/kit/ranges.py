"""HTTP Range requests over stored files (assets, recordings): one parser, one 416 error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from parley.kit.blobs import BlobStore
from parley.kit.errors import ParleyError


class RangeNotSatisfiable(ParleyError):
    status_code = 416
    code = "range_not_satisfiable"


def parse_range(header: str | None, size: int, what: str = "file") -> tuple[int, int] | None:
    """The inclusive byte range of a single-range ``Range`` header; ``None`` means the whole file.

    Malformed or multi-range headers are ignored (RFC 9110 allows serving the whole representation);
    a range that starts past the end is 416.
    """
    if not header:
        return None
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash:
        return None
    first, last = first.strip(), last.strip()
    if first == "":
        if not last.isdigit() or len(last) > 18:
            return None
        suffix = int(last)
        if suffix == 0:
            raise RangeNotSatisfiable(
                f"The range is empty; the {what} has {size} bytes.",
                headers={"Content-Range": f"bytes */{size}"},
            )
        return max(0, size - suffix), size - 1
    if not first.isdigit() or len(first) > 18 or (last and (not last.isdigit() or len(last) > 18)):
        return None
    start = int(first)
    if last and int(last) < start:
        return None
    if start >= size:
        raise RangeNotSatisfiable(
            f"The range starts at byte {start}, past the end of the {what} ({size} bytes).",
            headers={"Content-Range": f"bytes */{size}"},
        )
    return start, min(int(last), size - 1) if last else size - 1


# Headers every stored-file download carries: never rendered inline, never sniffed, never cached shared.
DOWNLOAD_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Accept-Ranges": "bytes",
    "Cache-Control": "private, max-age=0, must-revalidate",
    "Content-Security-Policy": "default-src 'none'; sandbox",
}


@dataclass(frozen=True)
class Download:
    chunks: AsyncIterator[bytes]
    status: int
    headers: dict[str, str]


def ranged_download(
    blobs: BlobStore, key: str, size: int, range_header: str | None, what: str, headers: dict[str, str]
) -> Download:
    """The whole blob (200) or the requested byte range (206), with the download headers."""
    headers = {**DOWNLOAD_HEADERS, **headers}
    selected = parse_range(range_header, size, what)
    if selected is None:
        headers["Content-Length"] = str(size)
        return Download(blobs.stream(key), 200, headers)
    start, end = selected
    headers["Content-Length"] = str(end - start + 1)
    headers["Content-Range"] = f"bytes {start}-{end}/{size}"
    return Download(blobs.stream(key, start, end), 206, headers)

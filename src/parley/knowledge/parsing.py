"""Recognising, reading and chunking documents: pure functions, no I/O, safe to run in a thread.

The type of an upload is taken from its content (magic bytes, text decoding, HTML markers); the file
name only tells Markdown from plain text and catches files that claim to be what they are not.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
HTML = "text/html"
MARKDOWN = "text/markdown"
TEXT = "text/plain"

CHUNK_TARGET = 800
CHUNK_OVERLAP = 100

# Ingestion caps (docs/security.md): every document type is bounded before and while it is read, so
# one upload cannot take the server's memory (a 364 KB .docx once expanded to 150 MB and 300,000 chunks).
MAX_UNCOMPRESSED_BYTES = 25 * 1024 * 1024  # all members of a .docx together, as declared and as read
MAX_COMPRESSION_RATIO = 100  # per member and overall
MAX_PDF_PAGES = 1000
MAX_TEXT_CHARS = 2_000_000  # extracted text, any type
MAX_CHUNKS = 4000

_EXTENSIONS = {
    ".pdf": PDF,
    ".docx": DOCX,
    ".html": HTML,
    ".htm": HTML,
    ".md": MARKDOWN,
    ".markdown": MARKDOWN,
    ".txt": TEXT,
    ".text": TEXT,
}
_KIND_NAMES = {PDF: "a PDF", DOCX: "a Word document (.docx)"}
_HTML_MARKERS = re.compile(
    r"<\s*(!doctype\s+html|html|head|body|p|div|h[1-6]|ul|table|section|article)\b", re.I
)


class UnsupportedDocument(Exception):
    """The upload is not one of the accepted types (or not what its name claims)."""


class ExtractionError(Exception):
    """The document has the right type but its text cannot be read; the message is for the user."""


class DocumentTooLarge(ExtractionError):
    """The document is over one of the ingestion caps; the message names the cap."""


def _text_too_long() -> DocumentTooLarge:
    return DocumentTooLarge(
        f"The document's text is longer than {MAX_TEXT_CHARS:,} characters; split it into smaller documents."
    )


def check_text_length(text: str) -> str:
    if len(text) > MAX_TEXT_CHARS:
        raise _text_too_long()
    return text


def check_archive(data: bytes) -> None:
    """Refuse a ZIP (a .docx) whose members would expand beyond the caps, before reading any of them."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ExtractionError("The Word document could not be read: the file is damaged.") from exc
    total = sum(member.file_size for member in members)
    packed = sum(member.compress_size for member in members)
    if total > MAX_UNCOMPRESSED_BYTES:
        raise DocumentTooLarge(
            f"The Word document expands to {total:,} bytes; at most {MAX_UNCOMPRESSED_BYTES:,} are accepted."
        )
    for member in members:
        if (
            member.file_size > MAX_COMPRESSION_RATIO * max(member.compress_size, 1)
            and member.file_size > 1_000_000
        ):
            raise DocumentTooLarge(
                f"The Word document's part {member.filename!r} is compressed more than "
                f"{MAX_COMPRESSION_RATIO}:1 (a zip bomb?); it is not read."
            )
    if total > MAX_COMPRESSION_RATIO * max(packed, 1) and total > 1_000_000:
        raise DocumentTooLarge(
            f"The Word document is compressed more than {MAX_COMPRESSION_RATIO}:1 (a zip bomb?); it is not read."
        )


def _extension(filename: str | None) -> str:
    if not filename or "." not in filename:
        return ""
    return "." + filename.rsplit(".", 1)[1].lower()


def decode_text(data: bytes) -> str | None:
    """Text from bytes (BOM-aware UTF-8/UTF-16, else UTF-8, else Windows-1252); None for binary data."""
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:].decode("utf-8", "replace")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            return None
    sample = data[:8192]
    if b"\x00" in sample:
        return None
    controls = sum(1 for b in sample if b < 32 and b not in (9, 10, 12, 13))
    if controls > max(2, len(sample) // 50):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", "replace")


def _is_docx(data: bytes) -> bool:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return "word/document.xml" in archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return False


def sniff(data: bytes, filename: str | None) -> str:
    """The media type of an upload, from its content; raises :class:`UnsupportedDocument`."""
    ext = _extension(filename)
    claimed = _EXTENSIONS.get(ext)
    shown = repr(filename) if filename else "The upload"
    if data.startswith(b"%PDF-"):
        return PDF
    if data.startswith(b"PK\x03\x04"):
        if _is_docx(data):
            return DOCX
        raise UnsupportedDocument(
            f"{shown} is a ZIP archive but not a Word document; upload PDF, DOCX, HTML, Markdown or text."
        )
    if claimed in _KIND_NAMES:
        what = _KIND_NAMES[claimed]
        magic = "%PDF-" if claimed == PDF else "a ZIP header"
        raise UnsupportedDocument(
            f"{shown} is named like {what}, but its content is not one (it does not start with {magic})."
        )
    text = decode_text(data)
    if text is None:
        raise UnsupportedDocument(
            f"{shown} is binary data of an unsupported type; upload PDF, DOCX, HTML, Markdown or text."
        )
    if claimed == HTML or _HTML_MARKERS.search(text[:4096]):
        return HTML
    if claimed == MARKDOWN:
        return MARKDOWN
    return TEXT


class _TextFromHtml(HTMLParser):
    SKIP = frozenset({"script", "style", "noscript", "template", "svg", "head", "iframe", "object"})
    BLOCK = frozenset(
        {
            "p", "div", "br", "li", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "table",
            "section", "article", "header", "footer", "blockquote", "pre", "dt", "dd", "hr", "main",
            "nav", "aside", "form", "title",
        }
    )  # fmt: skip

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in self.BLOCK:
            self.parts.append("\n\n")
        elif tag in ("td", "th"):
            self.parts.append(" ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.BLOCK:
            self.parts.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in self.BLOCK:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    parser = _TextFromHtml()
    parser.feed(html)
    parser.close()
    return "".join(parser.parts)


def _pdf_text(data: bytes) -> str:
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise ExtractionError("The PDF is password-protected; upload an unprotected copy.")
        if len(reader.pages) > MAX_PDF_PAGES:
            raise DocumentTooLarge(
                f"The PDF has {len(reader.pages):,} pages; at most {MAX_PDF_PAGES:,} are accepted."
            )
        parts: list[str] = []
        size = 0
        for page in reader.pages:
            text = page.extract_text() or ""
            size += len(text) + 2
            if size > MAX_TEXT_CHARS:  # stop at the cap rather than collecting the whole text first
                raise _text_too_long()
            parts.append(text)
        return "\n\n".join(parts)
    except ExtractionError:
        raise
    except Exception as exc:  # pypdf raises many types for damaged files
        raise ExtractionError("The PDF could not be read: the file is damaged or incomplete.") from exc


def _docx_text(data: bytes) -> str:
    import docx

    check_archive(data)
    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:  # python-docx raises many types for damaged files
        raise ExtractionError("The Word document could not be read: the file is damaged.") from exc
    parts: list[str] = []
    size = 0
    for text in _docx_parts(document):
        size += len(text) + 2
        if size > MAX_TEXT_CHARS:
            raise _text_too_long()
        parts.append(text)
    return "\n\n".join(parts)


def _docx_parts(document: Any) -> Iterator[str]:
    for paragraph in document.paragraphs:
        yield paragraph.text
    for table in document.tables:
        for row in table.rows:
            yield " | ".join(cell.text for cell in row.cells)


def extract_text(data: bytes, content_type: str) -> str:
    """The plain text of a document whose type :func:`sniff` recognised."""
    if content_type == PDF:
        text = _pdf_text(data)
    elif content_type == DOCX:
        text = _docx_text(data)
    else:
        decoded = decode_text(data)
        if decoded is None:
            raise ExtractionError("The file is not text.")
        check_text_length(decoded)
        text = html_to_text(decoded) if content_type == HTML else decoded
    text = check_text_length(normalize(text))
    if not text:
        raise ExtractionError(
            "The document contains no text (a scanned PDF needs OCR, which Parley does not do)."
        )
    return text


def normalize(text: str) -> str:
    """Paragraphs separated by one blank line, whitespace inside them collapsed."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    return "\n\n".join(p for p in paragraphs if p)


_SENTENCE_END = re.compile(r"(?<=[.!?…:])\s+(?=\S)")


def _split_long(text: str, limit: int) -> list[str]:
    """Sentences of ``text``; a sentence over ``limit`` is cut at spaces (or hard, for one long word)."""
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        while len(sentence) > limit:
            cut = sentence.rfind(" ", 0, limit)
            cut = cut if cut > limit // 2 else limit
            pieces.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        if sentence:
            pieces.append(sentence)
    return pieces


def _tail(units: list[str], overlap: int) -> list[str]:
    """The last units of a chunk that fit in ``overlap`` characters (a word-cut tail if none fits)."""
    tail: list[str] = []
    size = 0
    for unit in reversed(units):
        if size + len(unit) + 1 > overlap:
            break
        tail.insert(0, unit)
        size += len(unit) + 1
    if not tail and units and overlap > 0:
        last = units[-1][-overlap:]
        space = last.find(" ")
        tail = [last[space + 1 :] if 0 <= space < len(last) - 1 else last]
    return tail


def chunk_text(text: str, target: int = CHUNK_TARGET, overlap: int = CHUNK_OVERLAP) -> list[str]:
    """Chunks of about ``target`` characters along paragraphs and sentences; each new chunk repeats
    up to ``overlap`` characters from the end of the previous one so no fact is cut in half."""
    chunks: list[str] = []
    current: list[str] = []
    breaks: set[int] = set()  # indexes in ``current`` that start a new paragraph
    size = 0

    def flush() -> None:
        parts: list[str] = []
        for i, unit in enumerate(current):
            if i and i in breaks:
                parts.append("\n\n")
            elif i:
                parts.append(" ")
            parts.append(unit)
        chunks.append("".join(parts))

    for paragraph in normalize(text).split("\n\n"):
        for index, unit in enumerate(_split_long(paragraph, target - overlap)):
            if current and size + len(unit) + 2 > target:
                flush()
                current = _tail(current, overlap)
                breaks = set()
                size = sum(len(u) + 1 for u in current)
            if index == 0:
                breaks.add(len(current))
            current.append(unit)
            size += len(unit) + 2
    if current:
        flush()
    return chunks

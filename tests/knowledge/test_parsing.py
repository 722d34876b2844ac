from __future__ import annotations

import itertools

import pytest

from parley.knowledge.parsing import (
    CHUNK_TARGET,
    HTML,
    MARKDOWN,
    TEXT,
    UnsupportedDocument,
    chunk_text,
    html_to_text,
    normalize,
    sniff,
)


def test_chunks_stay_near_the_target_and_overlap() -> None:
    sentences = [f"Satz {i} erklärt, wie die Werkstatt Auftrag {i} bearbeitet." for i in range(60)]
    text = "\n\n".join(" ".join(sentences[i : i + 4]) for i in range(0, 60, 4))
    chunks = chunk_text(text)
    assert len(chunks) > 3
    assert all(len(chunk) <= CHUNK_TARGET for chunk in chunks)
    for before, after in itertools.pairwise(chunks):
        first_sentence = after.split(". ")[0]
        assert first_sentence in before  # the next chunk starts with the end of the previous one
    joined = " ".join(chunks)
    assert all(sentence in joined for sentence in sentences)


def test_a_sentence_longer_than_a_chunk_is_cut_at_spaces() -> None:
    chunks = chunk_text("wort " * 600)
    assert len(chunks) > 3
    assert all(len(chunk) <= CHUNK_TARGET for chunk in chunks)
    assert all(not chunk.startswith(" ") and "wortwort" not in chunk for chunk in chunks)


def test_short_text_is_one_chunk_and_empty_text_none() -> None:
    assert chunk_text("Kurz.") == ["Kurz."]
    assert chunk_text(" \n\n ") == []


def test_html_keeps_text_and_drops_scripts() -> None:
    html = "<p>Eins<br>zwei</p><script>alert('x')</script><style>p{}</style><ul><li>drei &uuml;</li></ul>"
    assert normalize(html_to_text(html)) == "Eins\n\nzwei\n\ndrei ü"


@pytest.mark.parametrize(
    ("data", "name", "expected"),
    [
        (b"# Title\n\ntext", "a.md", MARKDOWN),
        (b"# Title\n\ntext", "a.txt", TEXT),
        (b"<!doctype html><p>x</p>", None, HTML),
        (b"<p>x</p>", "a.htm", HTML),
        ("\ufeffMit BOM".encode(), "a.txt", TEXT),
        ("UTF-16 Text".encode("utf-16"), None, TEXT),
    ],
)
def test_sniff_from_content(data: bytes, name: str | None, expected: str) -> None:
    assert sniff(data, name) == expected


def test_sniff_refuses_liars_and_binaries() -> None:
    with pytest.raises(UnsupportedDocument, match="named like a PDF"):
        sniff(b"hello", "x.pdf")
    with pytest.raises(UnsupportedDocument, match="binary"):
        sniff(bytes(range(256)), "x.bin")

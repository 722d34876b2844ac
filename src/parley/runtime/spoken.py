"""What a knowledge node says without an LLM: clean sentences from the chunks, in the agent's language.

Knowledge chunks are stored as written, often Markdown, and documents are often bilingual. Read aloud
as they are, a caller hears "hash hash Garantie", URLs and both languages. Here a chunk becomes plain
sentences (headings and code dropped, list items and table rows as sentences, emphasis and links as
their text), sentences in another language than the agent's are left out, and a chunk counts as an
answer only when enough of the question's words occur in what is left (``relevance``): the search's
own score compares hits within one list only and differs between SQLite and PostgreSQL.
"""

from __future__ import annotations

import re
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

from parley.knowledge.repository import FOLD_FROM, FOLD_TO, PREFIX_MIN, query_terms

_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("table")
_FOLD = str.maketrans(FOLD_FROM, FOLD_TO)
MAX_SENTENCES = 2

# Said when nothing relevant was found (a node's ``not_found`` text replaces it).
NOTHING_FOUND = {
    "de": "Dazu habe ich leider keine Information gefunden.",
    "en": "Sorry, I found no information about that.",
}

# Short function words that tell German from English text; words both languages use are left out.
_GERMAN = (
    "der die das und ist nicht wir sie ihr ihre ihren mit für auf ein eine einen dem den zu von "
    "bei im auch werden wird sind oder nach bis uhr ab wenn kann können jede jeden jedes unsere "
    "unser zwei drei jahre tage keine kein sowie über vom zum zur es"
)
_ENGLISH = (
    "the and is not we you your with for on a an to of at also will be are or after until from "
    "our every each two three years days no any can this that it by"
)
_FUNCTION_WORDS = {"de": frozenset(_GERMAN.split(" ")), "en": frozenset(_ENGLISH.split(" "))}


def _inline(token: Token) -> str:
    parts: list[str] = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif child.type == "image":
            parts.append(child.content)  # the alt text
    return " ".join("".join(parts).split())


def _sentence(text: str) -> str:
    text = text.strip()
    return text if not text or text[-1] in ".!?:;" else f"{text}."


_LIST_ITEM = re.compile(r"(?<=[.!?:;)])\s+(?=(?:[-*+]|\d{1,2}[.)])\s)")
_TABLE_ROW = re.compile(r"\|\s+\|(?=\s*(?::?-{3,}|[^|\s]))")


def _restore(paragraph: str) -> str:
    """Ingestion joins the lines of a paragraph (parley.knowledge.parsing.normalize): a list's items and
    a table's rows come back on lines of their own, so that they parse as a list and a table again."""
    stripped = paragraph.lstrip()
    if stripped.startswith("|"):
        return _TABLE_ROW.sub("|\n|", stripped)
    if re.match(r"(?:[-*+]|\d{1,2}[.)])\s", stripped):
        return _LIST_ITEM.sub("\n", stripped)
    return paragraph


def blocks(markdown: str) -> list[str]:
    """The chunk as plain text blocks: paragraphs, list items and table rows; headings and code left out."""
    markdown = "\n\n".join(_restore(p) for p in re.split(r"\n\s*\n", markdown))
    found: list[str] = []
    heading = in_head = False
    row: list[str] | None = None
    header: list[str] = []
    for token in _MARKDOWN.parse(markdown):
        match token.type:
            case "heading_open":
                heading = True
            case "heading_close":
                heading = False
            case "thead_open":
                in_head = True
            case "thead_close":
                in_head = False
            case "tr_open":
                row = []
            case "tr_close" if row is not None:
                if in_head:
                    header = row
                elif any(row):
                    found.append(_row(header, row))
                row = None
            case "inline" if not heading:
                text = _inline(token)
                if row is not None:
                    row.append(text)
                elif text:
                    found.append(_sentence(text))
    return found


def _row(header: list[str], row: list[str]) -> str:
    cells = [c for c in row if c]
    if len(cells) == 2:
        return _sentence(f"{cells[0]}: {cells[1]}")
    if len(header) == len(row) and all(header):
        return _sentence(", ".join(f"{h} {c}" for h, c in zip(header, row, strict=True) if c))
    return _sentence(", ".join(cells))


def sentences(markdown: str) -> list[str]:
    return [s for block in blocks(markdown) for s in re.split(r"(?<=[.!?])\s+", block) if s.strip()]


def language_of(text: str) -> str | None:
    """``de`` or ``en`` when the text's function words say so clearly; None for too little to tell."""
    words = re.findall(r"\w+", text.casefold())
    counts = {lang: sum(w in vocabulary for w in words) for lang, vocabulary in _FUNCTION_WORDS.items()}
    counts["de"] += len(re.findall(r"[äöüß]", text.casefold()))
    (first, most), (_, second) = sorted(counts.items(), key=lambda item: -item[1])
    return first if most >= 1 and most > second else None


def in_language(markdown: str, language: str) -> list[str]:
    """The chunk's sentences the agent can say: its language's, and those too short to tell."""
    wanted = language[:2].casefold()
    if wanted not in _FUNCTION_WORDS:
        return sentences(markdown)
    return [s for s in sentences(markdown) if language_of(s) in (wanted, None)]


def _found(term: str, words: set[str]) -> bool:
    # as the search matches: the word itself, or (four letters or more) a word it begins
    return term in words or (len(term) >= PREFIX_MIN and any(w.startswith(term) for w in words))


def relevance(question: str, text: str) -> float:
    """The share (0–1) of the question's words (stop words left out) that occur in ``text``."""
    terms = query_terms(question)
    if not terms:
        return 0.0
    words = {w.translate(_FOLD) for w in re.findall(r"\w+", text.casefold())}
    return sum(_found(t, words) for t in terms) / len(terms)


def relevant_hits(
    question: str, hits: list[dict[str, Any]], language: str, min_relevance: float
) -> list[dict[str, Any]]:
    """The hits that answer the question in the agent's language, each with its ``sentences`` (clean,
    in that language) and ``relevance``, best first."""
    kept = []
    for hit in hits:
        said = in_language(str(hit.get("text") or ""), language)
        score = relevance(question, " ".join(said))
        if said and score >= min_relevance and score > 0:
            kept.append({**hit, "sentences": said, "relevance": round(score, 3)})
    return sorted(kept, key=lambda h: -float(h["relevance"]))


def answer(question: str, hits: list[dict[str, Any]]) -> str:
    """At most two sentences of the relevant hits that hold most of the question's words, in order."""
    candidates = [s for hit in hits for s in hit["sentences"]]
    ranked = sorted(range(len(candidates)), key=lambda i: -relevance(question, candidates[i]))
    best = sorted(i for i in ranked[:MAX_SENTENCES] if relevance(question, candidates[i]) > 0)
    chosen = [candidates[i] for i in best] or candidates[:1]
    return " ".join(chosen)


def nothing_found(language: str) -> str:
    return NOTHING_FOUND.get(language[:2].casefold(), NOTHING_FOUND["en"])

"""Full-text index and ranked search over knowledge chunks, on SQLite (FTS5) and PostgreSQL (tsvector).

Both engines get the same query: the question's words, lower-cased and folded (ä→a, é→e...), without
common German and English stop words, matched with OR semantics (a chunk needs only some of the words)
and ranked by relevance: BM25 on SQLite, ``ts_rank`` on PostgreSQL. Words of four letters or more also
match as prefixes, so "Lack" finds "Lackschaden" and "Garantie" finds "Garantiezeit".

The search structures come from migration 0004: on SQLite the FTS5 table ``knowledge_chunks_fts``
whose rowids are ``knowledge_chunks``' rowids; on PostgreSQL the GIN index ``ix_knowledge_chunks_tsv``
over the same expression the queries use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import bindparam, text
from sqlalchemy.ext.asyncio import AsyncSession

FOLD_FROM = "ÀÁÂÃÄÅàáâãäåÈÉÊËèéêëÌÍÎÏìíîïÒÓÔÕÖØòóôõöøÙÚÛÜùúûüÝýÿÇçÑñ"
FOLD_TO = "AAAAAAaaaaaaEEEEeeeeIIIIiiiiOOOOOOooooooUUUUuuuuYyyCcNn"
_FOLD = str.maketrans(FOLD_FROM, FOLD_TO)

_STOP_WORDS_TEXT = (
    "a an and are as at be by can could do does for from had has have how i if in is it its me "
    "my no not of on or our so that the their there this to was we what when where which who "
    "why will with would you your yours aber alle also am an auch auf aus bei beim bin bis "
    "bitte da das dass dem den der des die dies diese dieser doch du ein eine einem einen einer"
    " eines er es euch euer für gibt hab habe haben hat ich ihr ihre im in ist ja kann kein "
    "keine man mein meine meinem meinen mich mir mit muss nach nicht noch nur ob oder sie sind "
    "so um und uns unser unsere vom von vor wann war warum was welche wenn wer werden wie wir "
    "wird wo zu zum zur"
)
STOP_WORDS = frozenset(word.translate(_FOLD) for word in _STOP_WORDS_TEXT.split())
MAX_TERMS = 24
PREFIX_MIN = 4

# The document-side expression; the GIN index and the queries must use exactly this text.
PG_VECTOR = f"to_tsvector('simple', translate(text, '{FOLD_FROM}', '{FOLD_TO}'))"


@dataclass(frozen=True)
class Hit:
    chunk_id: str
    document_id: str
    document_title: str
    text: str
    score: float


def query_terms(query: str) -> list[str]:
    """The folded, de-duplicated words of a question, stop words removed (kept if that is all)."""
    words = [w.translate(_FOLD) for w in re.findall(r"\w+", query.lower())]
    words = [w.replace("_", "") for w in words if w.replace("_", "")]
    kept = [w for w in words if w not in STOP_WORDS] or words
    return list(dict.fromkeys(kept))[:MAX_TERMS]


def _dialect(session: AsyncSession) -> str:
    return session.get_bind().dialect.name


async def index_document(session: AsyncSession, document_id: str) -> None:
    """Add a document's (flushed) chunks to the full-text index."""
    if _dialect(session) == "sqlite":
        await session.execute(
            text(
                "INSERT INTO knowledge_chunks_fts(rowid, text) "
                "SELECT rowid, text FROM knowledge_chunks WHERE document_id = :document_id"
            ),
            {"document_id": document_id},
        )


async def unindex_document(session: AsyncSession, document_id: str) -> None:
    """Remove a document's chunks from the full-text index (before the chunks are deleted)."""
    if _dialect(session) != "sqlite":
        return
    await session.execute(
        text(
            "DELETE FROM knowledge_chunks_fts WHERE rowid IN "
            "(SELECT rowid FROM knowledge_chunks WHERE document_id = :document_id)"
        ),
        {"document_id": document_id},
    )


async def unindex_organization(session: AsyncSession, organization_id: str) -> None:
    """Remove all of an organization's chunks from the full-text index (before they are deleted)."""
    if _dialect(session) != "sqlite":
        return
    await session.execute(
        text(
            "DELETE FROM knowledge_chunks_fts WHERE rowid IN "
            "(SELECT rowid FROM knowledge_chunks WHERE organization_id = :organization_id)"
        ),
        {"organization_id": organization_id},
    )


def _fts5_query(terms: list[str]) -> str:
    return " OR ".join(f'"{t}"*' if len(t) >= PREFIX_MIN else f'"{t}"' for t in terms)


def _tsquery(terms: list[str]) -> str:
    return " | ".join(f"'{t}':*" if len(t) >= PREFIX_MIN else f"'{t}'" for t in terms)


async def search_chunks(
    session: AsyncSession,
    organization_id: str,
    query: str,
    top_k: int,
    document_ids: list[str] | None = None,
) -> list[Hit]:
    terms = query_terms(query)
    if not terms or document_ids == []:
        return []
    params: dict[str, object] = {"org": organization_id, "k": top_k}
    doc_filter = ""
    if document_ids is not None:
        doc_filter = " AND c.document_id IN :document_ids"
        params["document_ids"] = list(document_ids)
    if _dialect(session) == "sqlite":
        params["q"] = _fts5_query(terms)
        stmt = text(
            "SELECT c.id, c.document_id, d.title, c.text, -bm25(knowledge_chunks_fts) AS score "
            "FROM knowledge_chunks_fts "
            "JOIN knowledge_chunks c ON c.rowid = knowledge_chunks_fts.rowid "
            "JOIN knowledge_documents d ON d.id = c.document_id "
            "WHERE knowledge_chunks_fts MATCH :q AND c.organization_id = :org "
            "AND d.organization_id = :org AND d.status = 'ready'" + doc_filter + " "
            "ORDER BY score DESC, c.document_id, c.position LIMIT :k"
        )
    else:
        params["q"] = _tsquery(terms)
        vector = PG_VECTOR.replace("(text,", "(c.text,")
        # Only constants are formatted in; the user's words travel as the bound parameter :q.
        stmt = text(
            f"SELECT c.id, c.document_id, d.title, c.text, ts_rank({vector}, q.query, 1) AS score "  # noqa: S608
            "FROM knowledge_chunks c "
            "JOIN knowledge_documents d ON d.id = c.document_id, "
            "to_tsquery('simple', :q) AS q(query) "
            f"WHERE {vector} @@ q.query AND c.organization_id = :org "
            "AND d.organization_id = :org AND d.status = 'ready'" + doc_filter + " "
            "ORDER BY score DESC, c.document_id, c.position LIMIT :k"
        )
    if document_ids is not None:
        stmt = stmt.bindparams(bindparam("document_ids", expanding=True))
    rows = (await session.execute(stmt, params)).all()
    return [Hit(row[0], row[1], row[2], row[3], float(row[4])) for row in rows]

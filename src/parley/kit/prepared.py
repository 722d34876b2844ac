"""Core statements compiled once, for reads (and the inline writes) that go around SQLAlchemy's connection.

A one-row read of a read-only request costs far more in SQLAlchemy's connection, execution context
and result than in the database (docs/benchmarks.md). The engines' row readers (``kit.sqlite``'s
inline reader, ``kit.postgres``'s pooled reader) run such a statement on the driver directly; this
module gives them what SQLAlchemy would have done with it: the SQL its dialect compiles, the bound
values in order through the parameters' types, and rows whose values went through the columns' types
(dates, JSON, encrypted values), as ``Row`` objects.
"""

from __future__ import annotations

import weakref
from typing import Any

from sqlalchemy.engine.result import result_tuple

MAX_PREPARED = 256  # hot statements are built once per shape by their callers: a few dozen in all

# The execution option of a statement marked by :func:`one_row`.
ONE_ROW = "parley_one_row"


def one_row(statement: Any) -> Any:
    """``statement`` marked as returning at most one row whatever its values (a look-up by primary
    key, a ``LIMIT 1``): ``kit.postgres.PooledReader`` may then answer concurrent reads of it with one
    query. SQLAlchemy itself ignores the mark."""
    return statement.execution_options(**{ONE_ROW: True})


class PreparedRead:
    """One statement compiled for one dialect."""

    def __init__(self, statement: Any, dialect: Any) -> None:
        compiled = statement.compile(dialect=dialect)
        binds = [compiled.binds[name] for name in compiled.positiontup or ()]
        if any(bind.expanding for bind in binds):
            raise ValueError("an IN list is rendered per call: it cannot be compiled once")
        if compiled.insert_prefetch or compiled.update_prefetch:
            raise ValueError("a column default is computed per execution: it cannot be compiled once")
        self.sql: str = compiled.string
        self.binds = [
            (bind.key, bind.effective_value, bind.type.dialect_impl(dialect).bind_processor(dialect))
            for bind in binds
        ]
        # The values a caller must give (a bind with no value of its own): a write that lacks one would
        # store NULL where SQLAlchemy would have refused it, so it is not sent (see ``parameters``).
        self.required = frozenset(bind.key for bind in binds if bind.required)
        self.dialect = dialect
        # A SELECT's columns, or what an INSERT/UPDATE/DELETE returns (none: no rows to convert).
        returned = getattr(statement, "selected_columns", None)
        self.columns = list(returned if returned is not None else statement.exported_columns)
        self.make_row = result_tuple([column.key for column in self.columns])
        # A one-row ``INSERT ... VALUES`` that returns nothing and has nothing around its values (no
        # SELECT, ON CONFLICT, WITH or prefix): ``kit.postgres`` may run it in another statement's WITH.
        self.plain_insert = bool(
            getattr(statement, "is_insert", False)
            and statement.select is None
            and not statement._multi_values
            and statement._post_values_clause is None
            and not statement._independent_ctes
            and not statement._prefixes
            and not statement._returning
        )
        # At most one row whatever the values (:func:`one_row`).
        self.one_row = bool(statement.get_execution_options().get(ONE_ROW))
        # Built once the driver has told the columns' type codes (some types' conversions depend on it).
        self.processors: list[Any] | None = None
        self.converts = True

    def describe(self, type_codes: list[Any] | None) -> None:
        """The columns' conversions, from the type codes the driver reports (``None``: it reports none,
        as ``sqlite3`` does)."""
        codes = type_codes or [None] * len(self.columns)
        processors = [
            column.type.dialect_impl(self.dialect).result_processor(self.dialect, code)
            for column, code in zip(self.columns, codes, strict=True)
        ]
        # Often no column needs one (asyncpg gives Python values): then a row is made of the values as
        # they come, without a step per value (a third of a 50-row page's conversion time).
        self.converts = any(process is not None for process in processors)
        self.processors = processors

    def parameters(self, values: dict[str, Any]) -> list[Any]:
        """The statement's bound values in order: the caller's by name, else the statement's own.
        KeyError when a value the statement needs is missing."""
        if not self.required.issubset(values):
            raise KeyError(sorted(self.required.difference(values)))
        bound = []
        for key, default, process in self.binds:
            value = values.get(key, default)
            bound.append(value if process is None else process(value))
        return bound

    def row(self, values: Any) -> Any:
        assert self.processors is not None, "describe() first"
        if not self.converts:
            return self.make_row(values)
        return self.make_row(
            [
                value if process is None else process(value)
                for process, value in zip(self.processors, values, strict=True)
            ]
        )


class PreparedReads:
    """The prepared form of each statement a reader is given more than once.

    Callers build their hot statements once and bind values to them; a statement made for one request
    (a rare filter, say) is left to SQLAlchemy, whose compiled cache serves it better than compiling
    it here every time: a statement is prepared at its second use. Both maps hold statements weakly,
    so one-off statements leave them when they are dropped.
    """

    def __init__(self, dialect: Any) -> None:
        self.dialect = dialect
        self._prepared: weakref.WeakKeyDictionary[Any, PreparedRead | None] = weakref.WeakKeyDictionary()
        self._seen: weakref.WeakSet[Any] = weakref.WeakSet()

    def bound(
        self, steps: list[tuple[Any, dict[str, Any]]]
    ) -> tuple[list[PreparedRead], list[list[Any]]] | None:
        """Each statement prepared with its values bound in order, or None when one is not prepared
        (yet) or lacks a value: the caller goes the usual way. Every statement is looked at, so each
        is prepared at its second use even when another one is not ready."""
        looked = [self.of(statement) for statement, _ in steps]
        prepared = [one for one in looked if one is not None]
        if len(prepared) < len(steps):
            return None
        try:
            return prepared, [
                one.parameters(values) for one, (_, values) in zip(prepared, steps, strict=True)
            ]
        except KeyError:
            return None  # the usual way reports the missing value

    def of(self, statement: Any) -> PreparedRead | None:
        """The statement prepared, or None when it is not (yet): the caller reads the usual way."""
        try:
            return self._prepared[statement]
        except KeyError:
            pass
        if statement not in self._seen:
            self._seen.add(statement)
            return None
        if len(self._prepared) >= MAX_PREPARED:
            return None
        try:
            prepared: PreparedRead | None = PreparedRead(statement, self.dialect)
        except ValueError:
            prepared = None
        self._prepared[statement] = prepared
        return prepared

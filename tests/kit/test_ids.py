"""Ids are ULIDs in the ``ulid`` package's format, and made in order within a process."""

from __future__ import annotations

from ulid import ULID

from parley.kit.ids import new_id, ulid


def test_ids_made_in_one_burst_sort_in_the_order_they_were_made() -> None:
    # Thousands in a row share milliseconds: within one, each id is the one before plus one.
    ids = [new_id("itm") for _ in range(5000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_the_format_is_the_ulid_packages() -> None:
    text = ulid()
    assert len(text) == 26
    assert str(ULID.from_str(text)) == text

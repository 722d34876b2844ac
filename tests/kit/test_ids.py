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


def test_a_forked_child_never_repeats_its_parents_random_parts() -> None:
    import os
    import time

    from parley.kit import ids

    ulid()  # the parent's pool of random bytes is filled
    time.sleep(0.002)  # a new millisecond: the next id takes fresh random bits from the pool
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        os.write(write, ids.ulid().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    childs = os.read(read, 64).decode()
    os.close(read)
    parents = ids.ulid()
    # Same pool after the fork would give the same 80 random bits (the last 16 characters).
    assert childs[-16:] != parents[-16:]

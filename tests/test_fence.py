"""An outside store fenced by (job id, attempts) refuses the older attempt's write; unfenced, the zombie wins.

An equal fence is accepted only from the claim that wrote it (the same token): a crash
that lost a claim can hand its fence to a second claim, and the store must not let
that one replace the first.
"""

from __future__ import annotations

import sqlite3

import pytest

from leaselab.fencing import FencedStore
from tests.support.servers import IN_PROCESS_BACKENDS

TARGETS = IN_PROCESS_BACKENDS  # a real queue's fences, on every backend


def test_a_write_with_an_older_fence_is_refused(tmp_path):
    with FencedStore(tmp_path / "s.db") as store:
        assert store.write("k", "new", fence=(1, 2)) is True
        assert store.write("k", "stale", fence=(1, 1)) is False
        assert store.read("k") == ("new", (1, 2))


def test_a_newer_fence_is_accepted_from_any_claim(tmp_path):
    with FencedStore(tmp_path / "s.db") as store:
        assert store.write("k", "a", fence=(7, 3), token="t-a")
        assert store.write("k", "b", fence=(7, 12), token="t-b")
        assert store.write("k", "c", fence=(8, 1))  # a later job, and no token at all
        assert store.read("k") == ("c", (8, 1))


def test_the_same_claim_may_write_twice_with_its_fence(tmp_path):
    with FencedStore(tmp_path / "s.db") as store:
        assert store.write("k", "first", fence=(7, 3), token="t-a")
        assert store.write("k", "again", fence=(7, 3), token="t-a")
        assert store.read("k") == ("again", (7, 3))


def test_an_equal_fence_from_another_claim_is_refused(tmp_path):
    # Two claims holding one fence: what a crash that lost the first claim leaves behind.
    with FencedStore(tmp_path / "s.db") as store:
        assert store.write("k", "holder", fence=(7, 3), token="t-new")
        assert store.write("k", "zombie", fence=(7, 3), token="t-zombie") is False
        assert store.write("k", "who?", fence=(7, 3)) is False  # no token: it cannot show it is the same claim
        assert store.read("k") == ("holder", (7, 3))


def test_an_equal_fence_without_a_token_is_refused_even_after_a_write_without_one(tmp_path):
    with FencedStore(tmp_path / "s.db") as store:
        assert store.write("k", "a", fence=(7, 3))
        assert store.write("k", "b", fence=(7, 3)) is False
        assert store.read("k") == ("a", (7, 3))


def test_an_older_fence_is_refused_whatever_its_token(tmp_path):
    with FencedStore(tmp_path / "s.db") as store:
        assert store.write("k", "new", fence=(7, 4), token="t")
        assert store.write("k", "stale", fence=(7, 3), token="t") is False
        assert store.write("k", "stale", fence=(6, 99), token="t") is False
        assert store.read("k") == ("new", (7, 4))


def test_two_claims_of_one_job_from_a_real_queue_write_in_fence_order(tmp_path, queue, zombie):
    # The fences come from the queue, on every backend; the store is a SQLite file of its own.
    with FencedStore(tmp_path / "s.db") as store:
        queue.enqueue("page")
        stale, holder = zombie(lease=10, holder="w1", successor="w2")
        assert store.write("page", "w2", fence=holder.fence, token=holder.token)
        assert store.write("page", "w2 again", fence=holder.fence, token=holder.token)
        assert store.write("page", "w1", fence=stale.fence, token=stale.token) is False
        assert store.read("page") == ("w2 again", holder.fence)


def test_a_store_made_before_tokens_is_migrated_and_its_rows_take_no_equal_fence(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE fenced (key TEXT PRIMARY KEY, fence_job INTEGER NOT NULL, "
        "fence_attempt INTEGER NOT NULL, value TEXT NOT NULL)"
    )
    conn.execute("INSERT INTO fenced VALUES ('k', 7, 3, '\"old\"')")
    conn.commit()
    conn.close()
    with FencedStore(path) as store:
        assert store.read("k") == ("old", (7, 3))
        assert store.write("k", "equal", fence=(7, 3), token="t") is False
        assert store.write("k", "newer", fence=(7, 4), token="t") is True
    with FencedStore(path) as store:  # opening a migrated store again changes nothing
        assert store.write("k", "newer again", fence=(7, 4), token="t") is True
        assert store.read("k") == ("newer again", (7, 4))


def test_an_unchecked_write_lets_the_stale_value_win(tmp_path):
    with FencedStore(tmp_path / "s.db") as store:
        store.write("k", "new", fence=(1, 2), check=False)
        assert store.write("k", "stale", fence=(1, 1), check=False) is True
        assert store.read("k") == ("stale", (1, 1))
        assert store.read("missing") is None


def test_a_fence_must_be_two_ints_and_a_token_a_string(tmp_path):
    with FencedStore(tmp_path / "s.db") as store:
        with pytest.raises(TypeError, match="fence"):
            store.write("k", "v", fence=("1", 2))
        with pytest.raises(TypeError, match="token"):
            store.write("k", "v", fence=(1, 2), token=b"t")

"""An outside store fenced by (job id, attempts) refuses the older attempt's write; unfenced, the zombie wins."""

from __future__ import annotations

import pytest

from leaselab.lessons.fence import FencedStore


def test_a_write_with_an_older_fence_is_refused(tmp_path):
    with FencedStore(tmp_path / "s.db") as store:
        assert store.write("k", "new", fence=(1, 2)) is True
        assert store.write("k", "stale", fence=(1, 1)) is False
        assert store.read("k") == ("new", (1, 2))


def test_an_equal_or_newer_fence_may_write_again(tmp_path):
    with FencedStore(tmp_path / "s.db") as store:
        assert store.write("k", "a", fence=(7, 3))
        assert store.write("k", "b", fence=(7, 3))
        assert store.write("k", "c", fence=(7, 12))
        assert store.read("k") == ("c", (7, 12))


def test_an_unchecked_write_lets_the_stale_value_win(tmp_path):
    with FencedStore(tmp_path / "s.db") as store:
        store.write("k", "new", fence=(1, 2), check=False)
        assert store.write("k", "stale", fence=(1, 1), check=False) is True
        assert store.read("k") == ("stale", (1, 1))
        assert store.read("missing") is None


def test_a_fence_must_be_two_ints(tmp_path):
    with FencedStore(tmp_path / "s.db") as store, pytest.raises(TypeError, match="fence"):
        store.write("k", "v", fence=("1", 2))

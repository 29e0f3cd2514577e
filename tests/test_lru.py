"""heteroplan.lru.LRUCache against a plain list model of least-recently-used eviction, and from threads."""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from heteroplan.lru import LRUCache

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("get"), st.integers(0, 6)),
        st.tuples(st.just("put"), st.integers(0, 6), st.integers(0, 5)),
        st.tuples(st.just("capacity"), st.integers(0, 12)),
        st.tuples(st.just("clear")),
    ),
    max_size=60,
)


class ListModel:
    """The oracle: a list of (key, value), least recently used first; sizes added up every time."""

    def __init__(self, capacity: float) -> None:
        self.capacity, self.items = capacity, []

    def get(self, key):
        for i, (k, v) in enumerate(self.items):
            if k == key:
                self.items.append(self.items.pop(i))
                return v
        return None

    def put(self, key, value):
        for k, v in self.items:
            if k == key:
                return v
        self.items.append((key, value))
        while self.items and sum(v for _, v in self.items) > self.capacity:
            self.items.pop(0)
        return value


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 12), OPS)
def test_lru_cache_is_the_list_model(capacity, ops) -> None:
    cache: LRUCache[int, int] = LRUCache(capacity, size=lambda v: v)  # a value counts its own size
    model = ListModel(capacity)
    for op in ops:
        if op[0] == "get":
            assert cache.get(op[1]) == model.get(op[1])
        elif op[0] == "put":
            assert cache.put(op[1], op[2]) == model.put(op[1], op[2])
        elif op[0] == "capacity":
            cache.capacity = model.capacity = op[1]  # applied at the next put
        else:
            cache.clear()
            model.items = []
        assert len(cache) == len(model.items)
    assert [cache.get(k) for k, _ in list(model.items)] == [v for _, v in model.items]


def test_counted_cache_keeps_the_most_recently_used_and_the_first_value_of_a_key() -> None:
    cache: LRUCache[str, object] = LRUCache(2)
    a, b, c = object(), object(), object()
    cache.put("a", a)
    cache.put("b", b)
    assert cache.get("a") is a  # "b" is now the least recently used
    cache.put("c", c)
    assert cache.get("b") is None and cache.get("a") is a and cache.get("c") is c
    assert cache.put("a", object()) is a  # the first value stays, and is what put returns
    cache.capacity = 0
    fresh = object()
    assert cache.put("d", fresh) is fresh and len(cache) == 0


def test_threads_putting_one_key_all_get_the_one_kept_value() -> None:
    cache: LRUCache[int, object] = LRUCache(100)
    barrier = threading.Barrier(8)
    got: list[object] = []

    def worker() -> None:
        mine = object()
        barrier.wait()
        got.append(cache.put(0, mine))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(g is got[0] for g in got) and cache.get(0) is got[0]

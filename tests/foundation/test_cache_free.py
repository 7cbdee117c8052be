"""The per-request cache frees a dropped request's values where it is dropped, not inside
the next solve (models/cache.py `_collected`), and defers to the next cache access when
the lock is held."""

from __future__ import annotations

from benchmarks.generator import generate
from models import cache
from models.instance import compile_jobs, forget_compiled


def test_a_dropped_request_is_freed_at_once() -> None:
    forget_compiled()
    req = generate("S", 0)
    compile_jobs(req)
    key = id(req)
    assert key in cache._COMPILED
    del req   # no cache access after this: the entry and its values go here
    assert key not in cache._COMPILED
    assert key not in cache._COLLECTED


def test_a_request_dropped_while_the_lock_is_held_waits_for_the_next_access() -> None:
    forget_compiled()
    req = generate("S", 1)
    compile_jobs(req)
    key = id(req)
    with cache._COMPILED_LOCK:
        del req   # the callback cannot take the lock: the key waits
        assert key in cache._COLLECTED
    live = generate("S", 2)
    first = compile_jobs(live)   # the next access purges it
    assert key not in cache._COLLECTED
    assert key not in cache._COMPILED or cache._COMPILED[key][0]() is not None
    assert compile_jobs(live) is first

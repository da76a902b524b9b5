"""A query's jobs side by side (``KAR_IMAGE_QUERY_THREADS``): results in order, errors as one after another,
really on two threads, and never waiting behind another request's job."""

from __future__ import annotations

import threading

import pytest

from retrieval.images.query_threads import QueryThreads


def test_results_come_in_the_jobs_order_and_one_thread_runs_them_in_the_caller():
    assert QueryThreads(1).run([lambda i=i: i * i for i in range(5)]) == [0, 1, 4, 9, 16]
    names: list[str] = []
    QueryThreads(1).run([lambda: names.append(threading.current_thread().name)] * 3)
    assert names == [threading.current_thread().name] * 3
    threads = QueryThreads(2)
    try:
        assert threads.run([lambda i=i: i * i for i in range(9)]) == [i * i for i in range(9)]
        assert threads.run([]) == [] and threads.run([lambda: "one"]) == ["one"]
    finally:
        threads.close()


def test_two_threads_run_two_jobs_at_once():
    """Each job waits for the other: they finish only when they run at the same time, in two threads."""
    threads = QueryThreads(2)
    both = threading.Barrier(2, timeout=30)
    seen: list[str] = []

    def job() -> int:
        seen.append(threading.current_thread().name)
        return both.wait()

    try:
        assert sorted(threads.run([job, job])) == [0, 1]
        assert len(set(seen)) == 2 and any(name.startswith("kar-image-query") for name in seen)
    finally:
        threads.close()


def test_a_busy_pool_does_not_hold_the_query_up():
    """A pool thread busy with another request's job: this query's jobs run in its own thread, none waits."""
    threads = QueryThreads(2)
    release, started = threading.Event(), threading.Event()

    def other_request() -> None:
        started.set()
        release.wait(30)

    try:
        busy = threads._executor().submit(other_request)
        assert started.wait(30)
        names: list[str] = []
        out = threads.run([lambda i=i: names.append(threading.current_thread().name) or i for i in range(4)])
        assert out == [0, 1, 2, 3] and set(names) == {threading.current_thread().name}
    finally:
        release.set()
        busy.result(30)
        threads.close()


def test_a_failing_job_raises_in_the_caller_and_the_pool_stays_usable():
    threads = QueryThreads(2)
    ran: list[int] = []

    def fail() -> None:
        raise ValueError("region 2: no pixels")

    try:
        with pytest.raises(ValueError, match="region 2"):
            threads.run([fail, *[lambda i=i: ran.append(i) for i in range(3)]])
        assert threads.run([lambda: 1, lambda: 2]) == [1, 2]  # the pool is still usable
    finally:
        threads.close()
    with pytest.raises(ValueError, match="at least 1"):
        QueryThreads(0)


def test_jobs_started_ahead_run_while_the_caller_works_and_come_back_in_order():
    """The mirrored pass's descriptions start while the first pass verifies: a pool thread runs one while the
    caller is still busy, and the results come back in the jobs' order (the rest run on the caller's thread)."""
    threads = QueryThreads(2)
    started = threading.Event()

    def first() -> str:
        started.set()
        return threading.current_thread().name

    try:
        ahead = threads.ahead([first, lambda: "second", lambda: "third"])
        assert started.wait(30)  # the caller has not asked for anything yet
        name, *rest = ahead.results()
        assert name.startswith("kar-image-query") and rest == ["second", "third"]
    finally:
        threads.close()
    one = QueryThreads(1)
    ran: list[int] = []
    ahead = one.ahead([lambda: ran.append(1) or 1, lambda: ran.append(2) or 2])
    assert ran == []  # one thread: nothing runs before it is needed, then all on the caller's thread
    assert ahead.results() == [1, 2] and ran == [1, 2]


def test_jobs_started_ahead_and_dropped_do_not_run_unless_a_thread_had_started_them():
    threads = QueryThreads(2)
    release, started = threading.Event(), threading.Event()
    ran: list[int] = []

    def busy() -> None:
        started.set()
        release.wait(30)

    try:
        ahead = threads.ahead([busy, lambda: ran.append(1), lambda: ran.append(2)])
        assert started.wait(30)  # the one pool thread is held by the first job: the others wait in its queue
        ahead.drop()
        release.set()
        threads.close()  # waits for the pool's queue to drain
        assert ran == []  # dropped before any thread took them: never run
        assert threads.run([lambda: "after", lambda: "again"]) == ["after", "again"]  # a new pool after close
    finally:
        release.set()
        threads.close()
    QueryThreads(1).ahead([lambda: ran.append(3)]).drop()
    assert ran == []


def test_a_job_started_ahead_that_fails_raises_when_its_results_are_taken():
    threads = QueryThreads(2)

    def fail() -> None:
        raise ValueError("flipped region 1: no pixels")

    try:
        ahead = threads.ahead([fail, lambda: 2])
        with pytest.raises(ValueError, match="flipped region 1"):
            ahead.results()
        assert threads.run([lambda: 1, lambda: 2]) == [1, 2]
    finally:
        threads.close()

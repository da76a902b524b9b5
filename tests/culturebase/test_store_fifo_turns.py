"""FIFO turns at the embedded engine's reads: one caller at a time, in arrival order, and a
turn is never lost (an exception in the block, an interrupted waiter)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from culturebase.store import EmbedderInfo, PointRecord
from culturebase.store.culturebase import entity_spec
from culturebase.store.edge import EdgeBackend
from culturebase.store.fifo_turns import FifoTurns


def _wait_until(cond, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.001)


def _holder(turns: FifoTurns) -> tuple[threading.Thread, threading.Event, threading.Event]:
    """A thread that takes the turn and keeps it until ``release`` is set."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with turns.turn():
            held.set()
            release.wait(5)

    t = threading.Thread(target=hold)
    t.start()
    assert held.wait(5)
    return t, held, release


def test_turns_go_one_at_a_time_in_arrival_order():
    turns = FifoTurns()
    holder, _, release = _holder(turns)
    order: list[int] = []
    inside = [0, 0]  # now, most at once

    def take(i: int) -> None:
        with turns.turn():
            inside[0] += 1
            inside[1] = max(inside)
            order.append(i)
            time.sleep(0.002)
            inside[0] -= 1

    threads = []
    for i in range(6):  # each one queued before the next arrives
        t = threading.Thread(target=take, args=(i,))
        t.start()
        threads.append(t)
        _wait_until(lambda i=i: turns.waiting == i + 1)
    release.set()
    for t in [holder, *threads]:
        t.join(5)
    assert order == [0, 1, 2, 3, 4, 5]
    assert inside[1] == 1 and turns.waiting == 0


def test_an_uncontended_turn_is_taken_at_once_and_an_error_inside_passes_it_on():
    turns = FifoTurns()
    with turns.turn():
        pass
    holder, _, release = _holder(turns)
    got: list[str] = []

    def failing() -> None:
        with pytest.raises(ValueError), turns.turn():
            raise ValueError("engine error")

    def next_one() -> None:
        with turns.turn():
            got.append("next")

    a = threading.Thread(target=failing)
    a.start()
    _wait_until(lambda: turns.waiting == 1)
    b = threading.Thread(target=next_one)
    b.start()
    _wait_until(lambda: turns.waiting == 2)
    release.set()
    for t in (holder, a, b):
        t.join(5)
    assert got == ["next"]
    with turns.turn():  # free again
        pass


def test_a_waiter_interrupted_in_the_queue_leaves_it(monkeypatch):
    turns = FifoTurns()
    holder, _, release = _holder(turns)

    class InterruptedEvent(threading.Event):
        def wait(self, timeout=None):
            raise KeyboardInterrupt

    monkeypatch.setattr(threading, "Event", InterruptedEvent)
    with pytest.raises(KeyboardInterrupt), turns.turn():
        pass
    monkeypatch.undo()
    assert turns.waiting == 0
    release.set()
    holder.join(5)
    with turns.turn():  # not lost
        pass


def test_embedded_reads_take_a_turn(tmp_path):
    info = EmbedderInfo("synthetic", 8)
    backend = EdgeBackend(tmp_path / "kb")
    coll = backend.open_collection(entity_spec(info), info)
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(3, 8)).astype(np.float32)
    coll.upsert([PointRecord(id=f"e{i}", dense={r: vecs[i] for r in entity_spec(info).dense}, payload={"name": f"e{i}"}) for i in range(3)])

    class Counting(FifoTurns):
        taken = 0

        def turn(self):
            Counting.taken += 1
            return super().turn()

    coll._turns = Counting()
    assert coll.search("identity", vecs[1], 1)[0].id == "e1"
    assert [p["name"] for p in coll.retrieve(["e2"])] == ["e2"]
    assert Counting.taken == 2
    backend.close()

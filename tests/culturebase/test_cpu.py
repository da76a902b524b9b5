"""The process-wide CPU pool: bounded concurrency, FIFO queueing, inline nesting, dropped work on cancel."""

from __future__ import annotations

import asyncio
import threading

from culturebase.cpu import CpuPool, configure_cpu_pool, cpu_pool


async def test_never_more_than_workers_at_once_and_the_rest_queue():
    pool = CpuPool(2)
    lock = threading.Lock()
    running, peak = 0, 0
    release = threading.Event()

    def job(i: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        release.wait(10)
        with lock:
            running -= 1
        return i * i

    tasks = [asyncio.create_task(pool.run(job, i)) for i in range(6)]
    for _ in range(500):
        if pool.stats().running == 2 and pool.stats().queued == 4:
            break
        await asyncio.sleep(0.01)
    stats = pool.stats()
    assert (stats.workers, stats.running, stats.queued) == (2, 2, 4)
    release.set()
    assert await asyncio.gather(*tasks) == [i * i for i in range(6)]
    assert peak == 2 and pool.stats().completed == 6 and pool.stats().queued == 0
    pool.shutdown()


async def test_a_pooled_function_calling_the_pool_runs_inline_instead_of_deadlocking():
    pool = CpuPool(1)

    def inner() -> str:
        return threading.current_thread().name

    def outer() -> tuple[str, str]:
        return threading.current_thread().name, pool.call(inner)

    outer_thread, inner_thread = await pool.run(outer)
    assert outer_thread == inner_thread and outer_thread.startswith("kar-cpu")
    pool.shutdown()


async def test_work_still_queued_when_its_caller_is_cancelled_never_runs():
    pool = CpuPool(1)
    release = threading.Event()
    ran: list[str] = []
    blocker = asyncio.create_task(pool.run(release.wait, 10))
    queued = asyncio.create_task(pool.run(ran.append, "late"))
    for _ in range(500):
        if pool.stats().queued == 1:
            break
        await asyncio.sleep(0.01)
    queued.cancel()
    await asyncio.gather(queued, return_exceptions=True)
    release.set()
    await blocker
    await pool.run(ran.append, "next")
    assert ran == ["next"] and pool.stats().queued == 0
    pool.shutdown()


def test_the_process_pool_is_sized_from_settings_and_resized_on_demand(monkeypatch):
    from culturebase.settings import get_settings

    monkeypatch.setenv("KAR_CPU_WORKERS", "3")
    get_settings.cache_clear()
    try:
        assert configure_cpu_pool(get_settings().cpu_workers).workers == 3
        assert cpu_pool().workers == 3 and cpu_pool() is cpu_pool()
        assert configure_cpu_pool(None).workers >= 1
    finally:
        get_settings.cache_clear()


def test_the_decode_budget_keeps_big_decodes_apart_and_lets_small_ones_through():
    """Two 16 MP decodes never overlap under a 24 MP budget, a 2 MP one runs beside either,
    and a decode larger than the whole budget runs (alone) instead of waiting forever."""
    import threading
    import time

    from culturebase.cpu import PixelBudget

    budget = PixelBudget(24)
    inside: list[float] = []
    peak = [0.0]
    broken: list[list[float]] = []
    lock = threading.Lock()

    def decode(mp: float) -> None:
        with budget.hold(mp):
            with lock:
                inside.append(mp)
                peak[0] = max(peak[0], sum(min(m, 24) for m in inside))
                if mp == 40 and inside != [40]:
                    broken.append(list(inside))  # a decode over the whole budget must run alone
            time.sleep(0.15)
            with lock:
                inside.remove(mp)

    threads = [threading.Thread(target=decode, args=(mp,)) for mp in (16, 16, 2, 40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    assert peak[0] <= 24, peak  # never two 16 MP decodes at once
    assert broken == []
    assert budget.used == 0 and budget.waits >= 1

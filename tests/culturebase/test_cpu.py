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
    """Two 16 MP decodes never overlap under a 24 MP budget, a 2 MP one runs beside any,
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
                counted = [m for m in inside if m > 3]  # a 2 MP decode is not counted
                peak[0] = max(peak[0], sum(min(m, 24) for m in counted))
                if mp == 40 and counted != [40]:
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


async def _until(cond, what: str) -> None:
    for _ in range(500):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_decode_waiting_for_the_budget_waits_in_the_queue_not_in_a_worker():
    """Two workers, a 24 MP budget: a second 16 MP decode waits without a thread, and a job
    that needs no budget (an OCR read) runs on the free worker meanwhile."""
    from culturebase.cpu import PixelBudget

    budget = PixelBudget(24)
    pool = CpuPool(2, budget=budget)
    release = threading.Event()
    started: list[str] = []

    def job(name: str, wait: bool) -> str:
        started.append(name)
        if wait:
            release.wait(10)
        return name

    first = asyncio.create_task(pool.run_decode(16, job, "decode-1", True))
    await _until(lambda: started == ["decode-1"], "the first decode")
    second = asyncio.create_task(pool.run_decode(16, job, "decode-2", False))
    await _until(lambda: pool.stats().queued == 1, "the second decode to queue")
    assert await asyncio.wait_for(pool.run(job, "ocr", False), 5) == "ocr"  # ran beside the first decode
    assert started == ["decode-1", "ocr"] and budget.used == 16 and budget.waits == 1
    release.set()
    assert await asyncio.gather(first, second) == ["decode-1", "decode-2"]
    assert budget.used == 0 and pool.stats().completed == 3
    pool.shutdown()


async def test_budget_jobs_keep_their_order_and_their_own_holds_pass():
    """A smaller decode that would fit does not overtake a bigger one queued before it, and
    the budget a job declared covers the holds made inside it (no second wait)."""
    from culturebase.cpu import PixelBudget

    budget = PixelBudget(24)
    pool = CpuPool(3, budget=budget)
    release = threading.Event()
    started: list[str] = []

    def job(name: str, mp: float, wait: bool) -> float:
        with budget.hold(mp):  # what open_bounded does around its decode
            started.append(name)
            if wait:
                release.wait(10)
            return budget.used

    big = asyncio.create_task(pool.run_decode(16, job, "running", 16, True))
    await _until(lambda: started == ["running"], "the first decode")
    queued_big = asyncio.create_task(pool.run_decode(16, job, "big", 16, False))
    queued_small = asyncio.create_task(pool.run_decode(8, job, "small", 8, False))
    await _until(lambda: pool.stats().queued == 2, "both to queue")
    await asyncio.sleep(0.1)
    assert started == ["running"]  # 16 + 8 fits, but "small" stays behind "big"
    release.set()
    used = await asyncio.gather(big, queued_big, queued_small)
    assert started.index("big") < started.index("small")
    assert used[0] == 16 and max(used) <= 24 and budget.used == 0
    pool.shutdown()


def test_small_decodes_are_not_counted_and_a_huge_one_takes_the_whole_budget():
    from culturebase.cpu import PARAMS, PixelBudget

    budget = PixelBudget(24)
    assert budget.needed(2.56) == 0.0 and budget.needed(PARAMS.small_decode_mp + 0.1) > 0
    assert budget.needed(40) == 24
    with budget.hold(2.0):
        assert budget.used == 0


def test_a_fresh_process_makes_its_pool_and_budget_without_deadlock():
    """The first pool of a process is made before anything asked for the decode budget
    (what `kar serve` does at startup): it must not wait on itself."""
    import subprocess
    import sys

    code = (
        "from culturebase.cpu import configure_cpu_pool, cpu_pool, decode_budget\n"
        "pool = configure_cpu_pool(2)\n"
        "assert pool.call(sum, [1, 2]) == 3 and cpu_pool() is pool and pool.budget is decode_budget()\n"
        "print('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr

"""Back-pressure in front of the pipeline: a bounded queue, an honest 503 and a deadline.

At most ``max_in_flight`` explain requests are in flight at once (reading their body,
checking their image, running the pipeline); up to ``queue_size`` more wait for a slot with
their bodies *unread*: the server stops reading their sockets (the HTTP server's flow
control), so a queued 15 MB upload costs the server a few kB, not 15 MB, and memory is
bounded by the slots, not by the queue.  The CPU work of the requests in flight is bounded
again by :mod:`culturebase.cpu`.  A request that finds the queue full is refused at once
with 503, ``Retry-After`` (seconds, from the recent service time and the queue ahead) and
the standard error body: the server never accepts work it cannot finish in time.  Each
admitted request carries a deadline (``KAR_REQUEST_TIMEOUT_S``, queue wait included).

A clip or a sound costs far more than an image (a whole video decoded, a dozen frames read by OCR
and matched), so at most ``media_in_flight`` of them (``KAR_MEDIA_MAX_IN_FLIGHT``, default: the
CPU pool's workers) run at once; the others wait for one of these clip slots only as long as their
deadline leaves room for a clip's recent service time, and are then refused with 503 and
``Retry-After``, never started to end in a 504.  Run together, 24 clips would share the cores
until every one of them had missed its deadline.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from services.errors import ApiError
from services.metrics import Metrics
from services.params import PARAMS



class DeadlineExceeded(Exception):
    """The request's deadline passed while it waited (``stage`` says where)."""

    def __init__(self, stage: str, waited_s: float) -> None:
        super().__init__(stage)
        self.stage = stage
        self.waited_s = waited_s


@dataclass
class Ticket:
    """One admitted request: its arrival, its deadline, and whether it holds a pipeline slot."""

    arrived: float
    deadline: float
    running: bool = False
    released: bool = False
    started: float | None = field(default=None)
    media_started: float | None = field(default=None)  # when it took a clip slot (held until it leaves)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()


class Admission:
    """The bounded queue and the pipeline slots of one API process."""

    def __init__(self, max_in_flight: int, queue_size: int, timeout_s: float, metrics: Metrics, media_in_flight: int = 2) -> None:
        self.max_in_flight = max(1, max_in_flight)
        self.media_in_flight = max(1, media_in_flight)
        self._media = asyncio.Semaphore(self.media_in_flight)
        self._media_recent: deque[float] = deque(maxlen=8)  # service times of the last clips
        self.media_waiting = 0
        self.queue_size = max(0, queue_size)
        self.timeout_s = timeout_s
        self.metrics = metrics
        self._slots = asyncio.Semaphore(self.max_in_flight)
        self.waiting = 0  # admitted, not yet running the pipeline
        self.running = 0
        self._service_s = PARAMS.default_service_s  # moving average of the pipeline time
        metrics.queue_depth.set_function(lambda: float(self.waiting))
        metrics.queue_capacity.set(float(self.queue_size))

    def retry_after_s(self) -> int:
        """Seconds after which a slot is likely free: the queue ahead drained at the recent pace."""
        ahead = self.waiting + 1
        seconds = math.ceil(self._service_s * ahead / self.max_in_flight)
        return max(1, min(PARAMS.max_retry_after_s, seconds))

    def admit(self) -> Ticket:
        """Take a place in the queue, or raise the 503 at once when it is full."""
        if self.waiting + self.running >= self.max_in_flight + self.queue_size:
            what = f"({self.running} explaining, {self.waiting} waiting, queue limit {self.queue_size})"
            raise self._busy("queue_full", what, self.retry_after_s())
        now = time.monotonic()
        self.waiting += 1
        return Ticket(arrived=now, deadline=now + self.timeout_s)

    async def start(self, ticket: Ticket) -> None:
        """Wait (until the deadline) for a slot; the request then holds it until :meth:`leave`."""
        try:
            await asyncio.wait_for(self._slots.acquire(), timeout=max(0.0, ticket.remaining()))
        except TimeoutError:  # counted in kar_explain_timeouts_total by whoever answers it
            raise DeadlineExceeded("queue", time.monotonic() - ticket.arrived) from None
        self.waiting -= 1
        self.running += 1
        ticket.running = True
        ticket.started = time.monotonic()
        self.metrics.queue_wait.observe(ticket.started - ticket.arrived)

    def _busy(self, reason: str, what: str, retry: int) -> ApiError:
        """The 503 that asks the client to retry in ``retry`` s, counted under ``reason``."""
        self.metrics.rejections.labels(reason).inc()
        return ApiError(503, "busy", f"the server is busy {what}; retry in {retry} s", headers={"Retry-After": str(retry)})

    def _busy_media(self, why: str) -> ApiError:
        ahead = self.media_waiting + 1
        retry = max(1, min(PARAMS.max_retry_after_s, math.ceil(self.media_estimate_s() * ahead / self.media_in_flight)))
        return self._busy("media_full", f"with clips ({self.media_in_flight} at a time, {self.media_waiting} waiting; {why})", retry)

    def media_estimate_s(self) -> float:
        """Seconds a clip is expected to take: the longest of the last few (a mean lets a slow burst run into 504s)."""
        return max(self._media_recent) if self._media_recent else PARAMS.default_media_service_s

    async def start_media(self, ticket: Ticket) -> None:
        """Take a clip slot for the rest of the request (released by :meth:`leave`); wait for one only while the
        deadline still leaves a clip's expected time (checked again every second, as clips finish and the
        expectation moves), else raise the 503 with Retry-After."""
        if not self._media.locked():  # a free slot: taken at once, whatever the deadline
            await self._media.acquire()
            ticket.media_started = time.monotonic()
            return
        self.media_waiting += 1
        acquire = asyncio.ensure_future(self._media.acquire())  # one place in the slots' FIFO line
        try:
            while not acquire.done():
                budget = ticket.remaining() - self.media_estimate_s()
                if budget <= 0:
                    raise self._busy_media("none would free in time")
                await asyncio.wait({acquire}, timeout=min(budget, 1.0))
        except BaseException:
            self._abandon(acquire)
            raise
        finally:
            self.media_waiting -= 1
        ticket.media_started = time.monotonic()

    def _abandon(self, acquire: asyncio.Future) -> None:
        """Give up a pending acquire; a slot it got meanwhile goes back."""

        def give_back(task: asyncio.Future) -> None:
            if not task.cancelled() and task.exception() is None:
                self._media.release()

        if acquire.done():
            give_back(acquire)
        else:
            acquire.cancel()
            acquire.add_done_callback(give_back)

    @asynccontextmanager
    async def slot(self, ticket: Ticket) -> AsyncIterator[Ticket]:
        """Hold a slot for the block (:meth:`start`, then :meth:`leave`)."""
        await self.start(ticket)
        try:
            yield ticket
        finally:
            self.leave(ticket)

    def leave(self, ticket: Ticket) -> None:
        """Give the slot (or, before one was reached, the queue place) back; idempotent."""
        if ticket.released:
            return
        ticket.released = True
        if ticket.media_started is not None:
            self._media.release()
            self._media_recent.append(time.monotonic() - ticket.media_started)
        if ticket.running:
            self.running -= 1
            ticket.running = False
            self._slots.release()
            spent = time.monotonic() - (ticket.started or ticket.arrived)
            self._service_s = 0.8 * self._service_s + 0.2 * spent
        else:
            self.waiting -= 1

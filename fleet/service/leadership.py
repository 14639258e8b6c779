"""Leader election on PostgreSQL: one replica runs the scheduler, fenced by its term.

Theory of operation (decision 0021).  Any number of replicas serve the API on
one PostgreSQL database; exactly one, the leader, runs the scheduler loop,
the member watches, failover and the estimator.

* **Election.**  :class:`Leadership` ticks every ``renew`` seconds.  A
  follower tries to take the lease (:func:`fleet.store.leases.acquire`: only
  an expired one, with the term plus one); the leader extends its own
  (:func:`~fleet.store.leases.renew`).  Expiry is judged by the database's
  clock.  A follower also calls ``following()`` every round (the service
  reads the configuration again).  Winning calls ``lead(term)`` in a task of its own (restoring the
  state may take longer than a lease, and the lease must be renewed
  meanwhile); losing calls ``follow()``, which stops the loop and the
  watches at once.  A replica that stops hands its lease back, so the next
  one leads without waiting for it to expire.
* **Fencing.**  :meth:`Leadership.fence` is the first statement of every
  write transaction of the leader's loop (:meth:`fleet.store.database.
  Database.fenced`): it refuses, before the database is even asked, once the
  lease may have run out by this process's monotonic clock, and otherwise
  the database refuses a term that is over (:func:`fleet.store.leases.hold`).
  A refused write raises :class:`Fenced`, rolls its transaction back, and
  makes the replica a follower at once.
* **The inbox.**  Submissions stored by any replica go into the leader's
  inbox in their own transaction, with a ``NOTIFY``.  :class:`JobFeed`, run
  by the leader, ``LISTEN``s on a connection of its own
  (:func:`fleet.store.leases.listen`) and also looks every second (a missed
  notification, a lost connection); when the inbox holds jobs or a
  cancellation is open, it empties the inbox inside a loop iteration
  (:meth:`fleet.service.loop.SchedulerLoop.exclusive`), so that what it reads and
  what the loop knows are seen at one moment: a job is handed to the loop
  only while it is Queued in the database and unknown to the loop.

Every statement, the fencing one included, and the listening connection are
:mod:`fleet.store.leases`'s: this module imports no database library.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final, Literal

from fleet.core import snapshot
from fleet.service.loop import SchedulerLoop
from fleet.store import leases
from fleet.store.database import Database, Fenced, Session

log = logging.getLogger("fleet.service.leadership")

#: Most inbox entries taken in one transaction.
INBOX_BATCH: Final = 2000
#: Seconds between two looks at the inbox when no notification came.
POLL_SECONDS: Final = 1.0

Role = Literal["leader", "follower"]


class Leadership:
    """Elects the leader among the replicas on one database (see the module docstring)."""

    def __init__(
        self,
        db: Database,
        *,
        identity: str,
        address: str,
        lease: float,
        renew: float,
        lead: Callable[[int], Awaitable[None]],
        follow: Callable[[], Awaitable[None]],
        following: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        if not 0 < renew < lease:
            raise ValueError(f"the renewal interval ({renew} s) must be shorter than the lease")
        self.db = db
        self.identity = identity
        self.address = address
        self.lease = lease
        self.renew = renew
        self._lead = lead
        self._follow = follow
        self._following = following
        self.role: Role = "follower"
        self.term = 0
        #: the lease as last read (followers proxy to its address)
        self.seen: leases.Lease | None = None
        #: monotonic time until which this replica's lease surely runs
        self._valid_until = 0.0
        self._task: asyncio.Task[None] | None = None
        self._leading: asyncio.Task[None] | None = None
        self._change = asyncio.Lock()  # one change of role at a time
        self._stepping_down: asyncio.Task[None] | None = None
        #: terms this replica led, and how often it stepped down (for tests and logs)
        self.terms: list[int] = []
        self.step_downs = 0
        #: what stopped the last start of the loop (raised by the first round of start())
        self.failure: Exception | None = None

    @property
    def leading(self) -> bool:
        return self.role == "leader"

    # Lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Create the lease row if needed, then take part in the election.

        The first round runs here: a replica that finds the lease free returns
        leading, its loop restored and running (or raises what stopped it).
        """
        async with self.db.write() as session:
            await leases.ensure(session)
        await self._tick(time.monotonic())
        self._task = asyncio.create_task(self._run(), name="fleet-leadership")
        leading = self._leading
        if leading is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await leading
            if self.failure is not None:
                failure, self.failure = self.failure, None
                await self.stop()
                raise failure

    async def stop(self) -> None:
        """Leave the election; a leader stops leading and hands its lease back."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._stepping_down is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._stepping_down
        term, was_leading = self.term, self.leading
        await self._step_down("stopping", clean=True)
        if was_leading:
            try:
                async with self.db.write() as session:
                    await leases.release(session, self.identity, term)
                log.info("lease of term %d handed back", term)
            except Exception as e:  # it expires on its own
                log.warning("could not hand the lease back: %s", e)

    # The fence ------------------------------------------------------------------------------
    async def fence(self, session: Session) -> None:
        """Refuse the transaction unless this replica still leads (see the module docstring)."""
        if not self.leading or time.monotonic() >= self._valid_until:
            self._lost("its lease may have run out")
            raise Fenced(f"term {self.term} is over (lease not renewed in time)")
        # A leader paused inside a transaction frees the row after two leases.
        idle_ms = max(1, int(self.lease * 2000))
        if not await leases.hold(session, self.identity, self.term, idle_ms=idle_ms):
            self._lost("the database refused a write of its term")
            raise Fenced(f"term {self.term} is over: another replica leads")

    async def holds(self, session: Session) -> bool:
        """Whether this replica leads, checked as :meth:`fence` does, without raising.

        True: the transaction keeps the lease row until it ends, so it commits
        within this term (before any other replica can lead).
        """
        if not self.leading or time.monotonic() >= self._valid_until:
            return False
        idle_ms = max(1, int(self.lease * 2000))
        return await leases.hold(session, self.identity, self.term, idle_ms=idle_ms)

    def _lost(self, why: str) -> None:
        """Become a follower soon (from inside a fenced write, which must not wait for it)."""
        if self.leading and (self._stepping_down is None or self._stepping_down.done()):
            log.warning("term %d: %s; stepping down", self.term, why)
            self._stepping_down = asyncio.create_task(self._step_down(why))

    # The election ---------------------------------------------------------------------------
    async def _run(self) -> None:
        await asyncio.sleep(self.renew)  # start() ran the first round
        while True:
            started = time.monotonic()
            try:
                await self._tick(started)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("leader election: %s", e)
                if self.leading and time.monotonic() >= self._valid_until:
                    await self._step_down("the lease could not be renewed in time")
            await asyncio.sleep(max(0.0, self.renew - (time.monotonic() - started)))

    async def _tick(self, started: float) -> None:
        wait_ms = max(1, int(self.renew * 1000))
        if self.leading:
            async with self.db.write() as session:
                kept = await leases.renew(
                    session, self.identity, self.term, self.lease, wait_ms=wait_ms
                )
            if kept:
                self._valid_until = started + self.lease
            else:
                await self._step_down("another replica took the lease")
        else:
            try:
                async with self.db.write() as session:
                    term = await leases.acquire(
                        session, self.identity, self.address, self.lease, wait_ms=wait_ms
                    )
            except Exception as e:
                if not leases.lock_timed_out(e):
                    raise
                term = None  # the leader's transaction still holds it: its term runs
            if term is not None:
                await self._become_leader(term, started)
        async with self.db.read() as session:
            self.seen = await leases.current(session)
        if not self.leading and self._following is not None:
            await self._following()

    async def _become_leader(self, term: int, started: float) -> None:
        async with self._change:
            self.role, self.term = "leader", term
            self._valid_until = started + self.lease
            self.terms.append(term)
            log.info("leading the scheduler in term %d", term)
            self._leading = asyncio.create_task(self._start_leading(term), name="fleet-lead")

    async def _start_leading(self, term: int) -> None:
        try:
            await self._lead(term)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("could not start leading in term %d", term)
            self.failure = e
            self._lost(f"starting failed ({type(e).__name__})")

    async def _step_down(self, why: str, *, clean: bool = False) -> None:
        """Stop leading: at once when the term is over; ``clean`` (this replica stops
        while its lease runs): stop the loop first, so its last writes still land."""
        async with self._change:
            if not self.leading:
                return
            log.warning("term %d over (%s): following", self.term, why)
            if not clean:
                self.role = "follower"
                self._valid_until = 0.0
            self.step_downs += 1
            if self._leading is not None:
                if not self._leading.done():
                    self._leading.cancel()
                with contextlib.suppress(BaseException):
                    await self._leading
                self._leading = None
            try:
                await self._follow()
            except Exception:
                log.exception("stopping the scheduler after term %d", self.term)
            self.role = "follower"
            self._valid_until = 0.0

    def leader_address(self) -> str | None:
        """The base URL of the replica that leads, as last read (None: nobody leads now)."""
        found = self.leader()
        return None if found is None else found[0]

    def leader(self) -> tuple[str, int] | None:
        """The base URL and term of the replica that leads, as last read (None: nobody)."""
        seen = self.seen
        if self.leading:
            return self.address, self.term
        if seen is None or not seen.live or not seen.holder or seen.holder == self.identity:
            return None
        if seen.address == self.address:  # a former process here: this one takes over
            return None
        return (seen.address, seen.term) if seen.address else None


class JobFeed:
    """Hands the leader's loop what other replicas stored (see the module docstring)."""

    def __init__(self, db: Database, loop: SchedulerLoop, *, poll: float = POLL_SECONDS) -> None:
        self.db = db  # the plain database: the feed's writes go through the loop's fenced one
        self.loop = loop
        self.poll = poll
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._listener: leases.Listener | None = None
        self._posted: set[int] = set()  # cancel intents handed to the loop
        #: jobs handed to the loop (for logs and tests)
        self.handed = 0

    def told(self, intent: int) -> None:
        """The loop was handed cancellation ``intent`` already (by this replica)."""
        self._posted.add(intent)

    async def start(self) -> None:
        await self._listen()
        self._wake.set()  # the inbox may hold jobs from before
        self._task = asyncio.create_task(self._run(), name="fleet-job-feed")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._unlisten()

    async def _listen(self) -> None:
        try:
            listener = await leases.listen(self.db.url, self._notified)
        except Exception as e:  # the poll still finds everything
            log.warning("cannot LISTEN for submissions (polling every %.1f s): %s", self.poll, e)
            return
        self._listener = listener

    async def _unlisten(self) -> None:
        conn, self._listener = self._listener, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)

    def _notified(self, *_args: object) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll)
            self._wake.clear()
            try:
                if self._listener is None or self._listener.is_closed():
                    await self._unlisten()
                    await self._listen()
                if await self._pending():
                    await self.loop.exclusive(self._drain)
            except asyncio.CancelledError:
                raise
            except Fenced:
                return  # the leadership steps down
            except Exception as e:
                log.warning("reading the leader's inbox: %s", e)

    async def _pending(self) -> bool:
        """Whether the inbox holds jobs or a cancellation is new (a cheap read)."""
        async with self.db.read() as session:
            inbox = await leases.inbox_holds_jobs(session)
            cancels = await leases.open_cancels(session)
        self._posted &= {intent for intent, _ in cancels}
        fresh = [(i, key) for i, key in cancels if i not in self._posted]
        for intent, key in fresh:
            self.loop.cancel_stored(intent, key)
            self._posted.add(intent)
        return inbox

    async def _drain(self, loop: SchedulerLoop) -> None:
        """Inside a loop iteration: take the inbox, hand the loop the jobs it does not know."""
        while True:
            async with loop.db.write() as session:  # fenced
                ids = await leases.take(session, INBOX_BATCH)
                rows = await leases.queued(session, ids)
            jobs = [snapshot.job_from_plain(record, seq=i) for i, record in rows]
            new = [job for job in jobs if job.key not in loop.state.phase]
            if new:
                loop.submitted(new)
                self.handed += len(new)
            if len(ids) < INBOX_BATCH:
                return

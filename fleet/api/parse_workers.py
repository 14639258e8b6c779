"""Submissions parsed in processes of their own, beside the one that serves.

Theory of operation: reading a submission (YAML, the models, the checks
against the quota tree and the clusters: :func:`~fleet.api.submissions.parse_submission`)
is pure CPU work and the largest part of what a submission costs the
serving process, which also runs the scheduler loop and answers every other
request on one interpreter lock.  :class:`ParseWorkers` hands bodies to
``processes`` worker processes instead (``spawn``: fresh interpreters,
started at the first submission) and waits for their answers; the serving
process keeps only the database writes and the response.

* **Batches.** Bodies that arrive while the serving process is busy are sent
  together, one task per event-loop turn, so a task's fixed cost (two pipe
  writes, two thread hand-offs) is shared by every request in it.
* **The same answer.** A worker runs the same :func:`read_submission` with
  the tree, clusters, registered training runtimes and stored
  PropagationPolicies the service holds at that moment: they are pickled
  once per change (the objects the service replaces when an administrator
  or a team changes them; of the tree its shape only, ``to_spec()``, as the
  service's tree also carries the loop's usage, which a worker neither needs
  nor could rebuild) and a worker that has older ones asks for the new
  ones.  A body is answered with its jobs and the policies it stores, or its
  problem, exactly as in the serving process.
* **A worker that dies** (killed, out of memory, or one that cannot start)
  fails no request: its batch is parsed in the serving process, and so is
  everything for the next :data:`PAUSE` seconds; the first batch after that
  starts a new worker.  Bodies over the size limit are refused in the
  serving process, unread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import pickle
import time
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Final

from fleet import compiled_core
from fleet.api.problems import Problem, ProblemError
from fleet.api.submissions import (
    Parsed,
    StoredPolicies,
    SubmissionLimits,
    Submitted,
    read_submission,
)
from fleet.core.quota import QuotaTree
from fleet.manifests.kinds.base import Runtimes
from fleet.manifests.models import MemberClusterModel
from fleet.service.workers import WorkerProcesses

log = logging.getLogger("fleet.api.parse_workers")

#: Bodies sent to a worker in one task at most.
BATCH: Final = 64
#: Seconds submissions are read in the serving process after a worker died.
PAUSE: Final = 30.0


@dataclass(frozen=True, slots=True)
class _Config:
    """What submissions are checked against, pickled once per change."""

    generation: int
    pickled: bytes


class _Stale:
    """A worker's answer when it holds an older tree and clusters than the task's."""


#: The runtimes and stored policies of a parse that was given none.
_NO_RUNTIMES: Runtimes = {}
_NO_POLICIES: StoredPolicies = {}

#: What a worker answers for one body: what it holds, or the problem to answer with.
Answer = Parsed | Problem

# In a worker process: what the latest generation it was sent checks against.
_held: dict[str, Any] = {
    "generation": -1,
    "tree": None,
    "clusters": None,
    "runtimes": None,
    "policies": None,
}


def _parse_batch(
    generation: int,
    config: bytes | None,
    bodies: Sequence[tuple[bytes, SubmissionLimits]],
) -> list[Answer] | _Stale:
    """In a worker: each body's answer, against the tree and clusters of ``generation``."""
    if _held["generation"] != generation:
        if config is None:
            return _Stale()
        spec, _held["clusters"], _held["runtimes"], _held["policies"] = pickle.loads(config)
        _held["tree"] = QuotaTree.build(spec)
        _held["generation"] = generation
    tree: QuotaTree = _held["tree"]
    clusters: list[MemberClusterModel] = _held["clusters"]
    runtimes: Runtimes = _held["runtimes"]
    policies: StoredPolicies = _held["policies"]
    return [_answer(body, tree, clusters, runtimes, policies, limits) for body, limits in bodies]


def _answer(
    body: bytes,
    tree: QuotaTree,
    clusters: list[MemberClusterModel],
    runtimes: Runtimes,
    policies: StoredPolicies,
    limits: SubmissionLimits,
) -> Answer:
    """What :func:`read_submission` answers for ``body``: what it holds, or its problem."""
    try:
        return read_submission(
            body,
            tree=tree,
            clusters=clusters,
            first_seq=0,
            limits=limits,
            runtimes=runtimes,
            policies=policies,
        )
    except ProblemError as e:  # sent as its problem (the exception's args do not pickle back)
        return e.problem


@dataclass(slots=True)
class _Waiting:
    body: bytes
    limits: SubmissionLimits
    tree: QuotaTree
    clusters: list[MemberClusterModel]
    runtimes: Runtimes
    policies: StoredPolicies
    answer: asyncio.Future[Answer]


class ParseWorkers:
    """Parses submissions in ``processes`` worker processes (see the module docstring)."""

    def __init__(self, processes: int) -> None:
        self.workers = WorkerProcesses(processes)
        self._waiting: list[_Waiting] = []
        self._flushing = False
        self._sending: set[asyncio.Task[None]] = set()
        self._generations = itertools.count()
        self._config: (
            tuple[QuotaTree, list[MemberClusterModel], Runtimes, StoredPolicies, _Config] | None
        ) = None
        #: until when (time.monotonic()) bodies are read here: a worker died
        self._paused_until = float("-inf")
        #: tasks sent to the workers
        self.tasks = 0

    async def parse(
        self,
        body: bytes,
        *,
        tree: QuotaTree,
        clusters: list[MemberClusterModel],
        limits: SubmissionLimits,
        runtimes: Runtimes | None = None,
        policies: StoredPolicies | None = None,
    ) -> list[Submitted]:
        """The jobs :meth:`read` answers for ``body``."""
        found = await self.read(
            body, tree=tree, clusters=clusters, limits=limits, runtimes=runtimes, policies=policies
        )
        return found.jobs

    async def read(
        self,
        body: bytes,
        *,
        tree: QuotaTree,
        clusters: list[MemberClusterModel],
        limits: SubmissionLimits,
        runtimes: Runtimes | None = None,
        policies: StoredPolicies | None = None,
    ) -> Parsed:
        """What :func:`read_submission` answers for ``body`` (raises ProblemError likewise)."""
        runtimes = _NO_RUNTIMES if runtimes is None else runtimes
        policies = _NO_POLICIES if policies is None else policies
        if len(body) > limits.max_bytes or time.monotonic() < self._paused_until:
            return read_submission(
                body,
                tree=tree,
                clusters=clusters,
                first_seq=0,
                limits=limits,
                runtimes=runtimes,
                policies=policies,
            )
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Answer] = loop.create_future()
        self._waiting.append(_Waiting(body, limits, tree, clusters, runtimes, policies, answer))
        if not self._flushing:
            self._flushing = True
            loop.call_soon(self._flush)
        found = await answer
        if isinstance(found, Problem):
            raise ProblemError(found)
        return found

    def _flush(self) -> None:
        self._flushing = False
        waiting, self._waiting = self._waiting, []
        # One task per configuration (it changes rarely), at most BATCH bodies each.
        start = 0
        for i in range(1, len(waiting) + 1):
            if (
                i == len(waiting)
                or i - start >= BATCH
                or waiting[i].tree is not waiting[start].tree
                or waiting[i].clusters is not waiting[start].clusters
                or waiting[i].runtimes is not waiting[start].runtimes
                or waiting[i].policies is not waiting[start].policies
            ):
                task = asyncio.ensure_future(self._send(waiting[start:i]))
                self._sending.add(task)
                task.add_done_callback(self._sending.discard)
                start = i

    def _config_of(self, first: _Waiting) -> _Config:
        held = self._config
        if (
            held is None
            or held[0] is not first.tree
            or held[1] is not first.clusters
            or held[2] is not first.runtimes
            or held[3] is not first.policies
        ):
            compiled_core.picklable()
            # The tree's shape only: the service's tree also carries the loop's usage.
            pickled = pickle.dumps(
                (first.tree.to_spec(), first.clusters, dict(first.runtimes), dict(first.policies))
            )
            config = _Config(next(self._generations), pickled)
            held = self._config = (
                first.tree,
                first.clusters,
                first.runtimes,
                first.policies,
                config,
            )
        return held[4]

    async def _send(self, batch: list[_Waiting]) -> None:
        config = self._config_of(batch[0])
        bodies = [(w.body, w.limits) for w in batch]
        try:
            answers = await self._call(config.generation, None, bodies)
            if isinstance(answers, _Stale):
                answers = await self._call(config.generation, config.pickled, bodies)
            if isinstance(answers, _Stale):  # cannot happen: the task carried the config
                raise RuntimeError("a parse worker refused the configuration it was sent")
        except BrokenProcessPool:
            log.warning(
                "a submission parser process died; submissions are read here for %.0f s", PAUSE
            )
            self._paused_until = time.monotonic() + PAUSE
            answers = [
                _answer(w.body, w.tree, w.clusters, w.runtimes, w.policies, w.limits) for w in batch
            ]
        except asyncio.CancelledError:
            for w in batch:
                w.answer.cancel()
            raise
        except Exception as e:
            for w in batch:
                if not w.answer.done():
                    w.answer.set_exception(e)
            return
        for w, found in zip(batch, answers, strict=True):
            if not w.answer.done():
                w.answer.set_result(found)

    async def _call(
        self, generation: int, config: bytes | None, bodies: list[tuple[bytes, SubmissionLimits]]
    ) -> list[Answer] | _Stale:
        self.tasks += 1
        return await self.workers.call(_parse_batch, generation, config, bodies)

    def close(self) -> None:
        """Stop the worker processes now (requests waiting for them are cancelled)."""
        for task in list(self._sending):
            task.cancel()
        self.workers.close()

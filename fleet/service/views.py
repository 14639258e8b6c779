"""The publisher of the loop's view: made when read, announced to who waits.

Theory of operation: the view itself is the core's pure projection
(:func:`fleet.core.view.project`); :class:`Publisher` decides when it is
made.  A view is made when somebody reads it, not after every iteration of
the loop: read between iterations, it is made at once; read while an
iteration runs (or from another thread, such as a metrics exporter's), the
last view is returned and the iteration publishes a new one when it ends,
as it does for every iteration while somebody waits in
:meth:`Publisher.next_view`.  A replay, which reads none, makes none.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

from fleet.core.view import LoopView


class Publisher:
    """Makes and hands out the loop's views; see the module docstring."""

    def __init__(self, make: Callable[[], None]) -> None:
        #: publishes a new view (the loop's projection of its state, :meth:`publish`)
        self._make = make
        self.view = LoopView()
        #: the state changed since the view was published (it is made when read)
        self.stale = False
        #: the view was read while stale: publish it at the end of this iteration
        self.wanted = False
        #: an iteration of the loop runs (the state is not to be read)
        self.iterating = False
        self.waiting = 0  # callers of next_view waiting for the next one
        self._thread = threading.get_ident()  # the event loop's: views are made there
        self._published = asyncio.Event()  # set (and replaced) when a view is published

    def publish(self, view: LoopView) -> None:
        """Take ``view`` as the published one."""
        self.stale = self.wanted = False
        self.view = view

    def read(self) -> LoopView:
        """The view, made now when the state changed and may be read (see the module)."""
        if self.stale:
            if self.iterating or threading.get_ident() != self._thread:
                self.wanted = True
            else:
                self._make()
                self.announce()
        return self.view

    @property
    def due(self) -> bool:
        """Whether the iteration that ends should publish (somebody wants the view)."""
        return self.wanted or self.waiting > 0

    def announce(self) -> None:
        """Wake whoever waits in :meth:`next_view` (in the event loop's thread)."""
        self._published.set()
        self._published = asyncio.Event()

    async def next_view(self, after: int, timeout: float) -> LoopView:
        """The published view once its version is above ``after`` (or after ``timeout`` s)."""
        if self.read().version <= after:
            self.waiting += 1
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._published.wait(), timeout)
            finally:
                self.waiting -= 1
        return self.read()

"""Wait reasons kept from one cycle to the next, by the figures they are worded from.

A waiting job's reason is worded from a few figures: a quota block's fields
(:meth:`ReasonTexts.block`), a parked tail's block without the job's need
(:meth:`ReasonTexts.tail_texts`, then one text per need), or a queue's
``min``, its guaranteed usage and the job's request (a parked run of
non-preemptible jobs, :meth:`ReasonTexts.run_figures`).  The wording is a
function of those figures alone, so the texts are kept on the state, keyed
by every figure they are worded from, and a cycle words only the reasons
whose figures moved since some cycle last worded them.  At a deep backlog a
steady cycle parks nearly every queue's rigid jobs again, many on figures
that have not moved; worded afresh every cycle, the texts were a twelfth of
its work.

What is kept changes no decision and no text; it is dropped whole when it
grows past :data:`LIMIT` entries (figures that moved on are not looked up
again).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from fleet.core.quota import QuotaBlock
from fleet.core.resources import Resources

#: The most block texts, or tail figures, kept before they are dropped.
LIMIT: Final = 50_000

BlockFigures = tuple[str, str, int, int, int, str, bool]
TailFigures = tuple[str, str, int, int, str, bool]
RunFigures = tuple[dict[str, int], dict[str, int], dict[Resources, str]]


@dataclass(slots=True)
class ReasonTexts:
    """Worded reasons by their figures; see the module docstring."""

    #: a quota block's fields -> its reason
    blocks: dict[BlockFigures, str] = field(default_factory=dict)
    #: a parked tail's block without its request -> its texts by the job's need
    tails: dict[TailFigures, dict[int, str]] = field(default_factory=dict)
    #: queue -> the ``min`` and guaranteed usage (copies) its runs of rigid jobs
    #: were last parked on, and their texts by request
    runs: dict[str, RunFigures] = field(default_factory=dict)

    def block(self, block: QuotaBlock) -> str:
        """``block.reason``, worded once for its figures."""
        key = (
            block.node,
            block.resource,
            block.used,
            block.request,
            block.limit,
            block.kind,
            block.leaf,
        )
        known = self.blocks.get(key)
        if known is None:
            known = self.blocks[key] = block.reason
        return known

    def tail_texts(self, block: QuotaBlock) -> dict[int, str]:
        """The texts by need of the tails parked on ``block``'s figures (its
        request aside), to be filled in as they are read."""
        figures = (block.node, block.resource, block.used, block.limit, block.kind, block.leaf)
        texts = self.tails.get(figures)
        if texts is None:
            texts = self.tails[figures] = {}
        return texts

    def run_figures(
        self, queue: str, floor: dict[str, int], guaranteed: dict[str, int]
    ) -> RunFigures:
        """Copies of ``queue``'s ``min`` and guaranteed usage now and the texts by
        request of the rigid runs parked on them: the last ones while they hold."""
        known = self.runs.get(queue)
        if known is None or known[1] != guaranteed or known[0] != floor:
            known = self.runs[queue] = (dict(floor), dict(guaranteed), {})
        return known

    def trim(self, limit: int = LIMIT) -> None:
        """Drop what is kept once it has grown past ``limit`` entries."""
        if len(self.blocks) > limit:
            self.blocks.clear()
        if len(self.tails) > limit:
            self.tails.clear()
        if len(self.runs) > limit:
            self.runs.clear()

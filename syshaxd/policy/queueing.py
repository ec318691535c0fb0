"""Which waiting request the conductor offers capacity to next.

``fifo`` (sysHAX, and every policy but ``adaptive``): the oldest first. ``deadline``
(``adaptive``): the oldest request that can still meet its TTFT target first; a request
whose wait has already passed the target cannot count towards goodput wherever it runs,
so it yields to those that still can, and when the queue is full the oldest such late
request makes room for a new arrival (it is refused, as a full queue refuses). All
requests share one TTFT target, so earliest-deadline-first among the ones on time is
arrival order. Pure functions of arrival times: the daemon's admission queue and the
simulator's virtual conductor both use them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

QueueOrder = Literal["fifo", "deadline"]

#: The queue order each policy is designed for (``fifo`` for any other name).
ORDERS: dict[str, QueueOrder] = {"adaptive": "deadline"}


def queue_order(policy: str) -> QueueOrder:
    """The queue order of a policy name."""
    return ORDERS.get(policy, "fifo")


def on_time(arrived: float, now: float, ttft_target: float) -> bool:
    """Whether a request that arrived at ``arrived`` can still get its first token in time."""
    return now - arrived < ttft_target


def next_index(arrivals: Sequence[float], now: float, ttft_target: float, order: QueueOrder) -> int:
    """Index of the waiter to offer capacity to next (``arrivals`` in queue order, non-empty)."""
    if order == "deadline":
        for i, arrived in enumerate(arrivals):
            if on_time(arrived, now, ttft_target):
                return i
    return 0


def evict_index(arrivals: Sequence[float], now: float, ttft_target: float, order: QueueOrder) -> int | None:
    """Index of the waiter a full queue refuses to make room for a new arrival, or None (refuse the new one)."""
    if order == "deadline":
        for i, arrived in enumerate(arrivals):
            if not on_time(arrived, now, ttft_target):
                return i
    return None

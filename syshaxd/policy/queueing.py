"""Which order each policy wants its waiting requests offered capacity in.

``fifo`` (sysHAX, and every policy but ``adaptive``): the oldest first. ``deadline``
(``adaptive``): the oldest request that can still meet its TTFT target first; a request
whose wait has already passed the target cannot count towards goodput wherever it runs, so
it yields to those that still can, and a full line refuses the oldest such late request
rather than a new arrival. The scheduling core's waiting line carries the order out
(:mod:`syshaxd.core.line`).
"""

from __future__ import annotations

from typing import Literal

QueueOrder = Literal["fifo", "deadline"]

#: The queue order each policy is designed for (``fifo`` for any other name).
ORDERS: dict[str, QueueOrder] = {"adaptive": "deadline"}


def queue_order(policy: str) -> QueueOrder:
    """The queue order of a policy name."""
    return ORDERS.get(policy, "fifo")

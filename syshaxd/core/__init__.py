"""The scheduling core: the one place admission, placement, the books and release are decided.

No I/O and no clock of its own: time comes in as an argument and decisions come out as
values. The daemon's conductor drives it from real events (:mod:`syshaxd.conductor`), the
simulator's virtual-time runner from virtual engines (:mod:`sim.runner`); a parity test
replays one history through both and compares the decisions request by request.
"""

from __future__ import annotations

from syshaxd.core.ledger import EngineBook, Ledger
from syshaxd.core.line import WaitingLine
from syshaxd.core.place import fits, other_device, pick, place
from syshaxd.core.scheduler import WAITED_MIN, Inputs, Scheduler, down_message
from syshaxd.core.ticket import Outcome, Placement, Refusal, Ticket, Wake

__all__ = [
    "WAITED_MIN", "EngineBook", "Inputs", "Ledger", "Outcome", "Placement", "Refusal", "Scheduler", "Ticket",
    "WaitingLine", "Wake", "down_message", "fits", "other_device", "pick", "place",
]  # fmt: skip

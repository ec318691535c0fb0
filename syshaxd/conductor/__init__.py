"""The conductor: admission, the flight (a request that owns its books), dispatch, splits, stats.

The service builds a :class:`Conductor` (routing and the books) and a :class:`Dispatcher`
(answers: pass-through or a prefill/decode split) and hands the dispatcher to the API.
"""

from __future__ import annotations

from syshaxd.conductor.answer import Answer
from syshaxd.conductor.conductor import Conductor, Route
from syshaxd.conductor.dispatch import Dispatcher
from syshaxd.conductor.flight import Flight

__all__ = ["Answer", "Conductor", "Dispatcher", "Flight", "Route"]

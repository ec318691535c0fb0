"""The conductor: admission, the flight (a request that owns its books), dispatch, splits, stats.

The service builds a :class:`Conductor` (routing and the books) and a :class:`Dispatcher`
(answers: pass-through or a prefill/decode split) and hands the dispatcher to the API, which
gives it a :class:`Reply` per request to write the answer on.
"""

from __future__ import annotations

from syshaxd.conductor.boxload import BoxLoad, LoadFormat, get_load_body
from syshaxd.conductor.conductor import Conductor, Route
from syshaxd.conductor.dispatch import Dispatcher
from syshaxd.conductor.flight import BookedFlight, Flight
from syshaxd.conductor.ledger import LedgerSession
from syshaxd.conductor.relay import Relay, end_to_end
from syshaxd.conductor.remote import RemoteConductor, RemoteFlight
from syshaxd.conductor.reply import (
           JSON,
           Headers,
           Pausable,
           Reply,
           request_id_header,
           send_error,
           send_whole,
)
from syshaxd.conductor.tracing import Tracing

__all__ = ["JSON", "BookedFlight", "BoxLoad", "LoadFormat", "get_load_body", "Conductor", "Dispatcher", "Flight", "LedgerSession", "RemoteConductor",
           "RemoteFlight", "Headers", "Pausable", "Relay", "Reply", "Route", "end_to_end", "request_id_header",
           "send_error", "send_whole", "Tracing"]

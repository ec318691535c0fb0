"""A request's service level: its class from the live table, and what its headers override.

The API reads what a request asks (:class:`~syshaxd.request.ServiceAsk`: ``x-syshax-class``,
``x-slo-ttft-ms``, ``x-slo-tpot-ms``, the body's ``priority``); the conductor resolves it here
against ``service`` as it is now (the table changes at runtime), so a worker process and the
daemon classify the same way: the daemon does it for both.
"""

from __future__ import annotations

from dataclasses import replace

from syshaxd.config import RequestFields, ServiceLevels, classify
from syshaxd.errors import ApiError
from syshaxd.request import ParsedRequest
from syshaxd.routing import ServiceLevel


def level_of(service: ServiceLevels, levels: dict[str, ServiceLevel], parsed: ParsedRequest) -> ServiceLevel:
    """The level ``parsed`` runs at: the class it names, else the first rule's that matches, else
    the default; its own targets and priority, where it gave them, over the class's.

    Raises:
        ApiError: 400 for a class the table does not have.
    """
    ask = parsed.ask
    name = ask.class_name
    if name is None:
        name = classify(service, RequestFields(parsed.model, parsed.max_tokens, parsed.stream, parsed.messages,
                                               parsed.temperature, parsed.api_key_name))
    level = levels.get(name)
    if level is None:
        raise ApiError(400, f"x-syshax-class {name!r} is not a service class here; the classes are "
                       f"{', '.join(sorted(levels))}", param="x-syshax-class", code="unknown_service_class")
    if ask.ttft_ms is not None:
        level = replace(level, ttft=ask.ttft_ms / 1000)
    if ask.tpot_ms is not None:
        level = replace(level, tpot=ask.tpot_ms / 1000, deadline=None)
    if ask.priority is not None:
        level = replace(level, priority=ask.priority)
    return level

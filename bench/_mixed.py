"""Mixed traffic: an interactive stream and a batch stream in one workload, each request in its class.

- **interactive**: the Azure 2023 conversation trace (a seeded window, its own gaps scaled),
  in the shipped ``interactive`` class: the decider's targets (the benchmark's ``--ttft`` and
  ``--tpot``), priority 0.
- **batch**: arXiv summarisation lengths (long prompts, short answers; Sarathi-Serve's
  stats) with seeded Poisson arrivals, in the shipped ``batch`` class: first token within
  60 s, 1 s per token after it, priority 1 (``syshaxd.config.classes``).

``mixed-20`` and ``mixed-50`` carry 20% and 50% of their requests in the batch class; both
streams span the same window, so at an offered rate R the interactive stream arrives at
``(1 - share) R`` and the batch stream at ``share R``. ``mixed-50/batch`` (or
``/interactive``) is one class's stream alone, at the whole offered rate: the benchmark
measures each device alone per class with it.
"""

from __future__ import annotations

from dataclasses import replace

from bench._workloads import Request, Source, requests_at
from syshaxd.config.classes import ServiceLevels
from syshaxd.routing import ServiceLevel

#: Mixed workloads and their batch share of requests.
MIXED: dict[str, float] = {"mixed-20": 0.2, "mixed-50": 0.5}
CLASSES: tuple[str, ...] = ("interactive", "batch")
#: Added to the run's seed for the batch stream's draw, so it is not the interactive window's.
BATCH_SEED = 7919


def is_mixed(name: str) -> bool:
    """Whether ``name`` is a mixed workload or one class's stream of one."""
    base, _, only = name.partition("/")
    return base in MIXED and only in ("", *CLASSES)


def levels() -> dict[str, ServiceLevel]:
    """The classes of the mixed workloads, as the shipped class table defines them."""
    table = ServiceLevels().levels()
    return {name: table[name] for name in CLASSES}


def share(name: str) -> float:
    """The batch share of requests of a mixed workload."""
    return MIXED[name.partition("/")[0]]


def mixed_requests(name: str, interactive: Source, batch: Source, rate: float, count: int, seed: int) -> list[Request]:
    """``count`` requests of mixed workload ``name`` offered at ``rate`` requests/s, in arrival order."""
    base, _, only = name.partition("/")
    lv = levels()
    if only:
        source, offset = (interactive, 0) if only == "interactive" else (batch, BATCH_SEED)
        return [replace(r, level=lv[only]) for r in requests_at(source, rate, count, seed + offset)]
    batch_share = MIXED[base]
    n_batch = round(count * batch_share)
    n_interactive = count - n_batch
    out = [replace(r, level=lv["interactive"])
           for r in requests_at(interactive, rate * (1 - batch_share), n_interactive, seed)] if n_interactive else []
    if n_batch:
        out += [replace(r, level=lv["batch"]) for r in requests_at(batch, rate * batch_share, n_batch, seed + BATCH_SEED)]
    return sorted(out, key=lambda r: r.arrival)

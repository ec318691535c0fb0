"""``syshax advise``: what the recorded traffic would have met under each policy and setting.

The daemon records its finished requests (``GET /v1/requests``). Advise turns that window
into a trace, each request in its service class at its own targets, replays it through the
virtual-time runner (:mod:`sim.runner`, the daemon's scheduling core and policies) on the
engines' profiles under gpu-only, classic and adaptive with a small grid of batch limits and
auto-PD on/off (with several classes also gpu-priority and the CPU for some classes only),
checks its prediction for the current setting against what really happened, recommends one
setting and says which class the CPU should serve (see ``docs/advise.md``).

Modules: :mod:`~sim.advise.levels` (the daemon's class table), :mod:`~sim.advise.window`
(records to trace, measuring a window), :mod:`~sim.advise.options` (the grid),
:mod:`~sim.advise.predict` (one replay), :mod:`~sim.advise.check` (the self-check),
:mod:`~sim.advise.choose` (ranking, recommendation, the advice), :mod:`~sim.advise.verdict`
(which class the CPU serves), :mod:`~sim.advise.flow` (the steps in order),
:mod:`~sim.advise.daemon` (the control socket), :mod:`~sim.advise.table` (tables) and
:mod:`~sim.advise.cli`.
"""

"""``syshax advise``: what the recorded traffic would have met under each policy and setting.

The daemon records its finished requests (``GET /v1/requests``). Advise turns that window
into a trace, replays it through the virtual-time runner (:mod:`sim.runner`, the policy
functions the daemon calls) on the engines' profiles under gpu-only, classic and adaptive
with a small grid of batch limits and auto-PD on/off, checks its prediction for the current
setting against what really happened, and recommends one setting (see ``docs/advise.md``).

Modules: :mod:`~sim.advise.window` (records to trace, measuring a window),
:mod:`~sim.advise.options` (the grid), :mod:`~sim.advise.predict` (one replay),
:mod:`~sim.advise.choose` (error, recommendation, the advice), :mod:`~sim.advise.daemon`
(the control socket), :mod:`~sim.advise.table` (tables) and :mod:`~sim.advise.cli`.
"""

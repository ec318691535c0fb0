"""``syshax demo``: simulated engines, syshaxd, a replayed workload and the console, in one command.

Modules: :mod:`~demo.workload` (the request mix), :mod:`~demo.procs`
(child processes that never outlive the demo), :mod:`~demo.stack` (engines plus
daemon), :mod:`~demo.load` (the open-loop client), :mod:`~demo.status`
(the headless status line and the summary), :mod:`~demo.run` (putting it together).
"""

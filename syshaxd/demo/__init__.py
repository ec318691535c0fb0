"""``syshax demo``: simulated engines, syshaxd, a replayed workload and the console, in one command.

Modules: :mod:`~syshaxd.demo.workload` (the request mix), :mod:`~syshaxd.demo.procs`
(child processes that never outlive the demo), :mod:`~syshaxd.demo.stack` (engines plus
daemon), :mod:`~syshaxd.demo.load` (the open-loop client), :mod:`~syshaxd.demo.status`
(the headless status line and the summary), :mod:`~syshaxd.demo.run` (putting it together).
"""

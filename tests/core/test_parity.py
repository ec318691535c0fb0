"""One history, two drivers of the scheduling core, the same decisions request by request.

The script (:mod:`tests.core.script`) is played to a real syshaxd over real sockets in
front of scripted engines (:mod:`tests.core.daemon_side`) and replayed by the virtual-time
runner with scripted engines of the same script (:mod:`sim.scripted`). Both see identical
inputs -- the same arrivals in the same order, the same engine events, the same scrapes, the
same configuration changes -- so every request must end the same way in both: placed on the
same engines in the same mode, after waiting or not, or refused with the same outcome.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from sim.profile import load_profile
from sim.runner import Change, EngineSpec, RunOptions, run
from sim.scripted import ScriptedEngine
from syshaxd.config import Config
from syshaxd.config.runtime import limits_of
from syshaxd.schema import RequestRecordModel
from syshaxd.snapshot import EngineState, EngineView
from tests.core.daemon_side import Player, daemon_config, start_daemon
from tests.core.engines import ScriptedEngines
from tests.core.script import ENGINES, SHED_BURST, STEP, Script, make_script
from tests.plugins.ports import free_port, stop_processes

SEED = 7
REQUESTS = 520
TINY = load_profile("tiny")
SPECS = [EngineSpec(name, "gpu" if name.startswith("gpu") else "cpu", TINY) for name in ENGINES]

#: How one request ended: (outcome, mode, engines, waited in line, why refused).
Fate = tuple[str, str, str, bool, str]


@dataclass(frozen=True)
class Played:
    """The script, the daemon's config, and what the daemon recorded of each request."""

    script: Script
    config: dict[str, Any]
    records: dict[str, RequestRecordModel]


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Played]:
    script = make_script(SEED, REQUESTS)
    engines = ScriptedEngines(list(ENGINES))
    engines.start()
    tmp: Path = tmp_path_factory.mktemp("parity")
    api_port = free_port()
    config = daemon_config(engines.ports, api_port, REQUESTS)
    proc, socket_path = start_daemon(tmp, config)
    player = Player(engines, f"http://127.0.0.1:{api_port}", socket_path)
    try:
        player._wait(lambda s: len(s.engines) == 3 and all(e.state == "up" for e in s.engines), "every engine up")
        player.play(script)
        player._wait(lambda s: sum(s.conductor.outcomes.values()) == REQUESTS, "every request finished")
        records = player.records()
    finally:
        player.close()
        stop_processes([proc])
        engines.stop()
    yield Played(script, config, records)


def daemon_fates(records: dict[str, RequestRecordModel]) -> dict[int, Fate]:
    """Each request's fate in the daemon's records."""
    fates = {}
    for rid, record in records.items():
        d = record.decision
        fates[int(rid[1:])] = (record.outcome, d.mode if d else "", d.engine or "" if d else "",
                               d is not None and d.held is not None, record.refused or "")
    return fates


class Blind(ScriptedEngine):
    """The old runner's fault, planted: it takes every engine as usable, whatever its scrapes say."""

    def view(self) -> EngineView:
        return replace(super().view(), state=EngineState.UP)


def runner_fates(played: Played, engine: type[ScriptedEngine] = ScriptedEngine) -> dict[int, Fate]:
    """Each request's fate when the runner replays the same script."""
    config = Config.model_validate(played.config)
    limits = limits_of(config.decider, config.services.gpu.handoff)
    changes, current = [], limits
    for step in played.script.sets:
        current = replace(current, **{key.split(".", 1)[1]: value for key, value in step.keys.items()})
        changes.append(Change(step.at, current))
    options = RunOptions(scrape_interval=STEP, max_queue=config.system.max_queue_size,
                         timeout=config.system.request_timeout, handoff=config.services.gpu.handoff,
                         startup_check=False)
    engines = [engine(spec, played.script.actions) for spec in SPECS]
    result = run(played.script.requests, engines, config.decider.policy, limits, options, changes=changes)
    return {r.index: (r.outcome, r.mode, r.engines, r.held, r.refusal) for r in result.requests}


def _differences(daemon: dict[int, Fate], runner: dict[int, Fate]) -> list[str]:
    return [f"r{i}: daemon {daemon.get(i)}, runner {runner.get(i)}"
            for i in sorted(set(daemon) | set(runner)) if daemon.get(i) != runner.get(i)]


def test_the_daemon_and_the_runner_decide_alike_request_by_request(played: Played) -> None:
    daemon, runner = daemon_fates(played.records), runner_fates(played)
    assert len(daemon) == len(runner) == REQUESTS
    differences = _differences(daemon, runner)
    assert not differences, f"{len(differences)} requests differ; the first:\n  " + "\n  ".join(differences[:10])
    # The history is worth comparing: it holds every kind of decision the issue names.
    kinds = Counter((mode, engines.split("+")[0][:3] if mode == "whole" else "split", held)
                    for outcome, mode, engines, held, _ in daemon.values() if outcome == "ok")
    assert kinds[("whole", "gpu", False)] > 50 and kinds[("whole", "cpu", False)] > 20
    assert kinds[("pd_split", "split", False)] > 10
    assert sum(n for (mode, _, held), n in kinds.items() if held) > 50
    assert sum(f[0] == "rejected" for f in daemon.values()) > 5  # the line overflowed
    # Sheddable requests gave up their GPU slots before their first token, then the line refused.
    shed = [i for i, f in daemon.items() if f[4] == "shed" and f[2] == "gpu0"]
    assert len(shed) == SHED_BURST
    assert any(f[4] == "queue_full" and i > max(shed) for i, f in daemon.items())
    assert any("cpu1" in f[2] for f in daemon.values())  # the engine that goes down served before and after


def test_the_comparison_sees_a_runner_that_ignores_an_engine_being_down(played: Played) -> None:
    # The divergence the two drivers once had, planted in the runner: the comparison must fail.
    differences = _differences(daemon_fates(played.records), runner_fates(played, Blind))
    assert differences, "a runner blind to engine states went unnoticed"
    assert any("cpu1" in line for line in differences[:3]), differences[:3]

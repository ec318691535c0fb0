"""The advice on a recorded window, without I/O: self-check, replays, choice, which class the CPU serves.

The steps, in order: the current setting is replayed first and compared with what happened
(:mod:`sim.advise.check`); when that check fails advise recommends nothing (unless forced);
else every option of the grid is replayed (:mod:`sim.advise.options`), with more than one
service class also the best settings with the CPU for some classes only
(:func:`sim.advise.verdict.variants`), one is chosen (:mod:`sim.advise.choose`) and the
verdict says which class the CPU should serve (:func:`sim.advise.verdict.verdict`).
``syshax advise`` (:mod:`sim.advise.cli`) reads the window and the daemon's settings and
shows or applies what comes out; a replay is handed in, so the command can show progress.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sim.advise import check, choose, options, verdict, window
from sim.advise.levels import ClassTable
from sim.advise.predict import Prediction
from syshaxd.routing import Limits
from syshaxd.schema import AdviceModel

__all__ = ["Advised", "Case", "advise", "basis", "refusal"]

#: Replays settings on the window (:func:`sim.advise.predict.predict` for each).
Replay = Callable[[Sequence[options.Setting]], list[Prediction]]


@dataclass(frozen=True)
class Case:
    """What the advice is on: the window, the daemon's classes, its setting, the replay's profiles."""

    win: window.Window
    classes: ClassTable
    base: Limits  # the decider's limits the window ran under (its targets the decider's)
    current: options.Setting
    gpu_slots: int  # sequences the GPU engine runs at once
    profiles: dict[str, str] = field(default_factory=dict)  # device -> profile used
    misfits: list[str] = field(default_factory=list)  # why a profile is not of its engine


@dataclass(frozen=True)
class Advised:
    """The advice, and the current setting's replay beside what happened (the self-check)."""

    advice: AdviceModel
    mine: window.Measured
    actual: window.Measured


def refusal(actual: window.Measured, mine: window.Measured, misfits: list[str], bounds: check.Bounds) -> str | None:
    """Why advise recommends nothing, in one sentence, or None (see :mod:`sim.advise.check`)."""
    if misfits:
        return (f"advise recommends nothing: the profiles are not of these engines ({'; '.join(misfits)}), so "
                "its replay says nothing about them: calibrate each engine (`syshax calibrate`) and pass its file.")
    thin = check.window_problem(actual, bounds)
    if thin is not None:
        return f"advise recommends nothing: {thin}."
    over = check.over_bound(mine, actual, bounds.max_error)
    if over:
        return (f"advise recommends nothing: its replay of the current setting misses what happened by more than "
                f"its {bounds.max_error:.0%} bound ({', '.join(over)}), so its predictions for other settings "
                "cannot be trusted either (calibrate the engines on a quiet machine, or record a calmer window).")
    return None


def basis(mine: window.Measured, actual: window.Measured) -> str:
    """What the advice stands on: the self-check's worst error and the window."""
    judged = check.judged(mine, actual)
    worst = max((abs(v) for v in judged.values()), default=0.0)
    return (f"its replay of the current setting is within {worst:.0%} of what happened on {actual.requests} "
            f"requests over {actual.span:,.0f} s")


def _options(case: Case, first: Prediction, replay: Replay, span: float, error: dict[str, float]) -> list[Prediction]:
    """The grid replayed (the current setting's replay reused), then the CPU-for-some-classes
    variants of the grid's pick and of each policy's best."""
    current = case.current
    settings = options.grid(current, case.base, case.gpu_slots, len(case.win.classes))
    rest = iter(replay([s for s in settings if s != current]))
    predictions = [first if s == current else next(rest) for s in settings]
    if len(case.win.classes) < 2:
        return predictions
    pick = choose.choose(predictions, current, span, error, classes=case.win.classes).index
    return predictions + replay(verdict.variants(predictions, current, list(case.win.classes),
                                                 case.classes.allowed(), [predictions[pick].setting]))


def advise(case: Case, bounds: check.Bounds, replay: Replay, *, force: bool = False,
           warn: Callable[[str], None] | None = None) -> Advised:
    """The advice on ``case.win`` (see the module docstring); ``warn`` hears a forced refusal."""
    win, base, current = case.win, case.base, case.current
    actual = window.measure(win.outcomes, base.ttft_target, base.tpot_target)
    first = replay([current])[0]
    mine = first.measured
    current_error = check.errors(mine, actual)
    refused = refusal(actual, mine, case.misfits, bounds)
    if refused is not None and force and warn is not None:
        warn(f"--force: advising although {refused.removeprefix('advise recommends nothing: ')}")
    predictions, choice, served, sentence = [first], None, None, ""
    if refused is None or force:
        predictions = _options(case, first, replay, actual.span, current_error)
        choice = choose.choose(predictions, current, actual.span, current_error, basis(mine, actual), case.gpu_slots,
                               win.classes)
        served, sentence = verdict.verdict(predictions, choice, win.classes, current, actual.span, current_error)
    about = choose.Classes(case.classes.raw, win.classes,
                           window.measure_classes(win.outcomes, base.ttft_target, base.tpot_target), served, sentence)
    advice = choose.advice(predictions, current, actual, choice, case.profiles, current_error, refused=refused,
                           error_bound=bounds.max_error, forced=refused is not None and force,
                           gpu_slots=case.gpu_slots, classes=about)
    return Advised(advice, mine, actual)

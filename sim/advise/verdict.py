"""Which service class the CPU should serve on this box, said in one sentence from the replays.

With more than one class in the window, advise replays, besides the grid, the best setting of
each policy that uses the CPU with the CPU allowed for only some of the window's classes
(:func:`variants`, of the grid's pick too: each class alone, all but each, and all of them
when the table keeps one off now; the ``cpu`` flag of ``service.classes``, which every policy honours). The ranking
(:mod:`sim.advise.choose`) then picks among all of them. Under the recommended option the CPU
serves a class when at least :data:`SERVES` of its completed requests ran there, whole or
split; the verdict (:func:`verdict`) names those the option cannot do without: kept off the
CPU (the same setting with the class's flag false, or the GPU alone), its goodput falls by
more than advise's own error. When the CPU adds as much whichever class it serves, it names
the class that can wait most (the highest priority number). A class that goes to the CPU
without mattering is named as such. The sentence gives each class's figures against its own targets, what the GPU keeps,
and the gain over the best setting on the GPU alone; when the CPU should serve no class, why:
the best setting on the GPU alone and, class by class, the best that put the class on the
CPU. With one class in the window, it says so first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from sim.advise.choose import Choice, by_priority, gpu_alone, gpu_name, margin
from sim.advise.options import Setting
from sim.advise.predict import Prediction
from syshaxd.schema import AdviceClass, AdviceClassTargets, duration

__all__ = ["SERVES", "served", "variants", "verdict"]

#: A class the CPU serves under an option: at least this share of its completed requests ran
#: there (whole, or decoded there after a GPU prefill), and at least one request.
SERVES = 0.05
#: The CPU-using policies whose best setting is replayed with the CPU for some classes only.
_POLICIES = ("classic", "adaptive")


def _best_of(predictions: Sequence[Prediction], policy: str, current: Setting) -> Setting | None:
    mine = [p for p in predictions if p.setting.policy == policy and p.setting.uses_cpu
            and p.setting.cpu_flags is None]
    if not mine:
        return None
    top = max(p.measured.goodput for p in mine)
    return min((p.setting for p in mine if p.measured.goodput == top), key=lambda s: s.simplicity(current))


def variants(predictions: Sequence[Prediction], current: Setting, names: Sequence[str],
             allowed: frozenset[str], also: Sequence[Setting] = ()) -> list[Setting]:
    """The best setting of each CPU-using policy, and the settings ``also`` (the grid's pick),
    with the CPU for some of the window's classes only.

    Args:
        names: the window's classes; allowed: the classes the table lets on the CPU now (a
            class of the table outside the window keeps its flag).
    """
    if len(names) < 2:
        return []
    window = frozenset(names)
    subsets = {frozenset({n}) for n in names} | {window - {n} for n in names} | {window}
    now = allowed & window
    out: list[Setting] = []
    bases = [_best_of(predictions, policy, current) for policy in dict.fromkeys((*_POLICIES, current.policy))]
    for base in dict.fromkeys(b for b in (*also, *bases) if b is not None and b.uses_cpu and b.cpu_flags is None):
        for chosen in sorted(subsets - {now}, key=lambda s: (len(s), sorted(s))):
            out.append(replace(base, cpu_flags=tuple((n, n in chosen) for n in sorted(window))))
    return out


def served(option: Prediction, name: str) -> float:
    """The share of class ``name``'s completed requests the CPU served under ``option`` when it
    counts as serving the class (:data:`SERVES`), else 0."""
    c = option.classes.get(name)
    if c is None or not c.completed or not option.setting.uses_cpu:
        return 0.0
    share = c.cpu_share + c.split_share
    return share if share * c.completed >= max(1.0, SERVES * c.completed) - 1e-9 else 0.0


def _and(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _target(t: AdviceClassTargets | None) -> str:
    """`` of 60 s``: the class's TTFT target, or nothing when it has none of its own."""
    if t is None or t.ttft is None:
        return ""
    return f" of {t.ttft:g} s" if t.ttft >= 1 and t.ttft == round(t.ttft, 1) else f" of {duration(t.ttft)}"


def _met(name: str, c: AdviceClass, t: AdviceClassTargets | None) -> str:
    return f"{name} meets its targets on {c.met} of {c.requests} requests (TTFT p99 {duration(c.ttft_p99)}{_target(t)})"


def _gain(mine: float, gpu: float) -> str:
    return f"{(mine - gpu) / gpu:+.0%}" if gpu > 0 else f"+{mine:.2f} requests/s"


def _why_none(predictions: Sequence[Prediction], g: Prediction, names: Sequence[str],
              targets: Mapping[str, AdviceClassTargets]) -> str:
    """Why the CPU should serve no class: the GPU alone's figure, and each class's best on the CPU."""
    each = []
    for name in names:
        on = [p for p in predictions if served(p, name) > 0]
        if not on:
            each.append(f"no replayed setting put {name} on it")
            continue
        q = max(on, key=lambda p: p.measured.goodput)
        c = q.classes[name]
        each.append(f"with {name} on it, at best {q.measured.goodput:.2f} requests/s ({c.met} of {c.requests} {name} "
                    f"requests within their targets, TTFT p99 {duration(c.ttft_p99)}{_target(targets.get(name))})")
    return (f"{gpu_name(g.setting).split(' (')[0]} on the GPU alone serves {g.measured.goodput:.2f} requests/s "
            f"within their targets, and no setting that uses the CPU does better by more than advise's own error: "
            f"{'; '.join(each)}")


def _allowed(option: Prediction, names: Sequence[str], targets: Mapping[str, AdviceClassTargets]) -> set[str]:
    """The window's classes ``option`` lets the CPU serve."""
    out = set()
    for n in names:
        flag = option.setting.cpu_allows(n)
        if flag if flag is not None else (targets[n].cpu if n in targets else True):
            out.add(n)
    return out


def _needed(predictions: Sequence[Prediction], pick: Prediction, g: Prediction, there: Sequence[str],
            targets: Mapping[str, AdviceClassTargets], span: float, error: Mapping[str, float]) -> list[str]:
    """The classes of ``there`` the recommended option loses goodput without: kept off the CPU
    (the same setting with its flag false, or the GPU alone when it is the last one), it falls
    by more than advise's own error. A class whose variant was not replayed counts as needed."""
    names = list(targets)
    plain = replace(pick.setting, cpu_flags=None)
    allowed = _allowed(pick, names, targets)
    by_setting = {p.setting: p for p in predictions}
    out = []
    for name in there:
        rest = allowed - {name}
        without = by_setting.get(replace(plain, cpu_flags=tuple((n, n in rest) for n in sorted(names)))) if rest \
            else g
        if without is None or pick.measured.goodput - without.measured.goodput > margin(
                pick.measured.goodput, span, error):
            out.append(name)
    return out


def verdict(predictions: Sequence[Prediction], choice: Choice, targets: Mapping[str, AdviceClassTargets],
            current: Setting, span: float = 0.0, error: Mapping[str, float] | None = None) -> tuple[list[str], str]:
    """The classes the CPU should serve (by priority, empty for none) and the sentence that says so.

    Args:
        span: the window's length, error: the self-check's errors (what counts as a tie).
    """
    names = by_priority(targets)
    pick = predictions[choice.index]
    g = pick if not choice.cpu_helps else predictions[gpu_alone(predictions, current)]
    there = [n for n in names if served(pick, n) > 0]
    if not there:
        why = _why_none(predictions, g, names, targets)
        if len(names) == 1:
            return [], f"All recorded traffic is {names[0]}, and the CPU should serve none of it here: {why}."
        return [], f"The CPU should serve no class here: {why}."
    needed = _needed(predictions, pick, g, there, targets, span, error or {})
    # The CPU adds goodput whichever class it serves: the class that can wait most is the one.
    serve = needed or [max(there, key=lambda n: (targets[n].priority, n))]
    others = [n for n in names if n not in serve]
    either = "" if needed or not others else (f" (it adds as much serving {_and(others)} instead, and {serve[0]} is "
                                              f"the class that can wait)")
    gname = gpu_name(g.setting).split(" (")[0]
    total = (f"{pick.measured.goodput:.2f} requests/s within their targets in all, "
             f"{_gain(pick.measured.goodput, g.measured.goodput)} over {gname}, the best setting on the GPU alone")
    if len(names) == 1:
        n = names[0]
        return serve, (f"All recorded traffic is {n}: serve it on the CPU too ({served(pick, n):.0%} of it ran there, "
                       f"whole or split, in the replay of the recommended setting), where "
                       f"{_met(n, pick.classes[n], targets.get(n))}: {total}.")
    on = "; ".join(f"{served(pick, n):.0%} of {n} runs there (whole or split) and "
                   f"{_met(n, pick.classes[n], targets.get(n)).removeprefix(n + ' ')}" for n in serve)
    extra = [n for n in there if n not in serve]
    if extra:
        on += (f"; {_and(extra)} also {'runs' if len(extra) == 1 else 'run'} there ("
               + ", ".join(f"{served(pick, n):.0%} of {n}" for n in extra)
               + "), which moves goodput by less than advise's own error")
    rest = [n for n in names if n not in there]
    left = ""
    if rest:
        kept = ", ".join(f"{pick.classes[n].met} of {pick.classes[n].requests} {n} requests" for n in rest)
        left = f", and the GPU is left to {_and(rest)} ({kept} within their targets)"
    off = [n for n in names if pick.setting.cpu_allows(n) is False]
    keep = f"; keep {_and(off)} off the CPU (cpu: false in service.classes)" if off else ""
    return serve, f"Serve {_and(serve)} on the CPU{either}: {on}{left}: {total}{keep}."

"""The settings advise replays: each policy over a small grid of batch limits and auto-PD on/off.

A :class:`Setting` is what ``PATCH /v1/config`` would change: the policy and, for the
policies that use the CPU, the GPU and CPU batch limits and ``auto_pd_offload``. The grid is
kept small on purpose (fifteen replays of a few hundred requests take seconds):
``gpu-only`` once, then ``classic`` and ``adaptive`` each with the CPU batch limit at half,
the current and twice the current value, auto-PD off and on, the GPU batch limit as it is;
and each once more with the other GPU batch limit (the GPU engine's own slots when the
limit is unset, unset when it is set), the CPU limit as it is, auto-PD off. The current
setting is always one of the options, even under a policy outside the grid.

With more than one service class in the window, ``gpu-priority`` (strict priority on the GPU
alone) joins ``gpu-only`` as a setting without the CPU, and a setting may also say which
classes the CPU serves (``cpu_flags``: the ``cpu`` flag of each class of the window in
``service.classes``); :mod:`sim.advise.verdict` adds those variants of the best settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from syshaxd.routing import Limits

__all__ = ["GPU_ALONE", "GRID_POLICIES", "Setting", "base_limits", "current_setting", "grid", "other_gpu_batch"]

#: The policies advise compares, simplest first (ties go to the simpler).
GRID_POLICIES: tuple[str, ...] = ("gpu-only", "classic", "adaptive")
#: The policies that never use the CPU, simplest first.
GPU_ALONE: tuple[str, ...] = ("gpu-only", "gpu-priority")
_RANK: tuple[str, ...] = ("gpu-only", "gpu-priority", "classic", "adaptive")
#: The CPU batch limit tried when the current one is 0 (the CPU unused): the shipped default.
DEFAULT_CPU_BATCH = 20


@dataclass(frozen=True)
class Setting:
    """A policy and the decider limits advise may change (None: not used by the policy)."""

    policy: str
    gpu_max_batch_size: int | None = None
    cpu_max_batch_size: int | None = None
    auto_pd_offload: bool | None = None
    #: Whether the CPU may serve each class of the window, by name, sorted (None: as the
    #: class table has it now; a class not named keeps the table's flag).
    cpu_flags: tuple[tuple[str, bool], ...] | None = None

    @property
    def uses_cpu(self) -> bool:
        """Whether the policy may send work to the CPU at all."""
        return (self.policy not in GPU_ALONE and self.cpu_max_batch_size != 0
                and (self.cpu_flags is None or any(on for _, on in self.cpu_flags)))

    def cpu_allows(self, name: str) -> bool | None:
        """Whether this setting lets the CPU serve class ``name`` (None: as the class table has it)."""
        return None if self.cpu_flags is None else dict(self.cpu_flags).get(name)

    def settings(self, classes: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """The dotted runtime keys and values of ``PATCH /v1/config``.

        Args:
            classes: the class table as the daemon shows it (``service.classes``); a setting
                with ``cpu_flags`` sends it whole with those classes' ``cpu`` flags set.

        Raises:
            ValueError: a setting with ``cpu_flags`` and no table.
        """
        out: dict[str, Any] = {"decider.policy": self.policy}
        if self.policy not in GPU_ALONE:
            out["decider.gpu_max_batch_size"] = self.gpu_max_batch_size
            out["decider.cpu_max_batch_size"] = self.cpu_max_batch_size
            out["decider.auto_pd_offload"] = self.auto_pd_offload
        if self.cpu_flags is not None:
            if classes is None:
                raise ValueError("a setting of which classes the CPU serves needs the class table")
            flags = dict(self.cpu_flags)
            out["service.classes"] = {name: {**spec, "cpu": flags.get(name, spec.get("cpu", True))}
                                      for name, spec in classes.items()}
        return out

    def label(self, gpu_slots: int | None = None) -> str:
        """For people: ``classic, gpu batch 16, cpu batch 20, auto-PD off``.

        With ``gpu_slots`` (what the GPU engine runs at once) the GPU batch reads as what the
        engine really runs: ``gpu batch 8 (engine's)`` when no limit is set, ``gpu batch 64
        (engine runs 8)`` when the limit is above what the engine can run.
        """
        if self.policy in GPU_ALONE:
            return self.policy
        limit = self.gpu_max_batch_size
        if gpu_slots is None:
            gpu = "unset" if limit is None else str(limit)
        elif limit is None:
            gpu = f"{gpu_slots} (engine's)"
        elif limit > gpu_slots:
            gpu = f"{limit} (engine runs {gpu_slots})"
        else:
            gpu = str(limit)
        text = (f"{self.policy}, gpu batch {gpu}, cpu batch {self.cpu_max_batch_size}, "
                f"auto-PD {'on' if self.auto_pd_offload else 'off'}")
        if self.cpu_flags is not None:
            text += f", CPU for {' and '.join(n for n, on in self.cpu_flags if on) or 'no class'} only"
        return text

    def limits(self, base: Limits) -> Limits:
        """``base`` with this setting's limits."""
        if self.policy in GPU_ALONE:
            return base
        return replace(base, gpu_max_batch_size=self.gpu_max_batch_size,
                       cpu_max_batch_size=base.cpu_max_batch_size if self.cpu_max_batch_size is None
                       else self.cpu_max_batch_size,
                       auto_pd_offload=bool(self.auto_pd_offload))

    def simplicity(self, current: Setting) -> tuple[int, int, int]:
        """Sort key, smaller is simpler: the policy, auto-PD, how many keys differ from ``current``
        (the class table's flags count as one)."""
        rank = _RANK.index(self.policy) if self.policy in _RANK else len(_RANK)
        mine, theirs = replace(self, cpu_flags=None).settings(), replace(current, cpu_flags=None).settings()
        changed = sum(1 for key, value in mine.items() if key not in theirs or theirs[key] != value)
        changed += int(self.cpu_flags != current.cpu_flags)
        return rank, int(bool(self.auto_pd_offload)), changed


def base_limits(recorded: Mapping[str, Any]) -> Limits:
    """The policy's :class:`Limits` from a record's ``limits`` (unknown keys ignored, missing ones default)."""
    names = {f.name for f in fields(Limits)}
    return replace(Limits(), **{k: v for k, v in recorded.items() if k in names})


def current_setting(policy: str, limits: Limits) -> Setting:
    """The setting a daemon ran under, as an option."""
    if policy in GPU_ALONE:
        return Setting(policy)
    return Setting(policy, limits.gpu_max_batch_size, limits.cpu_max_batch_size, limits.auto_pd_offload)


def _cpu_batches(current: int) -> list[int]:
    base = current if current > 0 else DEFAULT_CPU_BATCH
    return sorted({max(1, base // 2), base, base * 2})


def other_gpu_batch(current: int | None, gpu_slots: int) -> int | None:
    """The GPU batch limit tried besides the current one: the engine's own slots when unset, else unset."""
    return gpu_slots if current is None else None


def grid(current: Setting, limits: Limits, gpu_slots: int, classes: int = 1) -> list[Setting]:
    """The options to replay: the grid plus the current setting, each once, simplest first.

    Args:
        gpu_slots: sequences the GPU engine runs at once (its profile's ``max_num_seqs``).
        classes: how many service classes the window holds (more than one: ``gpu-priority`` too).
    """
    out = [Setting("gpu-only")] + ([Setting("gpu-priority")] if classes > 1 else [])
    gpu, cpu_now = limits.gpu_max_batch_size, limits.cpu_max_batch_size
    for policy in GRID_POLICIES[1:]:
        for pd in (False, True):
            for cpu in _cpu_batches(cpu_now):
                out.append(Setting(policy, gpu, cpu, pd))
        out.append(Setting(policy, other_gpu_batch(gpu, gpu_slots), cpu_now if cpu_now > 0 else DEFAULT_CPU_BATCH,
                           False))
    if current not in out:
        out.append(current)
    return out

"""``adaptive``: estimate every option's latency and pick the one that meets the targets best.

For a request of P prompt tokens and N output tokens, three options are estimated from
live rates, the conductor's in-flight accounting and the defaults in
:mod:`syshaxd.policy.estimates`:

- ``gpu`` — wait for the GPU (its queue, or the prompts scheduled before this one),
  prefill at GPU speed, decode at the GPU's TPOT for the batch it joins.
- ``cpu`` — only for prompts the CPU prefills in time: short ones while it has not measured
  its prefill speed (a Kunpeng 920 on a dense 32B is ~100x slower than the GPU), then any
  its measured speed gets through within the TTFT target (an AMX Xeon on a 3B-active MoE
  prefills ~240 tokens/s); only while the CPU's TPOT with one more request stays within
  the target and the whole decode stays within a budget (a long answer at CPU speed takes
  minutes).
- ``pd_split`` — GPU prefill, CPU decode; with the ``recompute`` handoff the CPU also
  prefills the prompt again, so only short prompts qualify.

Each option's SLO cost is ``max(ttft / ttft_target, tpot / tpot_target)`` (<= 1 meets
both targets). The GPU is the default: a request leaves it only when the GPU would miss a
target and another option meets both *and* costs less by a margin — a stateless
hysteresis, so decisions do not flap when the estimates are close. Under KV pressure (the
GPU's cache past ``Tuning.kv_pressure`` with this prompt) a request also leaves when a CPU
whose speed is measured meets both targets by that margin: the requests after it would be
held back, and the GPU's room is kept for what only the GPU serves. ``gpu_max_batch_size``,
when set, is where the operator wants work to move: past it any option that meets the
targets is preferred, but the GPU still takes what nothing else can serve well (adaptive
never holds a request back from a usable GPU). Without a usable GPU the CPU serves what it
can.
"""

from __future__ import annotations

from dataclasses import dataclass

from syshaxd.policy.common import busy, pick_engine
from syshaxd.policy.estimates import (
    CPU_DEFAULTS,
    DEFAULT_TUNING,
    GPU_DEFAULTS,
    DeviceModel,
    Tuning,
    device_model,
    queued_prompt_tokens,
    slot_wait,
)
from syshaxd.policy.holding import gpu_hold, gpu_slack, kv_need
from syshaxd.routing import Decision, Limits, Mode, RequestFeatures
from syshaxd.snapshot import Device, EngineView, Snapshot


@dataclass(frozen=True)
class Option:
    """One way to run the request, with its estimated latencies (seconds)."""

    name: str  # "gpu", "cpu" or "pd_split"
    ttft: float
    tpot: float  # mean time per output token after the first
    e2e: float
    note: str = ""  # what drives the estimate, e.g. "queue 12"

    def cost(self, limits: Limits) -> float:
        """SLO cost: the worse of TTFT and TPOT relative to their targets."""
        return max(self.ttft / limits.ttft_target, self.tpot / limits.tpot_target)

    def meets(self, limits: Limits) -> bool:
        """Whether both targets are met."""
        return self.ttft <= limits.ttft_target and self.tpot <= limits.tpot_target

    def summary(self) -> str:
        """``ttft 0.4s tpot 35ms e2e 12s`` (and the note)."""
        text = f"ttft {secs(self.ttft)} tpot {self.tpot * 1000:.0f}ms e2e {secs(self.e2e)}"
        return f"{text} ({self.note})" if self.note else text


@dataclass(frozen=True)
class GpuSide:
    """The GPU's option for a request and why it must not, or should not, take it now."""

    option: Option
    part: float  # seconds until the GPU has prefilled the prompt (wait + prefill)
    #: Why the GPU is past the operator's ``gpu_max_batch_size``, if it is.
    at_limit: str | None = None
    #: Why the GPU's KV cache is under pressure (``Tuning.kv_pressure``), if it is.
    pressure: str | None = None
    #: Why the GPU must not take the request now (:mod:`syshaxd.policy.holding`), if so.
    hold: str | None = None
    #: Why the GPU must not take even a pd_split's prefill now, if so.
    split_hold: str | None = None
    #: Why the GPU has no slack for a request already past its TTFT target, if so.
    late_hold: str | None = None


@dataclass(frozen=True)
class Options:
    """Every option for a request: estimates where possible, else why not."""

    estimates: dict[str, Option]
    unavailable: dict[str, str]
    gpu_engine: str | None
    cpu_engine: str | None
    #: CPU whole without the length and budget rules (used only when no GPU is usable).
    cpu_anyway: Option | None = None
    gpu: GpuSide | None = None
    #: Whether the CPU's TPOT comes from its own measurements (not the defaults).
    cpu_measured: bool = False


def secs(value: float) -> str:
    """Seconds as reasons print them: 0.42s, 3.5s, 95s."""
    if value < 1:
        return f"{value:.2f}s"
    return f"{value:.1f}s" if value < 10 else f"{value:.0f}s"


def gpu_side(gpu: EngineView, prompt: int, out: int, limits: Limits, tuning: Tuning = DEFAULT_TUNING,
             waited: float = 0.0) -> GpuSide:
    """The GPU option: its queue (or the prompts ahead), prefill, TPOT in the batch it joins."""
    gm = device_model(gpu, GPU_DEFAULTS, tuning)
    load = busy(gpu)
    kv = gpu.metrics.kv_cache_usage
    engine_full = gpu.waiting > 0 or (kv is not None and kv * 100.0 >= limits.gpu_cache_threshold)
    ahead = max(gpu.waiting, gpu.scheduled)
    wait = gm.prefill(queued_prompt_tokens(gpu, ahead, tuning))
    note = f"{load} running+scheduled"
    if engine_full:
        wait = max(wait, slot_wait(gpu, gm, ahead, tuning))
        note = f"queue {ahead}"
    g_tpot = gm.tpot(gpu.running if engine_full else load + 1)
    part = wait + gm.prefill(prompt)
    cap = limits.gpu_max_batch_size
    at_limit = f"gpu at batch limit {cap}" if cap is not None and load >= cap else None
    need = kv_need(gpu, prompt)
    pressure = None
    if need is not None and need[0] > need[1] * tuning.kv_pressure:
        pressure = f"gpu KV cache would hold {need[0]:.0f} of {need[1]} tokens"
    # held any longer, it would be late; admitted now, it is still on time
    urgent = limits.ttft_target * (1.0 - tuning.ttft_slack) <= waited + part + g_tpot <= limits.ttft_target
    hold = gpu_hold(gpu, gm, prompt, limits, tuning, urgent=urgent)
    return GpuSide(
        Option("gpu", part + g_tpot, g_tpot, part + out * g_tpot, note), part, at_limit, pressure, hold,
        split_hold=hold and gpu_hold(gpu, gm, prompt, limits, tuning, decode=False),
        late_hold=hold or gpu_slack(gpu, gm, prompt, out, limits, tuning),
    )


def estimate_options(
    snapshot: Snapshot, request: RequestFeatures, limits: Limits, tuning: Tuning = DEFAULT_TUNING
) -> Options:
    """Estimate the gpu, cpu and pd_split options of a request (pure; used by tests and benches)."""
    prompt = max(0, request.prompt_tokens)
    out = max(1, request.max_tokens - request.generated_tokens)
    est: dict[str, Option] = {}
    why: dict[str, str] = {}

    gpu = pick_engine(snapshot, "gpu")
    side = None if gpu is None else gpu_side(gpu, prompt, out, limits, tuning, request.waited)
    if side is None:
        why["gpu"] = why["pd_split"] = "no usable GPU engine"
    else:
        est["gpu"] = side.option
    gpu_name = gpu.name if gpu else None

    cpu = pick_engine(snapshot, "cpu")
    if cpu is None:
        why["cpu"] = "no usable CPU engine"
        why.setdefault("pd_split", "no usable CPU engine")
        return Options(est, why, gpu_name, None, gpu=side)

    cm = device_model(cpu, CPU_DEFAULTS, tuning)
    c_load = busy(cpu)
    c_tpot = cm.tpot(c_load + 1)
    if c_load >= limits.cpu_max_batch_size:
        why["cpu"] = f"cpu at batch limit {limits.cpu_max_batch_size}"
    elif cpu.waiting > 0:
        why["cpu"] = f"cpu has {cpu.waiting} waiting"
    elif cpu.tightest_tpot is not None and c_tpot > cpu.tightest_tpot and cm.live:
        why["cpu"] = (f"one more would slow the cpu's answers to {c_tpot * 1000:.0f}ms per token, past the "
                      f"{cpu.tightest_tpot * 1000:.0f}ms one of them is due")
    if "cpu" in why:
        why.setdefault("pd_split", why["cpu"])
        return Options(est, why, gpu_name, cpu.name, gpu=side, cpu_measured=cm.live)

    whole_ttft = cm.prefill(cpu.scheduled_prompt_tokens) + cm.prefill(prompt) + c_tpot
    anyway = Option("cpu", whole_ttft, c_tpot, whole_ttft + (out - 1) * c_tpot)
    decode = (out - 1) * c_tpot
    if decode > tuning.cpu_decode_budget_s:
        why["cpu"] = f"cpu decode of {out} tokens would take {secs(decode)}"
        why.setdefault("pd_split", why["cpu"])
    else:
        if limits.auto_pd_offload:
            why["cpu"] = "auto_pd_offload: the cpu does not prefill"
        elif prompt > cpu_prefill_limit(cm, limits, tuning):
            why["cpu"] = f"prompt of {prompt} tokens is too long to prefill on the cpu"
        else:
            est["cpu"] = anyway
        if side is not None:
            _split(est, why, prompt, out, side.part, side.option.tpot, c_tpot, cm, limits, tuning)
    return Options(est, why, gpu_name, cpu.name, cpu_anyway=anyway, gpu=side, cpu_measured=cm.live)


def cpu_prefill_limit(cpu: DeviceModel, limits: Limits, tuning: Tuning = DEFAULT_TUNING) -> float:
    """Longest prompt the CPU prefills whole.

    Once the engine has measured its prefill speed (``prefill_speed``, a lower bound), any
    prompt it gets through within the TTFT target: the estimate then decides. Before,
    ``cpu_prefill_max_tokens``, or more when its observed prompt rate gets the prompt
    through within half the target (the default speed is one CPU's guess).
    """
    if cpu.prefill_measured:
        return cpu.prefill_tps * limits.ttft_target
    return max(float(tuning.cpu_prefill_max_tokens), cpu.prefill_tps * limits.ttft_target / 2)


def _split(
    est: dict[str, Option], why: dict[str, str], prompt: int, out: int, gpu_part: float,
    g_tpot: float, c_tpot: float, cpu: DeviceModel, limits: Limits, tuning: Tuning,
) -> None:
    """Estimate GPU prefill + CPU decode, counting what the handoff costs the CPU."""
    if out < 2:
        why["pd_split"] = "one output token: nothing to decode on the cpu"
        return
    if limits.handoff == "recompute":
        if prompt > tuning.cpu_prefill_max_tokens:
            why["pd_split"] = f"recompute handoff would prefill {prompt} tokens on the cpu"
            return
        stall = cpu.prefill(prompt + 1)
    else:
        stall = tuning.handoff_s
    if limits.handoff in ("syshax", "recompute"):
        ttft = gpu_part + g_tpot  # the GPU produces the first token
    else:
        ttft = gpu_part + tuning.handoff_s + c_tpot
    decode = (out - 1) * c_tpot + stall
    est["pd_split"] = Option("pd_split", ttft, decode / (out - 1), ttft + decode)


def _decision(option: Option, engine: str | None, reason: str) -> Decision:
    device: Device = "gpu" if option.name == "gpu" else "cpu"
    mode = Mode.PD_SPLIT if option.name == "pd_split" else Mode.WHOLE
    return Decision(device, mode, None, reason, engine=engine, est_ttft=option.ttft, est_e2e=option.e2e)


def decide(
    snapshot: Snapshot, request: RequestFeatures, limits: Limits, tuning: Tuning = DEFAULT_TUNING
) -> Decision:
    """The adaptive decision, with the tuning made explicit (see the module docstring)."""
    opts = estimate_options(snapshot, request, limits, tuning)
    est, why = opts.estimates, opts.unavailable

    if request.has_num_decode_tokens and opts.cpu_engine is not None:
        return Decision("cpu", Mode.WHOLE, None, "cpu: a continuation stays on the cpu", engine=opts.cpu_engine)
    if request.forced_mode is Mode.PD_SPLIT:
        split = est.get("pd_split")
        if split is None:
            return Decision(None, Mode.PD_SPLIT, None, f"no capacity: pd_split requested; {why['pd_split']}")
        return _decision(split, opts.cpu_engine, f"pd_split requested: est {split.summary()}")

    side = opts.gpu
    if side is not None and request.waited >= limits.ttft_target:
        return _late(opts, side, limits, request.waited, tuning)
    if side is not None and side.hold is not None:
        return _held(opts, side, limits, side.hold)
    feasible = [o for o in (est.get("cpu"), est.get("pd_split")) if o is not None and o.meets(limits)]
    best = min(feasible, key=lambda o: (o.cost(limits), o.name != "cpu"), default=None)
    if best is not None and request.level.priority > 0 and best.cost(limits) <= 1.0 - tuning.margin:
        # Work that can wait goes where it meets its own targets at the least cost to the rest:
        # the GPU's room is kept for the classes only it serves in time.
        return _decision(best, opts.cpu_engine, f"{best.name}: est {best.summary()}; class {request.level.name!r} "
                         f"meets its targets off the gpu")
    if side is not None:
        gpu = side.option
        # The GPU is the better device for anything it serves within the targets; a request
        # leaves it only when it would miss them there and the alternative clearly does not,
        # when the GPU is past the operator's batch limit and an alternative meets them, or
        # when the GPU's KV cache is under pressure and the alternative meets them clearly.
        leave = side.at_limit or _pressure(opts, side, best, limits, tuning)
        if best is not None and (
            leave is not None
            or (not gpu.meets(limits) and best.cost(limits) < gpu.cost(limits) * (1.0 - tuning.margin))
        ):
            why_not_gpu = leave or f"gpu would be {gpu.summary()}"
            return _decision(best, opts.cpu_engine, f"{best.name}: est {best.summary()}; {why_not_gpu}")
        prefix = f"{side.at_limit}, nothing better; " if side.at_limit else ""
        return _decision(gpu, opts.gpu_engine, f"gpu: est {gpu.summary()}; {prefix}{_alternative(opts, limits)}")
    if best is not None:
        return _decision(best, opts.cpu_engine, f"{best.name}: est {best.summary()}; {why['gpu']}")
    if opts.cpu_anyway is not None:
        # No usable GPU at all: the CPU serves what it can rather than let requests time out.
        return _decision(opts.cpu_anyway, opts.cpu_engine, f"cpu: no usable GPU engine; est {opts.cpu_anyway.summary()}")
    return Decision(None, Mode.WHOLE, None, f"no capacity: {why['gpu']}; {_alternative(opts, limits)}")


def _pressure(opts: Options, side: GpuSide, best: Option | None, limits: Limits, tuning: Tuning) -> str | None:
    """Why the GPU's room should be kept for what only it serves, when ``best`` may take this request.

    Past ``kv_pressure`` of the GPU's KV cache the next requests will be held back (or
    preempted) there and wait into lateness, while the CPU may have room to serve some of
    them in time. A request moves only to a CPU whose TPOT has been measured (the defaults
    are one CPU's guess) and only where its estimate meets both targets by ``margin``: the
    GPU would have served it, so the move must not be a gamble.
    """
    if side.pressure is None or best is None or not opts.cpu_measured:
        return None
    if best.cost(limits) > 1.0 - tuning.margin:
        return None
    return f"{side.pressure}, kept for what only the gpu serves"


def _late(opts: Options, side: GpuSide, limits: Limits, waited: float, tuning: Tuning) -> Decision:
    """A request already past its TTFT target: it cannot count towards goodput anywhere.

    The devices are kept for requests still on time: a late one runs on the CPU while the
    CPU has slack (with it, the CPU decodes within half the TPOT target, and the answer
    within ``cpu_decode_budget_s``), or on the GPU only while the GPU has slack
    (``GpuSide.late_hold`` is None), and otherwise waits.
    """
    cpu = opts.cpu_anyway
    if cpu is not None and cpu.tpot <= limits.tpot_target / 2 and cpu.e2e - cpu.ttft <= tuning.cpu_decode_budget_s:
        return _decision(cpu, opts.cpu_engine, f"cpu: waited {secs(waited)}, past the TTFT target; "
                         f"the gpu is kept for requests still on time; est {cpu.summary()}")
    gpu = side.option
    if side.late_hold is None:
        return _decision(gpu, opts.gpu_engine, f"gpu: waited {secs(waited)}, past the TTFT target; the gpu has slack; "
                         f"est {gpu.summary()}")
    return Decision(None, Mode.WHOLE, None, f"hold: waited {secs(waited)}, past the TTFT target; "
                    f"the gpu is kept for requests still on time ({side.late_hold})")


def _held(opts: Options, side: GpuSide, limits: Limits, hold: str) -> Decision:
    """The GPU must not take the request now: another device where it meets the targets, else wait."""
    split = opts.estimates.get("pd_split") if side.split_hold is None else None
    feasible = [o for o in (opts.estimates.get("cpu"), split) if o is not None and o.meets(limits)]
    best = min(feasible, key=lambda o: (o.cost(limits), o.name != "cpu"), default=None)
    if best is not None:
        return _decision(best, opts.cpu_engine, f"{best.name}: est {best.summary()}; gpu held back: {hold}")
    return Decision(None, Mode.WHOLE, None, f"hold: {hold}; {_alternative(opts, limits)}")


def _alternative(opts: Options, limits: Limits) -> str:
    """The best alternative to the GPU, or why there is none, for the reason line."""
    alts = [o for o in (opts.estimates.get("cpu"), opts.estimates.get("pd_split")) if o is not None]
    if alts:
        alt = min(alts, key=lambda o: o.cost(limits))
        return f"{alt.name} would be {alt.summary()}"
    return f"cpu not an option: {opts.unavailable.get('cpu', 'unknown')}"


def adaptive(snapshot: Snapshot, request: RequestFeatures, limits: Limits) -> Decision:
    """Pick the option whose estimated TTFT/TPOT meets the targets best (module docstring)."""
    return decide(snapshot, request, limits, DEFAULT_TUNING)

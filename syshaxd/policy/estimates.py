"""Time estimates for the adaptive policy: how long a request would wait, prefill and decode.

Everything here is arithmetic on a snapshot: live rates when the engine reports them, the
conductor's own in-flight accounting, and otherwise the defaults below.

Defaults (used until an engine reports its own rates), from
``shared/calibration/README.md`` (DeepSeek-R1-Distill-Qwen-32B):

=============================  =========  =========  ====================================
quantity                       GPU        CPU        source
=============================  =========  =========  ====================================
prefill, prompt tokens/s       6000       30         GPU: TP2 A100 1K tokens ~0.16 s; CPU:
                                                     15-50 tok/s estimate (Kunpeng 920)
time per output token, B=1     0.029 s    0.10 s     GPU: measured 29.2 ms; CPU: q4_0
                                                     8-12 tok/s estimate
growth of TPOT per extra       1.6 %      2 %        GPU: 35 ms + 0.33 ms x B fit at B=45;
request while memory-bound                           CPU: weights dominate the bytes read
batch where compute binds      256        3          CPU: "batching raises the aggregate
(TPOT then grows with B)                             2-4x until compute binds"
=============================  =========  =========  ====================================

TPOT at batch B is ``tpot1 * max(1 + growth * (B - 1), B / knee)``: flat-ish while the
step is memory-bound, proportional to B once compute binds. A live TPOT (``tpot_recent``,
or ``running / decode_tps``) measured at the engine's current batch is turned back into
``tpot1`` with the same formula, so the estimate follows the real engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from syshaxd.snapshot import EngineView


@dataclass(frozen=True)
class DeviceDefaults:
    """What a device does before its engine has reported anything."""

    prefill_tps: float  # prompt tokens/s of one prefill
    tpot1: float  # seconds per output token with nothing else running
    growth: float  # relative TPOT increase per extra request while memory-bound
    knee: float  # batch size from which compute binds and TPOT grows with the batch
    #: Whether a measured prefill speed replaces ``prefill_tps`` (else it can only raise it).
    measured_prefill_replaces: bool = False

    def shape(self, batch: float) -> float:
        """TPOT at ``batch`` relative to TPOT at batch 1."""
        b = max(1.0, batch)
        return max(1.0 + self.growth * (b - 1), b / self.knee)


GPU_DEFAULTS = DeviceDefaults(prefill_tps=6000.0, tpot1=0.029, growth=0.016, knee=256.0)
CPU_DEFAULTS = DeviceDefaults(prefill_tps=30.0, tpot1=0.10, growth=0.02, knee=3.0, measured_prefill_replaces=True)


@dataclass(frozen=True)
class Tuning:
    """The adaptive policy's knobs that are not operator settings."""

    #: Remaining output tokens of a running request, when the conductor does not say.
    remaining_tokens: float = 200.0
    #: Prompt tokens of a queued request, when the conductor does not say.
    prompt_tokens: float = 1000.0
    #: A prompt longer than this prefills on the CPU only when the CPU's measured prefill
    #: rate gets it through within half the TTFT target (a Kunpeng 920 is ~100x slower
    #: than the GPU; an AMX Xeon on a 3B-active MoE prefills ~240 tokens/s).
    cpu_prefill_max_tokens: int = 256
    #: A CPU decode expected to take longer than this is not offered: it would come close
    #: to the conductor's request timeout (``system.request_timeout``, 600 s by default),
    #: and a request cut there is lost after holding a CPU slot for minutes.
    cpu_decode_budget_s: float = 450.0
    #: Leave the GPU only for an option whose SLO cost is lower by this fraction.
    margin: float = 0.2
    #: Seconds to hand KV over between engines (2K tokens fp16 ~20 ms over PCIe).
    handoff_s: float = 0.05
    #: A live rate may not move the estimate further than this factor from the default.
    max_deviation: float = 100.0
    #: Hold a request back while the running batch's projected TPOT is above this share of
    #: the target (:mod:`syshaxd.policy.holding`): the projection is an average, and the
    #: slowest requests of a batch sit above it.
    tpot_guard: float = 0.8
    #: A request whose first token would come within this share of the TTFT target's end
    #: is held only while the projection passes the target itself (not ``tpot_guard``).
    ttft_slack: float = 0.2
    #: Hold a request back while the projected KV need is above this share of the cache
    #: (:mod:`syshaxd.policy.holding`; why 98%: docs/benchmarks.md).
    kv_guard: float = 0.98
    #: A prompt whose prefill takes longer than this (seconds) waits while the batch would
    #: outgrow the KV cache before its first answer ends (:mod:`syshaxd.policy.holding`). A
    #: fixed time, not a share of the TPOT target, so that a tight target does not hold
    #: ordinary prompts back; 0.2 s is under one 2,048-token prefill chunk on an A100 pair.
    long_prompt_s: float = 0.2
    #: Past this share of the GPU's KV cache (with the prompts on their way and this one), a
    #: request that meets its targets on the CPU by ``margin`` goes there: the GPU's room is
    #: kept for what only it serves (``syshaxd.policy.adaptive``).
    kv_pressure: float = 0.7


DEFAULT_TUNING = Tuning()


@dataclass(frozen=True)
class DeviceModel:
    """One engine's speeds as adaptive believes them now."""

    prefill_tps: float
    tpot1: float
    defaults: DeviceDefaults
    live: bool  # tpot1 comes from the engine's own numbers
    prefill_measured: bool = False  # prefill_tps comes from the engine's measured prefill speed

    def tpot(self, batch: int) -> float:
        """Seconds per output token with ``batch`` requests decoding together."""
        return self.tpot1 * self.defaults.shape(batch)

    def prefill(self, tokens: float) -> float:
        """Seconds to prefill ``tokens`` prompt tokens."""
        return max(0.0, tokens) / self.prefill_tps


def device_model(view: EngineView, defaults: DeviceDefaults, tuning: Tuning = DEFAULT_TUNING) -> DeviceModel:
    """Speeds of one engine: live numbers when it reports them, else the defaults.

    A measured TPOT is divided by the TPOT shape at the batch it was measured at:
    ``tpot_batch`` when the engine's histograms give it; otherwise the current batch, but
    at most the knee — a burst that just arrived was not yet in the measurement, and
    assuming it was would make a busy CPU look faster than it is.
    """
    m = view.metrics
    prefill, measured = _prefill_speed(m.prefill_speed, m.prefill_tps, defaults, tuning)
    observed: float | None = None
    batch = float(min(max(1, m.running or 0), defaults.knee))
    if m.tpot_recent is not None and m.tpot_recent > 0:
        observed = m.tpot_recent
        if m.tpot_batch is not None and m.tpot_batch > 0:
            batch = max(1.0, m.tpot_batch)
    elif m.decode_tps and m.decode_tps > 0 and m.running:
        observed = m.running / m.decode_tps
        batch = float(m.running)  # measured over the same few seconds as the batch
    if observed is None:
        return DeviceModel(prefill, defaults.tpot1, defaults, live=False, prefill_measured=measured)
    tpot1 = observed / defaults.shape(batch)
    low, high = defaults.tpot1 / tuning.max_deviation, defaults.tpot1 * tuning.max_deviation
    return DeviceModel(prefill, min(high, max(low, tpot1)), defaults, live=True, prefill_measured=measured)


def _prefill_speed(
    measured: float | None, demand: float | None, defaults: DeviceDefaults, tuning: Tuning
) -> tuple[float, bool]:
    """Prompt tokens/s of one prefill (the engine's measured speed or the default), and whether measured.

    The prompt tokens per second of prefill time (``prefill_speed``) is a measurement of
    capacity, and a lower bound (vLLM's histogram counts a step shared by several prompts
    once per prompt). A CPU's default is one CPU's estimate and CPUs differ tenfold (a
    Kunpeng 920 on a dense 32B ~30 tokens/s, an AMX Xeon on a 3B-active MoE ~240), so
    there a measurement replaces it; a GPU's default comes from published vLLM figures,
    and the lower bound can only show the GPU faster. An observed prompt rate
    (``prefill_tps``) is demand, not capacity: it can only show the device is faster.
    """
    if measured is None or measured <= 0:
        return max(defaults.prefill_tps, demand or 0.0), False
    low, high = defaults.prefill_tps / tuning.max_deviation, defaults.prefill_tps * tuning.max_deviation
    measured = min(high, max(low, measured))
    speed = measured if defaults.measured_prefill_replaces else max(defaults.prefill_tps, measured)
    return max(speed, demand or 0.0), True


def remaining_tokens(view: EngineView, tuning: Tuning = DEFAULT_TUNING) -> float:
    """Mean output tokens the requests on an engine still have to generate."""
    if view.inflight > 0 and view.inflight_decode_tokens > 0:
        return view.inflight_decode_tokens / view.inflight
    return tuning.remaining_tokens


def queued_prompt_tokens(view: EngineView, ahead: int, tuning: Tuning = DEFAULT_TUNING) -> float:
    """Prompt tokens the engine must prefill before a new request's own prompt."""
    if view.scheduled_prompt_tokens > 0:
        return float(view.scheduled_prompt_tokens)
    return ahead * tuning.prompt_tokens


def slot_wait(view: EngineView, model: DeviceModel, ahead: int, tuning: Tuning = DEFAULT_TUNING) -> float:
    """Seconds until a full engine has freed a place for a request behind ``ahead`` others.

    The running requests finish at about ``running / (remaining tokens x TPOT)`` per
    second; a measured finish rate is used when the conductor gives no token counts.
    """
    running = max(1, view.running)
    if view.inflight_decode_tokens <= 0 and view.metrics.finish_rate and view.metrics.finish_rate > 0:
        return (ahead + 1) / view.metrics.finish_rate
    per_departure = remaining_tokens(view, tuning) * model.tpot(running) / running
    return (ahead + 1) * per_departure


def solo_tpot(view: EngineView) -> float:
    """Seconds per token the engine would decode one request at alone (its measured TPOT taken
    back to a batch of one by the device's shape; the defaults when it measured nothing)."""
    return device_model(view, GPU_DEFAULTS if view.device == "gpu" else CPU_DEFAULTS).tpot(1)

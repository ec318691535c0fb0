"""The simulator against published measurements: the numbers behind docs/simulator.md.

Published points 1-5 of ``shared/calibration/README.md`` come from vLLM's
``benchmark_serving.py`` with ``--dataset-name random``, 1024 prompt and 1024 output
tokens and ``--num-prompts N`` sent all at once (dennislee22/vLLM-benchmarking, tests 6
and 7). The simulator replays exactly that: N requests at t=0 through one engine core, and
measures mean TTFT, mean TPOT ((e2e - TTFT) / (output - 1)) and output tokens/s (all
output tokens / duration) the way the benchmark does.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim import timing
from sim.core import EngineCore, SimRequest
from sim.profile import GIB, Profile, load_profile

SOURCE = "dennislee22/vLLM-benchmarking README"
TOLERANCE = 0.20


@dataclass(frozen=True)
class Published:
    """One published benchmark run."""

    point: int
    setup: str  # "tp2" (test 6: 2 x A100-80G) or "tp1" (test 7: 1 x A100-80G)
    prompts: int
    tpot_ms: float
    output_tps: float
    ttft_s: float | None
    source: str


PUBLISHED: tuple[Published, ...] = (
    Published(1, "tp2", 1, 29.2, 34.2, 0.061, f"{SOURCE}, test 6"),
    Published(2, "tp2", 10, 39.4, 243.0, 1.85, f"{SOURCE}, test 6"),
    Published(3, "tp2", 15, 39.4, 378.0, 0.213, f"{SOURCE}, test 6"),
    Published(3, "tp2", 20, 42.8, 464.0, 0.284, f"{SOURCE}, test 6"),
    Published(4, "tp2", 30, 50.0, 540.0, 5.4, f"{SOURCE}, test 6"),
    Published(4, "tp2", 50, 68.6, 508.0, 6.1, f"{SOURCE}, test 6 (KV-bound: ~45 running, KV 98-99.9%)"),
    Published(4, "tp2", 100, 80.1, 529.0, 44.1, f"{SOURCE}, test 6"),
    Published(5, "tp1", 10, 51.6, 186.0, 2.0, f"{SOURCE}, test 7"),
    Published(5, "tp1", 50, 80.0, 319.0, 21.5, f"{SOURCE}, test 7"),
    Published(5, "tp1", 100, 78.0, 363.0, 97.9, f"{SOURCE}, test 7"),
)
TP1_KV_GIB = 9.70  # "Available KV cache memory: 9.70 GiB" in the test-7 startup log


@dataclass(frozen=True)
class Measured:
    """The simulator's result for one burst."""

    ttft_s: float
    tpot_ms: float
    output_tps: float
    preemptions: int
    peak_running: int


def burst(profile: Profile, prompts: int, prompt_tokens: int = 1024, output_tokens: int = 1024) -> Measured:
    """``prompts`` requests at t=0 through one engine, measured like benchmark_serving."""
    core = EngineCore(profile)
    seqs = [core.submit(SimRequest(f"r{i}", prompt_tokens, output_tokens)) for i in range(prompts)]
    peak = 0
    while core.has_work():
        core.advance(float("inf"))
        peak = max(peak, core.num_running)
    ttft = [s.first_token - s.arrival for s in seqs if s.first_token is not None]
    tpot = [(s.finished_at - s.first_token) / (s.generated - 1)
            for s in seqs if s.finished_at is not None and s.first_token is not None and s.generated > 1]
    duration = max(s.finished_at or 0.0 for s in seqs)
    mean_tpot = 1000 * sum(tpot) / len(tpot) if tpot else 0.0
    return Measured(sum(ttft) / len(ttft), mean_tpot, prompts * output_tokens / duration, core.counters.preemptions, peak)


def setup_profile(setup: str) -> Profile:
    """gpu-a100 as in the published setup (``tp1``: one card, its measured KV room)."""
    profile = load_profile("gpu-a100")
    if setup == "tp1":
        return profile.variant(devices=1, kv_cache_bytes=TP1_KV_GIB * GIB)
    return profile


@dataclass(frozen=True)
class PointCheck:
    """A published point beside the simulator's."""

    published: Published
    measured: Measured

    @property
    def tpot_error(self) -> float:
        """Relative TPOT difference (simulator vs published)."""
        return self.measured.tpot_ms / self.published.tpot_ms - 1

    @property
    def tps_error(self) -> float:
        """Relative output tokens/s difference."""
        return self.measured.output_tps / self.published.output_tps - 1

    @property
    def within(self) -> bool:
        """Both within the tolerance."""
        return abs(self.tpot_error) <= TOLERANCE and abs(self.tps_error) <= TOLERANCE


def check_points(quick: bool = False) -> list[PointCheck]:
    """Every published point (``quick``: the ones with up to 30 prompts) against the simulator."""
    points = [p for p in PUBLISHED if not quick or p.prompts <= 30]
    return [PointCheck(p, burst(setup_profile(p.setup), p.prompts)) for p in points]


@dataclass(frozen=True)
class ProfileRow:
    """A profile's headline numbers: decode tokens/s by batch and TTFT by prompt length."""

    profile: str
    decode_tps: dict[int, float]  # batch -> tokens/s, at 1024 tokens of context each
    ttft_s: dict[int, float]  # prompt tokens -> seconds, alone on an idle engine
    kv_tokens: int


BATCHES = (1, 8, 32, 64)
PROMPTS = (512, 2048)
CONTEXT = 1024


def profile_row(name: str) -> ProfileRow:
    """Steady decode throughput and lone-prompt TTFT of a profile."""
    p = load_profile(name)
    decode = {b: b / timing.decode_step_time(p, [CONTEXT] * b) for b in BATCHES}
    ttft = {n: burst(p, 1, n, 1).ttft_s for n in PROMPTS}
    return ProfileRow(name, decode, ttft, p.kv_capacity_tokens)


# What was published (or estimated in the calibration README) for the headline numbers.
REFERENCE: dict[str, dict[str, str]] = {
    "gpu-a100": {
        "b1": "34.2 (pt 1)",
        "b8": "-",
        "b32": "~600 (30 running at 50 ms TPOT, pt 4)",
        "b64": "peak ~900 (pt 4, KV-bound at ~45 running)",
        "ttft512": "~0.08 [est]",
        "ttft2048": "~0.33 [est]",
    },
    "gpu-a100-40g": {"b1": "-", "b8": "-", "b32": "-", "b64": "-", "ttft512": "~0.08 [est]", "ttft2048": "~0.33 [est]"},
    "cpu-kunpeng920-q4": {"b1": "8-12 [est]", "b8": "2-4x b1 [est]", "b32": "2-4x b1 [est]", "b64": "-",
                          "ttft512": "-", "ttft2048": "40-130 [est]"},
    "cpu-kunpeng920-q8": {"b1": "4.3-6.5 [est]", "b8": "2-4x b1 [est]", "b32": "2-4x b1 [est]", "b64": "-",
                          "ttft512": "-", "ttft2048": "40-130 [est]"},
}

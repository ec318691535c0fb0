"""The devices of the benchmark in a few numbers, computed from the simulator's profiles."""

from __future__ import annotations

from typing import Any

from sim import timing
from sim.profile import Profile, load_profile

PROMPT = 1000  # about the Azure conversation trace's median prompt
CONTEXT = 1200  # a decoding request of that trace: prompt plus some answer


def best_batch(p: Profile, tpot_target: float) -> tuple[int, float]:
    """The largest decode batch (contexts of CONTEXT tokens, fitting the KV cache) within the
    TPOT target, and its tokens/s."""
    best, tps = 0, 0.0
    for batch in range(1, min(p.max_num_seqs, p.kv_capacity_tokens // CONTEXT) + 1):
        t = timing.decode_step_time(p, [CONTEXT] * batch)
        if t > tpot_target:
            break
        best, tps = batch, batch / t
    return best, tps


def hardware_table(report: dict[str, Any]) -> str:
    """Markdown: prefill speed, TPOT, decode capacity within the TPOT target and KV room per profile."""
    target = report["config"]["tpot_target"]
    names: list[str] = []
    for block in report["workloads"].values():
        for sc in block["scenarios"].values():
            for key in ("gpu_profile", "cpu_profile"):
                if sc[key] not in names:
                    names.append(sc[key])
    lines = [
        f"| profile | prefill of {PROMPT} tokens | TPOT, 1 request | largest batch of {CONTEXT}-token contexts within {target * 1000:g} ms TPOT and the KV cache "
        "| decode tokens/s there | KV cache (tokens) |",
        "|---|---|---|---|---|---|",
    ]
    for name in names:
        p = load_profile(name)
        prefill = timing.prefill_time(p, PROMPT)
        batch, tps = best_batch(p, target)
        lines.append(
            f"| {name} | {prefill:.2f} s ({PROMPT / prefill:.0f} tok/s) | "
            f"{timing.decode_step_time(p, [CONTEXT]) * 1000:.0f} ms | {batch} | {tps:.0f} | {p.kv_capacity_tokens:,} |"
        )
    return "\n".join(lines)

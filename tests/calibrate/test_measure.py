"""The measurement plan and the decode windows: what the fit is given to work with."""

from __future__ import annotations

from sim.calibrate.engine_info import EngineFacts
from sim.calibrate.measure import Measurements, Probe, make_plan
from sim.calibrate.probe import Timing


def _facts() -> EngineFacts:
    return EngineFacts(url="http://127.0.0.1:1", dialect="llamacpp", model="m", max_model_len=1024, max_num_seqs=4)


def test_the_context_term_is_measured_at_more_than_one_point() -> None:
    plan = make_plan(_facts(), max_prompt=2048, max_batch=4, decode_tokens=64)
    long = [(p.batch, p.prompt) for p in plan.decode if p.prompt > 16]
    assert len({prompt for _, prompt in long}) >= 2
    assert any(batch >= 2 for batch, _ in long)


def test_a_single_slot_engine_gets_no_batch_of_long_prompts() -> None:
    plan = make_plan(_facts(), max_prompt=2048, max_batch=1, decode_tokens=64)
    assert all(p.batch == 1 for p in plan.decode)


def _stream(gap: float, tokens: int = 20, late: float = 0.0) -> Timing:
    # ``late``: the client read every token only this long after the first was due
    times = tuple(max(0.01 + i * gap, 0.01 + late) + i * 1e-6 for i in range(tokens))
    return Timing(prompt_tokens=16, output_tokens=tokens, ttft=times[0], end=times[-1], token_times=times)


def test_a_stream_read_in_one_burst_is_left_out_of_the_decode_step() -> None:
    probe = Probe("decode", 1, 16, 20)
    m = Measurements(started_at=0.0)
    m.samples[probe] = [[_stream(0.001)], [_stream(0.001, late=0.05)], [_stream(0.0011)]]
    (point,) = m.decode_points()
    assert point.samples == 2
    assert 0.001 <= point.step_s <= 0.0011

"""``syshax advise`` on mixed traffic a real daemon recorded, and the ``cpu`` flag of a class in
the daemon.

The box: an L4 and a Xeon simulated on the Qwen3 MoE at four times their speed, syshaxd under
adaptive; the official openai client sends interactive requests and, with ``x-syshax-class:
batch``, batch requests. Which class advise names depends on how fast this machine ran the
engines, so the test holds advise to what it recorded and replayed: every request in its class
at its class's targets, figures per option and class, and a sentence that agrees with the
classes it names (tests/advise/test_classes.py checks the verdict itself on fixed windows).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from sim.advise.options import GPU_ALONE
from syshaxd.schema import AdviceModel
from tests.advise.traffic import advice_of
from tests.plugins.stack import Stack

pytestmark = pytest.mark.timeout(600)

#: Requests of each class sent, and the offered rate (requests/s, wall clock).
INTERACTIVE, BATCH, RATE = 40, 20, 3.5


async def _send(stack: Stack, seed: int = 5) -> list[str]:
    """Poisson arrivals, every third request batch; the class each answer says it ran in."""
    rng = random.Random(seed)
    client = openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0, timeout=120)

    async def one(batch: bool) -> str:
        prompt = [rng.randrange(100, 30000) for _ in range(rng.randint(1500, 3000) if batch else rng.randint(100, 1200))]
        raw = await client.completions.with_raw_response.create(
            model="ds-32b", prompt=prompt, max_tokens=rng.randint(40, 120) if batch else rng.randint(10, 80),
            stream=True, extra_headers={"x-syshax-class": "batch"} if batch else None)
        async for _ in raw.parse():
            pass
        return str(raw.headers["x-syshax-class"])

    kinds = [i % 3 == 2 for i in range(INTERACTIVE + BATCH)]
    tasks = []
    try:
        for batch in kinds:
            await asyncio.sleep(rng.expovariate(RATE))
            tasks.append(asyncio.create_task(one(batch)))
        return list(await asyncio.gather(*tasks))
    finally:
        await client.close()


@pytest.fixture(scope="module")
def recorded(make_module_stack: Callable[..., Stack]) -> tuple[Stack, AdviceModel]:
    """The stack after the mixed traffic, and its advice (``--json --force``: the self-check may
    refuse on a busy machine; tests/advise/test_refusal.py covers refusing)."""
    stack = make_module_stack(policy="adaptive", gpu_profile="gpu-l4-qwen3moe", cpu_profile="cpu-xeon-amx-qwen3moe",
                              speed=4.0)
    ran = asyncio.run(_send(stack))
    assert ran.count("batch") == BATCH and ran.count("interactive") == INTERACTIVE
    return stack, advice_of(stack, "--force")


def test_advise_replays_each_request_in_its_class_at_its_targets_and_reports_per_class(
        recorded: tuple[Stack, AdviceModel]) -> None:
    _, advice = recorded
    assert advice.requests == INTERACTIVE + BATCH
    assert set(advice.classes) == {"interactive", "batch"}
    batch = advice.classes["batch"]
    assert (batch.ttft, batch.tpot, batch.priority, batch.cpu) == (60.0, 1.0, 1, True)
    assert advice.classes["interactive"].ttft == 5.0 and advice.classes["interactive"].priority == 0
    assert {k: c.requests for k, c in advice.actual_classes.items()} == {"interactive": INTERACTIVE, "batch": BATCH}
    for option in advice.options:
        assert {k: c.requests for k, c in option.classes.items()} == {"interactive": INTERACTIVE, "batch": BATCH}
        assert sum(c.goodput for c in option.classes.values()) == pytest.approx(option.goodput), option.label
        if option.settings["decider.policy"] in GPU_ALONE:
            assert all(c.cpu_share + c.split_share == 0 for c in option.classes.values()), option.label
    assert "gpu-priority" in {o.settings["decider.policy"] for o in advice.options}
    variants = [o for o in advice.options if "service.classes" in o.settings]
    assert {o.label.rsplit("CPU for ", 1)[1] for o in variants} >= {"batch only", "interactive only"}


def test_the_sentence_names_the_classes_the_cpu_should_serve(recorded: tuple[Stack, AdviceModel]) -> None:
    stack, advice = recorded
    assert advice.recommended is not None and advice.cpu_classes is not None
    assert set(advice.cpu_classes) <= {"interactive", "batch"}
    print(advice.cpu_verdict)
    if advice.cpu_classes:
        assert advice.cpu_verdict.startswith(f"Serve {' and '.join(advice.cpu_classes)} on the CPU: ")
        pick = advice.options[advice.recommended]
        assert all(pick.classes[k].cpu_share + pick.classes[k].split_share > 0 for k in advice.cpu_classes)
    else:
        assert advice.cpu_verdict.startswith("The CPU should serve no class here: ")
    transport = httpx.HTTPTransport(uds=str(stack.tmp / "run" / "control.sock"))
    with httpx.Client(transport=transport, base_url="http://syshaxd", timeout=10) as control:
        kept = AdviceModel.model_validate(control.get("/v1/advice").raise_for_status().json())
    assert kept.cpu_verdict == advice.cpu_verdict and kept.actual_classes == advice.actual_classes


def test_the_daemon_takes_a_cpu_for_some_classes_option_as_advise_sends_it(recorded: tuple[Stack, AdviceModel]) -> None:
    # What --apply sends for an option "CPU for batch only" (sim.advise.daemon.apply): one PATCH.
    stack, advice = recorded
    option = next(o for o in advice.options if o.label.endswith("CPU for batch only"))
    transport = httpx.HTTPTransport(uds=str(stack.tmp / "run" / "control.sock"))
    with httpx.Client(transport=transport, base_url="http://syshaxd", timeout=10) as control:
        answer = control.patch("/v1/config", json=option.settings)
        assert answer.status_code == 200, answer.text
        config = control.get("/v1/state").raise_for_status().json()["config"]
    table = config["service.classes"]
    assert table["batch"]["cpu"] is True and table["interactive"]["cpu"] is False
    assert table["sheddable"]["cpu"] is True and table["batch"]["ttft_ms"] == 60000  # the rest as it was
    assert config["decider.policy"] == option.settings["decider.policy"]


def _devices(stack: Stack, order: list[str]) -> dict[str, set[str]]:
    """Send one short request per class name in ``order``, one after another: where each class ran."""
    client = stack.openai()
    out: dict[str, set[str]] = {}
    for klass in order:
        raw = client.completions.with_raw_response.create(
            model="ds-32b", prompt="the river", max_tokens=3, extra_headers={"x-syshax-class": klass},
            extra_body={"ignore_eos": True})
        raw.parse()
        assert raw.headers["x-syshax-class"] == klass
        out.setdefault(klass, set()).add(raw.headers["x-syshax-device"])
    return out


def _classes(interactive_cpu: bool, batch_cpu: bool) -> dict[str, Any]:
    return {"interactive": {"cpu": interactive_cpu}, "batch": {"ttft_ms": 60000, "tpot_ms": 1000, "priority": 1,
                                                             "cpu": batch_cpu}}


def test_a_class_kept_off_the_cpu_runs_on_the_gpu_in_the_daemon_and_the_flag_changes_at_runtime(
        make_stack: Callable[..., Stack]) -> None:
    # round-robin alternates devices request by request: sent alternately, one class gets every
    # CPU turn unless it is kept off the CPU.
    stack = make_stack(policy="round-robin", config={"service": {"classes": _classes(False, True)}})
    assert _devices(stack, ["interactive", "batch"] * 3) == {"interactive": {"gpu"}, "batch": {"cpu"}}
    transport = httpx.HTTPTransport(uds=str(stack.tmp / "run" / "control.sock"))
    with httpx.Client(transport=transport, base_url="http://syshaxd", timeout=10) as control:
        control.patch("/v1/config", json={"service.classes": _classes(True, False)}).raise_for_status()
    assert _devices(stack, ["batch", "interactive"] * 3) == {"batch": {"gpu"}, "interactive": {"cpu"}}

"""The accuracy benchmark's verdicts on made-up reports: when it refuses, misses or only runs."""

from __future__ import annotations

from typing import Any

import pytest

from bench._accuracy_report import MISSED, NOT_JUDGED, exit_code, figures


def _report(quick: bool, recovery_error: float, *, calibration_failed: bool = False,
            advise_error: float = 0.05) -> dict[str, Any]:
    term = {"fitted": 1.0 + recovery_error, "profile": 1.0, "error": recovery_error,
            "ok": abs(recovery_error) <= 0.10}
    found: dict[str, Any] = {"error": "no answer"} if calibration_failed else {"terms": {"prefill s/token": term}}
    ok = not calibration_failed and (quick or term["ok"])
    report: dict[str, Any] = {"quick": quick, "baseline": {"bound": 0.10, "profiles": {"tiny": found},
                                                           "judged": not quick, "ok": ok}}
    if ok:
        report["llama"] = {"bound": 0.2, "errors": {"TTFT p50": 0.01, "TPOT p50": 0.01, "output tok/s": 0.01}}
        report["advise"] = {"bound": 0.2, "errors": {"ttft_p50": advise_error, "throughput": 0.01}}
    report["figures"] = figures(report)
    return report


def _verdicts(report: dict[str, Any], stage: str) -> set[str]:
    return {f["verdict"] for f in report["figures"] if f["stage"] == stage}


def test_a_full_run_whose_baseline_misses_refuses_the_rest() -> None:
    report = _report(quick=False, recovery_error=0.3)
    assert exit_code(report) == 2
    assert _verdicts(report, "recovery") == {MISSED} and _verdicts(report, "advise") == {"not run"}


def test_a_full_run_judges_every_figure() -> None:
    assert exit_code(_report(quick=False, recovery_error=0.02)) == 0
    missed = _report(quick=False, recovery_error=0.02, advise_error=0.4)
    assert exit_code(missed) == 1 and MISSED in _verdicts(missed, "advise")


@pytest.mark.parametrize("recovery_error", [0.02, 0.3])
def test_a_quick_run_judges_no_timing_however_far_off(recovery_error: float) -> None:
    report = _report(quick=True, recovery_error=recovery_error, advise_error=0.4)
    assert exit_code(report) == 0
    assert {f["verdict"] for f in report["figures"]} == {NOT_JUDGED}


def test_a_quick_run_whose_calibration_cannot_run_refuses() -> None:
    report = _report(quick=True, recovery_error=0.0, calibration_failed=True)
    assert exit_code(report) == 2 and _verdicts(report, "recovery") == {MISSED}

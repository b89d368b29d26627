"""`bench.modelless`'s figures from answers: violations, accuracy served, phases, and the
verdict against the best fixed variant."""

from __future__ import annotations

import pytest

from bench.modelless import best_fixed, fixed_arms, round_order
from bench.modelless_load import Answer, Run, combine, summarize, verdict

ACCURACY = {"fp32": 1.0, "int8": 0.95}
PHASES = [(10.0, 1.0), (100.0, 1.0)]


def test_violations_are_late_answers_refusals_and_errors() -> None:
    answers: list[Answer] = [
        (5.0, 200, "fp32", 0, 0.5),
        (60.0, 200, "fp32", 0, 0.5),  # late: over the 50-ms SLO
        (1.0, 429, "int8", 1, 1.5),
        (2.0, 599, "", 1, 1.5),
        (10.0, 200, "int8", 1, 1.5),
        (12.0, 200, "int8", 1, 1.5),
    ]
    run = summarize("model-less", answers, PHASES, 50.0, ACCURACY, None)
    assert (run.requests, run.ok, run.refused, run.errors, run.violations) == (6, 4, 1, 1, 3)
    assert run.by_variant == {"fp32": 2, "int8": 2}
    assert run.accuracy == pytest.approx(0.975)
    assert [p["violations"] for p in run.phases] == [1, 2]
    assert [p["requests"] for p in run.phases] == [2, 4]
    assert run.late_by_second == {0: 1, 1: 2}
    assert run.lost_by_variant == {"fp32": {"late": 1}, "int8": {"429": 1}, "": {"error": 1}}


def test_a_fixed_arms_answers_count_its_variant() -> None:
    run = summarize("fixed int8", [(5.0, 200, "", 0, 0.5)], PHASES, 50.0, ACCURACY, "int8")
    assert run.by_variant == {"int8": 1}
    assert run.accuracy == 0.95


def test_the_verdict_wants_no_more_violations_and_a_higher_accuracy() -> None:
    best = Run("fixed int8", violations=200, accuracy=0.95)
    good = verdict(Run("model-less", violations=150, accuracy=0.97), best)
    assert good["no_more_violations"]
    assert good["higher_accuracy"]
    bad = verdict(Run("model-less", violations=201, accuracy=0.95), best)
    assert not bad["no_more_violations"]
    assert not bad["higher_accuracy"]
    assert bad["accuracy_not_lower"]  # equal accuracy is not lower
    assert not verdict(Run("model-less", accuracy=0.94), best)["accuracy_not_lower"]


def test_an_arm_over_rounds_sums_its_answers_and_cores() -> None:
    first = (Run("fixed int8", core_s=10.0), [(5.0, 200, "", 0, 0.5), (1.0, 429, "", 1, 1.5)])
    second = (Run("fixed int8", core_s=12.5), [(70.0, 200, "", 0, 0.5), (6.0, 200, "", 1, 1.5)])
    run = combine("fixed int8", [first, second], PHASES, 50.0, ACCURACY, "int8")
    assert (run.requests, run.ok, run.refused, run.violations) == (4, 3, 1, 2)
    assert run.core_s == 22.5
    assert [p["requests"] for p in run.phases] == [2, 2]


def test_rounds_alternate_which_arm_runs_first() -> None:
    fixed = ["bf16", "fp32", "int8"]
    assert round_order(0, fixed, True) == ["modelless", "bf16", "fp32", "int8"]
    assert round_order(1, fixed, True) == ["fp32", "int8", "bf16", "modelless"]
    assert round_order(2, fixed, True) == ["modelless", "int8", "bf16", "fp32"]
    assert round_order(1, [], True) == ["modelless"]
    assert round_order(1, ["fp32"], False) == ["fp32"]


def test_the_fixed_arms_are_every_variant_meeting_both_goals_or_those_named() -> None:
    eligible, servable = ["bf16", "fp32"], ["bf16", "fp32", "int8"]
    assert fixed_arms({"modelless", "fixed"}, eligible, servable, "fp32") == ["bf16", "fp32"]
    assert fixed_arms({"fastest"}, eligible, servable, "fp32") == ["fp32"]
    assert fixed_arms({"int8", "nope"}, eligible, servable, "fp32") == ["int8"]


def test_the_best_fixed_arm_has_the_fewest_violations_then_the_higher_accuracy() -> None:
    runs = [
        Run("model-less", violations=1),
        Run("fixed fp32", violations=900, accuracy=1.0),
        Run("fixed bf16", violations=40, accuracy=0.97),
        Run("fixed torchscript", violations=40, accuracy=1.0),
    ]
    best = best_fixed(runs)
    assert best is not None
    assert best.name == "fixed torchscript"
    assert best_fixed(runs[:1]) is None

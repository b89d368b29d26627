"""Group-based planning (Optimus Module 2⁺), the start choice, the idle rule and costs."""

from __future__ import annotations

import pytest

from infless.transform.choice import Candidate, StartCosts, choose
from infless.transform.costs import LinearCost, MetaOpCosts
from infless.transform.idle import IdleEntry, donors_for, may_keep
from infless.transform.optimal import assignment, optimal_cost_ms
from infless.transform.planner import PlanCache, build_cost_ms, plan_transformation
from infless.transform.records import StartPath
from infless.transform.structure import ModelStructure, Op, OpTensor

CONV = "torch.nn.modules.conv.Conv2d"
RELU = "torch.nn.modules.activation.ReLU"
LINEAR = "torch.nn.modules.linear.Linear"


def conv(target: str, c_in: int, c_out: int, k: int = 3) -> Op:
    props = {"in_channels": c_in, "out_channels": c_out, "kernel_size": [k, k], "bias": False}
    return Op(target, CONV, props, (OpTensor("weight", (c_out, c_in, k, k), "float32"),))


def relu(target: str) -> Op:
    return Op(target, RELU, {"inplace": True})


def linear(target: str, f_in: int, f_out: int) -> Op:
    tensors = (OpTensor("weight", (f_out, f_in), "float32"), OpTensor("bias", (f_out,), "float32"))
    return Op(target, LINEAR, {"in_features": f_in, "out_features": f_out, "bias": True}, tensors)


def model(key: str, *ops: Op, nodes: int = 10) -> ModelStructure:
    return ModelStructure(key, ops, tuple({"name": f"n{i}"} for i in range(nodes)))


COSTS = MetaOpCosts.default()


def test_same_structure_is_replace_only_then_edge() -> None:
    a = model("a", conv("c1", 3, 8), relu("r"), linear("fc", 8, 2))
    plan = plan_transformation(a, model("b", *a.ops), COSTS)
    assert plan.feasible
    assert plan.counts() == {"replace": 3, "reshape": 0, "reduce": 0, "add": 0, "edge": 1}
    assert [s.op for s in plan.steps][-1] == "edge"
    assert plan.steps[0].tensors == ["weight"]  # without sharing facts every tensor is mapped


def test_groups_match_in_order_reshape_add_and_reduce() -> None:
    source = model(
        "s", conv("a", 3, 8), conv("b", 8, 8), relu("r1"), relu("r2"), linear("fc", 8, 2)
    )
    dest = model("d", conv("x", 3, 16), conv("y", 16, 16), conv("z", 16, 16), relu("r"),
                 linear("head", 16, 10))  # fmt: skip
    plan = plan_transformation(source, dest, COSTS)
    by_target = {s.target: s for s in plan.steps if s.target}
    assert (by_target["x"].op, by_target["x"].source) == ("reshape", "a")  # in order
    assert (by_target["y"].op, by_target["y"].source) == ("reshape", "b")
    assert by_target["z"].op == "add"  # the destination has one conv more
    assert (by_target["r"].op, by_target["r"].source) == ("replace", "r1")
    assert by_target["head"].op == "reshape"
    assert [s.source for s in plan.steps if s.op == "reduce"] == ["r2"]  # one relu too many
    assert plan.predicted_ms == pytest.approx(sum(s.cost_us for s in plan.steps) / 1000)


def test_operations_of_other_types_are_never_matched() -> None:
    plan = plan_transformation(model("s", conv("c", 3, 8)), model("d", linear("l", 8, 2)), COSTS)
    assert plan.counts() == {"replace": 0, "reshape": 0, "reduce": 1, "add": 1, "edge": 1}


def test_tensors_the_source_already_holds_are_not_mapped_again() -> None:
    backbone = conv("c", 3, 8)
    source = model("s", backbone, linear("fc", 8, 2))
    dest = model("d", backbone, linear("fc", 8, 2))
    shared = {("c.weight", "c.weight")}
    plan = plan_transformation(source, dest, COSTS, lambda s, d: (s, d) in shared)
    steps = {s.target: s for s in plan.steps if s.target}
    assert steps["c"].tensors == []  # same content: kept, nothing mapped
    assert steps["fc"].tensors == ["weight", "bias"]
    assert plan.kept_bytes == backbone.nbytes
    without = plan_transformation(source, dest, COSTS)
    assert plan.predicted_ms < without.predicted_ms


def test_a_structure_that_cannot_be_rebuilt_gives_an_infeasible_plan() -> None:
    broken = ModelStructure("lstm-thing", (), (), False, "fx cannot trace it")
    plan = plan_transformation(broken, model("d", relu("r")), COSTS)
    assert not plan.feasible
    assert "fx cannot trace it" in plan.reason
    unreadable = model("d", Op("odd", "torch.nn.modules.rnn.LSTM", None))
    plan = plan_transformation(model("s", relu("r")), unreadable, COSTS)
    assert not plan.feasible
    assert "odd" in plan.reason


def test_a_bigger_destination_costs_more_than_a_smaller_one() -> None:
    """Optimus §8.4: large → small (Reduce) is cheaper than small → large (Add)."""
    small = model("small", conv("a", 3, 8), nodes=5)
    large = model("large", *(conv(f"c{i}", 8, 8) for i in range(12)), nodes=30)
    down = plan_transformation(large, small, COSTS).predicted_ms
    up = plan_transformation(small, large, COSTS).predicted_ms
    assert down < up


def test_building_from_nothing_costs_at_least_the_transformation_from_itself() -> None:
    dest = model("d", conv("a", 3, 8), relu("r"), linear("fc", 8, 2))
    assert plan_transformation(dest, dest, COSTS).predicted_ms < build_cost_ms(dest, COSTS)


def test_structure_json_round_trip_keeps_the_digest() -> None:
    structure = model("m", conv("a", 3, 8), relu("r"), linear("fc", 8, 2))
    again = ModelStructure.from_json(structure.to_json())
    assert again == structure
    assert again.digest == structure.digest
    with pytest.raises(ValueError, match="format"):
        ModelStructure.from_json('{"format": 99}')


def test_plan_cache_is_bounded() -> None:
    cache = PlanCache(capacity=2)
    plan = plan_transformation(model("a", relu("r")), model("b", relu("r")), COSTS)
    for key in (("a", "b"), ("b", "c"), ("c", "d")):
        cache.put(key, plan)
    assert len(cache) == 2
    assert cache.get(("a", "b")) is None
    assert cache.get(("c", "d")) is plan


def test_profiled_costs_override_the_defaults() -> None:
    measured = {("replace", CONV): LinearCost(1.0, 2.0, 3.0), ("edge", "*"): LinearCost(5.0, 7.0)}
    costs = COSTS.merged(measured, "profiled")  # type: ignore[arg-type]
    assert costs.us("replace", CONV, tensors=1, nbytes=1024 * 1024) == pytest.approx(6.0)
    assert costs.us("replace", LINEAR) == COSTS.us("replace", LINEAR)  # not profiled: default
    assert costs.edge_us(10) == pytest.approx(5.0 + 70.0)


def test_safeguard_takes_a_transformation_only_when_strictly_cheaper() -> None:
    normal = Candidate(StartPath.ZYGOTE, 40.0)
    cheaper = Candidate(StartPath.TRANSFORM, 15.0, "w1", "resnet-34")
    dearer = Candidate(StartPath.TRANSFORM, 400.0, "w2", "bert-base")
    assert choose(normal, [dearer]) is normal
    assert choose(normal, [dearer, cheaper]) is cheaper
    assert choose(normal, [Candidate(StartPath.TRANSFORM, 40.0, "w3")]) is normal


def test_start_costs_learn_from_measurements() -> None:
    costs = StartCosts(alpha=0.5)
    assert costs.predict(StartPath.ZYGOTE, "m", build_ms=10.0) == pytest.approx(35.0)
    costs.record(StartPath.ZYGOTE, "m", 100.0)
    costs.record(StartPath.ZYGOTE, "m", 50.0)
    assert costs.predict(StartPath.ZYGOTE, "m", build_ms=10.0) == pytest.approx(75.0)
    costs.record(StartPath.TEMPLATE, "other", 8.0)
    assert costs.predict(StartPath.TEMPLATE, "m", build_ms=10.0) == pytest.approx(8.0)


def test_idle_rule_keeps_per_function_and_in_all() -> None:
    parked = [IdleEntry("w1", "f", "t1", 0.0), IdleEntry("w2", "g", "t2", 5.0)]
    assert not may_keep(parked, "f", per_function=1, max_idle=4)
    assert may_keep(parked, "h", per_function=1, max_idle=4)
    assert not may_keep(parked, "h", per_function=1, max_idle=2)


def test_donors_never_cross_tenants() -> None:
    parked = [IdleEntry("w1", "f", "t1", 0.0), IdleEntry("w2", "g", "t2", 5.0),
              IdleEntry("w3", "h", "t1", 9.0)]  # fmt: skip
    assert [e.worker_id for e in donors_for(parked, "t1")] == ["w3", "w1"]
    assert donors_for(parked, "t3") == []


def test_hungarian_assignment_is_minimal_on_a_small_matrix() -> None:
    matrix = [[4.0, 1.0, 3.0], [2.0, 0.0, 5.0], [3.0, 2.0, 2.0]]
    columns = assignment(matrix)
    assert sorted(columns) == [0, 1, 2]
    assert sum(matrix[r][c] for r, c in enumerate(columns)) == 5.0  # 1 + 2 + 2


def test_the_group_plan_is_never_below_the_optimum_and_equal_when_trivial() -> None:
    same = model("m", conv("a", 3, 8), relu("r"), linear("fc", 8, 2))
    assert optimal_cost_ms(same, same, COSTS) == pytest.approx(
        plan_transformation(same, same, COSTS).predicted_ms
    )
    source = model("s", conv("a", 3, 8), conv("b", 8, 8), relu("r1"), linear("fc", 8, 2))
    dest = model("d", conv("x", 8, 8), relu("r"), relu("r2"), linear("fc", 16, 4))
    heuristic = plan_transformation(source, dest, COSTS).predicted_ms
    assert optimal_cost_ms(source, dest, COSTS) <= heuristic + 1e-9


def test_transformation_predictions_learn_how_far_plans_are_from_measurements() -> None:
    costs = StartCosts(alpha=1.0)
    assert costs.predict_transform(10.0) == pytest.approx(10.0)
    costs.record_transform(predicted_ms=10.0, measured_ms=25.0)
    assert costs.predict_transform(4.0) == pytest.approx(10.0)

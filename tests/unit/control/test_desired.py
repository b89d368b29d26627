"""Desired state: each writer's transition, and that only the owner's writes count."""

from __future__ import annotations

import itertools
from dataclasses import replace
from functools import partial

from infless.control import desired as d
from infless.control.desired import DesiredState, Owner, WantedInstance
from infless.scaling.view import (
    Action,
    Prewarm,
    ReleaseToZero,
    SetShare,
    StartInstance,
    StopInstance,
)
from infless.types import InstanceConfig
from tests.support.plans import start_instance

UNIFORM = InstanceConfig(batch_size=8, cpus=1)


class Mint:
    def __init__(self) -> None:
        self._ids = itertools.count()

    def uniform(self) -> WantedInstance:
        return WantedInstance(f"f-{next(self._ids)}", UNIFORM, fixed_batch=False)

    def planned(self, start: StartInstance) -> WantedInstance:
        return d.planned_instance(f"f-{next(self._ids)}", start)

    def moved(self, entry: WantedInstance) -> WantedInstance:
        return replace(entry, instance_id=f"f-{next(self._ids)}", server_id="s2")


def start(b: int, c: int) -> StartInstance:
    return start_instance(b, c)


def test_a_new_function_gets_uniform_instances_for_its_owner() -> None:
    state = d.initial(DesiredState(Owner.MANUAL), Mint(), count=2)
    assert state.owner is Owner.MANUAL
    assert [w.config for w in state.instances] == [UNIFORM, UNIFORM]
    assert not any(w.fixed_batch for w in state.instances)


def test_a_manual_scale_keeps_the_oldest_and_takes_the_function() -> None:
    mint = Mint()
    state = d.planned(DesiredState(Owner.AUTOSCALER), mint, actions=[start(4, 2), start(16, 1)])
    down = d.scaled(state, mint, count=1)
    assert down.owner is Owner.MANUAL
    assert down.instances == state.instances[:1]  # the <4, 2> planned first stays as it is
    up = d.scaled(down, mint, count=3)
    assert up.instances[:1] == down.instances
    assert [w.config for w in up.instances[1:]] == [UNIFORM, UNIFORM]


def test_the_plan_applies_only_while_the_autoscaler_owns_the_function() -> None:
    mint = Mint()
    state = d.planned(DesiredState(Owner.AUTOSCALER), mint, actions=[start(4, 2), start(8, 1)])
    first, second = state.instances
    assert (first.config, first.share_rps, first.server_id) == (InstanceConfig(4, 2), 400.0, "s1")
    plan: list[Action] = [
        StopInstance("f", first.instance_id, "release"),
        SetShare("f", second.instance_id, 7.0),
    ]
    after = d.planned(state, mint, actions=plan)
    assert [(w.instance_id, w.share_rps) for w in after.instances] == [(second.instance_id, 7.0)]
    manual = d.scaled(state, mint, count=2)
    assert d.planned(manual, mint, actions=plan) is manual  # not the autoscaler's any more


def test_release_and_wake_hand_the_function_back_to_its_owner() -> None:
    mint = Mint()
    manual = d.scaled(DesiredState(Owner.AUTOSCALER), mint, count=3)
    released = d.released(manual)
    assert (released.owner, released.instances) == (Owner.COLDSTART, ())
    assert d.released(released) is released
    woken = d.woken(released, mint)
    assert woken.owner is Owner.MANUAL
    assert woken.count == 3  # a person's count comes back whole

    auto = d.planned(DesiredState(Owner.AUTOSCALER), mint, actions=[start(4, 2), start(4, 2)])
    back = d.woken(d.released(auto), mint)
    assert back.owner is Owner.AUTOSCALER
    assert [w.config for w in back.instances] == [UNIFORM]  # one; the planner adds the rest


def test_waking_a_function_that_has_instances_changes_nothing() -> None:
    mint = Mint()
    state = d.initial(DesiredState(Owner.AUTOSCALER), mint, count=1)
    assert d.woken(state, mint) is state
    empty = DesiredState(Owner.MANUAL)
    assert d.woken(empty, mint).count == 1  # a manual zero with a request waiting


def test_a_plan_mixes_lifecycle_and_scaling_actions_by_their_writers_rules() -> None:
    mint = Mint()
    state = d.initial(DesiredState(Owner.AUTOSCALER), mint, count=1)
    applied = partial(d.applied, actions=[ReleaseToZero("f", 30.0), start(4, 1)])
    released = applied(state, mint)
    assert released.owner is Owner.COLDSTART
    assert released.instances == ()  # the start is not applied: the autoscaler lost it
    woken = d.applied(released, mint, actions=[Prewarm("f", 0.5)])
    assert woken.owner is Owner.AUTOSCALER
    assert woken.count == 1

"""How operators and models are timed: thread counts in blocks, settling, changing inputs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from infless.profiler import calibration, operators
from infless.profiler.service import measure_model_ms, model_source


def test_each_thread_count_is_measured_in_one_block_in_the_order_asked() -> None:
    seen: list[int] = []
    found = operators.measure_threads(
        lambda: seen.append(torch.get_num_threads()), (2, 1), budget_s=0.0, min_reps=4
    )
    assert set(found) == {1, 2}
    assert seen.index(1) > 0
    assert seen[: seen.index(1)] == [2] * seen.index(1)
    assert set(seen[seen.index(1) :]) == {1}  # no switching back and forth


def test_short_calls_settle_before_the_first_timed_repetition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_now_s = 0.0  # the settle loop's clock: each call takes exactly 1 ms of it
    monkeypatch.setattr(operators, "perf_s", lambda: fake_now_s)

    def calls_with(settle_s: float) -> int:
        monkeypatch.setattr(operators, "SETTLE_S", settle_s)
        count = 0

        def one_ms() -> None:
            nonlocal count, fake_now_s
            count += 1
            fake_now_s += 0.001

        operators.measure_threads(
            one_ms, (1,), budget_s=0.0, min_reps=2, max_reps=2, max_spread=float("inf")
        )  # never measured again: the count is of one run
        return count

    unsettled = calls_with(0.0)  # warm-up, the estimate, and each repetition's calls
    assert unsettled <= 8
    assert calls_with(0.03) >= unsettled + 20  # plus ~30 ms of untimed calls


class _Recording(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[tuple[int, ...], float]] = []

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        self.seen.append((tuple(image.shape), float(image.sum())))
        return image


def test_a_model_is_measured_on_changing_inputs_of_its_batch_shape() -> None:
    model = _Recording()
    measure_model_ms(model, model_source("mnist"), 2, (1,), budget_s=0.0, min_reps=5)
    shapes = {shape for shape, _ in model.seen}
    assert shapes == {(2, 1, 28, 28)}
    assert len({total for _, total in model.seen}) > 5  # new images, as requests bring


def test_the_cache_keeps_the_largest_working_set_still_streaming_near_full_speed() -> None:
    sizes = [4, 8, 12, 16, 24, 32]
    per_byte = [1.0, 1.04, 1.1, 1.2, 1.6, 2.0]  # 1/0.9 = 1.11: up to 12 stays "kept"
    assert calibration.largest_kept(sizes, per_byte) == 12
    # a later fast size does not count once one has fallen off
    assert calibration.largest_kept(sizes, [1.0, 1.5, 1.0, 1.0, 1.0, 1.0]) == 4
    assert calibration.largest_kept([4], [1.0]) == 4
    with pytest.raises(ValueError, match="one time per size"):
        calibration.largest_kept(sizes, per_byte[:2])


def test_the_effective_cache_is_one_of_the_sizes_tried_up_to_the_nominal_one() -> None:
    llc = 8 << 20
    found = calibration.effective_llc_bytes(llc, rounds=1)
    assert found in {llc * k // 8 for k in range(1, 9)}

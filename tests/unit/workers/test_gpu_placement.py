"""Which warm CUDA workers the standby pool starts, and the placement a GPU instance gets
(its share under MPS; the whole device where the GPU is time-sliced)."""

from __future__ import annotations

from infless.cluster.gpus import GpuDevice
from infless.workers.gpu_starter import GpuSlot
from infless.workers.protocol import GpuPlacement
from infless.workers.standby import to_launch

DEVICE = GpuDevice(0, "NVIDIA H100", "GPU-aaaa", 80 << 30, 0)


def placement(gpu_pct: int, uuid: str = "GPU-aaaa") -> GpuPlacement:
    return GpuPlacement("cuda", uuid, 0, gpu_pct, "/run/mps/GPU-aaaa/pipe")


def test_each_wanted_placement_is_filled_up_to_its_count() -> None:
    thirty, fifty = placement(30), placement(50)
    assert to_launch([thirty, fifty], {}, {}, 2) == {thirty: 2, fifty: 2}
    assert to_launch([thirty, fifty], {thirty: 1}, {thirty: 1, fifty: 1}, 2) == {fifty: 1}
    assert to_launch([thirty], {thirty: 3}, {}, 2) == {}  # more than enough: none stopped here
    assert to_launch([thirty], {}, {}, 0) == {}  # standby off


def test_under_mps_an_instance_is_a_client_at_its_share() -> None:
    slot = GpuSlot(DEVICE, "cuda", "/run/mps/GPU-aaaa/pipe", cuda_graphs=True)
    assert slot.placement(30) == GpuPlacement(
        "cuda", "GPU-aaaa", 0, 30, "/run/mps/GPU-aaaa/pipe", cuda_graphs=True
    )
    assert slot.placement(30) != slot.placement(50)  # two classes of standby workers


def test_a_time_sliced_gpu_has_one_placement_whatever_the_share() -> None:
    slot = GpuSlot(DEVICE, "cuda", None, cuda_graphs=False)
    assert slot.placement(30) == slot.placement(50)
    assert slot.placement(30).gpu_pct == 100
    assert slot.placement(30).mps_pipe_dir is None

"""Kernel choices for serving where PyTorch's CPU heuristic is wrong: 1x1 convolutions.

Worker side (imports torch). PyTorch runs a stride-1 1x1 convolution through oneDNN on more
than one thread, or from batch 16 on. Below batch 16 on one thread, and for one small sample
(at most 20480 elements) on any number of threads, it runs its native
`_slow_conv2d_forward` instead: an unfold and a GEMM per sample (its source says "THNN is
faster when single-threaded").

On this machine oneDNN is the faster one there. Measured per convolution, with the workers'
malloc policy, one thread, b1-b8:

- 64->128 at 32x32: 0.62-0.88x the time;
- 256->1024 at 14x14: 0.48x;
- 1024->1024 at 2x2: 0.08-0.25x (899 us -> 228 us for one sample);
- the one loss: 32->64 at 32x32, b1-b4, by 17-34 us.

Whole models on one thread, b1-b8: ResNet-50 20-28 % faster, SSD-MobileNet 15-37 %, YAMNet
30-38 %, MobileNet-v1 12-57 %. MobileNet-v1 no longer runs a batch of 8 slower than a batch
of 16 (22.4 ms against 15.3 ms before, 9.7 ms now).

`prefer_onednn` retypes such convolutions in place to `OneDnnPointwiseConv2d`, which runs
every batched float32 CPU input on oneDNN. Every module run for serving or for a measurement
goes through it: the worker, `load_model`, the predictor's model measurements, the operator
profiler's rebuilt operators. So profiles, measurements and serving run the same kernels.
Graphs are traced from modules that did not go through it (their nodes stay
`torch.nn.Conv2d`).
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn


def _is_pointwise(conv: nn.Conv2d) -> bool:
    """A convolution PyTorch sends to its native kernel on one thread below batch 16 (and
    for one small sample on any number)."""
    return (
        conv.kernel_size == (1, 1)
        and conv.stride == (1, 1)
        and conv.dilation == (1, 1)
        and conv.padding_mode == "zeros"
        and not isinstance(conv.padding, str)
    )


class OneDnnPointwiseConv2d(nn.Conv2d):
    """A stride-1 1x1 `nn.Conv2d` that runs on oneDNN at any batch and thread count.

    Same parameters, state dict and results (to float rounding) as `nn.Conv2d`; only the
    kernel differs. Falls back to `nn.Conv2d` for an unbatched input, another dtype or
    device, and when gradients are recorded.
    """

    def _conv_forward(
        self, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        if (
            input.dim() == 4
            and input.dtype == torch.float32
            and input.device.type == "cpu"
            and not torch.is_grad_enabled()
        ):
            padding = cast(tuple[int, ...], self.padding)  # never a string: `_is_pointwise`
            return torch.mkldnn_convolution(
                input, weight, bias, padding, self.stride, self.dilation, self.groups
            )
        native: torch.Tensor = super()._conv_forward(input, weight, bias)
        return native


def prefer_onednn(module: nn.Module) -> int:
    """Retype `module`'s stride-1 1x1 `nn.Conv2d`s (itself included) to run on oneDNN.

    In place; parameters and buffers are untouched (shared-memory weights stay shared).
    Returns how many were retyped; none where this PyTorch has no oneDNN.
    """
    if not torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]
        return 0
    retyped = 0
    for sub in module.modules():
        if type(sub) is nn.Conv2d and _is_pointwise(sub):
            sub.__class__ = OneDnnPointwiseConv2d
            retyped += 1
    return retyped

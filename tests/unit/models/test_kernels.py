"""1x1 convolutions run on oneDNN on one thread below batch 16, where PyTorch would not."""

from __future__ import annotations

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from infless.models.kernels import OneDnnPointwiseConv2d, prefer_onednn


def _kernels(module: nn.Module, x: torch.Tensor) -> set[str]:
    """The convolution kernels one forward of `module` on `x` runs."""
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
        module(x)
    names = {event.key for event in prof.key_averages()}
    return {n for n in names if n in {"aten::mkldnn_convolution", "aten::_slow_conv2d_forward"}}


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(16, 32, 3, padding=1),  # 3x3: PyTorch's choice already
        nn.Conv2d(32, 64, 1),  # the pointwise one
        nn.Conv2d(64, 64, 1, stride=2),  # strided: oneDNN already
        nn.Conv2d(64, 8, 1, dilation=2),  # dilated: oneDNN already
    ).eval()


def test_only_stride_one_pointwise_convolutions_are_retyped() -> None:
    net = _net()
    before = {k: v.data_ptr() for k, v in net.state_dict().items()}

    assert prefer_onednn(net) == 1
    assert [type(m) for m in net] == [nn.Conv2d, OneDnnPointwiseConv2d, nn.Conv2d, nn.Conv2d]
    # the same tensors: shared-memory weights stay shared
    assert {k: v.data_ptr() for k, v in net.state_dict().items()} == before
    assert prefer_onednn(net) == 0  # already done


def test_pointwise_convolution_on_one_thread_below_batch_16_runs_on_onednn() -> None:
    x = torch.randn(8, 32, 8, 8)
    conv = nn.Conv2d(32, 64, 1).eval()
    assert _kernels(conv, x) == {"aten::_slow_conv2d_forward"}  # PyTorch's own choice

    with torch.inference_mode():
        expected = conv(x)
    prefer_onednn(conv)

    assert _kernels(conv, x) == {"aten::mkldnn_convolution"}
    with torch.inference_mode():
        torch.testing.assert_close(conv(x), expected, rtol=1e-4, atol=1e-5)


def test_one_small_sample_runs_on_onednn_and_recorded_gradients_on_nn_conv2d() -> None:
    conv = nn.Conv2d(32, 64, 1)
    one_small = torch.randn(1, 32, 2, 2)
    assert _kernels(conv, one_small) == {"aten::_slow_conv2d_forward"}  # even on 2+ threads
    prefer_onednn(conv)

    assert _kernels(conv, one_small) == {"aten::mkldnn_convolution"}
    x = torch.randn(4, 32, 4, 4, requires_grad=True)
    conv(x).sum().backward()  # grad mode: nn.Conv2d's own path, gradients flow
    assert x.grad is not None
    assert conv.weight.grad is not None


def test_a_whole_model_keeps_its_results() -> None:
    net = _net()
    x = torch.randn(4, 16, 12, 12)
    with torch.inference_mode():
        expected = net(x)
    prefer_onednn(net)
    with torch.inference_mode():
        torch.testing.assert_close(net(x), expected, rtol=1e-4, atol=1e-5)

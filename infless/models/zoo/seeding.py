"""Seeded, deterministic weights for zoo models: every tensor drawn from its own generator.

Worker/build side (imports torch). Each state-dict tensor gets a generator seeded from
(seed, tensor name). So a tensor's values depend only on its seed, name and shape, not on
construction order or on the rest of the model. Models built from the same backbone seed
share those tensors bit for bit (Tetris's transfer-learning case).

Values are plausible rather than trained, and chosen so that outputs depend on inputs (tests
of batching need that). Matrices and filters are He-scaled with zero-mean rows, so a constant
offset in a layer's input does not swamp the signal. Batch-norm statistics are calibrated on
a seeded random batch, as if the model had been trained, and rounded to bfloat16 precision.

Everything runs in one torch thread, so weights are bit-for-bit reproducible for a given CPU
and torch build, whatever the caller's thread count (another CPU's vector units may round
some last bits differently). Every tensor is distinct, so no content-hash sharing happens by
accident. Must not do I/O.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn

from infless.models.package import TensorSignature

_CALIBRATION_BATCH = 2
_CALIBRATION_TOKEN_IDS = 1000  # token ids are drawn from [0, this)


def tensor_seed(seed: int, tensor_name: str) -> int:
    """A 63-bit generator seed for one tensor, stable across runs and platforms."""
    digest = hashlib.sha256(f"{seed}/{tensor_name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _fill(tensor: torch.Tensor, name: str, generator: torch.Generator) -> None:
    if tensor.dim() >= 2:  # conv filters, linear / embedding / LSTM matrices
        fan_in = math.prod(tensor.shape[1:])
        tensor.normal_(0.0, math.sqrt(2.0 / fan_in), generator=generator)
        if fan_in > 1:
            rows = tensor.view(tensor.shape[0], -1)
            rows.sub_(rows.mean(dim=1, keepdim=True))
    elif name.endswith("weight"):  # normalisation scales
        tensor.normal_(1.0, 0.05, generator=generator)
    else:  # biases
        tensor.normal_(0.0, 0.02, generator=generator)


@contextlib.contextmanager
def _single_thread() -> Iterator[None]:
    """Reductions and convolutions in one thread: results independent of the caller's."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _batch_norms(module: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def _calibration_inputs(
    signature: Sequence[TensorSignature], generator: torch.Generator, dtype: torch.dtype
) -> list[torch.Tensor]:
    inputs = []
    for spec in signature:
        shape = (_CALIBRATION_BATCH, *(8 if d < 0 else d for d in spec.shape))
        if spec.dtype.startswith("float"):
            inputs.append(torch.randn(shape, generator=generator, dtype=dtype))
        else:
            ids = torch.randint(0, _CALIBRATION_TOKEN_IDS, shape, generator=generator)
            inputs.append(ids.to(getattr(torch, spec.dtype)))
    return inputs


@torch.no_grad()
def calibrate_batch_norms(
    module: nn.Module, signature: Sequence[TensorSignature], seed: int
) -> None:
    """Set every batch norm's running statistics from one seeded random batch."""
    norms = _batch_norms(module)
    if not norms:
        return
    momenta = [norm.momentum for norm in norms]
    dtype = next(module.parameters()).dtype
    generator = torch.Generator().manual_seed(tensor_seed(seed, "calibration"))
    inputs = _calibration_inputs(signature, generator, dtype)
    try:
        for norm in norms:
            norm.reset_running_stats()
            norm.momentum = None  # cumulative average: exactly this batch's statistics
        module.train()
        module(*inputs)
    finally:
        module.eval()
        for norm, momentum in zip(norms, momenta, strict=True):
            norm.momentum = momentum
    for norm in norms:
        for stat in (norm.running_mean, norm.running_var):
            if stat is not None:
                stat.copy_(stat.to(torch.bfloat16).to(stat.dtype))
        if norm.num_batches_tracked is not None:
            norm.num_batches_tracked.zero_()


@torch.no_grad()
def seed_weights(
    module: nn.Module,
    seed_for: Callable[[str], int],
    calibration: Sequence[TensorSignature] = (),
    calibration_seed: int = 0,
) -> None:
    """Overwrite every floating-point parameter of `module` in place, then calibrate its
    batch norms on a random batch shaped like `calibration` (the model's inputs).

    `seed_for(tensor_name)` gives the seed of each parameter (a `ZooEntry.seed_for`);
    `calibration_seed` seeds the calibration batch (use the backbone seed, so models
    sharing a backbone get the same statistics). Structural buffers are left alone.
    """
    if any(t.is_meta for t in module.state_dict().values()):
        raise ValueError("seed_weights needs a module with real storage, not a meta-device one")
    with _single_thread():
        for name, parameter in module.named_parameters():
            if parameter.is_floating_point():
                generator = torch.Generator().manual_seed(tensor_seed(seed_for(name), name))
                _fill(parameter.data, name, generator)
        if calibration:
            calibrate_batch_norms(module, calibration, calibration_seed)

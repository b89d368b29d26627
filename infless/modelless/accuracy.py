"""A variant's accuracy on the validation set: the metrics, the default one, the score.

`--metric` chooses one of three:

- `top1-labels`: against the labels the validation file gives (the default when it gives
  them);
- `top1-agreement`: argmax agreement with fp32's outputs (the default for tensor
  packages);
- `cosine`: mean cosine similarity with fp32's first output per sample (the default for
  handler packages).

Scores compare the first output of every sample.
"""

from __future__ import annotations

import numpy as np

from infless.modelless.validation import LABELS, Array
from infless.models.package import PackageManifest

METRICS = ("top1-labels", "top1-agreement", "cosine")


def choose_metric(metric: str | None, labels: Array | None, manifest: PackageManifest) -> str:
    if metric is None:
        if labels is not None:
            return "top1-labels"
        return "cosine" if manifest.handler is not None else "top1-agreement"
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
    if metric == "top1-labels" and labels is None:
        raise ValueError(f"metric top1-labels needs a validation file with {LABELS!r}")
    return metric


def score(metric: str, found: Array, reference: Array, labels: Array | None) -> float:
    """The variant's accuracy on the validation set (see the module docstring)."""
    if metric == "top1-labels":
        if labels is None:
            raise ValueError("top1-labels needs labels")
        wanted = np.asarray(labels).reshape(-1).astype(np.int64)
        if len(wanted) != len(found):
            raise ValueError(f"{len(wanted)} labels for {len(found)} validation samples")
        return float(np.mean(_top1(found) == wanted))
    if found.shape != reference.shape:
        raise ValueError(
            f"the first output has shape {list(found.shape)}, fp32's {list(reference.shape)}"
        )
    if metric == "top1-agreement":
        return float(np.mean(_top1(found) == _top1(reference)))
    rows_a = found.reshape(len(found), -1).astype(np.float64)
    rows_b = reference.reshape(len(reference), -1).astype(np.float64)
    norms = np.linalg.norm(rows_a, axis=1) * np.linalg.norm(rows_b, axis=1)
    dots = np.sum(rows_a * rows_b, axis=1)
    both_zero = (np.linalg.norm(rows_a, axis=1) == 0) & (np.linalg.norm(rows_b, axis=1) == 0)
    # a row of zeros is like another row of zeros only
    cosine = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), both_zero.astype(float))
    return float(min(1.0, np.mean(cosine)))


def _top1(outputs: Array) -> Array:
    """Per sample: the argmax of its scores, or its value where the output is a class id."""
    if outputs.ndim == 1:
        return outputs.astype(np.int64)
    top: Array = np.argmax(outputs.reshape(len(outputs), -1), axis=1)
    return top

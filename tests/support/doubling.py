"""The package manifest of the in-process "doubling" model the control-plane tests deploy.

`tests/support/inprocess.py` runs it (`architecture = "test:doubling"`): one float32 input
`x` of shape [2], one output `y` = 2x. Tests build their own `FunctionSpec` around it.
"""

from __future__ import annotations

from infless.models.package import PackageManifest, TensorSignature

DOUBLING_MANIFEST = PackageManifest(
    name="m",
    architecture="test:doubling",
    inputs=[TensorSignature("x", "float32", [2])],
    outputs=[TensorSignature("y", "float32", [2])],
)

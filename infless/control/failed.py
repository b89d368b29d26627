"""Functions that could not be deployed: what was asked for, and why it failed.

The gateway restores its functions at start-up (the registry's, the config's
`[[functions]]`). One whose image or package is missing or broken does not keep the others
from serving. It is recorded here and listed as `failed` with its reason
(`/system/functions`, `/system/function/NAME`, the V2 repository index). A call to it is
answered with a 503 naming it and the reason (`FunctionFailed`), until it is deployed again
or removed. `control.service` writes the record; the frontend and the status views read it.
Gateway side: never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from infless.errors import FunctionFailed
from infless.types import FunctionSpec


@dataclass(frozen=True, slots=True)
class FailedDeployment:
    spec: FunctionSpec
    error: str  # why: the resolver's message (the image, what is missing, the fix)

    def refusal(self) -> FunctionFailed:
        """What a call to the function is answered."""
        return FunctionFailed(
            f"function {self.spec.name!r} failed to deploy: {self.error}; fix its image "
            f"({self.spec.image!r}) and deploy it again (PUT /system/functions), or remove it"
        )


FailedDeployments = dict[str, FailedDeployment]  # by function name

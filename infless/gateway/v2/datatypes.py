"""The V2 tensor datatypes infless speaks and their numpy dtypes (both directions).

Pure: a table and two lookups. BYTES is a function's request body, not a numeric tensor
(`byte_inputs`); BF16 exists in the protocol but no signature uses it, so it is named in
errors and never decoded.
"""

from __future__ import annotations

import numpy as np

from infless.errors import BadRequest

# numpy dtype name -> V2 datatype, for every dtype a signature may use (types.SUPPORTED_DTYPES).
V2_BY_NUMPY: dict[str, str] = {
    "float32": "FP32",
    "float16": "FP16",
    "float64": "FP64",
    "int64": "INT64",
    "int32": "INT32",
    "int16": "INT16",
    "int8": "INT8",
    "uint8": "UINT8",
    "bool": "BOOL",
    # Not in signatures today, but a worker may answer with them.
    "uint16": "UINT16",
    "uint32": "UINT32",
    "uint64": "UINT64",
}
NUMPY_BY_V2: dict[str, np.dtype[np.generic]] = {
    v2: np.dtype(name) for name, v2 in V2_BY_NUMPY.items()
}
# Triton's model-configuration spelling (`TYPE_FP32`), for /v2/models/{name}/config.
CONFIG_TYPE_PREFIX = "TYPE_"
UNSUPPORTED = frozenset({"BF16"})


def v2_datatype(dtype: np.dtype[np.generic] | str) -> str:
    """A numpy dtype (or its name) -> the V2 datatype string."""
    name = np.dtype(dtype).name
    try:
        return V2_BY_NUMPY[name]
    except KeyError:
        raise BadRequest(f"dtype {name!r} has no Open Inference Protocol datatype") from None


def numpy_dtype(datatype: object, where: str) -> np.dtype[np.generic]:
    """A V2 datatype string from a request -> its little-endian numpy dtype, or 400."""
    if isinstance(datatype, str):
        dtype = NUMPY_BY_V2.get(datatype)
        if dtype is not None:
            return dtype.newbyteorder("<") if dtype.itemsize > 1 else dtype
        if datatype in UNSUPPORTED:
            raise BadRequest(f"{where}: datatype {datatype} is not supported by any function")
    known = ", ".join(sorted(NUMPY_BY_V2))
    shown = repr(datatype)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    raise BadRequest(f"{where}: datatype {shown} is unknown; use one of {known}")

"""Read a package's safetensors file without torch and name every tensor by its content.

Gateway side: never imports torch or numpy. The safetensors format is an 8-byte little-endian
header length, a JSON header mapping each tensor name to `dtype`, `shape` and `data_offsets`
(relative to the end of the header; an optional `__metadata__` entry is ignored), then the raw
bytes. A tensor's store key is a BLAKE2b digest of its dtype, shape and bytes (Tetris §3.3:
"uniquely identified by a hash value calculated from the tensor content and dimensions"), so
identical tensors of different functions get one key. Pure functions of the file's bytes, and
`IndexCache`, which keeps indexes while their file stays the same.
"""

from __future__ import annotations

import hashlib
import json
import math
import mmap
import os
import re
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

# safetensors dtype code -> (dtype name used in StoredTensor and by torch, bytes per element)
SAFETENSORS_DTYPES: dict[str, tuple[str, int]] = {
    "BOOL": ("bool", 1),
    "U8": ("uint8", 1),
    "I8": ("int8", 1),
    "F8_E5M2": ("float8_e5m2", 1),
    "F8_E4M3": ("float8_e4m3fn", 1),
    "I16": ("int16", 2),
    "U16": ("uint16", 2),
    "F16": ("float16", 2),
    "BF16": ("bfloat16", 2),
    "I32": ("int32", 4),
    "U32": ("uint32", 4),
    "F32": ("float32", 4),
    "I64": ("int64", 8),
    "U64": ("uint64", 8),
    "F64": ("float64", 8),
}
ELEMENT_BYTES: dict[str, int] = dict(SAFETENSORS_DTYPES.values())
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the limit safetensors itself enforces
KEY_DIGEST_BYTES = 20
KEY_PATTERN = re.compile(r"^[0-9a-f]{40}$")  # 2 hex chars per digest byte
_LENGTH = struct.Struct("<Q")


class PackageFormatError(ValueError):
    """The weights file is not a valid safetensors file; the message names the file and field."""


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """What changes when a file is rewritten or replaced: the cache key of a package index."""

    device: int
    inode: int
    size_bytes: int
    mtime_ns: int

    @staticmethod
    def of(stat: os.stat_result) -> FileIdentity:
        return FileIdentity(stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


@dataclass(frozen=True, slots=True)
class IndexedTensor:
    """One tensor of a package: where its bytes are and the store key they hash to."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    key: str
    offset_bytes: int  # absolute offset in the weights file
    size_bytes: int


@dataclass(frozen=True, slots=True)
class PackageIndex:
    weights_path: Path
    identity: FileIdentity
    tensors: tuple[IndexedTensor, ...]

    def unique_sizes(self) -> dict[str, int]:
        """Store key -> bytes, each distinct tensor once (a model may repeat a tensor)."""
        return {t.key: t.size_bytes for t in self.tensors}

    @property
    def unique_bytes(self) -> int:
        return sum(self.unique_sizes().values())


def tensor_key(dtype: str, shape: tuple[int, ...], data: bytes | memoryview | mmap.mmap) -> str:
    """The store key of a tensor: BLAKE2b-160 over its dtype, shape and bytes."""
    digest = hashlib.blake2b(digest_size=KEY_DIGEST_BYTES, person=b"infless-tensor")
    digest.update(f"{dtype}:{','.join(map(str, shape))};".encode())
    digest.update(data)
    return digest.hexdigest()


def parse_header(path: Path, head: bytes, file_size_bytes: int) -> tuple[dict[str, object], int]:
    """The JSON header and the absolute offset where tensor data starts."""
    if len(head) < _LENGTH.size:
        raise PackageFormatError(f"{path}: {len(head)} bytes is too short for a safetensors file")
    (header_bytes,) = _LENGTH.unpack_from(head)
    data_start = _LENGTH.size + header_bytes
    if header_bytes > MAX_HEADER_BYTES or data_start > file_size_bytes:
        raise PackageFormatError(
            f"{path}: header length {header_bytes} does not fit the {file_size_bytes}-byte file"
        )
    try:
        header = json.loads(head[_LENGTH.size : data_start])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PackageFormatError(f"{path}: the header is not valid JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise PackageFormatError(f"{path}: the header must be a JSON object")
    return header, data_start


def _indexed(
    path: Path, name: str, spec: object, data_start: int, file_size_bytes: int
) -> tuple[str, tuple[int, ...], int, int]:
    """Validate one header entry: (dtype name, shape, absolute offset, size in bytes)."""
    if not isinstance(spec, dict):
        raise PackageFormatError(f"{path}: tensor {name!r} must map to an object")
    code, shape, offsets = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
    if code not in SAFETENSORS_DTYPES:
        raise PackageFormatError(f"{path}: tensor {name!r} has unsupported dtype {code!r}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise PackageFormatError(f"{path}: tensor {name!r} has invalid shape {shape!r}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) for o in offsets)
    ):
        raise PackageFormatError(f"{path}: tensor {name!r} has invalid data_offsets {offsets!r}")
    dtype, element_bytes = SAFETENSORS_DTYPES[str(code)]
    begin, end = offsets
    size_bytes = math.prod(shape) * element_bytes
    if begin < 0 or end - begin != size_bytes or data_start + end > file_size_bytes:
        raise PackageFormatError(
            f"{path}: tensor {name!r} data_offsets {offsets} do not hold {size_bytes} bytes "
            f"of {dtype}{shape} inside the file"
        )
    return dtype, tuple(shape), data_start + begin, size_bytes


def index_weights(path: Path) -> PackageIndex:
    """Parse and hash every tensor of a safetensors file (reads the whole file once).

    Thread-safe and GIL-friendly (hashlib releases the GIL on large buffers): call it from
    `asyncio.to_thread` for large models.
    """
    with path.open("rb") as file:
        stat = os.fstat(file.fileno())
        if stat.st_size < _LENGTH.size:
            raise PackageFormatError(f"{path}: {stat.st_size} bytes is too short for safetensors")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            (header_bytes,) = _LENGTH.unpack_from(mapped)
            head_end = min(_LENGTH.size + header_bytes, stat.st_size)
            header, data_start = parse_header(path, mapped[:head_end], stat.st_size)
            tensors = []
            view = memoryview(mapped)
            try:
                for name, spec in header.items():
                    if name == "__metadata__":
                        continue
                    dtype, shape, offset, size = _indexed(
                        path, name, spec, data_start, stat.st_size
                    )
                    key = tensor_key(dtype, shape, view[offset : offset + size])
                    tensors.append(IndexedTensor(name, dtype, shape, key, offset, size))
            finally:
                view.release()
    return PackageIndex(path, FileIdentity.of(stat), tuple(tensors))


class IndexCache:
    """Package indexes by weights file, kept while the file's identity stays the same.

    `read` indexes a package the first time (it hashes every tensor: not on an event loop);
    `known` only answers what was read before. Thread-safe.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._indexes: dict[Path, PackageIndex] = {}
        self._weights_of: dict[Path, Path] = {}  # package dir -> its weights file (manifest)

    def _weights(self, package_dir: Path) -> tuple[Path, FileIdentity]:
        """The package's weights file and its identity now (the manifest read once)."""
        weights = self._weights_of.get(package_dir)
        if weights is None:
            from infless.models.package import load_manifest

            weights = (package_dir / load_manifest(package_dir).weights_file).resolve()
            self._weights_of[package_dir] = weights
        return weights, FileIdentity.of(weights.stat())

    def _cached(self, weights: Path, identity: FileIdentity) -> PackageIndex | None:
        with self._mutex:
            cached = self._indexes.get(weights)
        return cached if cached is not None and cached.identity == identity else None

    def read(self, package_dir: Path) -> PackageIndex:
        weights, identity = self._weights(package_dir)
        index = self._cached(weights, identity)
        if index is None:
            index = index_weights(weights)
            with self._mutex:
                self._indexes[weights] = index
        return index

    def known(self, package_dir: Path) -> PackageIndex | None:
        try:
            return self._cached(*self._weights(package_dir))
        except (OSError, ValueError):
            return None

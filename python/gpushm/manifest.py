# SPDX-License-Identifier: MIT
"""The tensor manifest a buffer's metadata carries: which tensors lie where in it.

JSON, at most 4096 bytes (GPUSHM_METADATA_MAX), versioned::

    {"gpushm": 1,
     "tensors": [{"name": "w", "dtype": "float32", "shape": [4, 8],
                  "strides": [8, 1], "offset": 0}, ...]}

- ``gpushm``: the manifest's format version (1).  A newer one is refused with a message
  saying so, never half-read.
- ``tensors``: one or more; ``name`` is unique in the buffer (``""`` for the one tensor
  of gpushm.share()); ``dtype`` a name of gpushm.dtypes; ``shape`` the extents;
  ``strides`` in elements (optional: C-contiguous); ``offset`` in bytes from the buffer's
  start to element [0, ..., 0].
- Other keys are ignored (room to grow: a later version may add hints).

Whoever created the buffer wrote the manifest, and nothing says they are friendly:
decode() checks every field's type and that every element of every tensor lies inside
the buffer, aligned for its type, with overflow-free arithmetic (Python's ints do not
wrap, and values past 2^63 are refused as the C library would).  libgpushm checks again
when a tensor is exported (gpushm_buffer_dlpack).
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Iterable, List, Optional, Sequence, Tuple, Union

from . import dtypes
from .errors import CODES, ManifestError, make_error

#: The format version this package writes and reads.
VERSION = 1
#: Bytes of metadata a buffer may carry (GPUSHM_METADATA_MAX).
MAX_BYTES = 4096
#: Dimensions a tensor may have (GPUSHM_TENSOR_MAX_NDIM).
MAX_NDIM = 32
_INT64_MAX = (1 << 63) - 1
#: Manifests (and specs) remembered, encoded and decoded: a producer making a fresh tensor
#: of the same shape each step, and its consumer, parse and check each once (9 us of a
#: 4 KiB hand-off's Python overhead was decode() alone).
_CACHED = 256


@dataclass(frozen=True)
class TensorSpec:
    """Where one tensor lies in a buffer.  Immutable: what is derived from it is
    computed once (cached_property writes the instance's dict, which frozen allows)."""
    name: str
    dtype: dtypes.DType
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]  #: in elements
    offset: int               #: bytes from the buffer's start to element [0, ..., 0]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @functools.cached_property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for extent in self.shape:
            n *= extent
        return n

    @functools.cached_property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @functools.cached_property
    def contiguous(self) -> bool:
        return self.size == 0 or all(
            s == c for s, c, e in zip(self.strides, contiguous_strides(self.shape), self.shape)
            if e != 1)

    @functools.cached_property
    def _span(self) -> Tuple[int, int]:
        if any(extent == 0 for extent in self.shape):
            return self.offset, self.offset
        lowest = sum((e - 1) * s for e, s in zip(self.shape, self.strides) if s < 0)
        highest = sum((e - 1) * s for e, s in zip(self.shape, self.strides) if s > 0)
        size = self.dtype.itemsize
        return self.offset + lowest * size, self.offset + (highest + 1) * size

    @functools.cached_property
    def _array_template(self) -> Tuple[Any, ...]:
        """What NumPy's array interface of this tensor says besides its data: shape,
        typestr, strides in bytes (None: C-contiguous), then the span's first byte, its
        length, and element [0, ...]'s offset in it (gpushm._speedups builds the dict)."""
        first, end = self._span
        strides = None if self.contiguous else tuple(
            s * self.dtype.itemsize for s in self.strides)
        return self.shape, self.dtype.typestr, strides, first, end - first, self.offset - first

    def span(self) -> Tuple[int, int]:
        """Bytes [first, end) of the buffer its elements occupy; (offset, offset) if none."""
        return self._span

    def to_json(self) -> dict:
        return {"name": self.name, "dtype": self.dtype.name, "shape": list(self.shape),
                "strides": list(self.strides), "offset": self.offset}


def contiguous_strides(shape: Sequence[int]) -> Tuple[int, ...]:
    """C-order strides, in elements."""
    strides = []
    step = 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


def alignment(dtype: dtypes.DType) -> int:
    """What the C library requires of an element's address: the largest power of two that
    divides its size, at most 16."""
    size = dtype.itemsize
    return min(size & -size, 16)


def _int(value: Any, what: str, minimum: Optional[int] = None) -> int:
    # bool is an int to Python, and 1.0 is not one to JSON's readers: both refused
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError(f"{what} is {value!r}, not an integer")
    if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        raise ManifestError(f"{what} is {value}, out of the 64-bit range")
    if minimum is not None and value < minimum:
        raise ManifestError(f"{what} is {value}, below {minimum}")
    return value


def make_spec(name: str, dtype: Any, shape: Union[int, Iterable[int]],
              strides: Optional[Iterable[int]] = None, offset: int = 0) -> TensorSpec:
    """A TensorSpec from loose arguments, each checked (ManifestError if malformed)."""
    # The common call (a str name, a shape of plain ints, no strides) is remembered; only
    # exact types, so that 1.0 or True never passes for an int through an equal key.
    if type(shape) is int:
        shape = (shape,)
    if (strides is None and type(name) is str and type(offset) is int and type(shape) is tuple
            and all(type(e) is int for e in shape) and isinstance(dtype, (str, dtypes.DType))):
        return _contiguous_spec(name, dtype, shape, offset)
    return _make_spec(name, dtype, shape, strides, offset)


@functools.lru_cache(maxsize=_CACHED)
def _contiguous_spec(name: str, dtype: Any, shape: Tuple[int, ...], offset: int) -> TensorSpec:
    return _make_spec(name, dtype, shape, None, offset)


def _make_spec(name: str, dtype: Any, shape: Union[int, Iterable[int]],
               strides: Optional[Iterable[int]], offset: int) -> TensorSpec:
    if not isinstance(name, str):
        raise ManifestError(f"tensor name {name!r} is not a string")
    try:
        dt = dtypes.dtype(dtype)
    except TypeError as e:
        raise ManifestError(f"tensor {name!r}: {e}") from None
    if isinstance(shape, int):
        shape = (shape,)
    shape_t = tuple(_int(e, f"tensor {name!r}: extent", 0) for e in shape)
    if len(shape_t) > MAX_NDIM:
        raise ManifestError(f"tensor {name!r} has {len(shape_t)} dimensions, more than {MAX_NDIM}")
    if strides is None:
        strides_t = contiguous_strides(shape_t)
    else:
        strides_t = tuple(_int(s, f"tensor {name!r}: stride") for s in strides)
        if len(strides_t) != len(shape_t):
            raise ManifestError(f"tensor {name!r}: {len(strides_t)} strides for "
                                f"{len(shape_t)} dimensions")
    return TensorSpec(name, dt, shape_t, strides_t, _int(offset, f"tensor {name!r}: offset", 0))


def check_bounds(spec: TensorSpec, buffer_size: int) -> None:
    """ManifestError unless every element of spec lies in [0, buffer_size), aligned."""
    if spec.__dict__.get("_fits") == buffer_size:  # the last size it was checked against
        return
    first, end = spec.span()
    if spec.offset > buffer_size or first < 0 or end > buffer_size:
        raise ManifestError(
            f"tensor {spec.name!r} ({spec.dtype.name}, shape {list(spec.shape)}, strides "
            f"{list(spec.strides)}, offset {spec.offset}) spans bytes [{first}, {end}), "
            f"outside the buffer's {buffer_size} bytes")
    if end - first > _INT64_MAX:
        raise ManifestError(f"tensor {spec.name!r} spans more than 2^63 bytes")
    if spec.offset % alignment(spec.dtype):
        raise ManifestError(f"tensor {spec.name!r}: offset {spec.offset} is not a multiple of "
                            f"{alignment(spec.dtype)}, as {spec.dtype.name} elements need")
    spec.__dict__["_fits"] = buffer_size


def encode(specs: Sequence[TensorSpec]) -> bytes:
    """The manifest of specs, as compact JSON (LimitExceeded past MAX_BYTES)."""
    return _encode(tuple(specs))


@functools.lru_cache(maxsize=_CACHED)
def _encode(specs: Tuple[TensorSpec, ...]) -> bytes:
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ManifestError(f"tensor names repeat: {names}")
    data = json.dumps({"gpushm": VERSION, "tensors": [s.to_json() for s in specs]},
                      separators=(",", ":")).encode()
    if len(data) > MAX_BYTES:
        raise make_error(CODES["LIMIT"], f"the manifest of {len(specs)} tensors takes "
                         f"{len(data)} bytes, more than the {MAX_BYTES} a buffer's metadata "
                         f"may hold: share fewer tensors per buffer (or shorter names)",
                         "manifest", "limit or quota exceeded")
    return data


def decode(data: Optional[bytes], buffer_size: int) -> Optional[List[TensorSpec]]:
    """The tensors metadata describes, each checked against the buffer (ManifestError if
    anything is amiss); None if the buffer carries no metadata."""
    if not data:
        return None
    return list(_decode(bytes(data), buffer_size))  # a malformed one is not remembered


@functools.lru_cache(maxsize=_CACHED)
def _decode(data: bytes, buffer_size: int) -> Tuple[TensorSpec, ...]:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        # RecursionError: nesting deeper than the interpreter's limit ("[[[[...")
        raise ManifestError(f"the buffer's metadata is not a gpushm manifest (not JSON: {e}); "
                            f"name the dtype and shape yourself") from None
    if not isinstance(doc, dict) or "gpushm" not in doc:
        raise ManifestError("the buffer's metadata is not a gpushm manifest (no \"gpushm\" "
                            "version); name the dtype and shape yourself")
    version = _int(doc["gpushm"], "manifest version", 1)
    if version > VERSION:
        raise ManifestError(f"manifest version {version} is newer than this package's "
                            f"({VERSION}): upgrade the gpushm Python package")
    tensors = doc.get("tensors")
    if not isinstance(tensors, list) or not tensors:
        raise ManifestError("manifest: \"tensors\" must be a non-empty list")
    specs = []
    for i, t in enumerate(tensors):
        if not isinstance(t, dict):
            raise ManifestError(f"manifest: tensor {i} is not an object")
        name = t.get("name", "")
        shape = t.get("shape")
        strides = t.get("strides")
        if not isinstance(shape, list) or (strides is not None and not isinstance(strides, list)):
            raise ManifestError(f"manifest: tensor {i}: shape and strides must be lists")
        if not isinstance(t.get("dtype"), str):
            raise ManifestError(f"manifest: tensor {i}: dtype must be a name")
        spec = make_spec(name, t["dtype"], shape, strides, t.get("offset", 0))
        check_bounds(spec, buffer_size)
        specs.append(spec)
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ManifestError(f"manifest: tensor names repeat: {names}")
    return tuple(specs)

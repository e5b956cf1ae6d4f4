# SPDX-License-Identifier: MIT
"""Element types, without NumPy or PyTorch: a small table of what DLPack, the array
interfaces and the manifest call each type.

``dtype(x)`` accepts a ``DType``, a name (``"float32"``, ``"bfloat16"``), a NumPy type
string (``"<f4"``, ``"f4"``), a NumPy, CuPy or PyTorch dtype object (``numpy.float32``,
``torch.float16``: read through their names, never imported), or the Python types
``float``, ``int``, ``bool`` and ``complex`` (NumPy's defaults for them).
"""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from typing import Any, Dict, Optional

# DLDataTypeCode (gpushm-dlpack.h)
DL_INT, DL_UINT, DL_FLOAT, DL_BFLOAT, DL_COMPLEX, DL_BOOL = 0, 1, 2, 4, 5, 6


@dataclass(frozen=True)
class DType:
    """An element type.  ``name`` is what manifests store."""
    name: str
    code: int        #: DLPack type code
    bits: int        #: bits of one element
    kind: Optional[str]  #: NumPy's kind letter ("f", "i", "u", "b", "c"); None: no NumPy type

    @property
    def itemsize(self) -> int:
        return self.bits // 8

    @functools.cached_property
    def typestr(self) -> str:
        """The array interfaces' type string ("<f4", "|b1", ...)."""
        if self.kind is None:
            raise TypeError(f"{self.name} has no NumPy type string: the array interfaces "
                            f"(__array_interface__, __cuda_array_interface__) cannot describe "
                            f"it; use DLPack (torch.from_dlpack)")
        order = "|" if self.itemsize == 1 else ("<" if sys.byteorder == "little" else ">")
        return f"{order}{self.kind}{self.itemsize}"

    def __str__(self) -> str:
        return self.name


_TABLE = [
    DType("bool", DL_BOOL, 8, "b"),
    DType("int8", DL_INT, 8, "i"),
    DType("int16", DL_INT, 16, "i"),
    DType("int32", DL_INT, 32, "i"),
    DType("int64", DL_INT, 64, "i"),
    DType("uint8", DL_UINT, 8, "u"),
    DType("uint16", DL_UINT, 16, "u"),
    DType("uint32", DL_UINT, 32, "u"),
    DType("uint64", DL_UINT, 64, "u"),
    DType("float16", DL_FLOAT, 16, "f"),
    DType("bfloat16", DL_BFLOAT, 16, None),
    DType("float32", DL_FLOAT, 32, "f"),
    DType("float64", DL_FLOAT, 64, "f"),
    DType("complex64", DL_COMPLEX, 64, "c"),
    DType("complex128", DL_COMPLEX, 128, "c"),
]

#: Every supported type by its name.
BY_NAME: Dict[str, DType] = {d.name: d for d in _TABLE}
_BY_DLPACK = {(d.code, d.bits): d for d in _TABLE}
_BY_KIND = {(d.kind, d.itemsize): d for d in _TABLE if d.kind}
# Only names that mean one thing everywhere ("float" is float32 to PyTorch and float64 to
# NumPy: not accepted as a string; the type float is NumPy's float64).
_ALIASES = {"bool_": "bool", "half": "float16", "double": "float64", "cfloat": "complex64",
            "cdouble": "complex128"}
_PY_TYPES = {float: "float64", int: "int64", bool: "bool", complex: "complex128"}

bool_ = BY_NAME["bool"]
int8, int16, int32, int64 = (BY_NAME[n] for n in ("int8", "int16", "int32", "int64"))
uint8, uint16, uint32, uint64 = (BY_NAME[n] for n in ("uint8", "uint16", "uint32", "uint64"))
float16, bfloat16 = BY_NAME["float16"], BY_NAME["bfloat16"]
float32, float64 = BY_NAME["float32"], BY_NAME["float64"]
complex64, complex128 = BY_NAME["complex64"], BY_NAME["complex128"]


def from_dlpack(code: int, bits: int, lanes: int = 1) -> DType:
    """The type of a DLPack dtype triple."""
    d = _BY_DLPACK.get((code, bits))
    if d is None or lanes != 1:
        raise TypeError(f"unsupported DLPack dtype (code {code}, {bits} bits, {lanes} lanes)")
    return d


def _from_string(s: str) -> Optional[DType]:
    s = s.strip()
    if s.startswith("torch."):   # str(torch.float32)
        s = s[len("torch."):]
    s = _ALIASES.get(s, s)
    if s in BY_NAME:
        return BY_NAME[s]
    # NumPy type strings: "<f4", "|u1", "=i8", "f8", "c16"
    order = ""
    if s and s[0] in "<>|=":  # (s[:1] of "" is "", which is "in" any string)
        order, s = s[0], s[1:]
    if len(s) >= 2 and s[0] in "biufc" and s[1:].isdigit():
        if order == ">" or (order == "=" and sys.byteorder != "little"):
            raise TypeError(f"big-endian type {order}{s}: gpushm shares memory as it lies")
        return _BY_KIND.get((s[0], int(s[1:])))
    return None


def dtype(x: Any) -> DType:
    """The DType of x (see the module's documentation); TypeError if there is none."""
    if isinstance(x, DType):
        return x
    if isinstance(x, type) and x in _PY_TYPES:
        return BY_NAME[_PY_TYPES[x]]
    if isinstance(x, str):
        d = _from_string(x)
        if d is None:
            raise TypeError(f"unknown dtype {x!r}; known: {', '.join(BY_NAME)}")
        return d
    # A NumPy/CuPy dtype or scalar type (numpy.dtype("f4"), numpy.float32), a PyTorch dtype
    # (torch.float32, whose str() is "torch.float32"), ml_dtypes' bfloat16: by name.
    for candidate in (getattr(x, "name", None), getattr(getattr(x, "dtype", None), "name", None),
                      getattr(x, "__name__", None), str(x)):
        if isinstance(candidate, str):
            d = _from_string(candidate)
            if d is not None:
                return d
    raise TypeError(f"cannot tell the dtype of {x!r}")

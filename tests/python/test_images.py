# SPDX-License-Identifier: MIT
"""Images from Python (docs/graphics.md): a linear image made and opened as a tensor of
(height, width, channels) whose rows lie its pitch apart, written through NumPy and read
back by another open; an optimal-tiling image refused with what reads it instead."""
import ctypes

import pytest

import gpushm
from gpushm import _lib

np = pytest.importorskip("numpy")


def test_linear_image_as_tensor(conn, name):
    t = gpushm.create_image(name, 100, 30, format="rgba8-unorm", conn=conn)
    img = t.buffer.image
    assert img.width == 100 and img.height == 30 and img.tiling == "linear"
    assert img.row_pitch == 512  # 400 bytes of texels a row, rounded up to 256
    a = np.asarray(t)
    assert a.shape == (30, 100, 4) and a.dtype == np.uint8 and a.strides == (512, 4, 1)
    a[...] = np.arange(30 * 100 * 4, dtype=np.uint32).reshape(30, 100, 4) % 251
    b = np.asarray(gpushm.open(name, conn=conn))  # another open, the same texels
    assert b.shape == (30, 100, 4) and (b == a).all()
    t.close()


def test_image_formats(conn, name):
    t = gpushm.create_image(name, 8, 2, format="rg32-sfloat", conn=conn)
    a = np.asarray(t)
    assert a.shape == (2, 8, 2) and a.dtype == np.float32
    assert t.buffer.image.row_pitch == 256
    t.close()
    with pytest.raises(gpushm.InvalidArgument, match="unknown image format"):
        gpushm.create_image(name + "x", 8, 2, format="rgba7", conn=conn)
    with pytest.raises(gpushm.LimitExceeded):
        gpushm.create_image(name + "y", 20000, 2, conn=conn)


def test_optimal_image_refused_with_what_reads_it(conn, name):
    # an optimal-tiling image is registered memory (here a memfd stands for a Vulkan export)
    import os
    fd = os.memfd_create("export", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)  # gpushmd seals it
    os.ftruncate(fd, 1 << 20)

    class ExternalMemory(ctypes.Structure):
        _fields_ = [("size", ctypes.c_uint32), ("handle_type", ctypes.c_uint32),
                    ("fd", ctypes.c_int32), ("flags", ctypes.c_uint32),
                    ("allocation_size", ctypes.c_uint64), ("data_size", ctypes.c_uint64),
                    ("memory_type_index", ctypes.c_uint32),
                    ("device_uuid", ctypes.c_uint8 * 16), ("driver_uuid", ctypes.c_uint8 * 16),
                    ("driver_info", ctypes.c_char * 64), ("image", ctypes.c_void_p)]

    # the fake driver's first GPU (conftest), so that a CUDA open can map its array
    lib = _lib.lib
    lib.gpushm_local_devices.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.gpushm_local_device_list_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.gpushm_local_device_list_get.restype = ctypes.c_void_p
    lib.gpushm_local_device_uuid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.gpushm_local_device_list_free.argtypes = [ctypes.c_void_p]
    devices, uuid = ctypes.c_void_p(), ctypes.create_string_buffer(16)
    if lib.gpushm_local_devices(ctypes.byref(devices)) != 0:
        pytest.skip("no CUDA driver here (not even the fake one)")
    assert lib.gpushm_local_device_uuid(lib.gpushm_local_device_list_get(devices, 0), uuid) == 0
    lib.gpushm_local_device_list_free(devices)
    desc = _lib.ImageDesc(size=ctypes.sizeof(_lib.ImageDesc), format=3, width=64, height=64,
                          depth=1, mip_levels=1, array_layers=1, tiling=1, usage=1, row_pitch=0)
    mem = ExternalMemory(size=ctypes.sizeof(ExternalMemory), handle_type=1, fd=fd,
                         allocation_size=1 << 20, image=ctypes.addressof(desc))
    ctypes.memmove(mem.device_uuid, uuid.raw, 16)
    out = ctypes.c_void_p()
    f = _lib.lib.gpushm_register_memory
    f.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                  ctypes.POINTER(ctypes.c_void_p)]
    f.restype = ctypes.c_int
    assert f(conn._live()[1], name.encode(), ctypes.addressof(mem), None, ctypes.byref(out)) == 0
    os.close(fd)
    with pytest.raises(gpushm.Unsupported, match="optimal-tiling image.*CUarray"):
        gpushm.open(name, conn=conn, device="cpu")

#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch consumer: opens a buffer by name as a CUDA tensor, without a copy, and checks
it on the GPU (the C producer, c_producer.c, wrote x[i] = i / 2 as float32).
Usage: torch_consumer.py [NAME [N]]

gpushm-specific lines: the import and the open()."""
import sys

import torch

import gpushm

name = sys.argv[1] if len(sys.argv) > 1 else "py-demo"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20

x = torch.from_dlpack(gpushm.open(name))   # shape and dtype from the buffer's manifest
expected = torch.arange(n, dtype=torch.float32, device=x.device) * 0.5
assert x.is_cuda and x.dtype == torch.float32 and x.shape == (n,), (x.device, x.dtype, x.shape)
assert torch.equal(x, expected), "wrong data"
print(f"torch_consumer: {n} floats of '{name}' verified on {x.device}")

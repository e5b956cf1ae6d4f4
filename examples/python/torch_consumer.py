#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch consumer: opens a buffer by name as a CUDA tensor, without a copy, and checks
it on the GPU (the C producer, c_producer.c, wrote x[i] = i / 2 as float32).
Usage: torch_consumer.py [NAME [N]]

gpushm-specific lines: the import and the open()."""
import argparse

ap = argparse.ArgumentParser(
    description="Opens the gpushm buffer NAME (c-producer NAME N made it) as a CUDA tensor "
    "without a copy and checks x[i] = i / 2 over its N floats on the GPU. Success prints "
    "'torch_consumer: N floats of 'NAME' verified on cuda:0', exit 0.")
ap.add_argument("name", nargs="?", default="py-demo", metavar="NAME")
ap.add_argument("n", nargs="?", type=int, default=1 << 20, metavar="N")
args = ap.parse_args()
name, n = args.name, args.n

import torch  # noqa: E402  (after the arguments: --help needs no PyTorch)

import gpushm  # noqa: E402

x = torch.from_dlpack(gpushm.open(name))   # shape and dtype from the buffer's manifest
expected = torch.arange(n, dtype=torch.float32, device=x.device) * 0.5
assert x.is_cuda and x.dtype == torch.float32 and x.shape == (n,), (x.device, x.dtype, x.shape)
assert torch.equal(x, expected), "wrong data"
print(f"torch_consumer: {n} floats of '{name}' verified on {x.device}")

#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch producer: puts a CUDA tensor into a gpushm buffer by name and exits.  The
buffer outlives this process (gpushmd owns it); a consumer in any language opens it by
name (c_consumer.c reads it back).  Usage: torch_producer.py [NAME [N]]

gpushm-specific lines: the import and the share()."""
import sys

import torch

import gpushm

name = sys.argv[1] if len(sys.argv) > 1 else "py-demo"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20

x = torch.arange(n, dtype=torch.float32, device="cuda") * 0.5   # x[i] = i / 2
t = gpushm.share(name, x, mode=0o644)   # a copy in gpushmd's buffer, manifest included
print(f"torch_producer: {t!r} shared; it stays after this process exits")

#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch producer: puts a CUDA tensor into a gpushm buffer by name and exits.  The
buffer outlives this process (gpushmd owns it); a consumer in any language opens it by
name (c_consumer.c reads it back).  Usage: torch_producer.py [NAME [N]]

gpushm-specific lines: the import and the share()."""
import argparse

ap = argparse.ArgumentParser(
    description="Shares x[i] = i / 2 (float32[N], a CUDA tensor) as the gpushm buffer NAME, "
    "which stays after this process exits; c-consumer NAME checks it. Success prints "
    "'torch_producer: Tensor(...) shared; ...', exit 0.")
ap.add_argument("name", nargs="?", default="py-demo", metavar="NAME")
ap.add_argument("n", nargs="?", type=int, default=1 << 20, metavar="N")
args = ap.parse_args()
name, n = args.name, args.n

import torch  # noqa: E402  (after the arguments: --help needs no PyTorch)

import gpushm  # noqa: E402

x = torch.arange(n, dtype=torch.float32, device="cuda") * 0.5   # x[i] = i / 2
t = gpushm.share(name, x, mode=0o644)   # a copy in gpushmd's buffer, manifest included
print(f"torch_producer: {t!r} shared; it stays after this process exits")

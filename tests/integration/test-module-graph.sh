#!/bin/sh
# SPDX-License-Identifier: MIT
# The layering docs/architecture.md states, checked on the objects just built: no two
# modules of the library, the daemon or gpushmctl call each other in a circle, and no
# daemon layer calls one above it (scripts/module-graph reads their symbol tables).
set -eu
b=${GPUSHM_TEST_BUILDDIR:?}
s=${GPUSHM_TEST_SRCDIR:?}
command -v nm >/dev/null || { echo "nm (binutils) is needed"; exit 1; }
exec python3 "$s/scripts/module-graph" "$b"

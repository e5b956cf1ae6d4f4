#!/bin/sh
# SPDX-License-Identifier: MIT
# The layering docs/architecture.md states, checked on the objects just built and on the
# sources: no two modules of the library, the daemon or gpushmctl call or include each
# other in a circle, and no daemon layer calls or includes one above it
# (scripts/module-graph reads the objects' symbol tables and the sources' includes).
set -eu
b=${GPUSHM_TEST_BUILDDIR:?}
s=${GPUSHM_TEST_SRCDIR:?}
command -v nm >/dev/null || { echo "nm (binutils) is needed"; exit 1; }
exec python3 "$s/scripts/module-graph" "$b" "$s"

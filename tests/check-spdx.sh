#!/bin/sh
# SPDX-License-Identifier: MIT
# Every source file of the tree says its licence (SPDX-License-Identifier: MIT): the
# files git tracks in a checkout, else (a release tarball) every file under the tree.
# Data that cannot carry a comment (JSON, golden outputs, images, Debian's package
# metadata, empty markers) is listed below, by pattern, with the reason.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && [ -n "$(git ls-files | head -n 1)" ]; then
  list() { git ls-files; }
else
  # a tarball's tree also holds distcheck's build and install trees (_build/, _inst/)
  list() { find . \( -path ./.git -o -path './_*' \) -prune -o -type f -print | sed 's|^\./||'; }
fi
missing=$(list | while IFS= read -r f; do
  case "$f" in
    # data formats without comments, and outputs compared byte for byte
    *.json|*.png|*.spv|tests/golden/*) continue ;;
    LICENSE) continue ;; # the licence itself
    # empty markers; Debian's package metadata (deb822 and dh lists; debian/copyright
    # states the licence itself)
    */.keep|*/py.typed|debian/changelog|debian/control|debian/copyright|debian/*.install|\
    debian/*.symbols|debian/not-installed|debian/source/format) continue ;;
    # what autotools, the build and packaging generate in a tarball's tree
    Makefile.in|configure|aclocal.m4|config.h.in|build-aux/*|m4/libtool.m4|m4/lt*.m4|\
    *.pb-c.c|*.pb-c.h|*.spv.h) continue ;;
  esac
  [ -f "$f" ] || continue
  grep -q 'SPDX-License-Identifier: MIT' "$f" || echo "$f"
done)
if [ -n "$missing" ]; then
  echo "FAIL: these files do not say SPDX-License-Identifier: MIT:"
  echo "$missing" | sed 's/^/  /'
  exit 1
fi
echo "every source file carries SPDX-License-Identifier: MIT"

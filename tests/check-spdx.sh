#!/bin/sh
# SPDX-License-Identifier: MIT
# Every source file of the tree says its licence (SPDX-License-Identifier: MIT): the
# files git tracks in a checkout; elsewhere (a release tarball built in place, a Debian
# build from a clean export) the files a release ships, as make lists them in
# tests/shipped-files.txt (automake's DISTFILES), never what a build left beside them.
# Data that cannot carry a comment (JSON, golden outputs, images, Debian's package
# metadata, empty markers) is listed below, by pattern, with the reason.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
shipped=${GPUSHM_TEST_BUILDDIR:-$src}/tests/shipped-files.txt
if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$src" ]; then
  list() { git ls-files; }
elif [ -f "$shipped" ]; then
  # an entry may be a directory, which make dist copies whole
  list() {
    while IFS= read -r f; do
      if [ -d "$f" ]; then find "$f" -type f; else echo "$f"; fi
    done < "$shipped"
  }
else
  echo "FAIL: no git checkout here and no $shipped (make check makes it): nothing says what this tree ships"
  exit 1
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
echo "every source file carries SPDX-License-Identifier: MIT ($(list | wc -l) files)"

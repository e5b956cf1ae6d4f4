#!/bin/sh
# SPDX-License-Identifier: MIT
# The documentation holds together: every relative link of README.md, HACKING.md and
# docs/*.md resolves, to a file and to a heading (tests/check-doc-links.py), and the
# benchmark plots and tables that scripts/plot-bench generates match their data,
# docs/perf/figures.tsv, so that they cannot drift apart unnoticed.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
command -v python3 >/dev/null || { echo "python3 is needed"; exit 1; }
python3 "$src/tests/check-doc-links.py" "$src"
python3 "$src/scripts/plot-bench" --check

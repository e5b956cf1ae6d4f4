#!/bin/sh
# SPDX-License-Identifier: MIT
# What --help says exists is documented where users look: every gpushmd option in
# gpushmd(8) and the README's daemon synopsis, every gpushmctl command in gpushmctl(1)
# and the README, every option of each command in gpushmctl(1).  A new option or command
# without its documentation fails here, naming what is missing and where.
set -eu
b=${GPUSHM_TEST_BUILDDIR:?}
src=$(cd "$(dirname "$0")/.." && pwd)
gpushmd=${GPUSHMD:-$b/daemon/gpushmd}
ctl=$b/ctl/gpushmctl
missing=""
note() { missing="$missing
  $1"; }
# roff spells a long option's dashes \-\-
in_man() { grep -qF -- "$(printf '%s' "$2" | sed 's/-/\\-/g')" "$1"; }

readme=$src/README.md
# the daemon's synopsis: the first code block after "## Daemon"
synopsis=$(awk '/^## Daemon/ { in_section = 1; next }
                in_section && /^```/ { if (in_block) exit; in_block = 1; next }
                in_block' "$readme")

options=$("$gpushmd" --help | grep -o -- '--[a-z][a-z-]*' | sort -u)
[ -n "$options" ] || { echo "FAIL: gpushmd --help lists no options"; exit 1; }
for o in $options; do
  in_man "$src/man/gpushmd.8.in" "$o" || note "gpushmd $o: not in man/gpushmd.8.in"
  printf '%s\n' "$synopsis" | grep -qF -- "$o" || note "gpushmd $o: not in the README's daemon synopsis"
done

commands=$("$ctl" --help | sed -n '/^Commands:/,/^$/p' | awk 'NR > 1 && NF { print $1 }')
[ -n "$commands" ] || { echo "FAIL: gpushmctl --help lists no commands"; exit 1; }
for c in $commands; do
  grep -Eq "^\.BR? $c( |\$)" "$src/man/gpushmctl.1.in" || note "gpushmctl $c: no '.B $c' entry in man/gpushmctl.1.in"
  grep -qF -- "\`$c\`" "$readme" || note "gpushmctl $c: not named in the README"
  for o in $("$ctl" "$c" --help | sed -n '3,$p' | grep -o -- '--[a-z][a-z-]*' | sort -u); do
    in_man "$src/man/gpushmctl.1.in" "$o" || note "gpushmctl $c $o: not in man/gpushmctl.1.in"
  done
done
for o in $("$ctl" --help | grep -o -- '--[a-z][a-z-]*' | sort -u); do
  in_man "$src/man/gpushmctl.1.in" "$o" || note "gpushmctl $o: not in man/gpushmctl.1.in"
done

if [ -n "$missing" ]; then
  echo "FAIL: documentation lags behind --help:$missing"
  exit 1
fi
echo "every gpushmd option ($(echo "$options" | wc -l)) and gpushmctl command ($(echo "$commands" | wc -l)) is documented"

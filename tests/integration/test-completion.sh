#!/bin/sh
# SPDX-License-Identifier: MIT
# The shell completions (completion/) offer what gpushmctl takes, no more and no less:
# every command 'gpushmctl --help' lists (aliases too) and every option
# 'gpushmctl COMMAND --help' lists, in both files; backends and formats gpushmctl
# accepts, image formats as proto/formats.c names them; buffer names from a running
# gpushmd.  The bash file is run (its function driven as bash's completion would); the
# zsh file is read one command's branch at a time, and parsed where zsh is installed.
set -eu
b=${GPUSHM_TEST_BUILDDIR:?}
src=${GPUSHM_TEST_SRCDIR:?}
ctl=$b/ctl/gpushmctl
bash_file=$src/completion/gpushmctl.bash
zsh_file=$src/completion/_gpushmctl
dir=$(mktemp -d /tmp/gpushm-completion.XXXXXX)
daemon=""
cleanup() {
  [ -z "$daemon" ] || kill -9 "$daemon" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v bash >/dev/null || fail "bash is needed"
bash -n "$bash_file" || fail "$bash_file does not parse"
if command -v zsh >/dev/null; then
  zsh -n "$zsh_file" || fail "$zsh_file does not parse"
else
  echo "# no zsh here: $zsh_file is only read, not parsed"
fi

# offered WORD...: what the bash completion offers for the last word, one a line, sorted
offered() {
  bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _gpushmctl
           printf "%s\n" "${COMPREPLY[@]}"' offered "$bash_file" "$@" | sed '/^$/d' | sort
}
# same WHAT A B: the two sorted lists are equal
same() {
  [ "$2" = "$3" ] || fail "$1 differ:
--- gpushmctl
$2
--- completion
$3"
}
sorted() { tr ' ' '\n' | sed '/^$/d' | sort; }
# The branch of the zsh file for command $1: from its "(NAME)" or "(NAME|ALIAS)" to ";;".
zsh_branch() {
  awk -v c="$1" '
    { line = $0; gsub(/^ +| +$/, "", line) }
    line ~ /^\([a-z|-]+\)$/ { n = split(substr(line, 2, length(line) - 2), names, "|")
                              on = 0; for (i = 1; i <= n; i++) if (names[i] == c) on = 1; next }
    on && line == ";;" { exit }
    on { print }' "$zsh_file"
}
# The options of a zsh branch: quoted specs that start with --name, or whose exclusion
# list ")" is followed by it; $common brings --help and --socket.
zsh_options() {
  branch=$(zsh_branch "$1")
  [ -n "$branch" ] || fail "$zsh_file has no branch for $1"
  { echo "$branch" | grep -oE "[\"')]--[a-z-]+" | cut -c2-
    case $branch in *'$common'*) echo --help; echo --socket ;; esac; } | sort -u
}

# --- commands
help=$("$ctl" --help)
commands=$(echo "$help" | awk '/^Commands:/ {on = 1; next} on && /^$/ {exit} on && /^  [^ ]/ {print $1}')
aliases=$(echo "$help" | sed -n "s/.*(also '\([a-z-]*\)').*/\1/p")
[ "$(echo "$commands" | wc -l)" -ge 13 ] || fail "too few commands in --help: $help"
all=$(printf '%s\n%s\n' "$commands" "$aliases" | sort)
same "commands (bash)" "$(printf '%s\n' $all --help --socket --version | sort)" "$(offered "$ctl" "")"
zsh_commands=$(sed -n "/^  commands=(/,/^  )/s/^    '\([a-z-]*\):.*/\1/p" "$zsh_file" | sort)
same "commands (zsh)" "$all" "$zsh_commands"

# --- each command's options
for c in $all; do
  help_options=$({ "$ctl" "$c" --help | awk '/^  --/ {print $1}'; echo --help; echo --socket; } | sort -u)
  same "options of $c (bash)" "$help_options" "$(offered "$ctl" "$c" --)"
  same "options of $c (zsh)" "$help_options" "$(zsh_options "$c")"
done

# --- option values: what gpushmctl accepts (a usage error exits 2 before connecting;
# accepted, it fails to connect and exits 1)
nowhere=$dir/no-daemon.sock
accepted() {
  set +e; "$ctl" --socket "$nowhere" "$@" >/dev/null 2>&1; rc=$?; set -e
  [ "$rc" = 1 ] || fail "gpushmctl $* exited $rc: a completion offers what it refuses"
}
backends=$(offered "$ctl" create x 1 --backend "")
same "create's backends" "$(echo host cuda-ipc cuda-fd cuda-fabric | sorted)" "$backends"
for v in $backends; do accepted create x 1 --backend "$v"; done
for v in $(offered "$ctl" doctor --backend ""); do
  case $v in host|cuda-ipc|cuda-fd) ;; *) fail "doctor judges no $v" ;; esac
done
formats=$(sed -n 's/^ *\[[0-9]*\] = { "\([a-z0-9-]*\)".*/\1/p' "$src/proto/formats.c" | sort)
[ -n "$formats" ] || fail "no image formats in proto/formats.c"
same "image formats (bash)" "$formats" "$(offered "$ctl" create-image x 1x1 --format "")"
zsh_formats=$(sed -n '/^  formats=(/,/)/p' "$zsh_file" | tr -d '()' | sed 's/formats=//' | sorted)
same "image formats (zsh)" "$formats" "$zsh_formats"
for v in $formats; do accepted create-image x 1x1 --format "$v"; done
same "dump's formats" "$(echo hex raw | sorted)" "$(offered "$ctl" dump x --format "")"
for v in hex raw; do accepted dump x --format "$v"; done
offered "$ctl" stats --textfile "$src/completion/gpushmctl.b" | grep -qx "$bash_file" ||
  fail "--textfile completes no file name"

# --- buffer names, from the daemon the socket names
export GPUSHM_SOCKET="$dir/gpushmd.sock"
"$GPUSHMD" --socket "$GPUSHM_SOCKET" --socket-group none --log-level warn &
daemon=$!
i=0
until "$ctl" ping >/dev/null 2>&1; do
  i=$((i + 1)); [ $i -lt 500 ] || fail "gpushmd did not answer"; sleep 0.02
done
"$ctl" create alpha 1 --metadata '{"name":"not-a-buffer"}' >/dev/null
"$ctl" create beta 1 >/dev/null
same "buffer names" "$(echo alpha beta | sorted)" "$(offered "$ctl" show "")"
same "buffer names by prefix" alpha "$(offered "$ctl" dump --offset 1 a)"
same "an unlink's one argument" "" "$(offered "$ctl" unlink alpha "")"
# --socket on the command line is the daemon asked
unset GPUSHM_SOCKET
same "buffer names (--socket)" "$(echo alpha beta | sorted)" \
  "$(offered "$ctl" --socket "$dir/gpushmd.sock" unlink "")"
kill "$daemon"; wait "$daemon" 2>/dev/null || true; daemon=""
echo "completion tests passed"

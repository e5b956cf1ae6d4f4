#!/bin/bash
# SPDX-License-Identifier: MIT
# The Debian packages (debian/), built and used as a user would: from a clean copy of
# the source tree, dpkg-buildpackage -b; lintian with no errors; apt-get install of the
# five packages; the INSTALLED gpushmd, with the installed settings file, on a private
# socket, driven by the installed gpushmctl, by a C program built with
# "pkg-config gpushm" against libgpushm-dev, by the examples libgpushm-dev ships (built
# with their Makefile outside the tree; the host-memory producer and consumer pair run),
# and by python3-gpushm; then apt-get purge, after which no file the packages installed
# may be left.
#
# Usage: tests/system/test-debian-packages.sh [SRCDIR]   (default: this script's tree)
# Environment: GPUSHM_DEB_OUT  a directory to copy the built .deb files into (kept).
# Exit status: 0 every check passed, 1 a check failed, 77 this machine cannot run the
# test (one line says why).  It installs and purges packages: root, and no gpushm
# packages installed beforehand (it would purge them).
# shellcheck disable=SC2086,SC2046  # $packages, $debs, pkg-config's output: lists of words
set -eu
set -o pipefail

say() { printf '%s\n' "$*"; }
skip() { say "SKIP: $*"; exit 77; }
die() { say "FAIL: $*"; exit 1; }
ok() { say "ok - $*"; }

src=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
[ -f "$src/debian/control" ] || die "$src has no debian/control"
t0=$(date +%s)

# --- can this machine run it? -----------------------------------------------------
[ "$(id -u)" -eq 0 ] || skip "needs root (apt-get install and purge)"
for tool in dpkg-buildpackage dh lintian apt-get pkg-config cc make /usr/bin/python3; do
  command -v "$tool" >/dev/null || skip "$tool missing (scripts/setup-debian installs it)"
done
packages=$(sed -n 's/^Package: *//p' "$src/debian/control")
for p in $packages; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'installed$'; then
    skip "package $p is installed already; this test would purge it"
  fi
done
group_existed=no
getent group gpushm >/dev/null && group_existed=yes
# Other work on this machine may hold the dpkg lock for a while: wait for it.
apt_get() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 "$@"; }

work=$(mktemp -d /var/tmp/gpushm-deb.XXXXXX)
chmod 755 "$work"   # apt-get reads the local .deb files as _apt
daemon_pid=
installed=no
teardown() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$daemon_pid" ]; then
    kill -TERM "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  # A failed run leaves nothing installed behind either.
  [ "$installed" = no ] || apt_get purge -y -qq $packages >/dev/null 2>&1 || true
  rm -rf "$work"
  exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- build (scripts/build-debs: from a clean copy of the tree) ----------------------
t_build=$(date +%s)
"$src/scripts/build-debs" "$work" "$src" > "$work/build-debs.out" ||
  { cat "$work/build-debs.out"; die "building the packages failed"; }
cat "$work/build-debs.out"
# it says what it builds and where the packages went, each by name
grep -q "^build-debs: building gpushm " "$work/build-debs.out" || die "build-debs did not say what it builds"
for deb in "$work"/*.deb; do
  grep -qF "  ${deb##*/} (" "$work/build-debs.out" || die "build-debs did not name ${deb##*/}"
done
grep -qF "packages in $work:" "$work/build-debs.out" || die "build-debs did not say where the packages are"
say "# dpkg-buildpackage: $(( $(date +%s) - t_build )) s"
changes=$(ls "$work"/gpushm_*.changes)
debs=
for p in $packages; do
  deb=$(ls "$work/${p}"_*.deb 2>/dev/null) || die "no .deb for $p"
  debs="$debs $deb"
done
ok "dpkg-buildpackage built$(for d in $debs; do printf ' %s' "${d##*/}"; done)"
if [ -n "${GPUSHM_DEB_OUT:-}" ]; then
  mkdir -p "$GPUSHM_DEB_OUT"
  cp $debs "$GPUSHM_DEB_OUT/"
fi
for d in $debs; do
  say "# --- dpkg -c ${d##*/}"
  dpkg -c "$d" | awk '{ print "#   " $1, $3, $6, $7, $8 }'
done

# --- lintian: errors fail, warnings and notes are printed -------------------------
say "# --- lintian --pedantic -I ${changes##*/}"
rc=0
lintian --pedantic -I --fail-on error "$changes" > "$work/lintian.log" 2>&1 || rc=$?
grep -v '^running with root privileges' "$work/lintian.log" | sed 's/^/#   /' || true
[ "$rc" -eq 0 ] || die "lintian reported errors (exit $rc)"
ok "lintian: no errors"

# --- install, with the README's own line (as root, no sudo: a minimal Debian has none),
# run where its debs/ are this build's packages ------------------------------------------
readme_install=$(awk '/^## Install \(Debian packages\)/ { s = 1 } s && /^## / && !/Install/ { exit }
                      s && /^apt-get install / { sub(/ +#.*/, ""); print; exit }' "$src/README.md")
[ -n "$readme_install" ] || die "no 'apt-get install' line in the README's Install section"
awk '/^## Install \(Debian packages\)/ { s = 1; next } s && /^## / { exit } s' "$src/README.md" |
  grep -qE '^sudo ' && die "the README's Install section runs sudo, which a minimal Debian lacks"
mkdir "$work/readme" && ln -s "$work" "$work/readme/debs"
installed=yes
# (one 'y' for its question: yes(1) would die of SIGPIPE, which pipefail counts)
(cd "$work/readme" && printf 'y\n' | DEBIAN_FRONTEND=noninteractive sh -c "$readme_install") \
  > "$work/install.log" 2>&1 || { tail -n 30 "$work/install.log"; die "the README's '$readme_install' failed"; }
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" | grep -q 'install ok installed' || die "$p is not installed"
  dpkg -L "$p" > "$work/files.$p"
done
ok "apt-get install:$(printf ' %s' $packages)"

getent group gpushm >/dev/null || die "no group gpushm after install (sysusers entry not applied)"
ok "group gpushm exists (existed before: $group_existed)"
dpkg-query -W -f='${Conffiles}\n' gpushmd | grep -q '^ /etc/gpushm/gpushmd.conf ' ||
  die "/etc/gpushm/gpushmd.conf is not a conffile of gpushmd"
ok "/etc/gpushm/gpushmd.conf is a conffile"
# deb-systemd-helper records the enablement whether or not systemd runs here.
if [ -d /run/systemd/system ]; then
  [ "$(systemctl is-enabled gpushmd.socket)" = enabled ] || die "gpushmd.socket not enabled"
  [ "$(systemctl is-active gpushmd.socket)" = active ] || die "gpushmd.socket not started"
  [ "$(systemctl is-active gpushmd.service)" != active ] || die "gpushmd.service started at install"
else
  [ -L /etc/systemd/system/sockets.target.wants/gpushmd.socket ] || die "gpushmd.socket not enabled"
  [ ! -e /etc/systemd/system/multi-user.target.wants/gpushmd.service ] ||
    die "gpushmd.service enabled (the socket starts it)"
fi
ok "gpushmd.socket enabled, the service left to socket activation"
[ ! -e /etc/systemd/user/sockets.target.wants/gpushmd.socket ] ||
  die "the per-user gpushmd.socket is enabled for every user (it is opt-in)"
ok "per-user units installed, not enabled globally"

# --- the installed daemon on a private socket -------------------------------------
cd "$work"   # nothing of the source tree on any search path from here on
export GPUSHM_SOCKET="$work/run/gpushmd.sock"
unset GPUSHM_LIBRARY PYTHONPATH LD_LIBRARY_PATH
gpushmd=$(grep -x '/usr/s\?bin/gpushmd' "$work/files.gpushmd") || die "gpushmd ships no daemon"
"$gpushmd" --config=/etc/gpushm/gpushmd.conf --socket="$GPUSHM_SOCKET" > "$work/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do
  gpushmctl ping >/dev/null 2>&1 && break
  kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/daemon.log"; die "installed gpushmd exited"; }
  sleep 0.1
done
[ "$(command -v gpushmctl)" = /usr/bin/gpushmctl ] || die "gpushmctl is not /usr/bin/gpushmctl"
gpushmctl ping || { cat "$work/daemon.log"; die "gpushmctl ping failed"; }
ok "installed $gpushmd answers the installed gpushmctl"
gpushmctl create deb-ctl 8192 --backend host --mode 0644 >/dev/null || die "gpushmctl create failed"

# The C API through libgpushm-dev: pkg-config, the installed header and library.
cat > client.c <<'EOF'
#include <gpushm.h>
#include <stdio.h>
#include <string.h>
/* Creates a persistent host buffer "deb-c" whose byte i is (i * 7 + 3) & 0xff. */
int main(void)
{
  gpushm_t *conn;
  gpushm_buffer_t *buf;
  gpushm_create_opts_t opts;
  int r = gpushm_connect(NULL, "deb-test", &conn);
  if (r < 0) { fprintf(stderr, "connect: %s\n", gpushm_last_error_message()); return 1; }
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_HOST, opts.mode = 0644, opts.lifetime = GPUSHM_LIFETIME_PERSISTENT;
  r = gpushm_buffer_create(conn, "deb-c", 4096, &opts, &buf);
  if (r < 0) { fprintf(stderr, "create: %s\n", gpushm_last_error_message()); return 1; }
  unsigned char *p = gpushm_buffer_ptr(buf);
  for (unsigned i = 0; i < 4096; i++)
    p[i] = (unsigned char)((i * 7 + 3) & 0xff);
  printf("%s %s\n", gpushm_version_string(), gpushm_daemon_version(conn));
  gpushm_buffer_close(buf);
  gpushm_disconnect(conn);
  return 0;
}
EOF
cc -Wall -Werror -o client client.c $(pkg-config --cflags gpushm) $(pkg-config --libs gpushm) ||
  die "building against libgpushm-dev failed"
# (/lib is /usr/lib on a merged-/usr system: the linker may name either.)
# grep reads all of ldd's output (no -q): under pipefail, a grep that quits at its
# first match can leave ldd to die of SIGPIPE and fail the pipeline that matched.
ldd ./client | grep -E '=> (/usr)?/lib/[^ ]*/libgpushm\.so\.1 ' > /dev/null ||
  die "client does not use the installed libgpushm.so.1: $(ldd ./client | grep gpushm)"
./client || die "the C client failed"
ok "C client built with pkg-config gpushm, linked to the installed libgpushm.so.1"

# The examples as libgpushm-dev installs them, copied out and built with their Makefile:
# nothing but the installed headers, gpushm.pc and library may reach the compiler.
exdir=/usr/share/doc/libgpushm-dev/examples
grep -qx "$exdir/Makefile" "$work/files.libgpushm-dev" || die "libgpushm-dev ships no $exdir/Makefile"
cp -r "$exdir" "$work/examples"
make -C "$work/examples" all graphics CFLAGS="-O2 -Werror" > "$work/examples.log" 2>&1 ||
  { cat "$work/examples.log"; die "the examples do not build against the installed packages"; }
sed 's/^/#   /' "$work/examples.log"
if grep -qF "$src" "$work/examples.log"; then
  die "the examples' build names the source tree ($src)"
fi
# pkg-config leaves out the system's own include directory: any -I is somebody else's
if grep -E -- '(^| )-I' "$work/examples.log"; then
  die "the examples' compile lines add include directories"
fi
for p in gpushm-producer gpushm-consumer python/c-producer python/c-consumer \
         multinode/dmabuf-export graphics/frame-producer; do
  [ -x "$work/examples/$p" ] || die "make built no $p"
  ldd "$work/examples/$p" | grep -E '=> (/usr)?/lib/[^ ]*/libgpushm\.so\.1 ' > /dev/null ||
    die "$p does not use the installed libgpushm.so.1"
done
built_graphics=$(cd "$work/examples" && ls graphics/frame-*-consumer 2>/dev/null | paste -sd ' ' -) || true
# built with pkg-config gpushm-vulkan / gpushm-gl: the installed helper libraries
for p in $built_graphics; do
  case $p in *-vk-*) want=libgpushm-vulkan.so.0 ;; *) want=libgpushm-gl.so.0 ;; esac
  ldd "$work/examples/$p" | grep -E "=> (/usr)?/lib/[^ ]*/${want%.so.0}\\.so\\.0 " > /dev/null ||
    die "$p does not use the installed $want"
done
ok "examples built from $exdir with its Makefile (graphics consumers: ${built_graphics:-none, skipped})"

# The host-memory pair runs on any machine: no driver, not even where there is a GPU.
(cd "$work/examples" && GPUSHM_CUDA_LIBRARY=/nonexistent ./gpushm-producer deb-demo 8 host) \
  > "$work/producer.log" 2>&1 &
producer_pid=$!
(cd "$work/examples" && GPUSHM_CUDA_LIBRARY=/nonexistent ./gpushm-consumer deb-demo) \
  > "$work/consumer.log" 2>&1 || { cat "$work/consumer.log"; die "gpushm-consumer failed"; }
wait "$producer_pid" || { cat "$work/producer.log"; die "gpushm-producer failed"; }
sed 's/^/#   /' "$work/producer.log" "$work/consumer.log"
grep -q "^consumer: 'deb-demo': 1048576 words of host memory verified" "$work/consumer.log" ||
  die "the consumer did not verify the producer's data"
grep -q "^producer: consumer's answer verified (1048576 words)" "$work/producer.log" ||
  die "the producer did not verify the consumer's answer"
ok "examples' gpushm-producer and gpushm-consumer: 8 MiB of host memory verified both ways"

# Python: the installed package, reading the C client's bytes; with NumPy, a round trip.
/usr/bin/python3 - <<'EOF' || die "python3-gpushm failed"
import gpushm
from gpushm import _accel
assert gpushm.__file__.startswith("/usr/lib/python3/dist-packages/gpushm/"), gpushm.__file__
# the package's C speedups, built by the package's build with the distribution's flags
assert _accel.speedups is not None, _accel.WHY
assert _accel.speedups.__file__.startswith("/usr/lib/python3/dist-packages/gpushm/"), _accel.WHY
data = bytes(gpushm.open("deb-c", dtype="uint8").memoryview())
assert data == bytes((i * 7 + 3) & 0xFF for i in range(4096)), "deb-c's bytes differ"
try:
    import numpy
except ImportError:
    print("# python3-numpy missing: NumPy round trip not run")
else:
    a = numpy.arange(1024, dtype=numpy.float32) / 4
    gpushm.share("deb-py", a, mode=0o644)
    b = numpy.asarray(gpushm.open("deb-py", readonly=True))
    assert b.dtype == numpy.float32 and (b == a).all(), "deb-py differs"
print("python3-gpushm", gpushm.__version__, "from", gpushm.__file__)
EOF
ok "python3-gpushm (with its C speedups): the C client's buffer read back$(/usr/bin/python3 -c 'import numpy' 2>/dev/null && echo ', NumPy round trip')"
listing=$(gpushmctl list) || die "gpushmctl list failed"
for name in deb-ctl deb-c; do
  printf '%s\n' "$listing" | grep -q "$name" || { say "$listing"; die "gpushmctl list lacks $name"; }
done
ok "gpushmctl list shows the buffers of gpushmctl, C and Python"
kill -TERM "$daemon_pid"
wait "$daemon_pid" || die "gpushmd exited with status $? on SIGTERM"
daemon_pid=

# --- purge: nothing the packages installed is left ---------------------------------
apt_get purge -y -qq $packages > "$work/purge.log" 2>&1 || { cat "$work/purge.log"; die "apt-get purge failed"; }
installed=no
left=
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'installed$' && die "$p still installed"
  while IFS= read -r f; do
    [ "$f" != /. ] || continue
    if [ -d "$f" ]; then
      # A directory may stay where another package owns it too (also one reached
      # through a symbolic link: /lib on a merged-/usr system).
      dpkg -S "$f" >/dev/null 2>&1 || left="$left $f"
    elif [ -e "$f" ] || [ -L "$f" ]; then
      left="$left $f"
    fi
  done < "$work/files.$p"
done
for f in /etc/systemd/system/sockets.target.wants/gpushmd.socket /var/cache/gpushm; do
  [ ! -e "$f" ] && [ ! -L "$f" ] || left="$left $f"
done
[ -z "$left" ] || die "left after purge:$left"
ok "apt-get purge left none of the packages' files"
# Debian leaves system groups in place (the README says so, and how to remove it)
getent group gpushm >/dev/null || die "purge removed group gpushm (the README says it stays)"
ok "group gpushm stays after purge, as the README says"
say "# test-debian-packages: $(( $(date +%s) - t0 )) s in all"

#!/bin/bash
# SPDX-License-Identifier: MIT
# Root file systems for the system tests (sourced): a minimal Debian, bootstrapped once
# per release and package list and cached, and a throw-away layer over it per run.
# The caller defines say, skip (exit 77) and die (exit 1).
#   GPUSHM_TEST_ROOTFS_CACHE  where root file systems are kept (/var/cache/gpushm-test)
#   GPUSHM_TEST_MIRROR        Debian mirror for debootstrap (default: from apt sources)

# rootfs_bootstrap SUITE PACKAGES: sets rootfs to the cached root of SUITE (minbase)
# with PACKAGES (comma-separated), bootstrapping it first where it is missing.
rootfs_bootstrap() {
  local suite=$1 packages=$2 cache key probe mirror
  cache=${GPUSHM_TEST_ROOTFS_CACHE:-/var/cache/gpushm-test}
  key=$(printf '%s minbase %s\n' "$suite" "$packages" | sha256sum | cut -c1-12)
  rootfs=$cache/$suite-$key

  # (complete once it is there: it is moved into place only when bootstrapped)
  if [ ! -d "$rootfs" ]; then
    command -v debootstrap >/dev/null || skip "debootstrap missing and no cached root file system at $rootfs"
    mirror=${GPUSHM_TEST_MIRROR:-$(rootfs_apt_mirror "$suite" | head -n1)}
    mirror=${mirror:-http://deb.debian.org/debian}
    mkdir -p "$cache"
    exec 9>"$cache/.lock"
    flock 9   # another run may be bootstrapping the same list
    if [ ! -d "$rootfs" ]; then
      probe=$(mktemp -d)
      chmod 755 "$probe"   # apt-helper downloads as _apt
      if ! timeout 30 /usr/lib/apt/apt-helper download-file "$mirror/dists/$suite/Release" \
           "$probe/Release" >/dev/null 2>&1; then
        rm -rf "$probe"
        skip "cannot reach the Debian mirror $mirror (no network) and no cached root file system"
      fi
      rm -rf "$probe"
      say "# bootstrapping $suite ($packages) from $mirror into $rootfs"
      rm -rf "$rootfs.new"
      if ! debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs.new" "$mirror" \
           > "$cache/debootstrap-$key.log" 2>&1; then
        tail -n 20 "$cache/debootstrap-$key.log"
        rm -rf "$rootfs.new"
        die "debootstrap failed although the mirror answered (log: $cache/debootstrap-$key.log)"
      fi
      rm -f "$rootfs.new"/var/cache/apt/archives/*.deb
      mv "$rootfs.new" "$rootfs"
    fi
    exec 9>&-
  fi
}

rootfs_apt_mirror() {
  local f suite=$1
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # deb822: the first stanza whose Suites list the release itself (not -security)
    awk -v s="$suite" '
      /^URIs:/ { u = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == s) ok = 1 }
      /^[ \t]*$/ { if (u != "" && ok) { print u; exit } u = ""; ok = 0 }
      END { if (u != "" && ok) print u }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    sed -n "s/^deb\( \[[^]]*\]\)\? \([^ ]*\) $suite .*/\2/p" "$f"
  done
}

# rootfs_layer RUNDIR: RUNDIR/root, a writable copy of $rootfs (an overlay where the
# kernel allows one, else a copy), so the cache stays clean.
rootfs_layer() {
  local run=$1
  mkdir -p "$run/upper" "$run/work" "$run/root"
  if ! mount -t overlay overlay -o "lowerdir=$rootfs,upperdir=$run/upper,workdir=$run/work" \
       "$run/root" 2>/dev/null; then
    cp -a "$rootfs/." "$run/root/"
  fi
}

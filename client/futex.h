/* SPDX-License-Identifier: MIT */
/* futex_waitv (Linux 5.16), also for builds whose headers predate it: every build of the
 * library must sleep on a sync control block's two words at once wherever the kernel
 * can, since its signallers then wake only one of them (sync.c). */
#ifndef GPUSHM_CLIENT_FUTEX_H
#define GPUSHM_CLIENT_FUTEX_H

#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449 /* one number on every architecture (since 424, all share) */
#endif
#ifndef FUTEX_32
#define FUTEX_32 2
struct futex_waitv {
  uint64_t val;
  uint64_t uaddr;
  uint32_t flags;
  uint32_t __reserved;
};
#endif

#endif

/* SPDX-License-Identifier: MIT */
/* How much host memory gpushmd may commit for buffers.  memfd pages are charged to
 * the daemon's own cgroup, so without a budget below its memory limit the kernel's OOM
 * killer would answer a large create by killing the daemon, and every buffer with it. */
#ifndef GPUSHMD_HOST_MEMORY_H
#define GPUSHMD_HOST_MEMORY_H

#include <stddef.h>
#include <stdint.h>

/* The default budget: the smaller of GPUSHM_AUTO_BUDGET_PERCENT_OF_RAM of physical
 * memory and GPUSHM_AUTO_BUDGET_PERCENT_OF_CGROUP of the tightest cgroup memory limit
 * on the way from this process's cgroup to the root (v1 or v2).  why says which. */
uint64_t host_memory_auto_budget(char *why, size_t whylen);

#endif

/* SPDX-License-Identifier: MIT */
/* The header of shared-memory layouts: what a reader accepts (this layout, and the
 * 16-byte prefix gpushm 0.1 wrote) and what it refuses (another magic, an unknown
 * version, a size that does not cover what it reads or overruns the mapping); and the
 * writer's init leaving the word at offset 8 alone; the control block's appended release
 * signatures. */
#include "config.h"
#include "harness.h"
#include "shm_layout.h"

#include <string.h>

static union {
  struct sync_control ctl;
  uint8_t bytes[SYNC_CONTROL_SIZE];
} region;

static const size_t need = offsetof(struct sync_control, release_seq) + 8;

static const char *check(void)
{
  return shm_layout_check(&region, SYNC_CONTROL_SIZE, SYNC_CONTROL_MAGIC, need);
}

int main(void)
{
  const char *why;

  /* Fresh: init writes magic, version and size, and keeps the word at 8. */
  memset(&region, 0, sizeof region);
  region.ctl.release_seq = 41;
  shm_layout_init(&region, SYNC_CONTROL_MAGIC, sizeof region.ctl);
  CHECK(region.ctl.magic == SYNC_CONTROL_MAGIC && region.ctl.release_seq == 41);
  CHECK(region.ctl.layout_version == SHM_LAYOUT_VERSION &&
        region.ctl.layout_size == sizeof region.ctl);
  CHECK(check() == NULL);
  /* What gpushm 0.1 wrote: magic and the word, zeros after. */
  region.ctl.layout_version = 0;
  region.ctl.layout_size = 0;
  CHECK(check() == NULL);
  /* ... but a reader needing more than that prefix cannot use it. */
  CHECK((why = shm_layout_check(&region, SYNC_CONTROL_SIZE, SYNC_CONTROL_MAGIC,
                                sizeof region.ctl)) && strstr(why, "size"));
  /* gpushmd reads the releases' signatures only from a block whose size covers them:
   * this layout's, not the 24 bytes of one written before they were appended. */
  region.ctl.layout_version = SHM_LAYOUT_VERSION;
  region.ctl.layout_size = sizeof region.ctl;
  CHECK(sizeof region.ctl == 24 + 8 * GPUSHM_LIMIT_RELEASERS_KEPT);
  CHECK(shm_layout_check(&region, SYNC_CONTROL_SIZE, SYNC_CONTROL_MAGIC,
                         sizeof region.ctl) == NULL);
  region.ctl.layout_size = 24;
  CHECK((why = shm_layout_check(&region, SYNC_CONTROL_SIZE, SYNC_CONTROL_MAGIC,
                                sizeof region.ctl)) && strstr(why, "size"));
  /* A signature names its client and its release; the next release in the same slot
   * never reads as the old one; the same client id of two daemon instances differs. */
  CHECK(sync_releaser(7, 3) == (7ull << 32 | 3));
  CHECK(sync_releaser(7, 3) != sync_releaser(7, 3 + GPUSHM_LIMIT_RELEASERS_KEPT));
  CHECK(sync_releaser(7, (1ull << 32) + 3) == sync_releaser(7, 3)); /* the low half only */
  CHECK(sync_releaser_id(0x1234567800000000ull, 7) == (7u ^ 0x12345678u));
  CHECK(sync_releaser_id(0x1234567800000000ull, 7) != sync_releaser_id(0x8765432100000000ull, 7));
  /* A later writer that appended fields: still readable. */
  region.ctl.layout_version = SHM_LAYOUT_VERSION;
  region.ctl.layout_size = 256;
  CHECK(check() == NULL);
  /* Refused: size beyond the mapping, size short of the need, version 0 with a size
   * (not 0.1's), an unknown version, another layout's magic. */
  region.ctl.layout_size = SYNC_CONTROL_SIZE + 1;
  CHECK((why = check()) && strstr(why, "size"));
  region.ctl.layout_size = (uint32_t)need - 1;
  CHECK((why = check()) && strstr(why, "size"));
  region.ctl.layout_version = 0;
  region.ctl.layout_size = 24;
  CHECK((why = check()) && strstr(why, "version"));
  region.ctl.layout_version = SHM_LAYOUT_VERSION + 1;
  region.ctl.layout_size = sizeof region.ctl;
  CHECK((why = check()) && strstr(why, "version"));
  region.ctl.layout_version = SHM_LAYOUT_VERSION;
  region.ctl.magic = STATUS_PAGE_MAGIC;
  CHECK((why = check()) && strstr(why, "magic"));
  return 0;
}

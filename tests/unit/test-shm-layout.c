/* SPDX-License-Identifier: MIT */
/* The header of shared-memory layouts: what a reader accepts (this layout, and the
 * 16-byte prefix gpushm 0.1 wrote) and what it refuses (another magic, an unknown
 * version, a size that does not cover what it reads or overruns the mapping); and the
 * writer's init leaving the word at offset 8 alone; the control block's appended release
 * signatures, and 0.8's promises and lost values. */
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
   * this layout's, not the 24 bytes of one written before they were appended.  0.7's
   * block ended after them (88 bytes); 0.8 appended promises (to 208), a timeline's
   * fence (216), which a waiter on the GPU reaches at a fixed, 8-byte-aligned place, and
   * its semaphore word (224). */
  region.ctl.layout_version = SHM_LAYOUT_VERSION;
  region.ctl.layout_size = sizeof region.ctl;
  CHECK(offsetof(struct sync_control, releases_signed) == 24 + 8 * GPUSHM_LIMIT_RELEASERS_KEPT);
  CHECK(offsetof(struct sync_control, fence) == 208 &&
        offsetof(struct sync_control, semaphore) == 216 && sizeof region.ctl == 224);
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
  /* A signature's number from its low half: the latest published number with those
   * bits; none for a signature above the counter (signed, not yet published), nor for a
   * counter at 0; numbers 2^32 apart alias (hence released_value, 0.8). */
  CHECK(sync_signed_number(sync_releaser(7, 5), 9) == 5);
  CHECK(sync_signed_number(sync_releaser(7, 9), 9) == 9);
  CHECK(sync_signed_number(sync_releaser(7, 10), 9) == 0);
  CHECK(sync_signed_number(sync_releaser(7, 1), 0) == 0);
  CHECK(sync_signed_number(sync_releaser(7, 5), (2ull << 32) + 3) == (1ull << 32) + 5);
  CHECK(sync_signed_number(sync_releaser(7, (1ull << 32) + 2), (1ull << 32) + 3) ==
        (1ull << 32) + 2);
  /* A promise covers its values while live (the counter below upto), not its owner's
   * own, and above it nothing; a promise the counter reached covers nothing. */
  memset(&region, 0, sizeof region);
  shm_layout_init(&region, SYNC_CONTROL_MAGIC, sizeof region.ctl);
  CHECK(sync_control_intact(&region.ctl));
  region.ctl.release_seq = 4;
  region.ctl.promise.owner = sync_promise_owner(7);
  region.ctl.promise.from = 4;
  region.ctl.promise.upto = 10;
  CHECK(sync_promise_covering(&region.ctl, 5, 4, 0) == &region.ctl.promise);
  CHECK(sync_promise_covering(&region.ctl, 10, 4, 0) == &region.ctl.promise);
  CHECK(sync_promise_covering(&region.ctl, 11, 4, 0) == NULL);
  CHECK(sync_promise_covering(&region.ctl, 5, 4, sync_promise_owner(7)) == NULL);
  CHECK(sync_promise_covering(&region.ctl, 5, 10, 0) == NULL);
  CHECK(sync_promise_owner(0) != 0);
  /* A break: lost values, then the counter; bounded against a counter someone moves. */
  CHECK(!sync_value_lost(&region.ctl, 5));
  sync_mark_lost(&region.ctl, 7, 4, 10);
  CHECK(!sync_value_lost(&region.ctl, 4) && sync_value_lost(&region.ctl, 5) &&
        sync_value_lost(&region.ctl, 10) && !sync_value_lost(&region.ctl, 11));
  CHECK(region.ctl.release_seq == 4 && region.ctl.lost_by == 7);
  sync_publish_upto(&region.ctl, 10);
  CHECK(region.ctl.release_seq == 10 && region.ctl.wake == 1);
  sync_publish_upto(&region.ctl, 8); /* never lowered */
  CHECK(region.ctl.release_seq == 10);
  region.ctl.magic = ~0ull;
  CHECK(!sync_control_intact(&region.ctl));
  region.ctl.magic = SYNC_CONTROL_MAGIC;
  region.ctl.layout_size = 88; /* a 0.7 daemon's block: no 0.8 fields */
  CHECK(!sync_control_intact(&region.ctl));
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

/* SPDX-License-Identifier: MIT */
/* Layouts of the memory gpushmd shares with clients (memfds, mapped by both sides).
 *
 * Each starts with a 64-bit magic naming what it is; then comes the one word gpushm
 * 0.1 already read at offset 8 (kept there, so 0.1 libraries go on working); then the
 * layout version and the number of bytes the writer filled in.  Evolution rules:
 *  - a new field is appended and layout_size grows: a reader uses a field only when it
 *    lies below layout_size, and ignores what lies beyond what it knows;
 *  - layout_version changes only when a field moves or changes meaning: a reader
 *    refuses a version it does not know;
 *  - layout_version 0 (and size 0) is what gpushm 0.1 wrote (zero-filled memory): the
 *    16-byte prefix only.
 * Multi-byte fields are in host byte order: the memory never leaves the host. */
#ifndef GPUSHM_SHM_LAYOUT_H
#define GPUSHM_SHM_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "gpushm_limits.h"

#define SHM_LAYOUT_VERSION 1u
/* What gpushm 0.1 wrote: magic and the word at offset 8, nothing more. */
#define SHM_LAYOUT_LEGACY_SIZE 16u

/* The header every layout below starts with, seen without its particular word. */
struct shm_prefix {
  uint64_t magic;
  uint64_t word;
  uint32_t layout_version;
  uint32_t layout_size;
};

/* The read-only page gpushmd shares with every client (sent as an fd with the Hello
 * reply).  The daemon bumps unlink_generation before it answers any request that
 * removed a name, so a client that sees the same generation as when it cached a name
 * knows the name still means the same buffer, without asking. */
#define STATUS_PAGE_MAGIC 0x3170616d6873706full
#define STATUS_PAGE_SIZE 4096u

struct status_page {
  uint64_t magic;
  uint64_t unlink_generation; /* accessed with __atomic builtins */
  uint32_t layout_version;
  uint32_t layout_size;
};

/* A sync buffer's control block (a 4 KiB memfd, mapped by every holder, read-write
 * by those that may write the buffer): release_seq counts the releases published so
 * far.  A release first orders its completion behind the releaser's work — it records
 * the buffer's IPC event (cuda-ipc), or enqueues a GPU write of its number into the
 * buffer's fence (cuda-fd) — and publishes the number in release_seq after, so
 * whoever sees N published knows release N's completion is already on its way.
 * Waiters sleep on a futex on release_seq's low 32 bits (docs/sync.md).
 *
 *
 * A cuda-fd sync buffer's fence is not here: it is 8 bytes of the buffer's own device
 * allocation, past its data, which GPUs write (cuStreamWriteValue64) and wait on
 * (cuStreamWaitValue64 >=) and whose offset the daemon sends with each open reply.  In
 * the allocation, because every holder already maps it with the right access (read-only
 * openers cannot write the fence) and GPUs poll their own memory much faster than host
 * memory; in the reply, because everything in this page is writable by every read-write
 * holder, and a location read from here could be made to point anywhere. */
#define SYNC_CONTROL_MAGIC 0x6c6f72746e6f6373ull
#define SYNC_CONTROL_SIZE 4096u

/* released_by (appended, layout_size 88): who published each of the last
 * GPUSHM_LIMIT_RELEASERS_KEPT releases, release n in slot n % GPUSHM_LIMIT_RELEASERS_KEPT,
 * as sync_releaser(sync_releaser_id(instance, client id), n): the releaser's connection
 * and the low 32 bits of n, so that a slot names its own release and cannot be mistaken
 * for an older one it replaced, nor read torn (one 64-bit word).  A releaser stores it
 * after its fence write is queued and before it publishes n: a slot naming a client
 * names a number whose write that client queued.  gpushmd reads it once the releaser's
 * process has exited, to raise a fence whose write died with that process
 * (docs/sync.md).  Several slots, not one: a consumer that hands the buffer back
 * publishes the next release within microseconds of the producer's, long before
 * anybody notices the producer died; the producer's release must still be found
 * behind it. */
struct sync_control {
  uint64_t magic;
  uint64_t release_seq; /* accessed with __atomic builtins */
  uint32_t layout_version;
  uint32_t layout_size;
  uint64_t released_by[GPUSHM_LIMIT_RELEASERS_KEPT]; /* __atomic builtins */
};

/* A connection's client id, salted with its daemon's instance id: a restarted daemon
 * (persistent buffers outlive it) counts client ids from 1 again, and a new client must
 * not take the signatures of an old one, whose process may still be running. */
static inline uint32_t sync_releaser_id(uint64_t instance_id, uint32_t client_id)
{
  return client_id ^ (uint32_t)instance_id ^ (uint32_t)(instance_id >> 32);
}

static inline uint64_t sync_releaser(uint32_t releaser_id, uint64_t seq)
{
  return (uint64_t)releaser_id << 32 | (uint32_t)seq;
}
/* What a cuda-fd sync buffer's allocation holds beyond its size. */
#define SYNC_DEVICE_FENCE_BYTES 8u

#define SHM_LAYOUT_SAME_PREFIX_(type, word_field)                                    \
  _Static_assert(offsetof(struct type, word_field) == offsetof(struct shm_prefix, word) &&      \
                   offsetof(struct type, layout_version) ==                                \
                     offsetof(struct shm_prefix, layout_version) &&                        \
                   offsetof(struct type, layout_size) == offsetof(struct shm_prefix, layout_size), \
                 #type " must start with struct shm_prefix (0.1 reads offset 8)");
SHM_LAYOUT_SAME_PREFIX_(status_page, unlink_generation)
SHM_LAYOUT_SAME_PREFIX_(sync_control, release_seq)
#undef SHM_LAYOUT_SAME_PREFIX_
_Static_assert(offsetof(struct sync_control, released_by) == 24,
               "released_by follows the 0.2 header: appended, nothing moved");
_Static_assert(sizeof(struct status_page) <= STATUS_PAGE_SIZE &&
                 sizeof(struct sync_control) <= SYNC_CONTROL_SIZE,
               "a layout must fit its mapping");

/* Writes the header of a fresh (zero-filled) or adopted region; the words at offset 8
 * are left as they are. */
static inline void shm_layout_init(void *region, uint64_t magic, uint32_t size)
{
  struct shm_prefix *h = region;
  h->magic = magic;
  h->layout_version = SHM_LAYOUT_VERSION;
  h->layout_size = size;
}

/* Checks a mapped region of map_len bytes: its magic, a layout version this code
 * knows and a size that covers the need bytes the reader uses and fits the mapping.
 * Returns NULL, or why the region cannot be used. */
static inline const char *shm_layout_check(const void *region, size_t map_len, uint64_t magic,
                                           size_t need)
{
  const struct shm_prefix *h = region;
  uint32_t version = h->layout_version, size = h->layout_size;

  if (h->magic != magic)
    return "wrong magic";
  if (version == 0 && size == 0) /* gpushm 0.1 */
    size = SHM_LAYOUT_LEGACY_SIZE;
  else if (version != SHM_LAYOUT_VERSION)
    return "unknown layout version";
  if (size < need || size > map_len)
    return "layout size out of range";
  return NULL;
}

#endif

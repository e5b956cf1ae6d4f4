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

#include <stdbool.h>
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
/* Appended in 0.8 (layout_size sizeof(struct sync_control)), for caller-numbered
 * releases and promises (docs/sync.md); a daemon that offers PROTO_FEATURE_PROMISES
 * lays out every control block it makes or adopts with them.
 *  - releases_signed counts the releases 0.8 libraries signed: such a release signs slot
 *    releases_signed % GPUSHM_LIMIT_RELEASERS_KEPT, not its number's, since numbers the
 *    caller picks (a stride of 8, say) could all land in one slot and push a dead
 *    releaser's signature out at once.  gpushmd scans every slot for a signature.
 *  - wake is the futex word waiters for a caller-chosen value sleep on: a promise
 *    publishes no number, so release_seq's word cannot tell them of one.  Every 0.8
 *    release, promise and broken promise changes it.
 *  - promise: a connection's promise to release every value in (from, upto], which
 *    makes it their only signaller (others' releases are refused while it is live), so
 *    that waiters may queue their GPU waits at once.  gpushmd alone writes it (the
 *    promise request), from its own record: owner is sync_promise_owner() of the
 *    promiser's releaser id, 0 for none; live while the counter is below upto; from is
 *    the counter when the promise was made.  One place, since every promise covers the
 *    values just above the counter: two live ones would overlap.
 *  - lost_*: written by gpushmd as it breaks a promise (its promiser's process gone, or
 *    its connection's last handle closed, with values still owed): values in
 *    (lost_from, lost_upto] were reached because their signaller was lost, not
 *    signalled; lost_by is its releaser id.  The latest break only. */
struct sync_promise {
  uint64_t owner; /* __atomic builtins, as every field below */
  uint64_t from;
  uint64_t upto;
};

struct sync_control {
  uint64_t magic;
  uint64_t release_seq; /* accessed with __atomic builtins */
  uint32_t layout_version;
  uint32_t layout_size;
  uint64_t released_by[GPUSHM_LIMIT_RELEASERS_KEPT]; /* __atomic builtins */
  /* 0.8 */
  uint64_t releases_signed;
  uint32_t wake;
  uint32_t lost_by;
  uint64_t lost_from;
  uint64_t lost_upto;
  struct sync_promise promise;
  /* released_value[i]: the whole number slot i of released_by signs (0.8 libraries), so
   * that numbers far apart (caller-chosen) are not told apart by their low 32 bits. */
  uint64_t released_value[GPUSHM_LIMIT_RELEASERS_KEPT];
  /* A timeline's fence (sync buffers keep theirs in their allocation): the value its
   * signallers' work has reached, written by the CPU or by a GPU through this page
   * registered with CUDA (cuStreamWriteValue64), and raised by gpushmd only with a
   * compare-and-swap to a higher value.  Read-only holders map the page read-only. */
  uint64_t fence;
  /* A timeline's semaphore plane (docs/sync.md#semaphore-planes): nonzero once gpushmd
   * holds one, written by gpushmd alone; a signaller that sees it signals the semaphore
   * beside the fence.  Any read-write holder can write it, as it can the fence and the
   * counter: one that sets it makes others' signals ask for a plane there is not (and
   * fail), one that clears it makes processes that have not imported the plane yet
   * signal the fence alone — gpushmd never reads it back. */
  uint64_t semaphore;
};

/* A frame ring's control block (docs/rings.md) is a timeline's, its fence the ready
 * counter (the frame last presented), with the table of its consumers' done timelines
 * at RING_TABLE_OFFSET, written by gpushmd alone as consumers attach and let go.
 * Producers read it to know whose done timelines to wait on, as a seqlock: generation
 * is odd while gpushmd writes, and a reader that saw it change reads again.  Read-only
 * holders (consumers) map the block read-only; read-write holders (producers) could
 * scribble on the table, which only misleads themselves: gpushmd never reads it back,
 * and an id opens only what its opener may open. */
#define RING_TABLE_OFFSET 1024u

struct ring_table {
  uint32_t generation; /* __atomic builtins, as every field */
  uint32_t consumers;
  uint64_t done_id[GPUSHM_LIMIT_RING_CONSUMERS];
  /* Bit i: consumer i registered a ready plane (docs/rings.md#vulkan-consumers), which
   * producers signal beside the ready counter: they ask gpushmd for it when they see
   * the bit. */
  uint32_t planes;
  uint32_t reserved;
};

_Static_assert(GPUSHM_LIMIT_RING_CONSUMERS <= 32, "one bit of planes per consumer");

_Static_assert(RING_TABLE_OFFSET >= sizeof(struct sync_control),
               "the ring table lies past the timeline's fields");
_Static_assert(RING_TABLE_OFFSET + sizeof(struct ring_table) <= SYNC_CONTROL_SIZE,
               "the ring table fits the control block");

/* What a detached consumer's done timeline is raised to: past any frame a producer
 * waits for, so that waits queued on it before it went (on streams too) go on. */
#define RING_DONE_DETACHED (UINT64_C(1) << 62)

/* What a weight-set generation's fence (the set's newest generation) is raised to when
 * the set's name goes: no newer generation will come. */
#define SHM_WEIGHTS_GONE UINT64_MAX

/* A weight-set generation's control block carries, at WEIGHTS_HELD_OFFSET, the oldest
 * generation of its set that anyone still holds (0 from a daemon that does not write
 * it), written by gpushmd alone whenever that changes, with the block's wake word
 * changed and woken: a publisher that recycles buffers sleeps on it until the
 * generations that named them are let go of (gpushm_weights_wait_released()).  Every
 * holder maps the block read-only, so no client can forge it.  Only ever raised: a
 * generation let go of is freed, and new ones are newer. */
#define WEIGHTS_HELD_OFFSET 1024u

struct weights_held {
  uint64_t oldest; /* __atomic builtins */
};

_Static_assert(WEIGHTS_HELD_OFFSET >= sizeof(struct sync_control) &&
               WEIGHTS_HELD_OFFSET + sizeof(struct weights_held) <= SYNC_CONTROL_SIZE,
               "the held word lies past the control block's fields, inside it");

static inline struct weights_held *weights_held_of(struct sync_control *ctl)
{
  return (struct weights_held *)((char *)ctl + WEIGHTS_HELD_OFFSET);
}

static inline struct ring_table *ring_table_of(struct sync_control *ctl)
{
  return (struct ring_table *)((char *)ctl + RING_TABLE_OFFSET);
}

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
static inline uint64_t sync_promise_owner(uint32_t releaser_id)
{
  return (uint64_t)releaser_id << 32 | 1u; /* never 0, the free slot's owner */
}

/* The number a slot's signature names: the latest published number (last) with the
 * signature's low 32 bits.  Numbers more than 2^32 below last are not told apart, nor
 * needed: only the latest few releases are repaired. */
static inline uint64_t sync_signed_number(uint64_t signature, uint64_t last)
{
  uint32_t behind = (uint32_t)last - (uint32_t)signature;

  return behind <= last ? last - behind : 0; /* 0: none (a signature not yet published) */
}

/* The futex word waiters for the next release sleep on: release_seq's low 32 bits. */
static inline uint32_t *sync_seq_futex_word(struct sync_control *ctl)
{
  return (uint32_t *)&ctl->release_seq + (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__);
}

/* The live promise (the counter, last, is below its upto) that covers value, unless
 * it is the one of owner skip (0: none), or NULL. */
static inline const struct sync_promise *sync_promise_covering(const struct sync_control *ctl,
                                                               uint64_t value, uint64_t last,
                                                               uint64_t skip)
{
  const struct sync_promise *p = &ctl->promise;
  uint64_t owner = __atomic_load_n(&p->owner, __ATOMIC_ACQUIRE);
  uint64_t upto = __atomic_load_n(&p->upto, __ATOMIC_RELAXED);

  return owner && owner != skip && upto > last && value <= upto ? p : NULL;
}

/* Whether value was reached through a broken promise (lost_* above). */
static inline bool sync_value_lost(const struct sync_control *ctl, uint64_t value)
{
  uint64_t upto = __atomic_load_n(&ctl->lost_upto, __ATOMIC_ACQUIRE);
  uint64_t from = __atomic_load_n(&ctl->lost_from, __ATOMIC_RELAXED);

  return value > from && value <= upto;
}

/* Records a broken promise of releaser_id over (from, upto] (see lost_*).  Before the
 * fence is raised: a stream waiting on it may go on the moment it is, and its process
 * must then find the value lost.  upto 0 first, so that a reader never pairs the new
 * from with an old upto that would call more values lost than were. */
static inline void sync_mark_lost(struct sync_control *ctl, uint32_t releaser_id, uint64_t from,
                                  uint64_t upto)
{
  __atomic_store_n(&ctl->lost_upto, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&ctl->lost_from, from, __ATOMIC_RELAXED);
  __atomic_store_n(&ctl->lost_by, releaser_id, __ATOMIC_RELAXED);
  __atomic_store_n(&ctl->lost_upto, upto, __ATOMIC_SEQ_CST);
}

/* Then, the fence raised: publishes upto as the counter's value if it is above it and
 * changes the wake word; the caller wakes the futexes.  Bounded: the counter is any
 * read-write holder's to write, and gpushmd must not spin on it. */
static inline void sync_publish_upto(struct sync_control *ctl, uint64_t upto)
{
  uint64_t n = __atomic_load_n(&ctl->release_seq, __ATOMIC_ACQUIRE);

  for (int tries = 0; n < upto && tries < 64; tries++)
    if (__atomic_compare_exchange_n(&ctl->release_seq, &n, upto, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_ACQUIRE))
      break;
  __atomic_add_fetch(&ctl->wake, 1, __ATOMIC_SEQ_CST);
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
_Static_assert(offsetof(struct sync_control, releases_signed) == 88,
               "the 0.8 fields follow released_by: appended, nothing moved");
_Static_assert(offsetof(struct sync_control, fence) == 208,
               "the timeline's fence follows the 0.8 fields: appended, nothing moved");
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

/* Whether the block's 0.8 fields are believed: its header is as the daemon wrote it.
 * Garbage over the header (any read-write holder can write it) must not read as
 * promises that would refuse everyone's releases; the sequence stays usable. */
static inline bool sync_control_intact(const struct sync_control *ctl)
{
  return shm_layout_check(ctl, SYNC_CONTROL_SIZE, SYNC_CONTROL_MAGIC, sizeof *ctl) == NULL;
}

#endif

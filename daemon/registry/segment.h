/* SPDX-License-Identifier: MIT */
/* Private to daemon/registry/.  Segments: small buffers carved out of larger shared allocations.
 *
 * A mapping of one buffer's memory exposes the whole allocation it lies in (a memfd, an
 * exported cuda-fd allocation, a legacy IPC handle), so a segment holds buffers of one
 * permission class only: backend, device, owner uid and gid, mode.  Whoever may open one
 * buffer of a segment may open all of them.  Within a segment every slot has one size (a
 * slab: no fragmentation to manage); a class keeps its segments by slot size, and a pool
 * of empty ones to slice again, so that a create of a pooled size costs no driver call.
 *
 * Clients map a segment once per process; the table counts who maps what (connection,
 * segment, access).  A segment's memory goes back (to the pool or the driver) only when
 * it holds no buffer and no client maps it.  The registry owns the table; this file
 * knows nothing of names, references or quotas. */
#ifndef GPUSHMD_SEGMENT_H
#define GPUSHMD_SEGMENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "backends/backend.h"
#include "gpushm_limits.h"
#include "util/list.h"

struct reg_client;

/* The permission class: two buffers share a segment only if all of this is equal. */
struct seg_key {
  int backend; /* enum proto_backend */
  int device;  /* -1: host memory */
  uid_t uid;
  gid_t gid;
  uint32_t mode;
};

/* Slot sizes: 4, 8, 12, 16 KiB, then a quarter octave apart up to the largest carve. */
#define SEG_BINS 48u
/* Slots per segment at most: bounds the free-slot stack (and so the daemon's memory per
 * segment) when slots are small. */
#define SEG_MAX_SLOTS 4096u

struct seg_class;

struct segment {
  uint64_t id; /* never reused */
  struct seg_class *cls;
  struct backend_mem mem;
  uint64_t bytes;
  uint64_t slot;     /* bytes per slot; 0 while pooled */
  unsigned bin;
  uint32_t n_slots;
  uint32_t n_used;   /* slots holding buffers */
  uint32_t n_fresh;  /* slots from here on were never handed out since it was sliced */
  bool clean;        /* fresh slots are known to be zero (a new allocation) */
  uint32_t n_free;   /* freed slots, on the stack below */
  uint32_t n_warm;   /* the top ones of them, kept committed (GPUSHM_LIMIT_WARM_SLOT) */
  uint32_t *free_slots;
  uint32_t n_mappers;
  struct list mappers;   /* seg_mapping.segment_link */
  /* Processes whose connection ended while they held buffers here and that live on:
   * they may still read their old slots, so nothing is carved out of the segment, nor a
   * freed slot's memory given back, until they have exited (detached.h).  retired:
   * such a process could not be watched: it never is carved from again. */
  uint32_t n_detached;
  uint64_t charged;  /* device bytes its class's uid is charged (seg_charge) */
  bool retired;
  bool in_bin;
  /* What keeps its persistent slots across a restart (slot_store.c), released with it;
   * NULL: none of its slots is deposited. */
  void *persist;
  void (*persist_release)(void *persist);
  struct list all_link;  /* cls->all, or cls->pool while pooled */
  struct list bin_link;  /* cls->bins[bin] while it has a free slot */
};

struct seg_mapping {
  struct segment *seg;
  struct reg_client *client;
  bool read_only;
  struct list segment_link;
  struct list client_link; /* the client's list (reg_client.mappings) */
};

struct seg_class {
  struct seg_key key;
  struct seg_class *next; /* hash chain */
  const struct backend *backend;
  struct list all;  /* sliced segments */
  struct list pool; /* empty ones, kept warm */
  uint64_t pool_bytes;
  struct list bins[SEG_BINS];
  uint32_t bin_slots[SEG_BINS]; /* slots of the segments sliced to the bin's size */
};

/* What the table has done, by backend and device (index: device + 1; 0 is host). */
struct seg_counters {
  uint64_t carved;
  uint64_t driver_allocs;
};

#define SEG_CLASS_BUCKETS 256u

/* A device segment's memory is its class's uid's, all of it, from when a segment is
 * taken for the class (a new allocation, or out of the pool) until it is retired: its
 * slots' buffers are that uid's, and one uid keeping a single slot of each segment (or
 * mapping emptied ones) would otherwise hold whole segments charged for nothing.
 * take() may refuse (its PROTO_E_* with err); NULL: nothing is charged. */
struct seg_charge {
  int (*take)(void *ctx, uid_t uid, int device, uint64_t bytes, char *err, size_t errlen);
  void (*give_back)(void *ctx, uid_t uid, int device, uint64_t bytes);
  void *ctx;
};

struct seg_table {
  struct seg_class *classes[SEG_CLASS_BUCKETS];
  struct seg_charge charge;
  uint64_t next_id;
  uint64_t pool_limit; /* bytes per class */
  struct seg_counters counters[GPUSHM_BACKEND_COUNT][GPUSHM_LIMIT_DEVICES + 1];
};

void seg_table_init(struct seg_table *t, uint64_t pool_limit);
/* Gives every segment back, mappings and all (shutdown: no buffer is left). */
void seg_table_destroy(struct seg_table *t);

/* The slot a buffer of size bytes of backend be takes, or 0 when be carves nothing or the
 * buffer is larger than its carve limit (it gets an allocation of its own). */
uint64_t seg_slot_size(const struct backend *be, uint64_t size);

/* Takes a slot of seg_slot_size(be, size) bytes in a segment of class key, made ready
 * (zeroed, committed): from a segment with a free slot, a pooled one, or a new
 * allocation.  Device memory is not cleared here when the creator clears it
 * (creator_clears): *dirty then says whether it must (the slot held an earlier buffer of
 * the class).  Returns 0 or a negative PROTO_E_* with err set. */
int seg_carve(struct seg_table *t, const struct backend *be, const struct seg_key *key,
              uint64_t size, bool creator_clears, struct segment **out, uint32_t *slot,
              bool *dirty, char *err, size_t errlen);
/* Gives a slot back; the segment is pooled or released if nothing holds it any more. */
void seg_free_slot(struct seg_table *t, struct segment *seg, uint32_t slot);

/* Empties the pools of one backend and device (all classes), for an allocation that ran
 * out of memory.  Returns the bytes given back. */
uint64_t seg_drain_pools(struct seg_table *t, int backend, int device);

bool seg_mapped_by(const struct segment *seg, const struct reg_client *client, bool read_only);
/* Counts client as mapping seg with this access; client_list is the client's own list
 * of mappings.  PROTO_E_NOMEM, or 0. */
int seg_map(struct segment *seg, struct reg_client *client, struct list *client_list,
            bool read_only);
/* The client unmapped it: 0, or PROTO_E_NOENT when it did not map segment_id so. */
int seg_unmap(struct seg_table *t, struct list *client_list, uint64_t segment_id, bool read_only);
/* A connection ends: its mappings go. */
void seg_client_gone(struct seg_table *t, struct list *client_list);
/* A connection ends while its process, which held buffers, lives on: its mappings turn
 * into holds on their segments until seg_undetach (its exit); *segs (malloc'ed, one per
 * mapping) says which.  Returns the count, or a negative PROTO_E_NOMEM, after which
 * the segments are retired instead.  Where the process cannot be watched,
 * seg_client_retire retires what it maps. */
ssize_t seg_client_detach(struct seg_table *t, struct list *client_list, struct segment ***segs);
void seg_undetach(struct seg_table *t, struct segment *seg);
void seg_client_retire(struct seg_table *t, struct list *client_list);

/* After a restart: the segment id was, of class key, sliced into slot-byte slots, its
 * memory mem (now the segment's), bytes long; every slot free until seg_adopt_slot()
 * says it holds a buffer, and seg_adopt_done() then gives the others' memory back and
 * retires it (the last daemon's clients may still map it), or gives the segment back if
 * none came.  0 or a negative PROTO_E_* with err set (mem left to the caller). */
int seg_adopt(struct seg_table *t, const struct backend *be, const struct seg_key *key,
              uint64_t id, uint64_t slot, struct backend_mem *mem, uint64_t bytes,
              struct segment **out, char *err, size_t errlen);
void seg_adopt_slot(struct segment *seg, uint32_t slot);
void seg_adopt_done(struct seg_table *t, struct segment *seg);

/* The carve counters of a backend and device (any numbers: out of range is host's). */
const struct seg_counters *seg_counters(const struct seg_table *t, int backend, int device);

/* Walks every segment (pooled ones with pooled true), for statistics. */
void seg_each(const struct seg_table *t,
              void (*fn)(void *arg, const struct seg_class *cls, const struct segment *seg,
                         bool pooled),
              void *arg);

#endif

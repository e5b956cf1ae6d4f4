/* SPDX-License-Identifier: MIT */
/* Private to daemon/registry/.  How carved buffers outlive the daemon: through their
 * segment, whose memory and a table of its persistent slots wait in the store as two
 * records ("s.<segment id>", "t.<segment id>"), however many buffers it holds.  One fd
 * per buffer would make 100,000 small persistent buffers 100,000 store fds; this makes
 * them two per segment (slot_store.c has the table's layout). */
#ifndef GPUSHMD_REGISTRY_SLOT_STORE_H
#define GPUSHMD_REGISTRY_SLOT_STORE_H

#include "registry/segment.h"
#include "registry/state.h"

/* What a persistent buffer in a slot is, as its segment's table keeps it. */
struct slot_entry {
  uint64_t id;
  uint64_t size;
  uint64_t created_unix_ms;
  const char *name;
  const uint8_t *metadata;
  uint32_t metadata_len;
};

/* Whether seg's records are in the store already (a deposit adds none). */
bool slot_store_deposited(const struct segment *seg);
/* Puts slot's buffer in seg's table, depositing the segment first if it is not yet:
 * the records that added (0 or 2), or a negative errno with err set, nothing changed. */
int slot_store_deposit(struct segment *seg, uint32_t slot, const struct slot_entry *e,
                       const struct reg_store *store, char *err, size_t errlen);
/* Takes slot's buffer out of the table, and the segment out of the store when it was
 * its last: the records that removed (0 or 2). */
int slot_store_withdraw(struct segment *seg, uint32_t slot, const struct reg_store *store);

/* After a restart, a segment's records: what its table says of it. */
struct slot_store_segment {
  uint64_t id, bytes, slot;
  int backend;
  struct seg_key key;
  uint32_t n_slots;
  void *table; /* slot_store_attach() makes it seg's */
};
/* Reads the table under "t.<id>" (taken from store) for the segment record "s.<id>":
 * 0, *out filled; 1, record is no segment's (nothing taken); or a negative PROTO_E_*
 * with err set (the table's record removed). */
int slot_store_open(const char *record, const struct reg_store *store,
                    struct slot_store_segment *out, char *err, size_t errlen);
/* The table, once the segment is back: seg's from now on (released with it). */
void slot_store_attach(struct segment *seg, struct slot_store_segment *s);
/* Drops a table that no segment took (the segment could not come back). */
void slot_store_discard(struct slot_store_segment *s);
/* The entry of slot in seg's table: 1, *out filled; 0, the slot holds no persistent
 * buffer; -1, one the table does not describe whole (its entry cleared). */
int slot_store_entry(struct segment *seg, uint32_t slot, struct slot_entry *out);
/* Clears slot's entry (its buffer could not come back). */
void slot_store_clear(struct segment *seg, uint32_t slot);
/* After adoption: the segment's records leave the store when no entry came back (the
 * number removed: 0 or 2), else it keeps them. */
int slot_store_adopted(struct segment *seg, const struct reg_store *store);

#endif

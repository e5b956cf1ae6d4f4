/* SPDX-License-Identifier: MIT */
/* A segment's table of persistent slots: a memfd gpushmd keeps mapped and deposits
 * beside the segment's memory, written in place as buffers are deposited and withdrawn
 * (the store holds the same file, so nothing is deposited again).  An entry's id is
 * written last and cleared first: a daemon killed mid-write leaves an entry that is
 * whole or absent.  Layout (version 1): a 256-byte header; one 160-byte entry per slot;
 * then, page-aligned, one page of metadata per slot (the file is sparse: only pages
 * written take memory). */
#include "config.h"
#include "registry/slot_store.h"
#include "protocol.h"
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define TABLE_MAGIC 0x6d736774u /* "tgsm" */
#define TABLE_VERSION 1u
#define HEADER_BYTES 256u
#define META_BYTES 4096u
#define PAGE 4096u

_Static_assert(GPUSHM_LIMIT_METADATA <= META_BYTES, "a slot's metadata fits its page");

struct table_header {
  uint32_t magic, version;
  uint64_t segment_id, bytes, slot;
  int32_t backend, device;
  uint32_t uid, gid, mode, n_slots, entry_bytes;
};

struct table_entry {
  uint64_t id; /* 0: no persistent buffer; written last, cleared first */
  uint64_t size, created_unix_ms;
  uint32_t metadata_len, reserved;
  char name[GPUSHM_LIMIT_NAME_LEN + 1];
};

_Static_assert(sizeof(struct table_header) <= HEADER_BYTES, "the header fits its room");
_Static_assert(sizeof(struct table_entry) == 160, "version 1's entry");

struct slot_table {
  int fd;
  uint8_t *map;
  size_t size;
  uint32_t n_slots, n_entries;
  uint64_t segment_id;
};

static uint64_t meta_offset(uint32_t n_slots)
{
  uint64_t end = HEADER_BYTES + (uint64_t)n_slots * sizeof(struct table_entry);
  return (end + PAGE - 1) / PAGE * PAGE;
}

static uint64_t table_bytes(uint32_t n_slots)
{
  return meta_offset(n_slots) + (uint64_t)n_slots * META_BYTES;
}

static struct table_entry *entry_of(struct slot_table *t, uint32_t slot)
{
  return (struct table_entry *)(t->map + HEADER_BYTES) + slot;
}

static uint8_t *meta_of(struct slot_table *t, uint32_t slot)
{
  return t->map + meta_offset(t->n_slots) + (uint64_t)slot * META_BYTES;
}

static void records_of(uint64_t id, char *memory, char *table)
{
  snprintf(memory, REG_RECORD_MAX, "s.%" PRIu64, id);
  snprintf(table, REG_RECORD_MAX, "t.%" PRIu64, id);
}

static void table_free(void *p)
{
  struct slot_table *t = p;

  if (!t)
    return;
  munmap(t->map, t->size);
  close(t->fd);
  free(t);
}

static void detach(struct segment *seg)
{
  table_free(seg->persist);
  seg->persist = NULL;
  seg->persist_release = NULL;
}

/* No slot of seg is kept any more: both its records leave the store.  Returns how many. */
static int forget(struct segment *seg, const struct reg_store *store)
{
  char memory[REG_RECORD_MAX], table[REG_RECORD_MAX];

  records_of(seg->id, memory, table);
  store->remove(store->ctx, memory);
  store->remove(store->ctx, table);
  detach(seg);
  return 2;
}

bool slot_store_deposited(const struct segment *seg)
{
  return seg->persist != NULL;
}

static struct slot_table *table_new(const struct segment *seg, char *err, size_t errlen)
{
  struct slot_table *t = calloc(1, sizeof *t);
  struct table_header *h;

  if (!t) {
    snprintf(err, errlen, "daemon out of memory");
    return NULL;
  }
  t->n_slots = seg->n_slots;
  t->size = table_bytes(t->n_slots);
  t->segment_id = seg->id;
  t->fd = memfd_create("gpushm-slot-table", MFD_CLOEXEC);
  if (t->fd < 0 || ftruncate(t->fd, (off_t)t->size) < 0 ||
      (t->map = mmap(NULL, t->size, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd, 0)) == MAP_FAILED) {
    snprintf(err, errlen, "a slot table for segment %" PRIu64 ": %s", seg->id, strerror(errno));
    if (t->fd >= 0)
      close(t->fd);
    free(t);
    return NULL;
  }
  h = (struct table_header *)t->map;
  *h = (struct table_header){
    .magic = TABLE_MAGIC, .version = TABLE_VERSION, .segment_id = seg->id, .bytes = seg->bytes,
    .slot = seg->slot, .backend = seg->cls->key.backend, .device = seg->cls->key.device,
    .uid = (uint32_t)seg->cls->key.uid, .gid = (uint32_t)seg->cls->key.gid,
    .mode = seg->cls->key.mode, .n_slots = seg->n_slots,
    .entry_bytes = (uint32_t)sizeof(struct table_entry),
  };
  return t;
}

int slot_store_deposit(struct segment *seg, uint32_t slot, const struct slot_entry *e,
                       const struct reg_store *store, char *err, size_t errlen)
{
  struct slot_table *t = seg->persist;
  char memory[REG_RECORD_MAX], table[REG_RECORD_MAX];
  struct table_entry *entry;
  int added = 0, r;

  if (slot >= seg->n_slots || e->metadata_len > META_BYTES) {
    snprintf(err, errlen, "slot %u of segment %" PRIu64 " cannot be kept", slot, seg->id);
    return -EINVAL;
  }
  if (!t) {
    if (!(t = table_new(seg, err, errlen)))
      return -ENOMEM;
    records_of(seg->id, memory, table);
    if ((r = store->add(store->ctx, memory, seg->mem.fd)) < 0 ||
        (r = store->add(store->ctx, table, t->fd)) < 0) {
      snprintf(err, errlen, "segment %" PRIu64 ": %s", seg->id, strerror(-r));
      store->remove(store->ctx, memory);
      table_free(t);
      return r;
    }
    seg->persist = t;
    seg->persist_release = table_free;
    added = 2;
  }
  entry = entry_of(t, slot);
  entry->size = e->size;
  entry->created_unix_ms = e->created_unix_ms;
  entry->metadata_len = e->metadata_len;
  snprintf(entry->name, sizeof entry->name, "%s", e->name);
  if (e->metadata_len)
    memcpy(meta_of(t, slot), e->metadata, e->metadata_len);
  if (!entry->id)
    t->n_entries++;
  __atomic_store_n(&entry->id, e->id, __ATOMIC_RELEASE);
  return added;
}

int slot_store_withdraw(struct segment *seg, uint32_t slot, const struct reg_store *store)
{
  struct slot_table *t = seg->persist;
  struct table_entry *entry;

  if (!t || slot >= t->n_slots || !(entry = entry_of(t, slot))->id)
    return 0;
  __atomic_store_n(&entry->id, 0, __ATOMIC_RELEASE);
  if (entry->metadata_len)
    (void)fallocate(t->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    (off_t)(meta_offset(t->n_slots) + (uint64_t)slot * META_BYTES), META_BYTES);
  /* its last: the segment needs no keeping */
  return --t->n_entries ? 0 : forget(seg, store);
}

int slot_store_open(const char *record, const struct reg_store *store,
                    struct slot_store_segment *out, char *err, size_t errlen)
{
  char memory[REG_RECORD_MAX], table[REG_RECORD_MAX];
  const struct table_header *h;
  unsigned long long id;
  struct slot_table *t;
  struct stat st;
  int used = -1, fd;

  if (sscanf(record, "s.%llu%n", &id, &used) != 1 || used < 0 || record[used] != '\0')
    return 1;
  records_of(id, memory, table);
  if (strcmp(memory, record) != 0)
    return 1; /* only the daemon's own spelling: withdrawing rebuilds it from the id */
  if ((fd = store->take(store->ctx, table)) < 0) {
    snprintf(err, errlen, "its slot table is missing");
    return PROTO_E_INVAL;
  }
  if (!(t = calloc(1, sizeof *t))) {
    close(fd);
    snprintf(err, errlen, "daemon out of memory");
    return PROTO_E_NOMEM;
  }
  t->fd = fd;
  if (fstat(fd, &st) < 0 || st.st_size < (off_t)HEADER_BYTES ||
      (t->map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
        MAP_FAILED) {
    snprintf(err, errlen, "its slot table cannot be read");
    goto bad;
  }
  t->size = (size_t)st.st_size;
  h = (const struct table_header *)t->map;
  if (h->magic != TABLE_MAGIC || h->version != TABLE_VERSION || h->segment_id != id ||
      h->entry_bytes != sizeof(struct table_entry) || h->n_slots == 0 ||
      h->n_slots > SEG_MAX_SLOTS || h->slot == 0 || h->bytes / h->slot < h->n_slots ||
      t->size < table_bytes(h->n_slots)) {
    snprintf(err, errlen, "its slot table is not one this daemon wrote");
    goto bad;
  }
  t->n_slots = h->n_slots;
  t->segment_id = id;
  *out = (struct slot_store_segment){
    .id = id, .bytes = h->bytes, .slot = h->slot, .backend = h->backend, .n_slots = h->n_slots,
    .key = { .backend = h->backend, .device = h->device, .uid = h->uid, .gid = h->gid,
             .mode = h->mode & 0777u },
    .table = t,
  };
  return 0;

bad:
  if (t->map && t->map != MAP_FAILED)
    munmap(t->map, (size_t)st.st_size);
  close(fd);
  free(t);
  store->remove(store->ctx, table);
  return PROTO_E_INVAL;
}

void slot_store_attach(struct segment *seg, struct slot_store_segment *s)
{
  seg->persist = s->table;
  seg->persist_release = table_free;
  s->table = NULL;
}

void slot_store_discard(struct slot_store_segment *s)
{
  table_free(s->table);
  s->table = NULL;
}

int slot_store_entry(struct segment *seg, uint32_t slot, struct slot_entry *out)
{
  struct slot_table *t = seg->persist;
  struct table_entry *entry;

  if (!t || slot >= t->n_slots || !(entry = entry_of(t, slot))->id)
    return 0;
  if (!memchr(entry->name, '\0', sizeof entry->name) || entry->metadata_len > META_BYTES) {
    slot_store_clear(seg, slot);
    return -1;
  }
  *out = (struct slot_entry){
    .id = entry->id, .size = entry->size, .created_unix_ms = entry->created_unix_ms,
    .name = entry->name, .metadata = entry->metadata_len ? meta_of(t, slot) : NULL,
    .metadata_len = entry->metadata_len,
  };
  return 1;
}

void slot_store_clear(struct segment *seg, uint32_t slot)
{
  struct slot_table *t = seg->persist;

  if (t && slot < t->n_slots)
    __atomic_store_n(&entry_of(t, slot)->id, 0, __ATOMIC_RELEASE);
}

int slot_store_adopted(struct segment *seg, const struct reg_store *store)
{
  struct slot_table *t = seg->persist;

  if (!t)
    return 0;
  t->n_entries = 0;
  for (uint32_t i = 0; i < t->n_slots; i++)
    t->n_entries += entry_of(t, i)->id != 0;
  return t->n_entries ? 0 : forget(seg, store);
}

/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "registry/segment.h"
#include "protocol.h"
#include "util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void seg_table_init(struct seg_table *t, uint64_t pool_limit)
{
  memset(t, 0, sizeof *t);
  t->next_id = 1;
  t->pool_limit = pool_limit;
}

static bool is_host(const struct backend *be)
{
  return be->kind == PROTO_BACKEND_HOST;
}

uint64_t seg_slot_size(const struct backend *be, uint64_t size)
{
  uint64_t limit, base;
  unsigned bin = 0;

  if (!be->alloc_segment || !be->zero_range)
    return 0;
  limit = is_host(be) ? GPUSHM_LIMIT_CARVE_HOST : GPUSHM_LIMIT_CARVE_DEVICE;
  if (size == 0 || size > limit)
    return 0;
  if (size <= 16384)
    return (size + 4095) / 4096 * 4096;
  for (base = 16384, bin = 4; bin < SEG_BINS; base <<= 1)
    for (unsigned step = 1; step <= 4 && bin < SEG_BINS; step++, bin++)
      if (size <= base + step * (base / 4))
        return base + step * (base / 4);
  return 0;
}

/* The bin of a slot size seg_slot_size() returned. */
static unsigned bin_of(uint64_t slot)
{
  uint64_t base;
  unsigned bin;

  if (slot <= 16384)
    return (unsigned)(slot / 4096) - 1;
  for (base = 16384, bin = 4;; base <<= 1, bin += 4)
    if (slot <= 2 * base)
      return bin + (unsigned)((slot - base) / (base / 4)) - 1;
}

_Static_assert(GPUSHM_LIMIT_CARVE_DEVICE == 16384ull << ((SEG_BINS - 4) / 4),
               "SEG_BINS bins reach the largest carve");

static size_t key_hash(const struct seg_key *k)
{
  uint64_t h = 1469598103934665603ull;
  uint64_t words[5] = { (uint64_t)k->backend, (uint64_t)(int64_t)k->device, k->uid, k->gid,
                        k->mode };
  for (int i = 0; i < 5; i++)
    h = (h ^ words[i]) * 1099511628211ull;
  return (size_t)(h % SEG_CLASS_BUCKETS);
}

static bool key_equal(const struct seg_key *a, const struct seg_key *b)
{
  return a->backend == b->backend && a->device == b->device && a->uid == b->uid &&
         a->gid == b->gid && a->mode == b->mode;
}

static struct seg_class *find_class(struct seg_table *t, const struct seg_key *key,
                                    const struct backend *be)
{
  struct seg_class **slot = &t->classes[key_hash(key)], *c;

  for (c = *slot; c; c = c->next)
    if (key_equal(&c->key, key))
      return c;
  if (!be || !(c = calloc(1, sizeof *c)))
    return NULL;
  c->key = *key;
  c->backend = be;
  list_init(&c->all);
  list_init(&c->pool);
  for (unsigned i = 0; i < SEG_BINS; i++)
    list_init(&c->bins[i]);
  c->next = *slot;
  *slot = c;
  return c;
}

/* A class with no segment left is forgotten: classes come and go with users and modes. */
static void maybe_drop_class(struct seg_table *t, struct seg_class *c)
{
  struct seg_class **p;

  if (!list_empty(&c->all) || !list_empty(&c->pool))
    return;
  for (p = &t->classes[key_hash(&c->key)]; *p != c; p = &(*p)->next)
    ;
  *p = c->next;
  free(c);
}

const struct seg_counters *seg_counters(const struct seg_table *t, int backend, int device)
{
  /* out of range (a slot table's header says what it likes) counts with host memory */
  unsigned dev = device < 0 || (unsigned)device >= GPUSHM_LIMIT_DEVICES ? 0 : (unsigned)device + 1;
  unsigned be = backend > 0 && backend < GPUSHM_BACKEND_COUNT ? (unsigned)backend : 0;
  return &t->counters[be][dev];
}

static struct seg_counters *counters_of(struct seg_table *t, const struct seg_key *key)
{
  return (struct seg_counters *)seg_counters(t, key->backend, key->device);
}

static void release_segment(struct seg_class *c, struct segment *seg)
{
  log_debug("segment %llu (%llu bytes) given back", (unsigned long long)seg->id,
            (unsigned long long)seg->bytes);
  if (seg->persist_release)
    seg->persist_release(seg->persist);
  c->backend->release(c->backend, &seg->mem);
  free(seg->free_slots);
  free(seg);
}

/* Cuts seg into slots of slot bytes for bin (it holds nothing). */
static int slice(struct seg_class *c, struct segment *seg, uint64_t slot, unsigned bin)
{
  uint64_t n = seg->bytes / slot;
  uint32_t *stack;

  if (n > SEG_MAX_SLOTS)
    n = SEG_MAX_SLOTS;
  if (!(stack = malloc(n * sizeof *stack)))
    return PROTO_E_NOMEM;
  free(seg->free_slots);
  seg->free_slots = stack;
  seg->slot = slot;
  seg->bin = bin;
  seg->n_slots = (uint32_t)n;
  seg->n_used = seg->n_free = seg->n_fresh = seg->n_warm = 0;
  list_add_tail(&c->all, &seg->all_link);
  list_add_tail(&c->bins[bin], &seg->bin_link);
  seg->in_bin = true;
  c->bin_slots[bin] += seg->n_slots;
  return 0;
}

static bool carvable(const struct segment *seg)
{
  return !seg->retired && seg->n_detached == 0;
}

/* In its bin exactly while a slot can be carved out of it. */
static void update_bin(struct segment *seg)
{
  bool want = carvable(seg) && seg->n_used < seg->n_slots && seg->slot;

  if (want && !seg->in_bin)
    list_add_tail(&seg->cls->bins[seg->bin], &seg->bin_link);
  else if (!want && seg->in_bin)
    list_del(&seg->bin_link);
  seg->in_bin = want;
}

/* Drops a pooled segment out of the pool (the caller slices or releases it). */
static void unpool(struct seg_class *c, struct segment *seg)
{
  list_del(&seg->all_link);
  c->pool_bytes -= seg->bytes;
}

uint64_t seg_drain_pools(struct seg_table *t, int backend, int device)
{
  uint64_t freed = 0;

  for (unsigned i = 0; i < SEG_CLASS_BUCKETS; i++) {
    for (struct seg_class *c = t->classes[i]; c; c = c->next) {
      if (c->key.backend != backend || c->key.device != device)
        continue;
      while (!list_empty(&c->pool)) {
        struct segment *seg = list_entry(c->pool.next, struct segment, all_link);
        unpool(c, seg);
        freed += seg->bytes;
        release_segment(c, seg);
      }
      /* The class stays, empty or not: the create that ran out may be using it. */
    }
  }
  if (freed)
    log_info("gave back %llu bytes of pooled segments (%s memory, device %d) for an allocation "
             "that ran out", (unsigned long long)freed, backend == PROTO_BACKEND_HOST ? "host"
             : "device", device);
  return freed;
}

/* How big the next segment for slot-size bin of class c is: as many slots as its
 * segments of that size hold already (doubling), within the backend's bounds. */
static uint64_t next_segment_bytes(const struct seg_class *c, uint64_t slot, unsigned bin)
{
  const struct backend *be = c->backend;
  uint64_t min = is_host(be) ? GPUSHM_SEGMENT_MIN_HOST : be->granule;
  uint64_t max = is_host(be) ? GPUSHM_LIMIT_SEGMENT_HOST : GPUSHM_LIMIT_SEGMENT_DEVICE;
  uint64_t slots = c->bin_slots[bin], bytes;

  if (max / slot > SEG_MAX_SLOTS)
    max = slot * SEG_MAX_SLOTS;
  if (max < slot)
    max = slot;
  bytes = slots * slot;
  if (bytes < min)
    bytes = min;
  if (bytes > max)
    bytes = max;
  if (bytes < slot)
    bytes = slot;
  return (bytes + be->granule - 1) / be->granule * be->granule;
}

/* A device segment's bytes charged to its class's uid, or refused (seg_charge). */
static int take_charge(struct seg_table *t, const struct seg_class *c, uint64_t bytes, char *err,
                       size_t errlen)
{
  if (is_host(c->backend) || !t->charge.take)
    return 0;
  return t->charge.take(t->charge.ctx, c->key.uid, c->key.device, bytes, err, errlen);
}

static void give_back_charge(struct seg_table *t, struct segment *seg)
{
  if (seg->charged && t->charge.give_back)
    t->charge.give_back(t->charge.ctx, seg->cls->key.uid, seg->cls->key.device, seg->charged);
  seg->charged = 0;
}

/* A segment to slice for slot: a pooled one of the class, else a new allocation. */
static int new_segment(struct seg_table *t, struct seg_class *c, uint64_t slot, unsigned bin,
                       struct segment **out, char *err, size_t errlen)
{
  const struct backend *be = c->backend;
  struct segment *seg = NULL;
  uint64_t charge;
  char label[64];
  int r;

  for (struct list *l = c->pool.next; l != &c->pool; l = l->next) {
    struct segment *p = list_entry(l, struct segment, all_link);
    if (p->bytes >= slot) {
      seg = p;
      break;
    }
  }
  charge = seg ? seg->bytes : next_segment_bytes(c, slot, bin);
  if ((r = take_charge(t, c, charge, err, errlen)) < 0)
    return r;
  if (seg) {
    unpool(c, seg);
    seg->clean = false; /* freed device slots keep their data until cleared */
  } else {
    uint64_t bytes = charge;
    if (!(seg = calloc(1, sizeof *seg))) {
      if (!is_host(be) && t->charge.give_back)
        t->charge.give_back(t->charge.ctx, c->key.uid, c->key.device, charge);
      snprintf(err, errlen, "daemon out of memory");
      return PROTO_E_NOMEM;
    }
    seg->id = t->next_id;
    snprintf(label, sizeof label, "gpushm-segment-%llu", (unsigned long long)seg->id);
    r = be->alloc_segment(be, bytes, c->key.device, label, &seg->mem, &seg->bytes, err, errlen);
    if (r == PROTO_E_NOMEM && seg_drain_pools(t, c->key.backend, c->key.device))
      r = be->alloc_segment(be, bytes, c->key.device, label, &seg->mem, &seg->bytes, err, errlen);
    if (r < 0) {
      free(seg);
      if (!is_host(be) && t->charge.give_back)
        t->charge.give_back(t->charge.ctx, c->key.uid, c->key.device, charge);
      return r;
    }
    t->next_id++;
    counters_of(t, &c->key)->driver_allocs++;
    seg->clean = true;
    seg->cls = c;
    list_init(&seg->mappers);
    log_debug("segment %llu: %llu bytes (%s, device %d, uid %u, mode %03o) for %llu-byte slots",
              (unsigned long long)seg->id, (unsigned long long)seg->bytes, be->name,
              c->key.device, (unsigned)c->key.uid, c->key.mode, (unsigned long long)slot);
  }
  seg->charged = is_host(be) || !t->charge.take ? 0 : charge;
  if (slice(c, seg, slot, bin) < 0) {
    snprintf(err, errlen, "daemon out of memory");
    give_back_charge(t, seg);
    release_segment(c, seg);
    return PROTO_E_NOMEM;
  }
  *out = seg;
  return 0;
}

int seg_carve(struct seg_table *t, const struct backend *be, const struct seg_key *key,
              uint64_t size, bool creator_clears, struct segment **out, uint32_t *slot_out,
              bool *dirty, char *err, size_t errlen)
{
  uint64_t slot = seg_slot_size(be, size);
  struct seg_class *c;
  struct segment *seg;
  uint32_t index;
  bool known_zero, warm;
  unsigned bin;
  int r;

  if (!slot) {
    snprintf(err, errlen, "%llu bytes of %s memory are not carved", (unsigned long long)size,
             be->name);
    return PROTO_E_INVAL;
  }
  bin = bin_of(slot);
  if (!(c = find_class(t, key, be))) {
    snprintf(err, errlen, "daemon out of memory");
    return PROTO_E_NOMEM;
  }
  if (!list_empty(&c->bins[bin])) {
    seg = list_entry(c->bins[bin].next, struct segment, bin_link);
  } else if ((r = new_segment(t, c, slot, bin, &seg, err, errlen)) < 0) {
    maybe_drop_class(t, c);
    return r;
  }
  known_zero = seg->n_free == 0 && seg->clean;
  index = seg->n_free ? seg->free_slots[seg->n_free - 1] : seg->n_fresh;
  warm = seg->n_warm > 0;
  /* Host memory is committed here whoever clears it; a slot of device memory can hold
   * only what a buffer of the same class left there, which the creator clears. */
  *dirty = creator_clears && !is_host(be) && !known_zero;
  if (!(creator_clears && !is_host(be)) &&
      (r = warm ? be->zero_warm_range(be, &seg->mem, (uint64_t)index * slot, slot, err, errlen)
                : be->zero_range(be, &seg->mem, (uint64_t)index * slot, slot, known_zero, err,
                                 errlen)) < 0) {
    if (seg->n_used == 0 && seg->n_mappers == 0 && seg->n_free == 0 && seg->n_fresh == 0)
      seg_free_slot(t, seg, UINT32_MAX); /* a segment nothing ever held goes back */
    return r;
  }
  if (seg->n_free)
    seg->n_free--;
  else
    seg->n_fresh++;
  if (warm)
    seg->n_warm--;
  seg->n_used++;
  update_bin(seg);
  counters_of(t, key)->carved++;
  *out = seg;
  *slot_out = index;
  return 0;
}

/* Gives back the memory of seg's warm slots (they become plain freed ones). */
static void cool(struct segment *seg)
{
  const struct backend *be = seg->cls->backend;

  for (; seg->n_warm; seg->n_warm--)
    be->discard_range(be, &seg->mem,
                      (uint64_t)seg->free_slots[seg->n_free - seg->n_warm] * seg->slot, seg->slot);
}

/* Nothing holds seg any more: pooled for its class within the limit, else released. */
static void retire(struct seg_table *t, struct segment *seg)
{
  struct seg_class *c = seg->cls;

  cool(seg); /* nobody is about to create in it: what a pool keeps, it keeps uncommitted */
  seg->slot = 0;
  update_bin(seg);
  list_del(&seg->all_link);
  c->bin_slots[seg->bin] -= seg->n_slots;
  give_back_charge(t, seg); /* pooled, it is nobody's until taken again */
  /* A retired segment may still be read by a process gpushmd cannot watch: its memory
   * never goes to another buffer. */
  if (!seg->retired && c->pool_bytes + seg->bytes <= t->pool_limit) {
    list_add_tail(&c->pool, &seg->all_link);
    c->pool_bytes += seg->bytes;
    return;
  }
  release_segment(c, seg);
  maybe_drop_class(t, c);
}

static bool unheld(const struct segment *seg)
{
  return seg->n_used == 0 && seg->n_mappers == 0 && seg->n_detached == 0;
}

/* Whether a slot freed now is kept committed (GPUSHM_LIMIT_WARM_SLOT). */
static bool keeps_warm(const struct segment *seg)
{
  return seg->cls->backend->zero_warm_range && seg->slot <= GPUSHM_LIMIT_WARM_SLOT &&
         (uint64_t)(seg->n_warm + 1) * seg->slot <= GPUSHM_LIMIT_WARM_BYTES;
}

void seg_free_slot(struct seg_table *t, struct segment *seg, uint32_t slot)
{
  const struct backend *be = seg->cls->backend;

  if (slot != UINT32_MAX) {
    bool warm = be->discard_range && carvable(seg) && keeps_warm(seg);
    if (be->discard_range && carvable(seg) && !warm)
      be->discard_range(be, &seg->mem, (uint64_t)slot * seg->slot, seg->slot);
    seg->n_used--;
    /* The warm ones stay on top, to be carved first: a cold one goes below them. */
    if (!warm && seg->n_warm) {
      seg->free_slots[seg->n_free] = seg->free_slots[seg->n_free - seg->n_warm];
      seg->free_slots[seg->n_free - seg->n_warm] = slot;
    } else {
      seg->free_slots[seg->n_free] = slot;
    }
    seg->n_free++;
    seg->n_warm += warm;
    update_bin(seg);
  }
  if (unheld(seg))
    retire(t, seg);
}

bool seg_mapped_by(const struct segment *seg, const struct reg_client *client, bool read_only)
{
  for (const struct list *l = seg->mappers.next; l != &seg->mappers; l = l->next) {
    const struct seg_mapping *m = list_entry(l, struct seg_mapping, segment_link);
    if (m->client == client && m->read_only == read_only)
      return true;
  }
  return false;
}

int seg_map(struct segment *seg, struct reg_client *client, struct list *client_list,
            bool read_only)
{
  struct seg_mapping *m = calloc(1, sizeof *m);

  if (!m)
    return PROTO_E_NOMEM;
  m->seg = seg;
  m->client = client;
  m->read_only = read_only;
  list_add_tail(&seg->mappers, &m->segment_link);
  list_add_tail(client_list, &m->client_link);
  seg->n_mappers++;
  return 0;
}

static void drop_mapping(struct seg_table *t, struct seg_mapping *m)
{
  struct segment *seg = m->seg;

  list_del(&m->segment_link);
  list_del(&m->client_link);
  free(m);
  seg->n_mappers--;
  if (unheld(seg))
    retire(t, seg);
}

int seg_unmap(struct seg_table *t, struct list *client_list, uint64_t segment_id, bool read_only)
{
  for (struct list *l = client_list->next; l != client_list; l = l->next) {
    struct seg_mapping *m = list_entry(l, struct seg_mapping, client_link);
    if (m->seg->id == segment_id && m->read_only == read_only) {
      drop_mapping(t, m);
      return 0;
    }
  }
  return PROTO_E_NOENT;
}

void seg_client_gone(struct seg_table *t, struct list *client_list)
{
  while (!list_empty(client_list))
    drop_mapping(t, list_entry(client_list->next, struct seg_mapping, client_link));
}

ssize_t seg_client_detach(struct seg_table *t, struct list *client_list, struct segment ***segs)
{
  size_t n = 0;

  for (struct list *l = client_list->next; l != client_list; l = l->next)
    n++;
  *segs = NULL;
  if (n == 0)
    return 0;
  if (!(*segs = malloc(n * sizeof **segs))) {
    seg_client_retire(t, client_list);
    return PROTO_E_NOMEM;
  }
  n = 0;
  for (struct list *l = client_list->next; l != client_list; l = l->next) {
    struct segment *seg = list_entry(l, struct seg_mapping, client_link)->seg;
    seg->n_detached++;
    update_bin(seg);
    (*segs)[n++] = seg;
  }
  seg_client_gone(t, client_list); /* the holds keep them */
  return (ssize_t)n;
}

void seg_undetach(struct seg_table *t, struct segment *seg)
{
  const struct backend *be = seg->cls->backend;

  if (--seg->n_detached == 0 && !seg->retired && seg->slot) {
    /* What the process could read is its no more: freed slots give their memory back
     * (the warm ones too: simpler than telling which were freed while it lived). */
    seg->n_warm = 0;
    for (uint32_t i = 0; be->discard_range && i < seg->n_free; i++)
      be->discard_range(be, &seg->mem, (uint64_t)seg->free_slots[i] * seg->slot, seg->slot);
    update_bin(seg);
  }
  if (unheld(seg))
    retire(t, seg);
}

void seg_client_retire(struct seg_table *t, struct list *client_list)
{
  for (struct list *l = client_list->next; l != client_list; l = l->next) {
    struct segment *seg = list_entry(l, struct seg_mapping, client_link)->seg;
    if (!seg->retired)
      log_info("segment %llu is retired: a process that may still map it cannot be watched",
               (unsigned long long)seg->id);
    seg->retired = true;
    update_bin(seg);
  }
  seg_client_gone(t, client_list);
}

int seg_adopt(struct seg_table *t, const struct backend *be, const struct seg_key *key,
              uint64_t id, uint64_t slot, struct backend_mem *mem, uint64_t bytes,
              struct segment **out, char *err, size_t errlen)
{
  struct seg_class *c;
  struct segment *seg;

  if (seg_slot_size(be, slot) != slot || bytes < slot || id == 0) {
    snprintf(err, errlen, "not a segment of this daemon's (%llu-byte slots in %llu bytes)",
             (unsigned long long)slot, (unsigned long long)bytes);
    return PROTO_E_INVAL;
  }
  if (!(c = find_class(t, key, be)) || !(seg = calloc(1, sizeof *seg))) {
    if (c)
      maybe_drop_class(t, c);
    snprintf(err, errlen, "daemon out of memory");
    return PROTO_E_NOMEM;
  }
  seg->id = id;
  seg->cls = c;
  seg->mem = *mem;
  seg->bytes = bytes;
  list_init(&seg->mappers);
  if (slice(c, seg, slot, bin_of(slot)) < 0) {
    free(seg);
    maybe_drop_class(t, c);
    snprintf(err, errlen, "daemon out of memory");
    return PROTO_E_NOMEM;
  }
  /* no slot is fresh: what a buffer of the last daemon left is not known to be zero */
  seg->n_fresh = seg->n_slots;
  if (t->next_id <= id)
    t->next_id = id + 1;
  *out = seg;
  return 0;
}

void seg_adopt_slot(struct segment *seg, uint32_t slot)
{
  /* marked on the free stack's slots until seg_adopt_done() stacks the others */
  seg->free_slots[seg->n_used++] = slot;
}

void seg_adopt_done(struct seg_table *t, struct segment *seg)
{
  const struct backend *be = seg->cls->backend;
  uint8_t *used = calloc(seg->n_slots, 1);

  /* Retired: the last daemon's clients may outlive it and still map the whole segment, and
   * this daemon cannot watch them (they are what seg_client_retire() guards against), so a
   * free slot here may be written by one of them; nothing new is carved from it, and it is
   * freed with its last adopted buffer. */
  seg->retired = true;
  if (!used) {
    seg->n_free = 0;
  } else {
    for (uint32_t i = 0; i < seg->n_used; i++)
      used[seg->free_slots[i]] = 1;
    seg->n_free = 0;
    for (uint32_t i = seg->n_slots; i-- > 0;)
      if (!used[i]) {
        seg->free_slots[seg->n_free++] = i;
        if (be->discard_range)
          be->discard_range(be, &seg->mem, (uint64_t)i * seg->slot, seg->slot);
      }
    free(used);
  }
  update_bin(seg);
  if (unheld(seg))
    retire(t, seg);
}

void seg_each(const struct seg_table *t,
              void (*fn)(void *arg, const struct seg_class *cls, const struct segment *seg,
                         bool pooled),
              void *arg)
{
  for (unsigned i = 0; i < SEG_CLASS_BUCKETS; i++)
    for (const struct seg_class *c = t->classes[i]; c; c = c->next) {
      for (const struct list *l = c->all.next; l != &c->all; l = l->next)
        fn(arg, c, list_entry(l, struct segment, all_link), false);
      for (const struct list *l = c->pool.next; l != &c->pool; l = l->next)
        fn(arg, c, list_entry(l, struct segment, all_link), true);
    }
}

void seg_table_destroy(struct seg_table *t)
{
  for (unsigned i = 0; i < SEG_CLASS_BUCKETS; i++) {
    while (t->classes[i]) {
      struct seg_class *c = t->classes[i];
      t->classes[i] = c->next;
      while (!list_empty(&c->all)) {
        struct segment *seg = list_entry(c->all.next, struct segment, all_link);
        while (!list_empty(&seg->mappers)) {
          struct seg_mapping *m = list_entry(seg->mappers.next, struct seg_mapping, segment_link);
          list_del(&m->segment_link);
          list_del(&m->client_link);
          free(m);
        }
        list_del(&seg->all_link);
        release_segment(c, seg);
      }
      while (!list_empty(&c->pool)) {
        struct segment *seg = list_entry(c->pool.next, struct segment, all_link);
        list_del(&seg->all_link);
        release_segment(c, seg);
      }
      free(c);
    }
  }
}

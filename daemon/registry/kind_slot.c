/* SPDX-License-Identifier: MIT */
/* Buffers carved out of a segment (segment.h): a slot of an allocation that holds
 * buffers of one permission class only.  The client maps the segment once per process;
 * a buffer in it is an offset and a size.  Persistent host ones outlive the daemon
 * through their segment (slot_store.h). */
#include "config.h"
#include "registry/kind.h"
#include "registry/slot_store.h"
#include "util/log.h"
#include "registry/backends.h"
#include "protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Its device memory is its segment's, charged whole to the class's uid when one is
 * taken (seg_charge), not per slot. */
static void slot_estimate(const struct registry *reg, const struct reg_create_args *args,
                          const struct backend *be, struct quota_cost *cost)
{
  uint64_t slot = seg_slot_size(be, args->size); /* a carved buffer takes its whole slot */

  (void)reg;
  *cost = (struct quota_cost){ .bytes = slot, .host = be->kind == PROTO_BACKEND_HOST ? slot : 0,
                               .device = -1 };
}

struct reg_slot {
  struct reg_object obj;
  struct segment *segment;
  uint32_t slot;
  bool dirty; /* until its creator has it: the creator clears it */
};

static struct reg_slot *slot_of(struct reg_object *obj)
{
  return (struct reg_slot *)obj;
}

static int slot_alloc(struct registry *reg, struct reg_object *obj,
                      const struct reg_create_args *args, const struct backend *be,
                      const struct reg_client *client, char *err, size_t errlen)
{
  struct reg_slot *s = slot_of(obj);
  int device = be->kind == PROTO_BACKEND_HOST ? -1 : args->device;
  struct seg_key key = {
    /* the object's group: a segment is shared by one permission class alone, so that
     * whoever may map it may read every slot in it */
    .backend = be->kind, .device = device, .uid = client->uid,
    .gid = args->has_group ? args->group : client->gid,
    .mode = args->mode ? args->mode : reg->limits.default_mode,
  };
  int r;

  /* The creator's library (one that knows segments: select() checked) clears device
   * memory in its own context. */
  if ((r = seg_carve(&reg->segs, be, &key, args->size, true, &s->segment, &s->slot,
                     &s->dirty, err, errlen)) < 0)
    return r;
  obj->allocated = s->segment->slot;
  obj->host_bytes = be->kind == PROTO_BACKEND_HOST ? obj->allocated : 0;
  obj->backend = be;
  obj->device = device;
  return 0;
}

/* The segment's fd or handle, only where this connection does not map it with this
 * access yet (it is counted as mapping it from then on); never sync.  The first export,
 * its creator's, says whether the slot needs clearing. */
static int slot_export(struct registry *reg, struct reg_object *obj, struct reg_client *client,
                       const struct reg_policy *policy, bool read_only, struct reg_export *out,
                       char *err, size_t errlen)
{
  struct reg_slot *s = slot_of(obj);
  struct segment *seg = s->segment;
  struct backend_export mem = { .fd = -1 };
  int r;

  if ((r = reg_legacy_ipc_check(reg, obj->backend, err, errlen)) < 0)
    return r;
  if (!policy->carved) {
    snprintf(err, errlen, "unsupported: '%s' is carved out of a shared segment, which this "
             "gpushm library does not know (it is older than 0.3)", obj->name);
    return PROTO_E_UNSUPPORTED;
  }
  out->segment_id = seg->id;
  out->segment_offset = (uint64_t)s->slot * seg->slot;
  out->segment_size = seg->bytes;
  out->clear = s->dirty;
  s->dirty = false;
  if (seg_mapped_by(seg, client, read_only))
    return 0;
  r = obj->backend->export(obj->backend, &seg->mem, read_only, &mem, err, errlen);
  if (r < 0)
    return r;
  if (seg_map(seg, client, &client->mappings, read_only) < 0) {
    if (mem.fd >= 0)
      close(mem.fd);
    snprintf(err, errlen, "daemon out of memory");
    return PROTO_E_NOMEM;
  }
  if (mem.fd >= 0)
    out->fds[out->n_fds++] = mem.fd;
  memcpy(out->handle, mem.handle, mem.handle_len);
  out->handle_len = mem.handle_len;
  out->segment_attached = true;
  return 0;
}

static void slot_release(struct registry *reg, struct reg_object *obj)
{
  struct reg_slot *s = slot_of(obj);

  /* Stopping: the segment goes whole with the table (seg_table_destroy), its memory
   * as the last buffers left it, for the next daemon to adopt. */
  if (!reg->stopping)
    seg_free_slot(&reg->segs, s->segment, s->slot);
  s->segment = NULL;
}

static void slot_describe(const struct reg_object *obj, struct reg_description *out)
{
  const struct reg_slot *s = (const struct reg_slot *)obj;

  memset(out, 0, sizeof *out);
  out->kind = "buffer";
  out->backend = obj->backend->kind;
  out->segment_id = s->segment->id;
}

/* ---- persistence: through the segment (slot_store.h) -------------------------------
 * Host memory only: a carved cuda-fd buffer gets an allocation of its own while the
 * store is reachable (kind_buffer.c), and persists as a buffer. */
static bool slot_persists(const struct registry *reg, const struct reg_object *obj)
{
  (void)reg;
  return obj->backend->kind == PROTO_BACKEND_HOST && obj->backend->adopt;
}

static unsigned slot_deposit_records(const struct registry *reg, const struct reg_object *obj)
{
  (void)reg;
  return slot_store_deposited(((const struct reg_slot *)obj)->segment) ? 0 : 2;
}

static int slot_deposit(struct registry *reg, struct reg_object *obj, const struct reg_store *store,
                        char *err, size_t errlen)
{
  struct reg_slot *s = slot_of(obj);
  const struct slot_entry e = {
    .id = obj->id, .size = obj->size, .created_unix_ms = obj->created_unix_ms,
    .name = obj->name, .metadata = obj->metadata, .metadata_len = obj->metadata_len,
  };

  (void)reg;
  return slot_store_deposit(s->segment, s->slot, &e, store, err, errlen);
}

static int slot_withdraw(struct registry *reg, struct reg_object *obj, const struct reg_store *store)
{
  struct reg_slot *s = slot_of(obj);

  (void)reg;
  return slot_store_withdraw(s->segment, s->slot, store);
}

/* Each persistent slot of an adopted segment, back as a buffer; one that cannot come
 * back (a name taken since, an entry not whole) loses its entry and its slot. */
static void adopt_slots(struct registry *reg, struct segment *seg,
                        const struct slot_store_segment *ss, const struct reg_adopt_sink *emit)
{
  struct reg_adopt_args a;
  struct slot_entry e;
  char why[200];

  for (uint32_t i = 0; i < seg->n_slots; i++) {
    struct reg_slot *s;
    int r = slot_store_entry(seg, i, &e);
    if (r < 0)
      log_warn("systemd's fd store: dropping the persistent buffer in slot %u of segment %llu: "
               "its entry in the slot table is not whole", i, (unsigned long long)seg->id);
    if (r <= 0)
      continue;
    if (e.size == 0 || e.size > seg->slot || !(s = calloc(1, sizeof *s))) {
      log_warn("systemd's fd store: dropping persistent host buffer '%s' (id %llu) in segment "
               "%llu: %s", e.name, (unsigned long long)e.id, (unsigned long long)seg->id,
               e.size == 0 || e.size > seg->slot ? "its size does not fit its slot"
                                                 : "daemon out of memory");
      slot_store_clear(seg, i);
      continue;
    }
    s->obj.ops = &reg_kind_slot;
    s->obj.kind = REG_BUFFER;
    s->obj.backend = seg->cls->backend;
    s->obj.device = -1;
    s->obj.allocated = seg->slot;
    s->obj.host_bytes = seg->slot;
    s->segment = seg;
    s->slot = i;
    a.id = e.id;
    snprintf(a.name_buf, sizeof a.name_buf, "%s", e.name);
    a.name = a.name_buf;
    a.size = e.size;
    a.owner_uid = ss->key.uid;
    a.owner_gid = ss->key.gid;
    a.mode = ss->key.mode;
    a.created_unix_ms = e.created_unix_ms;
    a.metadata_len = e.metadata_len;
    a.metadata = e.metadata_len ? memcpy(a.metadata_buf, e.metadata, e.metadata_len) : NULL;
    seg_adopt_slot(seg, i);
    if (emit->emit(emit->ctx, &s->obj, &a, why, sizeof why) < 0) {
      log_warn("systemd's fd store: dropping persistent host buffer '%s' (id %llu) in segment "
               "%llu: %s", a.name_buf, (unsigned long long)a.id, (unsigned long long)seg->id,
               why);
      seg->n_used--; /* the slot it marked was the last: seg_adopt_slot() stacks in order */
      slot_store_clear(seg, i);
      free(s->obj.metadata);
      free(s);
    }
  }
}

static int slot_adopt_record(struct registry *reg, const char *record, int fd,
                             const struct reg_store *store, const struct reg_adopt_sink *emit,
                             unsigned *records, char *err, size_t errlen)
{
  struct slot_store_segment ss;
  const struct backend *be;
  struct backend_mem mem;
  struct segment *seg;
  uint64_t allocated = 0;
  char why[200];
  int r, device;

  if ((r = slot_store_open(record, store, &ss, why, sizeof why)) == 1)
    return 0;
  if (r == 0) {
    if (!(be = registry_backend(reg, ss.backend)) || be->kind != PROTO_BACKEND_HOST ||
        !be->adopt || ss.key.device != -1) {
      snprintf(why, sizeof why, "not a host segment");
      r = PROTO_E_INVAL;
    } else if ((r = be->adopt(be, fd, NULL, ss.bytes, &allocated, &mem, &device, why,
                              sizeof why)) == 0) {
      fd = -1; /* the memory's now */
      if ((r = seg_adopt(&reg->segs, be, &ss.key, ss.id, ss.slot, &mem, allocated, &seg, why,
                         sizeof why)) < 0) {
        be->release(be, &mem);
      } else if (seg->n_slots != ss.n_slots) {
        snprintf(why, sizeof why, "its slot table has %u slots, the segment %u", ss.n_slots,
                 seg->n_slots);
        r = PROTO_E_INVAL;
        seg_adopt_done(&reg->segs, seg); /* nothing adopted: given back */
      } else {
        slot_store_attach(seg, &ss);
        adopt_slots(reg, seg, &ss, emit);
        *records = 2u - (unsigned)slot_store_adopted(seg, store);
        seg_adopt_done(&reg->segs, seg);
        return 1;
      }
    }
    slot_store_discard(&ss);
    if (r == 0)
      r = PROTO_E_INVAL;
  }
  snprintf(err, errlen, "segment record '%s': %s", record, why);
  {
    char table[REG_RECORD_MAX];
    snprintf(table, sizeof table, "t.%s", record + 2);
    store->remove(store->ctx, table);
  }
  store->remove(store->ctx, record);
  if (fd >= 0)
    close(fd);
  return r;
}

const struct reg_kind_ops reg_kind_slot = {
  .name = "buffer",
  .kind = REG_BUFFER,
  .object_size = sizeof(struct reg_slot),
  .estimate = slot_estimate,
  .alloc = slot_alloc,
  .export = slot_export,
  .release = slot_release,
  .describe = slot_describe,
  .persists = slot_persists,
  .deposit_records = slot_deposit_records,
  .deposit = slot_deposit,
  .withdraw = slot_withdraw,
  .adopt_record = slot_adopt_record,
};

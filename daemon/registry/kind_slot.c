/* SPDX-License-Identifier: MIT */
/* Buffers carved out of a segment (segment.h): a slot of an allocation that holds
 * buffers of one permission class only.  The client maps the segment once per process;
 * a buffer in it is an offset and a size. */
#include "config.h"
#include "registry/kind.h"
#include "registry/backends.h"
#include "gpushm.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Its device memory is its segment's, charged whole to the class's uid when one is
 * taken (seg_charge), not per slot. */
static void slot_estimate(const struct registry *reg, const struct reg_create_args *args,
                          const struct backend *be, struct quota_cost *cost)
{
  uint64_t slot = seg_slot_size(be, args->size); /* a carved buffer takes its whole slot */

  (void)reg;
  *cost = (struct quota_cost){ .bytes = slot, .host = be->kind == GPUSHM_BACKEND_HOST ? slot : 0,
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
  int device = be->kind == GPUSHM_BACKEND_HOST ? -1 : args->device;
  struct seg_key key = {
    .backend = be->kind, .device = device, .uid = client->uid, .gid = client->gid,
    .mode = args->mode ? args->mode : reg->limits.default_mode,
  };
  int r;

  /* The creator's library (one that knows segments: select() checked) clears device
   * memory in its own context. */
  if ((r = seg_carve(&reg->segs, be, &key, args->size, true, &s->segment, &s->slot,
                     &s->dirty, err, errlen)) < 0)
    return r;
  obj->allocated = s->segment->slot;
  obj->host_bytes = be->kind == GPUSHM_BACKEND_HOST ? obj->allocated : 0;
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
    return GPUSHM_E_UNSUPPORTED;
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
    return GPUSHM_E_NOMEM;
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

const struct reg_kind_ops reg_kind_slot = {
  .name = "buffer",
  .kind = REG_BUFFER,
  .object_size = sizeof(struct reg_slot),
  .estimate = slot_estimate,
  .alloc = slot_alloc,
  .export = slot_export,
  .release = slot_release,
  .describe = slot_describe,
};

/* SPDX-License-Identifier: MIT */
/* Calls for admin tools (gpushm-admin.h): the buffer list, clients, daemon statistics.
 *
 * The objects they return are the daemon's unpacked replies, kept alive as they came:
 * each public element type is the protobuf-c message it names, behind an opaque
 * pointer (a gpushm_buffer_info_t * is a Gpushm__BufferInfo *), and nothing is copied
 * field by field.  Lists hold every page of their walk, unpacked into an arena of
 * their own; a gpushm_stats_t is the stats
 * body taken out of its reply.  Accessors come from one table, ADMIN_ACCESSORS below:
 * a field the daemon starts reporting costs its line in gpushm.proto, the daemon's
 * filler, one line in the table and its declaration in gpushm-admin.h. */
#include "config.h"
#include "error.h"
#include "conn.h"
#include "buffer.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

/* The message behind each public type, for the table's generators. */
#define MSG_buffer_info Gpushm__BufferInfo
#define MSG_holder Gpushm__Holder
#define MSG_client_info Gpushm__ClientInfo
#define MSG_stats Gpushm__StatsReply
#define MSG_device_stats Gpushm__Device
#define MSG_request_stats Gpushm__RequestCount
#define MSG_usage Gpushm__Usage
#define MSG_detached Gpushm__Detached
#define MSG_detached_buffer Gpushm__DetachedBuffer
#define MSG_segment_usage Gpushm__SegmentUsage
#define MSG_open_stats Gpushm__OpenCount
#define MSG_metric Gpushm__Metric
#define MSG_metric_label Gpushm__MetricLabel

/* One line per accessor, three kinds of line:
 *   NUM(object, field, C type, value):  gpushm_<object>_<field>(), value read from the
 *                                       message m; 0 for a NULL object;
 *   TEXT(object, field, member):        a string member; "" for NULL (or none sent);
 *   LIST(object, field, element, member): a repeated member: gpushm_<object>_<field>_count()
 *                                       and gpushm_<object>_<field>(i), NULL past the end.
 * Enums of the wire are translated here (events are a kind in the API, a backend on
 * the wire); everything else is as the daemon sent it. */
#define ADMIN_ACCESSORS(NUM, TEXT, LIST)                                                  \
  NUM(buffer_info, id, uint64_t, m->id)                                                   \
  TEXT(buffer_info, name, name)                                                           \
  NUM(buffer_info, size, uint64_t, m->size)                                               \
  NUM(buffer_info, allocated, uint64_t, m->allocated)                                     \
  NUM(buffer_info, kind, gpushm_kind_t, client_kind_of_info(m))                           \
  NUM(buffer_info, backend, gpushm_backend_t, client_backend_of_wire(m->backend))         \
  NUM(buffer_info, device, int32_t, m->device)                                            \
  NUM(buffer_info, owner_uid, uint32_t, m->owner_uid)                                     \
  NUM(buffer_info, owner_gid, uint32_t, m->owner_gid)                                     \
  NUM(buffer_info, mode, uint32_t, m->mode)                                               \
  NUM(buffer_info, lifetime, gpushm_lifetime_t, (gpushm_lifetime_t)m->lifetime)           \
  NUM(buffer_info, linked, int, m->linked != 0)                                           \
  NUM(buffer_info, sync, int, m->sync != 0)                                               \
  NUM(buffer_info, segment_id, uint64_t, m->segment_id)                                   \
  NUM(buffer_info, refs, uint32_t, m->refs)                                               \
  NUM(buffer_info, my_refs, uint32_t, m->my_refs)                                         \
  NUM(buffer_info, creator_pid, uint32_t, m->creator_pid)                                 \
  NUM(buffer_info, created_unix_ms, uint64_t, m->created_unix_ms)                         \
  NUM(buffer_info, holders_total, uint32_t, m->holders_total)                             \
  LIST(buffer_info, holder, gpushm_holder_t, holders)                                     \
  NUM(holder, client_id, uint32_t, m->client_id)                                          \
  NUM(holder, pid, uint32_t, m->pid)                                                      \
  NUM(holder, uid, uint32_t, m->uid)                                                      \
  NUM(holder, refs, uint32_t, m->refs)                                                    \
  NUM(holder, read_write, int, m->read_write != 0)                                        \
  NUM(holder, ring_consumer, int, m->ring_consumer != 0)                                  \
  NUM(client_info, client_id, uint32_t, m->client_id)                                     \
  NUM(client_info, pid, uint32_t, m->pid)                                                 \
  NUM(client_info, uid, uint32_t, m->uid)                                                 \
  NUM(client_info, gid, uint32_t, m->gid)                                                 \
  TEXT(client_info, name, name)                                                           \
  NUM(client_info, connected_unix_ms, uint64_t, m->connected_unix_ms)                     \
  NUM(client_info, buffers_held, uint32_t, m->buffers_held)                               \
  NUM(client_info, bytes_held, uint64_t, m->bytes_held)                                   \
  NUM(client_info, admin, int, m->admin != 0)                                             \
  NUM(client_info, segments_mapped, uint32_t, m->segments_mapped)                         \
  NUM(client_info, segment_bytes_mapped, uint64_t, m->segment_bytes_mapped)               \
  TEXT(stats, daemon_version, daemon_version)                                             \
  NUM(stats, instance_id, uint64_t, m->instance_id)                                       \
  NUM(stats, uptime_ms, uint64_t, m->uptime_ms)                                           \
  NUM(stats, clients, uint32_t, m->clients)                                               \
  NUM(stats, buffers, uint32_t, m->buffers)                                               \
  NUM(stats, buffers_linked, uint32_t, m->buffers_linked)                                 \
  NUM(stats, bytes_allocated, uint64_t, m->bytes_allocated)                               \
  NUM(stats, requests, uint64_t, m->requests)                                             \
  NUM(stats, request_errors, uint64_t, m->request_errors)                                 \
  NUM(stats, protocol_errors, uint64_t, m->protocol_errors)                               \
  NUM(stats, clients_dropped, uint64_t, m->clients_dropped)                               \
  NUM(stats, open_fds, uint32_t, m->open_fds)                                             \
  LIST(stats, device, gpushm_device_stats_t, devices)                                     \
  LIST(stats, request_type, gpushm_request_stats_t, requests_by_type)                     \
  LIST(stats, usage, gpushm_usage_t, usage)                                               \
  LIST(stats, detached, gpushm_detached_t, detached)                                      \
  NUM(stats, detached_total, uint32_t, m->detached_total)                                 \
  NUM(stats, bytes_pinned_after_release, uint64_t, m->bytes_pinned_after_release)         \
  NUM(stats, fences_raised, uint64_t, m->fences_raised)                                   \
  NUM(stats, oneway_errors, uint64_t, m->oneway_errors)                                   \
  LIST(stats, segment_usage, gpushm_segment_usage_t, segments)                            \
  NUM(segment_usage, backend, gpushm_backend_t, client_backend_of_wire(m->backend))       \
  NUM(segment_usage, device, int32_t, m->device)                                          \
  NUM(segment_usage, segments, uint32_t, m->segments)                                     \
  NUM(segment_usage, bytes, uint64_t, m->bytes)                                           \
  NUM(segment_usage, bytes_used, uint64_t, m->bytes_used)                                 \
  NUM(segment_usage, mappings, uint32_t, m->mappings)                                     \
  NUM(segment_usage, pooled, uint32_t, m->pooled)                                         \
  NUM(segment_usage, pooled_bytes, uint64_t, m->pooled_bytes)                             \
  NUM(segment_usage, carved, uint64_t, m->carved)                                         \
  NUM(segment_usage, driver_allocs, uint64_t, m->driver_allocs)                           \
  NUM(detached, pid, uint32_t, m->pid)                                                    \
  NUM(detached, uid, uint32_t, m->uid)                                                    \
  NUM(detached, client_id, uint32_t, m->client_id)                                        \
  NUM(detached, since_unix_ms, uint64_t, m->since_unix_ms)                                \
  NUM(detached, buffers_total, uint32_t, m->buffers_total)                                \
  NUM(detached, bytes_total, uint64_t, m->bytes_total)                                    \
  NUM(detached, bytes_released, uint64_t, m->bytes_released)                             \
  LIST(detached, buffer, gpushm_detached_buffer_t, buffers)                               \
  NUM(detached_buffer, id, uint64_t, m->id)                                               \
  TEXT(detached_buffer, name, name)                                                       \
  NUM(detached_buffer, backend, gpushm_backend_t, client_backend_of_wire(m->backend))     \
  NUM(detached_buffer, device, int32_t, m->device)                                        \
  NUM(detached_buffer, allocated, uint64_t, m->allocated)                                 \
  NUM(detached_buffer, released, int, m->released != 0)                                   \
  NUM(device_stats, ordinal, int32_t, m->ordinal)                                         \
  TEXT(device_stats, name, name)                                                          \
  NUM(device_stats, total_memory, uint64_t, m->total_memory)                              \
  NUM(device_stats, free_memory, uint64_t, m->free_memory)                                \
  TEXT(request_stats, type, type)                                                         \
  NUM(request_stats, count, uint64_t, m->count)                                           \
  NUM(request_stats, errors, uint64_t, m->errors)                                         \
  NUM(request_stats, latency_sum_ns, uint64_t, m->latency_sum_ns)                         \
  LIST(stats, opens, gpushm_open_stats_t, opens)                                          \
  NUM(open_stats, kind, gpushm_kind_t, client_kind_of_wire(m->backend))                   \
  NUM(open_stats, backend, gpushm_backend_t, client_backend_of_wire(m->backend))          \
  NUM(open_stats, device, int32_t, m->device)                                             \
  NUM(open_stats, opens, uint64_t, m->opens)                                              \
  NUM(open_stats, creates, uint64_t, m->creates)                                          \
  NUM(usage, kind, gpushm_kind_t, client_kind_of_wire(m->backend))                        \
  NUM(usage, backend, gpushm_backend_t, client_backend_of_wire(m->backend))               \
  NUM(usage, device, int32_t, m->device)                                                  \
  NUM(usage, buffers, uint32_t, m->buffers)                                               \
  NUM(usage, bytes, uint64_t, m->bytes)                                                   \
  LIST(stats, metric, gpushm_metric_t, metrics)                                           \
  TEXT(metric, name, name)                                                                \
  TEXT(metric, help, help)                                                                \
  NUM(metric, type, gpushm_metric_type_t, (gpushm_metric_type_t)m->type)                  \
  TEXT(metric, unit, unit)                                                                \
  NUM(metric, value, uint64_t, m->value)                                                  \
  NUM(metric, exponent, int32_t, m->exponent)                                             \
  LIST(metric, label, gpushm_metric_label_t, labels)                                      \
  TEXT(metric_label, name, name)                                                          \
  TEXT(metric_label, value, value)

#define ADMIN_MSG(object, o) ((const MSG_##object *)(const void *)(o))

#define DEFINE_NUM(object, field, type, value)                                            \
  type gpushm_##object##_##field(const gpushm_##object##_t *o)                            \
  {                                                                                       \
    const MSG_##object *m = ADMIN_MSG(object, o);                                         \
    return m ? (type)(value) : (type)0;                                                   \
  }
#define DEFINE_TEXT(object, field, member)                                                \
  const char *gpushm_##object##_##field(const gpushm_##object##_t *o)                     \
  {                                                                                       \
    const MSG_##object *m = ADMIN_MSG(object, o);                                         \
    return m && m->member ? m->member : "";                                               \
  }
#define DEFINE_LIST(object, field, element, member)                                       \
  size_t gpushm_##object##_##field##_count(const gpushm_##object##_t *o)                  \
  {                                                                                       \
    const MSG_##object *m = ADMIN_MSG(object, o);                                         \
    return m ? m->n_##member : 0;                                                         \
  }                                                                                       \
  const element *gpushm_##object##_##field(const gpushm_##object##_t *o, size_t i)        \
  {                                                                                       \
    const MSG_##object *m = ADMIN_MSG(object, o);                                         \
    return m && i < m->n_##member ? (const element *)(const void *)m->member[i] : NULL;   \
  }

ADMIN_ACCESSORS(DEFINE_NUM, DEFINE_TEXT, DEFINE_LIST)

/* A 16-byte UUID, or GPUSHM_E_NOENT where the daemon sent none (host memory). */
static int copy_uuid(const ProtobufCBinaryData *src, uint8_t uuid[16], const char *what)
{
  client_clear_error();
  if (!src || !uuid)
    return client_error(GPUSHM_E_INVAL, "%s is NULL", src ? "uuid" : what);
  if (src->len != 16)
    return client_error(GPUSHM_E_NOENT, "%s has no device UUID", what);
  memcpy(uuid, src->data, 16);
  return 0;
}

int gpushm_buffer_info_device_uuid(const gpushm_buffer_info_t *info, uint8_t uuid[16])
{
  const Gpushm__BufferInfo *m = ADMIN_MSG(buffer_info, info);
  return copy_uuid(m ? &m->device_uuid : NULL, uuid, "info");
}

const void *gpushm_buffer_info_metadata(const gpushm_buffer_info_t *info, size_t *size)
{
  const Gpushm__BufferInfo *m = ADMIN_MSG(buffer_info, info);
  bool has = m && m->metadata.len;

  if (size)
    *size = has ? m->metadata.len : 0;
  return has ? m->metadata.data : NULL;
}

int gpushm_buffer_info_image(const gpushm_buffer_info_t *info, gpushm_image_desc_t *out)
{
  const Gpushm__BufferInfo *m = ADMIN_MSG(buffer_info, info);
  const Gpushm__ImageDesc *d = m ? m->image : NULL;

  client_clear_error();
  if (!d || !out)
    return client_error(GPUSHM_E_INVAL, "not an image");
  memset(out, 0, sizeof *out);
  out->size = sizeof *out;
  out->format = d->format;
  out->width = d->width;
  out->height = d->height;
  out->depth = d->depth;
  out->mip_levels = d->mip_levels;
  out->array_layers = d->array_layers;
  out->tiling = d->tiling;
  out->usage = d->usage;
  out->row_pitch = d->row_pitch;
  return 0;
}

int gpushm_buffer_info_ring(const gpushm_buffer_info_t *info, uint32_t *slots,
                            uint64_t *slot_size, uint64_t *slot_stride, uint32_t *consumers)
{
  const Gpushm__BufferInfo *m = ADMIN_MSG(buffer_info, info);
  const Gpushm__RingInfo *r = m ? m->ring : NULL;

  client_clear_error();
  if (!r)
    return client_error(GPUSHM_E_INVAL, "not a ring");
  if (slots)
    *slots = r->slots;
  if (slot_size)
    *slot_size = r->slot_size;
  if (slot_stride)
    *slot_stride = r->slot_stride;
  if (consumers)
    *consumers = r->consumers;
  return 0;
}

int gpushm_buffer_info_weights(const gpushm_buffer_info_t *info, uint64_t *generation,
                               uint64_t *newest, uint32_t *tensors, uint64_t *manifest_size)
{
  const Gpushm__BufferInfo *m = ADMIN_MSG(buffer_info, info);
  const Gpushm__WeightsInfo *w = m ? m->weights : NULL;

  client_clear_error();
  if (!w)
    return client_error(GPUSHM_E_INVAL, "not a weight set");
  if (generation)
    *generation = w->generation;
  if (newest)
    *newest = w->newest;
  if (tensors)
    *tensors = w->tensors;
  if (manifest_size)
    *manifest_size = w->manifest_size;
  return 0;
}

int gpushm_device_stats_uuid(const gpushm_device_stats_t *dev, uint8_t uuid[16])
{
  const Gpushm__Device *m = ADMIN_MSG(device_stats, dev);
  return copy_uuid(m ? &m->uuid : NULL, uuid, "dev");
}

/* value * 10^exponent in decimal, exact: no trailing zeros after the point. */
static const char *scaled_text(uint64_t value, int32_t exponent, char *out, size_t len)
{
  char digits[32];
  int n, point;

  if (!out || !len)
    return out;
  n = snprintf(digits, sizeof digits, "%llu", (unsigned long long)value);
  if (exponent >= 0) {
    /* whole: the digits and as many zeros (a daemon sends small exponents) */
    snprintf(out, len, "%s%.*s", digits, exponent > 18 ? 18 : (int)exponent,
             "000000000000000000");
    return out;
  }
  point = n + exponent; /* digits before the point */
  if (point > 0)
    snprintf(out, len, "%.*s.%s", point, digits, digits + point);
  else
    snprintf(out, len, "0.%.*s%s", -point > 18 ? 18 : -point, "000000000000000000", digits);
  if (strchr(out, '.')) {
    size_t end = strlen(out);
    while (end > 0 && out[end - 1] == '0')
      out[--end] = '\0';
    if (end > 0 && out[end - 1] == '.')
      out[--end] = '\0';
  }
  return out;
}

const char *gpushm_metric_value_text(const gpushm_metric_t *metric, char *out, size_t len)
{
  const Gpushm__Metric *m = ADMIN_MSG(metric, metric);

  if (out && len)
    out[0] = '\0';
  return m ? scaled_text(m->value, m->exponent, out, len) : out;
}

/* A histogram's buckets as a reader may use them: one more than its bounds, the bounds
 * ascending; anything else reads as no buckets (a daemon's bug must not print a
 * histogram Prometheus rejects). */
static const Gpushm__Metric *histogram_of(const gpushm_metric_t *metric)
{
  const Gpushm__Metric *m = ADMIN_MSG(metric, metric);

  if (!m || m->type != GPUSHM__METRIC_TYPE__METRIC_HISTOGRAM || !m->n_bounds ||
      m->n_buckets != m->n_bounds + 1)
    return NULL;
  for (size_t i = 1; i < m->n_bounds; i++)
    if (m->bounds[i] <= m->bounds[i - 1])
      return NULL;
  return m;
}

uint64_t gpushm_metric_observations(const gpushm_metric_t *metric)
{
  const Gpushm__Metric *m = ADMIN_MSG(metric, metric);
  return m && m->type == GPUSHM__METRIC_TYPE__METRIC_HISTOGRAM ? m->count : 0;
}

size_t gpushm_metric_bucket_count(const gpushm_metric_t *metric)
{
  const Gpushm__Metric *m = histogram_of(metric);
  return m ? m->n_bounds : 0;
}

const char *gpushm_metric_bucket_le_text(const gpushm_metric_t *metric, size_t i, char *out,
                                         size_t len)
{
  const Gpushm__Metric *m = histogram_of(metric);

  if (out && len)
    out[0] = '\0';
  return m && i < m->n_bounds ? scaled_text(m->bounds[i], m->exponent, out, len) : out;
}

uint64_t gpushm_metric_bucket_observations(const gpushm_metric_t *metric, size_t i)
{
  const Gpushm__Metric *m = histogram_of(metric);
  uint64_t total = 0;

  if (!m || i >= m->n_bounds)
    return 0;
  for (size_t b = 0; b <= i; b++)
    total += m->buckets[b];
  return total;
}

/* The latency histogram: repeated numbers, not messages, so not in the table. */
size_t gpushm_stats_latency_bound_count(const gpushm_stats_t *stats)
{
  const Gpushm__StatsReply *m = ADMIN_MSG(stats, stats);
  return m ? m->n_latency_bounds_ns : 0;
}

uint64_t gpushm_stats_latency_bound_ns(const gpushm_stats_t *stats, size_t i)
{
  const Gpushm__StatsReply *m = ADMIN_MSG(stats, stats);
  return m && i < m->n_latency_bounds_ns ? m->latency_bounds_ns[i] : 0;
}

size_t gpushm_request_stats_latency_bucket_count(const gpushm_request_stats_t *req)
{
  const Gpushm__RequestCount *m = ADMIN_MSG(request_stats, req);
  return m ? m->n_latency_le : 0;
}

uint64_t gpushm_request_stats_latency_le(const gpushm_request_stats_t *req, size_t i)
{
  const Gpushm__RequestCount *m = ADMIN_MSG(request_stats, req);
  return m && i < m->n_latency_le ? m->latency_le[i] : 0;
}

/* ---- paged lists ----------------------------------------------------------------- */

/* Every page of a walk is unpacked into one arena that the list owns, and items point
 * into it: protobuf-c allocates each entry, name and holder array on its own, which with
 * malloc made a list of 100k buffers cost some 300k mallocs and as many frees.  Here an
 * allocation is a bump of a pointer and the whole list goes in a few frees.  protobuf-c's
 * frees (temporaries of an unpack, a page that failed) do nothing: that memory is
 * returned with the rest when the list is freed. */
struct arena_block {
  struct arena_block *next;
  size_t used, cap;
  bool mapped; /* mmap()ed (large), else malloc()ed */
  _Alignas(max_align_t) unsigned char data[];
};

/* The first block; each next one doubles, up to the last size, so that a list takes
 * few blocks however long it is and a short one stays small. */
#define ARENA_FIRST_BLOCK (64u * 1024u)
#define ARENA_MAX_BLOCK (4u * 1024u * 1024u)

struct reply_list {
  ProtobufCAllocator alloc; /* allocator_data: this list */
  struct arena_block *blocks; /* the newest first */
  const void **items;
  size_t n, cap;
};

struct gpushm_buffer_list {
  struct reply_list l;
};

struct gpushm_client_list {
  struct reply_list l;
};

/* Blocks of a long list are mapped with transparent huge pages where the system
 * allows them (madvise): a list of 100k buffers is some 20 MB of structs written once,
 * which in 4 KiB pages was 5000 page faults per list, a third of its cost. */
#define ARENA_HUGE (2u * 1024u * 1024u)

static struct arena_block *arena_block_new(size_t cap)
{
  size_t bytes = sizeof(struct arena_block) + cap, span;
  struct arena_block *b;
  uint8_t *p, *aligned;

  if (bytes < ARENA_HUGE) {
    if ((b = malloc(bytes))) {
      b->mapped = false;
      b->cap = cap;
    }
    return b;
  }
  /* huge pages need 2 MiB alignment: map one more and trim */
  bytes = (bytes + ARENA_HUGE - 1) & ~(size_t)(ARENA_HUGE - 1);
  span = bytes + ARENA_HUGE;
  if ((p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)) ==
      MAP_FAILED)
    return NULL;
  aligned = (uint8_t *)(((uintptr_t)p + ARENA_HUGE - 1) & ~(uintptr_t)(ARENA_HUGE - 1));
  if (aligned > p)
    munmap(p, (size_t)(aligned - p));
  if (aligned + bytes < p + span)
    munmap(aligned + bytes, (size_t)(p + span - (aligned + bytes)));
  madvise(aligned, bytes, MADV_HUGEPAGE); /* a hint: 4 KiB pages if refused */
  b = (struct arena_block *)(void *)aligned;
  b->mapped = true;
  b->cap = bytes - sizeof *b;
  return b;
}

static void arena_block_free(struct arena_block *b)
{
  if (b->mapped)
    munmap(b, sizeof *b + b->cap);
  else
    free(b);
}

static void *arena_alloc(void *data, size_t size)
{
  struct reply_list *l = data;
  struct arena_block *b = l->blocks;
  size_t need = (size + _Alignof(max_align_t) - 1) & ~(_Alignof(max_align_t) - 1);
  void *p;

  if (need < size)
    return NULL;
  if (!b || b->cap - b->used < need) {
    size_t cap = b ? (b->cap < ARENA_MAX_BLOCK ? 2 * b->cap : b->cap) : ARENA_FIRST_BLOCK;
    if (cap < need)
      cap = need;
    if (!(b = arena_block_new(cap)))
      return NULL;
    b->used = 0;
    b->next = l->blocks;
    l->blocks = b;
  }
  p = b->data + b->used;
  b->used += need;
  return p;
}

static void arena_free(void *data, void *p)
{
  (void)data;
  (void)p;
}

static void reply_list_init(struct reply_list *l)
{
  l->alloc.alloc = arena_alloc;
  l->alloc.free = arena_free;
  l->alloc.allocator_data = l;
}

static void reply_list_clear(struct reply_list *l)
{
  while (l->blocks) {
    struct arena_block *next = l->blocks->next;
    arena_block_free(l->blocks);
    l->blocks = next;
  }
  free(l->items);
}

/* Appends a page's n items (they live in the list's arena). */
static int reply_list_add(struct reply_list *l, void *const *items, size_t n)
{
  if (n > l->cap - l->n) {
    size_t cap = l->cap ? l->cap : 256;
    const void **grown;
    while (cap - l->n < n)
      cap *= 2;
    if (!(grown = realloc(l->items, cap * sizeof *grown)))
      return client_error(GPUSHM_E_NOMEM, "out of memory");
    l->items = grown;
    l->cap = cap;
  }
  if (n) /* an empty page: items may be NULL, and NULL + 0 is undefined */
    memcpy(l->items + l->n, items, n * sizeof *items);
  l->n += n;
  return 0;
}

/* One page of the buffer list after *after_id; *more: another page may follow. */
/* client_call_list_walk()'s take for buffer lists. */
static int take_buffer_page(void *ctx, Gpushm__Reply *reply, uint64_t *after_id)
{
  struct reply_list *l = ctx;
  const Gpushm__ListReply *page;
  uint64_t last;
  bool more;
  int r;

  if (reply->body_case != GPUSHM__REPLY__BODY_LIST || !reply->list)
    return client_error(GPUSHM_E_PROTO, "malformed list reply");
  page = reply->list;
  last = page->n_buffers ? page->buffers[page->n_buffers - 1]->id : 0;
  /* A page that does not move past after_id ends the walk even if the daemon says
   * more: no progress. */
  more = page->more && page->n_buffers > 0 && last > *after_id;
  *after_id = last;
  if ((r = reply_list_add(l, (void *const *)page->buffers, page->n_buffers)) < 0)
    return r;
  return more;
}

int gpushm_list(gpushm_t *conn, unsigned flags, gpushm_buffer_list_t **out)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__ListRequest body = GPUSHM__LIST_REQUEST__INIT;
  gpushm_buffer_list_t *list;
  int r;

  client_clear_error();
  if (out)
    *out = NULL;
  if (!conn || !out)
    return client_error(GPUSHM_E_INVAL, "conn and out must not be NULL");
  if (flags & ~(GPUSHM_LIST_ALL | GPUSHM_LIST_METADATA))
    return client_error(GPUSHM_E_INVAL, "unknown list flags 0x%x", flags);
  if (!(list = calloc(1, sizeof *list)))
    return client_error(GPUSHM_E_NOMEM, "out of memory");
  reply_list_init(&list->l);
  body.all = (flags & GPUSHM_LIST_ALL) != 0;
  body.metadata = (flags & GPUSHM_LIST_METADATA) != 0;
  req.body_case = GPUSHM__REQUEST__BODY_LIST;
  req.list = &body;
  if ((r = client_call_list_walk(conn, &req, &list->l.alloc, take_buffer_page, &list->l)) < 0) {
    gpushm_buffer_list_free(list);
    return r;
  }
  *out = list;
  return 0;
}

size_t gpushm_buffer_list_count(const gpushm_buffer_list_t *list)
{
  return list ? list->l.n : 0;
}

const gpushm_buffer_info_t *gpushm_buffer_list_get(const gpushm_buffer_list_t *list, size_t i)
{
  return list && i < list->l.n ? list->l.items[i] : NULL;
}

void gpushm_buffer_list_free(gpushm_buffer_list_t *list)
{
  if (!list)
    return;
  reply_list_clear(&list->l);
  free(list);
}

static int fetch_client_page(gpushm_t *conn, uint32_t *after_id, struct reply_list *l,
                             bool *more)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__ClientsRequest body = GPUSHM__CLIENTS_REQUEST__INIT;
  Gpushm__Reply *reply;
  const Gpushm__ClientsReply *page;
  uint32_t last;
  int r;

  body.after_id = *after_id;
  req.body_case = GPUSHM__REQUEST__BODY_CLIENTS;
  req.clients = &body;
  if ((r = client_call_alloc(conn, &req, &reply, NULL, &l->alloc)) < 0)
    return r;
  if (reply->body_case != GPUSHM__REPLY__BODY_CLIENTS || !reply->clients)
    return client_error(GPUSHM_E_PROTO, "malformed clients reply");
  page = reply->clients;
  last = page->n_clients ? page->clients[page->n_clients - 1]->client_id : 0;
  *more = page->more && page->n_clients > 0 && last > *after_id;
  *after_id = last;
  return reply_list_add(l, (void *const *)page->clients, page->n_clients);
}

int gpushm_clients(gpushm_t *conn, gpushm_client_list_t **out)
{
  gpushm_client_list_t *list;
  uint32_t after_id = 0;
  bool more = true;

  client_clear_error();
  if (out)
    *out = NULL;
  if (!conn || !out)
    return client_error(GPUSHM_E_INVAL, "conn and out must not be NULL");
  if (!(list = calloc(1, sizeof *list)))
    return client_error(GPUSHM_E_NOMEM, "out of memory");
  reply_list_init(&list->l);
  while (more) {
    int r = fetch_client_page(conn, &after_id, &list->l, &more);
    if (r < 0) {
      gpushm_client_list_free(list);
      return r;
    }
  }
  *out = list;
  return 0;
}

size_t gpushm_client_list_count(const gpushm_client_list_t *list)
{
  return list ? list->l.n : 0;
}

const gpushm_client_info_t *gpushm_client_list_get(const gpushm_client_list_t *list, size_t i)
{
  return list && i < list->l.n ? list->l.items[i] : NULL;
}

void gpushm_client_list_free(gpushm_client_list_t *list)
{
  if (!list)
    return;
  reply_list_clear(&list->l);
  free(list);
}

/* ---- statistics -------------------------------------------------------------------- */

/* A daemon of 0.8 sends a metric's help with its first row only (so that the reply fits
 * one frame): each later row of the same name points at that one, as if it had come
 * with it... */
static void share_help(Gpushm__StatsReply *s)
{
  for (size_t i = 1; i < s->n_metrics; i++) {
    Gpushm__Metric *m = s->metrics[i], *prev = s->metrics[i - 1];
    if (!*m->help && strcmp(m->name, prev->name) == 0)
      m->help = prev->help;
  }
}

/* ...until protobuf-c frees each string it unpacked, once: the borrowers go back to the
 * empty default, from the last row, whose lender may borrow too. */
static void unshare_help(Gpushm__StatsReply *s)
{
  for (size_t i = s->n_metrics; i-- > 1;)
    if (s->metrics[i]->help == s->metrics[i - 1]->help)
      s->metrics[i]->help = (char *)protobuf_c_empty_string;
}

/* A stats reply too large for a frame, from the sealed memfd it came in (nobody can
 * change or resize it while it is read). */
static int stats_from_memfd(int fd, Gpushm__StatsReply **out)
{
  struct stat st;
  void *p;
  int seals = fcntl(fd, F_GET_SEALS);

  if (fstat(fd, &st) < 0 || seals < 0 ||
      (seals & (F_SEAL_WRITE | F_SEAL_SHRINK)) != (F_SEAL_WRITE | F_SEAL_SHRINK))
    return client_error(GPUSHM_E_PROTO, "stats reply in an unsealed file");
  if (st.st_size <= 0 || (uint64_t)st.st_size > GPUSHM_LIMIT_STATS_REPLY)
    return client_error(GPUSHM_E_PROTO, "stats reply of %lld bytes: more than "
                        "GPUSHM_LIMIT_STATS_REPLY (%u) or none", (long long)st.st_size,
                        GPUSHM_LIMIT_STATS_REPLY);
  if ((p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED)
    return client_error(GPUSHM_E_NOMEM, "stats reply: mmap: %s", strerror(errno));
  *out = gpushm__stats_reply__unpack(NULL, (size_t)st.st_size, p);
  munmap(p, (size_t)st.st_size);
  if (!*out)
    return client_error(GPUSHM_E_PROTO, "malformed stats reply in its memfd");
  if ((*out)->in_memfd) {
    gpushm__stats_reply__free_unpacked(*out, NULL);
    return client_error(GPUSHM_E_PROTO, "malformed stats reply in its memfd");
  }
  return 0;
}

int gpushm_stats(gpushm_t *conn, gpushm_stats_t **out)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__StatsRequest body = GPUSHM__STATS_REQUEST__INIT;
  Gpushm__Reply *reply;
  Gpushm__StatsReply *stats;
  struct client_fds fds = { .n = 0 };
  int r;

  client_clear_error();
  if (out)
    *out = NULL;
  if (!conn || !out)
    return client_error(GPUSHM_E_INVAL, "conn and out must not be NULL");
  /* Rows for everything (0.8): a daemon before it ignores the field and sends the rows
   * it has.  Readers of this library render rows alone; those of older ones print the
   * frozen fields as well, and ask for nothing. */
  body.all_rows = true;
  body.reply_in_memfd = true;
  req.body_case = GPUSHM__REQUEST__BODY_STATS;
  req.stats = &body;
  if ((r = client_call(conn, &req, &reply, &fds)) < 0)
    return r;
  /* exactly the one fd in_memfd promises, or none (found by fuzz-client: two fds with a
   * stats reply that promised none were kept) */
  if (reply->body_case != GPUSHM__REPLY__BODY_STATS || !reply->stats ||
      fds.n != (reply->stats->in_memfd ? 1u : 0u)) {
    gpushm__reply__free_unpacked(reply, NULL);
    client_close_fds(&fds);
    return client_error(GPUSHM_E_PROTO, "malformed stats reply");
  }
  /* protobuf-c allocates each sub-message on its own: the body outlives its reply. */
  stats = reply->stats;
  reply->stats = NULL;
  reply->body_case = GPUSHM__REPLY__BODY__NOT_SET;
  gpushm__reply__free_unpacked(reply, NULL);
  if (stats->in_memfd) {
    gpushm__stats_reply__free_unpacked(stats, NULL);
    r = stats_from_memfd(fds.fd[0], &stats);
    client_close_fds(&fds);
    if (r < 0)
      return r;
  }
  share_help(stats);
  *out = (gpushm_stats_t *)(void *)stats;
  return 0;
}

void gpushm_stats_free(gpushm_stats_t *stats)
{
  if (stats) {
    unshare_help((Gpushm__StatsReply *)(void *)stats);
    gpushm__stats_reply__free_unpacked((Gpushm__StatsReply *)(void *)stats, NULL);
  }
}

int gpushm_client_disconnect(gpushm_t *conn, uint32_t client_id)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__DisconnectRequest body = GPUSHM__DISCONNECT_REQUEST__INIT;
  Gpushm__Reply *reply;
  int r;

  client_clear_error();
  if (!conn)
    return client_error(GPUSHM_E_INVAL, "conn is NULL");
  if ((r = client_need_feature(conn, GPUSHM_FEATURE_DISCONNECT, "disconnecting clients")) < 0)
    return r;
  body.client_id = client_id;
  req.body_case = GPUSHM__REQUEST__BODY_DISCONNECT;
  req.disconnect = &body;
  if ((r = client_call(conn, &req, &reply, NULL)) < 0)
    return r;
  gpushm__reply__free_unpacked(reply, NULL);
  return 0;
}

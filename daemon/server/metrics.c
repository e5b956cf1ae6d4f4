/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "server/metrics.h"
#include "protocol.h"
#include "formats.h"
#include "wire.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define METRIC_MAX_LABELS 3
#define METRIC_LABEL_VALUE_MAX 48

/* One sample, with room for its labels. */
struct sample {
  Gpushm__Metric m;
  Gpushm__MetricLabel labels[METRIC_MAX_LABELS];
  Gpushm__MetricLabel *label_ptrs[METRIC_MAX_LABELS];
  char values[METRIC_MAX_LABELS][METRIC_LABEL_VALUE_MAX];
};

struct metric_family;

/* Where samples go: counted first (samples NULL), then written. */
struct sink {
  const struct metric_family *family;
  size_t family_start; /* the family's first sample */
  bool help_once;      /* the reader takes a metric's help from its first row */
  struct sample *samples;
  Gpushm__Metric **ptrs;
  size_t n;
};

struct metric_family {
  const char *name;
  const char *help;
  Gpushm__MetricType type;
  const char *unit;
  int exponent;
  /* Repeats what readers before 0.8 print from StatsReply's frozen fields: sent only to
   * readers that ask (StatsRequest.all_rows), or such a reader would print it twice. */
  bool all_rows_only;
  /* A plain counter of struct request_counters: its offset there is all it needs. */
  bool is_counter_field;
  size_t counter_field;
  /* Otherwise: adds its samples. */
  void (*samples)(const struct metrics_source *src, struct sink *k);
};

/* A label; `kept` values outlive the reply's rows (they live in the reply), so they are
 * pointed at rather than copied: a device's name may be longer than a copy's room. */
struct label {
  const char *name, *value;
  bool kept;
};

/* Adds one sample; labels with NULL names or values are left out.  The sample, to add
 * to; NULL while counting. */
static Gpushm__Metric *emit_labels(struct sink *k, uint64_t value, const struct label *ls,
                                   unsigned n)
{
  const struct metric_family *f = k->family;
  struct sample *s;

  if (!k->samples) {
    k->n++;
    return NULL;
  }
  s = &k->samples[k->n];
  gpushm__metric__init(&s->m);
  s->m.name = (char *)f->name;
  s->m.help = (char *)(k->help_once && k->n != k->family_start ? "" : f->help);
  s->m.type = f->type;
  s->m.unit = (char *)(f->unit ? f->unit : "");
  s->m.exponent = f->exponent;
  s->m.value = value;
  for (unsigned i = 0; i < n && i < METRIC_MAX_LABELS; i++) {
    Gpushm__MetricLabel *l = &s->labels[s->m.n_labels];
    if (!ls[i].name || !ls[i].value)
      continue;
    gpushm__metric_label__init(l);
    l->name = (char *)ls[i].name;
    if (ls[i].kept) {
      l->value = (char *)ls[i].value;
    } else {
      snprintf(s->values[s->m.n_labels], METRIC_LABEL_VALUE_MAX, "%s", ls[i].value);
      l->value = s->values[s->m.n_labels];
    }
    s->label_ptrs[s->m.n_labels] = l;
    s->m.n_labels++;
  }
  s->m.labels = s->label_ptrs;
  k->ptrs[k->n++] = &s->m;
  return &s->m;
}

static Gpushm__Metric *emit(struct sink *k, uint64_t value, const char *l1, const char *v1,
                            const char *l2, const char *v2)
{
  const struct label ls[] = { { l1, v1, false }, { l2, v2, false } };
  return emit_labels(k, value, ls, 2);
}

static const char *backend_label(int wire_backend)
{
  const char *name = wire_backend_name(wire_backend);
  return name ? name : "unknown";
}

static const char *device_label(int device, char buf[16])
{
  snprintf(buf, 16, "%d", device);
  return buf;
}

static void uptime(const struct metrics_source *src, struct sink *k)
{
  emit(k, src->stats->uptime_ms, NULL, NULL, NULL, NULL);
}

static void clients(const struct metrics_source *src, struct sink *k)
{
  emit(k, src->stats->clients, NULL, NULL, NULL, NULL);
}

static void open_fds(const struct metrics_source *src, struct sink *k)
{
  emit(k, src->stats->open_fds, NULL, NULL, NULL, NULL);
}

static void costly_deferred(const struct metrics_source *src, struct sink *k)
{
  emit(k, src->counters->costly_deferred, NULL, NULL, NULL, NULL);
}

/* linked + unlinked is every object: a partition of one count, so one metric. */
static void buffers(const struct metrics_source *src, struct sink *k)
{
  struct reg_totals t;

  registry_totals(src->reg, &t);
  emit(k, t.linked, "state", "linked", NULL, NULL);
  emit(k, t.objects - t.linked, "state", "unlinked", NULL, NULL);
}

/* Images by format and tiling (a partition of all images), and their memory: the
 * registry's tally. */
static void images(const struct metrics_source *src, struct sink *k, bool bytes)
{
  const struct reg_tally *t = registry_tally(src->reg);

  for (uint32_t f = 0; f < REG_TALLY_FORMATS; f++)
    for (uint32_t tiling = 0; tiling < 2; tiling++)
      if (t->image[f][tiling].objects)
        emit(k, bytes ? t->image[f][tiling].bytes : t->image[f][tiling].objects, "format",
             format_info(f) ? format_info(f)->name : "?", "tiling",
             tiling == IMAGE_TILING_LINEAR ? "linear" : "optimal");
}

static void images_count(const struct metrics_source *src, struct sink *k)
{
  images(src, k, false);
}

static void image_bytes(const struct metrics_source *src, struct sink *k)
{
  images(src, k, true);
}

/* Bytes by (wire backend, device), from the stats' own usage rows. */
static void allocated(const struct metrics_source *src, struct sink *k)
{
  char dev[16];

  for (size_t i = 0; i < src->stats->n_usage; i++) {
    const Gpushm__Usage *u = src->stats->usage[i];
    emit(k, u->bytes, "backend", backend_label(u->backend), "device", device_label(u->device, dev));
  }
}

static void requests(const struct metrics_source *src, struct sink *k, bool errors)
{
  for (unsigned t = 0; t < HANDLER_REQUEST_TYPES; t++) {
    if (!src->counters->by_type[t])
      continue;
    emit(k, errors ? src->counters->errors_by_type[t] : src->counters->by_type[t], "type",
         wire_request_name(t), NULL, NULL);
  }
}

static void requests_total(const struct metrics_source *src, struct sink *k)
{
  requests(src, k, false);
}

static void request_errors_total(const struct metrics_source *src, struct sink *k)
{
  requests(src, k, true);
}

static void opens(const struct metrics_source *src, struct sink *k, bool creates)
{
  const struct request_counters *c = src->counters;
  char dev[16];

  for (unsigned b = 0; b <= GPUSHM_BACKEND_COUNT; b++)
    for (unsigned d = 0; d <= GPUSHM_LIMIT_DEVICES; d++) {
      if (!c->opens[b][d] && !c->creates[b][d])
        continue;
      emit(k, creates ? c->creates[b][d] : c->opens[b][d], "backend", backend_label((int)b),
           "device", device_label((int)d - 1, dev));
    }
}

static void opens_total(const struct metrics_source *src, struct sink *k)
{
  opens(src, k, false);
}

static void creates_total(const struct metrics_source *src, struct sink *k)
{
  opens(src, k, true);
}

static void detached_processes(const struct metrics_source *src, struct sink *k)
{
  emit(k, src->stats->detached_total, NULL, NULL, NULL, NULL);
}

static void pinned_after_release(const struct metrics_source *src, struct sink *k)
{
  emit(k, src->stats->bytes_pinned_after_release, NULL, NULL, NULL, NULL);
}

/* What one uid may hold (rows only for limits that are set). */
static void uid_limits(const struct metrics_source *src, struct sink *k)
{
  const struct reg_limits *l = registry_limits(src->reg);
  char dev[16];

  if (l->max_bytes_per_uid)
    emit(k, l->max_bytes_per_uid, "memory", "any", NULL, NULL);
  if (l->max_host_bytes_per_uid)
    emit(k, l->max_host_bytes_per_uid, "memory", "host", NULL, NULL);
  for (int i = 0; i < (int)GPUSHM_LIMIT_DEVICES; i++)
    if (l->max_device_bytes_per_uid[i])
      emit(k, l->max_device_bytes_per_uid[i], "memory", "device", "device", device_label(i, dev));
}

static void host_budget(const struct metrics_source *src, struct sink *k)
{
  if (registry_limits(src->reg)->host_budget)
    emit(k, registry_limits(src->reg)->host_budget, NULL, NULL, NULL, NULL);
}

/* The segment figures by backend and device, from the stats' own segment rows. */
#define SEGMENT_FAMILY(fn, field)                                                         \
  static void fn(const struct metrics_source *src, struct sink *k)                        \
  {                                                                                       \
    char dev[16];                                                                         \
    for (size_t i = 0; i < src->stats->n_segments; i++) {                                 \
      const Gpushm__SegmentUsage *u = src->stats->segments[i];                            \
      emit(k, u->field, "backend", backend_label(u->backend), "device",                    \
           device_label(u->device, dev));                                                 \
    }                                                                                     \
  }
SEGMENT_FAMILY(segments, segments)
SEGMENT_FAMILY(segment_bytes, bytes)
SEGMENT_FAMILY(segment_used_bytes, bytes_used)
SEGMENT_FAMILY(segment_mappings, mappings)
SEGMENT_FAMILY(pool_segments, pooled)
SEGMENT_FAMILY(pool_bytes, pooled_bytes)
SEGMENT_FAMILY(carved_total, carved)
SEGMENT_FAMILY(segment_allocations_total, driver_allocs)

/* Buffers by (wire backend, device): the count beside gpushm_allocated_bytes' memory. */
static void backend_buffers(const struct metrics_source *src, struct sink *k)
{
  char dev[16];

  for (size_t i = 0; i < src->stats->n_usage; i++) {
    const Gpushm__Usage *u = src->stats->usage[i];
    emit(k, u->buffers, "backend", backend_label(u->backend), "device",
         device_label(u->device, dev));
  }
}

/* Labelled with what names a GPU across processes and exporters (the ordinal alone
 * differs under CUDA_VISIBLE_DEVICES): the UUID as DCGM spells it, and its name. */
static void device_memory(const struct metrics_source *src, struct sink *k, bool free_memory)
{
  for (size_t i = 0; i < src->stats->n_devices; i++) {
    const Gpushm__Device *d = src->stats->devices[i];
    char dev[16], uuid[WIRE_UUID_TEXT_LEN] = "";
    uint64_t v = free_memory ? d->free_memory : d->total_memory;

    /* Free memory is known only where gpushmd holds a context: a 0 there would read as
     * a full GPU, so that series is left out instead. */
    if (free_memory && !v)
      continue;
    if (d->uuid.len == 16)
      wire_uuid_text(d->uuid.data, wire_is_mig_name(d->name), uuid);
    /* the name lives in the reply (reply_devices), as long as the rows */
    emit_labels(k, v, (const struct label[]){ { "device", device_label(d->ordinal, dev), false },
                                              { "uuid", uuid, false },
                                              { "name", d->name, true } }, 3);
  }
}

static void device_memory_total(const struct metrics_source *src, struct sink *k)
{
  device_memory(src, k, false);
}

static void device_memory_free(const struct metrics_source *src, struct sink *k)
{
  device_memory(src, k, true);
}

/* The request latency histogram: one row a request type, its buckets pointing at the
 * counters themselves (the reply is packed before the loop turns). */
static void latency(const struct metrics_source *src, struct sink *k)
{
  const struct request_counters *c = src->counters;

  for (unsigned t = 0; t < HANDLER_REQUEST_TYPES; t++) {
    Gpushm__Metric *m;

    if (!c->by_type[t])
      continue;
    if (!(m = emit(k, c->latency_sum_ns[t], "type", wire_request_name(t), NULL, NULL)))
      continue;
    for (unsigned b = 0; b <= GPUSHM_LATENCY_BOUNDS; b++)
      m->count += c->latency[t][b];
    m->n_bounds = GPUSHM_LATENCY_BOUNDS;
    m->bounds = (uint64_t *)counters_latency_bounds_ns;
    m->n_buckets = GPUSHM_LATENCY_BOUNDS + 1;
    m->buckets = (uint64_t *)c->latency[t];
  }
}

#define GAUGE(n, h, fn) { .name = n, .help = h, .type = GPUSHM__METRIC_TYPE__METRIC_GAUGE, .samples = fn }
#define GAUGE_BYTES(n, h, fn)                                                              \
  { .name = n, .help = h, .type = GPUSHM__METRIC_TYPE__METRIC_GAUGE, .unit = "bytes", .samples = fn }
#define COUNTER(n, h, fn) { .name = n, .help = h, .type = GPUSHM__METRIC_TYPE__METRIC_COUNTER, .samples = fn }
/* A counter of struct request_counters: one row is all a new one takes. */
#define COUNTER_FIELD(n, h, field)                                                         \
  { .name = n, .help = h, .type = GPUSHM__METRIC_TYPE__METRIC_COUNTER,                     \
    .is_counter_field = true, .counter_field = offsetof(struct request_counters, field) }

/* Named by Prometheus's rules (prometheus.io/docs/practices/naming): one metric per
 * meaning, labels only where the series of a metric add up to something (a
 * partition), base units in the name (_bytes, _seconds), _total on counters only.
 * docs/metrics.md lists them; tests/integration/test-metrics.sh holds the rendered text
 * to the exposition format, to promtool and to that list. */
static const struct metric_family families[] = {
  { .name = "gpushm_uptime_seconds", .help = "Time since gpushmd started.",
    .type = GPUSHM__METRIC_TYPE__METRIC_GAUGE, .unit = "seconds", .exponent = -3,
    .samples = uptime },
  GAUGE("gpushm_clients", "Connected clients.", clients),
  GAUGE("gpushm_buffers", "Buffers and events, by whether their name is still linked "
        "(unlinked ones live until their last holder closes them).", buffers),
  GAUGE_BYTES("gpushm_allocated_bytes", "Memory held for buffers, by backend and device.",
              allocated),
  COUNTER("gpushm_requests_total", "Requests handled, by type.", requests_total),
  COUNTER("gpushm_request_errors_total", "Requests answered with an error, by type.",
          request_errors_total),
  COUNTER("gpushm_opens_total", "Buffers and events opened (creates that found one "
          "included), by backend and device.", opens_total),
  COUNTER("gpushm_creates_total", "Buffers and events created, by backend and device.",
          creates_total),
  GAUGE("gpushm_detached_processes", "Live processes whose connection ended while they held "
        "buffers (they may still map them).", detached_processes),
  GAUGE_BYTES("gpushm_pinned_after_release_bytes", "Memory gpushmd freed that such processes "
              "still map.", pinned_after_release),
  COUNTER_FIELD("gpushm_fences_raised_total", "Sync buffer fences gpushmd raised for "
                "releasers that died before their GPU wrote them.", fences_raised),
  COUNTER_FIELD("gpushm_promises_broken_total", "Promises on sync buffers gpushmd broke for "
                "promisers that exited owing values (those values count as lost).",
                promises_broken),
  COUNTER_FIELD("gpushm_oneway_errors_total", "One-way requests (last closes) gpushmd "
                "refused.", oneway_errors),
  GAUGE("gpushm_segments", "Segments holding buffers or mapped by clients.", segments),
  GAUGE_BYTES("gpushm_segment_bytes", "Memory of those segments.", segment_bytes),
  GAUGE_BYTES("gpushm_segment_used_bytes", "Of it, slots holding buffers.", segment_used_bytes),
  GAUGE("gpushm_segment_mappings", "Segment mappings clients hold (connection, access).",
        segment_mappings),
  GAUGE("gpushm_pool_segments", "Empty segments kept warm for their class.", pool_segments),
  GAUGE_BYTES("gpushm_pool_bytes", "Memory of the warm pools.", pool_bytes),
  COUNTER("gpushm_carved_buffers_total", "Buffers carved out of segments.", carved_total),
  COUNTER("gpushm_segment_allocations_total", "Segment allocations (driver calls).",
          segment_allocations_total),
  COUNTER_FIELD("gpushm_protocol_errors_total", "Clients ended for protocol errors.",
                protocol_errors),
  COUNTER_FIELD("gpushm_clients_dropped_total", "Clients refused or dropped (limits, not "
                "reading).", clients_dropped),
  GAUGE("gpushm_open_fds", "File descriptors gpushmd has open.", open_fds),
  COUNTER_FIELD("gpushm_open_waits_total", "Opens that waited for their name to be made "
                "(a wait that ended without it is counted below, not as a failed request).",
                open_waits),
  COUNTER_FIELD("gpushm_open_wait_timeouts_total", "Opens whose wait for their name ended "
                "without it.", open_wait_timeouts),
  COUNTER("gpushm_requests_deferred_total", "Requests whose cost grows with what gpushmd "
          "holds (stats, list, clients) that non-admins sent past their share of the loop, "
          "answered in turn.", costly_deferred),
  GAUGE_BYTES("gpushm_uid_limit_bytes", "Memory one uid may hold: of any kind, of host "
              "memory, of each GPU (max-bytes-, max-host-bytes-, max-device-bytes-per-uid).",
              uid_limits),
  GAUGE_BYTES("gpushm_host_budget_bytes", "Host memory all buffers together may use.",
              host_budget),
  GAUGE("gpushm_images", "Images, by format and tiling (docs/graphics.md).", images_count),
  GAUGE_BYTES("gpushm_image_bytes", "Memory of those images.", image_bytes),
  /* 0.8: what readers before it print from the frozen fields. */
  { .name = "gpushm_backend_buffers", .help = "Buffers and events, by backend and device.",
    .type = GPUSHM__METRIC_TYPE__METRIC_GAUGE, .all_rows_only = true, .samples = backend_buffers },
  { .name = "gpushm_device_memory_total_bytes", .help = "Device memory.",
    .type = GPUSHM__METRIC_TYPE__METRIC_GAUGE, .unit = "bytes", .all_rows_only = true,
    .samples = device_memory_total },
  { .name = "gpushm_device_memory_free_bytes",
    .help = "Free device memory (devices gpushmd holds a context on).",
    .type = GPUSHM__METRIC_TYPE__METRIC_GAUGE, .unit = "bytes", .all_rows_only = true,
    .samples = device_memory_free },
  { .name = "gpushm_request_duration_seconds", .help = "Time gpushmd spent on a request, "
    "from its arrival to its reply's hand-off to the socket, by type.",
    .type = GPUSHM__METRIC_TYPE__METRIC_HISTOGRAM, .unit = "seconds", .exponent = -9,
    .all_rows_only = true, .samples = latency },
};

static void run_families(const struct metrics_source *src, struct sink *k)
{
  for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
    const struct metric_family *f = &families[i];
    if (f->all_rows_only && !src->all_rows)
      continue;
    k->family = f;
    k->family_start = k->n;
    if (f->is_counter_field) {
      uint64_t v;
      memcpy(&v, (const char *)src->counters + f->counter_field, sizeof v);
      emit(k, v, NULL, NULL, NULL, NULL);
    } else {
      f->samples(src, k);
    }
  }
}

int metrics_fill(const struct metrics_source *src, Gpushm__StatsReply *s, void **block)
{
  struct sink k = { 0 };
  size_t n;
  void *mem;

  /* Help once a metric: what keeps the reply within a frame at every device and request
   * type (test-stats-size); libgpushm 0.8, which asks for all rows, hands it to each. */
  k.help_once = src->all_rows;
  run_families(src, &k); /* counts */
  n = k.n;
  if (!(mem = calloc(1, n * (sizeof(struct sample) + sizeof(Gpushm__Metric *)) + 1)))
    return PROTO_E_NOMEM;
  k = (struct sink){ .samples = mem, .ptrs = (Gpushm__Metric **)((struct sample *)mem + n),
                     .help_once = src->all_rows };
  run_families(src, &k);
  s->metrics = k.ptrs;
  s->n_metrics = k.n;
  *block = mem;
  return 0;
}

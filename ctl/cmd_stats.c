/* SPDX-License-Identifier: MIT */
/* gpushmctl stats and its three renderers: text, --json, --prometheus (and --textfile). */
#include "config.h"
#include "ctl.h"
#include "doctor.h"
#include "dump.h"
#include "escape.h"
#include "fail.h"
#include "format.h"
#include "rows.h"
#include "textfile.h"
#include "gpushm-admin.h"
#include "gpushm-graphics.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <langinfo.h>
#include <locale.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>


/* --prometheus follows Prometheus's naming rules (prometheus.io/docs/practices/naming):
 * one metric per meaning, labels only where the series of a metric add up to something
 * (a partition), base units in the name (_bytes, _seconds), _total on counters only.
 * docs/metrics.md lists them; tests/integration/test-metrics.sh holds every
 * line to the text format and to promtool. */
static void prom_family(const char *name, const char *type, const char *help)
{
  printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static const char *usage_backend_name(const gpushm_usage_t *u)
{
  return backend_name(gpushm_usage_kind(u), gpushm_usage_backend(u));
}

/* A request type's buckets, if they match the daemon's bounds (else none: a histogram
 * with the wrong le values would be worse than a missing one). */
static bool has_latency(const gpushm_stats_t *s, const gpushm_request_stats_t *rq)
{
  size_t nb = gpushm_stats_latency_bound_count(s);
  return nb && gpushm_request_stats_latency_bucket_count(rq) == nb + 1;
}

static const char *open_backend_name(const gpushm_open_stats_t *o)
{
  return backend_name(gpushm_open_stats_kind(o), gpushm_open_stats_backend(o));
}

/* Metric and label names come from the daemon: only what Prometheus's grammar allows
 * ([a-zA-Z_][a-zA-Z0-9_]*) is printed, so a row can inject nothing into the text. */
static bool prom_name_ok(const char *name)
{
  if (!*name || (!isalpha((unsigned char)*name) && *name != '_'))
    return false;
  for (; *name; name++)
    if (!isalnum((unsigned char)*name) && *name != '_')
      return false;
  return true;
}

static bool metric_ok(const gpushm_metric_t *m)
{
  if (!prom_name_ok(gpushm_metric_name(m)))
    return false;
  for (size_t i = 0; i < gpushm_metric_label_count(m); i++)
    if (!prom_name_ok(gpushm_metric_label_name(gpushm_metric_label(m, i))))
      return false;
  return true;
}

/* A metric row's labels as Prometheus writes them, {a="x",b="y"} or nothing, and a
 * bucket's le last (NULL: none). */
static void prom_labels_le(const gpushm_metric_t *m, const char *le)
{
  size_t n = gpushm_metric_label_count(m);

  for (size_t i = 0; i < n; i++) {
    const gpushm_metric_label_t *l = gpushm_metric_label(m, i);
    printf("%s%s=\"", i ? "," : "{", gpushm_metric_label_name(l));
    prom_label(gpushm_metric_label_value(l));
    printf("\"");
  }
  if (le)
    printf("%sle=\"%s\"", n ? "," : "{", le);
  if (n || le)
    printf("}");
}

static void prom_labels(const gpushm_metric_t *m)
{
  prom_labels_le(m, NULL);
}

static const char *metric_type_name(const gpushm_metric_t *m)
{
  switch (gpushm_metric_type(m)) {
  case GPUSHM_METRIC_COUNTER:
    return "counter";
  case GPUSHM_METRIC_HISTOGRAM:
    return "histogram";
  default:
    return "gauge"; /* a type newer than this gpushmctl: its value is still a value */
  }
}

/* A histogram row as Prometheus's samples: a _bucket for each bound and +Inf (its le
 * the last label), its _sum and _count.  A row without buckets (malformed) is left out:
 * a histogram Prometheus rejects would lose the whole scrape. */
static void prom_histogram(const gpushm_metric_t *m)
{
  const char *name = gpushm_metric_name(m);
  size_t n = gpushm_metric_bucket_count(m);
  char le[48], value[48];

  for (size_t b = 0; b <= n; b++) {
    printf("%s_bucket", name);
    prom_labels_le(m, b < n ? gpushm_metric_bucket_le_text(m, b, le, sizeof le) : "+Inf");
    printf(" %" PRIu64 "\n",
           b < n ? gpushm_metric_bucket_observations(m, b) : gpushm_metric_observations(m));
  }
  printf("%s_sum", name);
  prom_labels(m);
  printf(" %s\n%s_count", gpushm_metric_value_text(m, value, sizeof value), name);
  prom_labels(m);
  printf(" %" PRIu64 "\n", gpushm_metric_observations(m));
}

/* The daemon's rows as they come (each metric's samples together), with a HELP and a
 * TYPE line before the first sample of each; the build info, which names this
 * gpushmctl too, is the one thing not a row. */
static void prometheus_stats(struct ctl *ctl, const gpushm_stats_t *s)
{
  char previous[256] = "", value[48];

  prom_family("gpushm_build_info", "gauge", "Always 1: the versions of gpushmd and of the "
              "gpushmctl that wrote this.");
  printf("gpushm_build_info{version=\"");
  prom_label(gpushm_stats_daemon_version(s));
  printf("\",ctl_version=\"%s\"} 1\n", PACKAGE_VERSION);
  if (!gpushm_stats_metric_count(s))
    printf("# gpushmd %s sends no metric rows (older than 0.7): only the above\n",
           gpushm_stats_daemon_version(s));
  else if (gpushm_daemon_family_version(ctl->conn, "admin") < 2)
    printf("# gpushmd %s sends no rows for the request latency histogram and device memory "
           "(older than 0.8): they are left out\n", gpushm_stats_daemon_version(s));
  for (size_t i = 0; i < gpushm_stats_metric_count(s); i++) {
    const gpushm_metric_t *m = gpushm_stats_metric(s, i);
    const char *name = gpushm_metric_name(m);
    bool histogram = gpushm_metric_type(m) == GPUSHM_METRIC_HISTOGRAM;
    if (!metric_ok(m) || strlen(name) >= sizeof previous ||
        (histogram && !gpushm_metric_bucket_count(m)))
      continue;
    if (strcmp(name, previous) != 0)
      prom_family(name, metric_type_name(m), gpushm_metric_help(m));
    snprintf(previous, sizeof previous, "%s", name);
    if (histogram) {
      prom_histogram(m);
      continue;
    }
    printf("%s", name);
    prom_labels(m);
    printf(" %s\n", gpushm_metric_value_text(m, value, sizeof value));
  }
}

static void json_stats(const gpushm_stats_t *s)
{
  printf("{\"daemon_version\":");
  json_string(gpushm_stats_daemon_version(s));
  printf(",\"instance_id\":\"%016" PRIx64 "\",\"uptime_ms\":%" PRIu64 ",\"clients\":%u,"
         "\"buffers\":%u,\"buffers_linked\":%u,\"bytes_allocated\":%" PRIu64 ",\"requests\":%" PRIu64
         ",\"request_errors\":%" PRIu64 ",\"protocol_errors\":%" PRIu64 ",\"clients_dropped\":%" PRIu64
         ",\"open_fds\":%u,\"requests_by_type\":{",
         gpushm_stats_instance_id(s), gpushm_stats_uptime_ms(s), gpushm_stats_clients(s),
         gpushm_stats_buffers(s), gpushm_stats_buffers_linked(s), gpushm_stats_bytes_allocated(s),
         gpushm_stats_requests(s), gpushm_stats_request_errors(s), gpushm_stats_protocol_errors(s),
         gpushm_stats_clients_dropped(s), gpushm_stats_open_fds(s));
  for (size_t i = 0; i < gpushm_stats_request_type_count(s); i++) {
    const gpushm_request_stats_t *rq = gpushm_stats_request_type(s, i);
    printf("%s", i ? "," : "");
    json_string(gpushm_request_stats_type(rq));
    printf(":{\"count\":%" PRIu64 ",\"errors\":%" PRIu64, gpushm_request_stats_count(rq),
           gpushm_request_stats_errors(rq));
    if (has_latency(s, rq)) {
      printf(",\"latency_sum_ns\":%" PRIu64 ",\"latency_le\":[",
             gpushm_request_stats_latency_sum_ns(rq));
      for (size_t b = 0; b < gpushm_request_stats_latency_bucket_count(rq); b++)
        printf("%s%" PRIu64, b ? "," : "", gpushm_request_stats_latency_le(rq, b));
      printf("]");
    }
    printf("}");
  }
  printf("},\"latency_bounds_ns\":[");
  for (size_t b = 0; b < gpushm_stats_latency_bound_count(s); b++)
    printf("%s%" PRIu64, b ? "," : "", gpushm_stats_latency_bound_ns(s, b));
  printf("],\"opens\":[");
  for (size_t i = 0; i < gpushm_stats_opens_count(s); i++) {
    const gpushm_open_stats_t *o = gpushm_stats_opens(s, i);
    printf("%s{\"backend\":\"%s\",\"device\":%d,\"opens\":%" PRIu64 ",\"creates\":%" PRIu64 "}",
           i ? "," : "", open_backend_name(o), gpushm_open_stats_device(o),
           gpushm_open_stats_opens(o), gpushm_open_stats_creates(o));
  }
  printf("],\"usage\":[");
  for (size_t i = 0; i < gpushm_stats_usage_count(s); i++) {
    const gpushm_usage_t *u = gpushm_stats_usage(s, i);
    printf("%s{\"backend\":\"%s\",\"device\":%d,\"buffers\":%u,\"bytes\":%" PRIu64 "}",
           i ? "," : "", usage_backend_name(u), gpushm_usage_device(u), gpushm_usage_buffers(u),
           gpushm_usage_bytes(u));
  }
  printf("],\"oneway_errors\":%" PRIu64 ",\"segments\":[", gpushm_stats_oneway_errors(s));
  for (size_t i = 0; i < gpushm_stats_segment_usage_count(s); i++) {
    const gpushm_segment_usage_t *u = gpushm_stats_segment_usage(s, i);
    printf("%s{\"backend\":\"%s\",\"device\":%d,\"segments\":%u,\"bytes\":%" PRIu64
           ",\"bytes_used\":%" PRIu64 ",\"mappings\":%u,\"pooled\":%u,\"pooled_bytes\":%" PRIu64
           ",\"carved\":%" PRIu64 ",\"driver_allocs\":%" PRIu64 "}", i ? "," : "",
           backend_name(GPUSHM_KIND_BUFFER, gpushm_segment_usage_backend(u)),
           gpushm_segment_usage_device(u), gpushm_segment_usage_segments(u),
           gpushm_segment_usage_bytes(u), gpushm_segment_usage_bytes_used(u),
           gpushm_segment_usage_mappings(u), gpushm_segment_usage_pooled(u),
           gpushm_segment_usage_pooled_bytes(u), gpushm_segment_usage_carved(u),
           gpushm_segment_usage_driver_allocs(u));
  }
  printf("],\"fences_raised\":%" PRIu64 ",\"detached_total\":%u,\"bytes_pinned_after_release\":%"
         PRIu64 ",\"detached\":[", gpushm_stats_fences_raised(s), gpushm_stats_detached_total(s),
         gpushm_stats_bytes_pinned_after_release(s));
  for (size_t i = 0; i < gpushm_stats_detached_count(s); i++) {
    const gpushm_detached_t *d = gpushm_stats_detached(s, i);
    printf("%s{\"pid\":%u,\"uid\":%u,\"client_id\":%u,\"since_unix_ms\":%" PRIu64
           ",\"buffers_total\":%u,\"bytes_total\":%" PRIu64 ",\"bytes_released\":%" PRIu64
           ",\"buffers\":[", i ? "," : "", gpushm_detached_pid(d), gpushm_detached_uid(d),
           gpushm_detached_client_id(d), gpushm_detached_since_unix_ms(d),
           gpushm_detached_buffers_total(d), gpushm_detached_bytes_total(d),
           gpushm_detached_bytes_released(d));
    for (size_t k = 0; k < gpushm_detached_buffer_count(d); k++) {
      const gpushm_detached_buffer_t *b = gpushm_detached_buffer(d, k);
      printf("%s{\"id\":%" PRIu64 ",\"name\":", k ? "," : "", gpushm_detached_buffer_id(b));
      json_string(gpushm_detached_buffer_name(b));
      printf(",\"backend\":\"%s\",\"device\":%d,\"allocated\":%" PRIu64 ",\"released\":%s}",
             backend_name(GPUSHM_KIND_BUFFER, gpushm_detached_buffer_backend(b)),
             gpushm_detached_buffer_device(b), gpushm_detached_buffer_allocated(b),
             gpushm_detached_buffer_released(b) ? "true" : "false");
    }
    printf("]}");
  }
  printf("],\"metrics\":[");
  for (size_t i = 0; i < gpushm_stats_metric_count(s); i++) {
    const gpushm_metric_t *m = gpushm_stats_metric(s, i);
    char value[48];
    printf("%s{\"name\":", i ? "," : "");
    json_string(gpushm_metric_name(m));
    printf(",\"type\":\"%s\",\"unit\":", metric_type_name(m));
    json_string(gpushm_metric_unit(m));
    printf(",\"labels\":{");
    for (size_t k = 0; k < gpushm_metric_label_count(m); k++) {
      const gpushm_metric_label_t *l = gpushm_metric_label(m, k);
      printf("%s", k ? "," : "");
      json_string(gpushm_metric_label_name(l));
      putchar(':');
      json_string(gpushm_metric_label_value(l));
    }
    printf("},\"value\":%s", gpushm_metric_value_text(m, value, sizeof value));
    if (gpushm_metric_type(m) == GPUSHM_METRIC_HISTOGRAM) {
      printf(",\"observations\":%" PRIu64 ",\"buckets\":[", gpushm_metric_observations(m));
      for (size_t b = 0; b < gpushm_metric_bucket_count(m); b++)
        printf("%s{\"le\":%s,\"observations\":%" PRIu64 "}", b ? "," : "",
               gpushm_metric_bucket_le_text(m, b, value, sizeof value),
               gpushm_metric_bucket_observations(m, b));
      printf("]");
    }
    printf("}");
  }
  printf("],\"devices\":[");
  for (size_t i = 0; i < gpushm_stats_device_count(s); i++) {
    const gpushm_device_stats_t *d = gpushm_stats_device(s, i);
    uint8_t raw[16];
    char uuid[CTL_UUID_TEXT_LEN + 1];
    printf("%s{\"ordinal\":%d,\"name\":", i ? "," : "", gpushm_device_stats_ordinal(d));
    json_string(gpushm_device_stats_name(d));
    if (gpushm_device_stats_uuid(d, raw) == 0)
      printf(",\"uuid\":\"%s\"", ctl_uuid_text(raw, ctl_is_mig(gpushm_device_stats_name(d)),
                                             uuid, sizeof uuid));
    printf(",\"total_memory\":%" PRIu64 ",\"free_memory\":%" PRIu64 "}",
           gpushm_device_stats_total_memory(d), gpushm_device_stats_free_memory(d));
  }
  printf("]}\n");
}

/* The metrics the lines of text_stats() show in their own words; any other row the
 * daemon sends (a counter newer than this list) is shown as it comes. */
static const char *const text_shown_metrics[] = {
  "gpushm_uptime_seconds", "gpushm_clients", "gpushm_buffers", "gpushm_allocated_bytes",
  "gpushm_requests_total", "gpushm_request_errors_total", "gpushm_opens_total",
  "gpushm_creates_total", "gpushm_detached_processes", "gpushm_pinned_after_release_bytes",
  "gpushm_fences_raised_total", "gpushm_oneway_errors_total", "gpushm_segments",
  "gpushm_segment_bytes", "gpushm_segment_used_bytes", "gpushm_segment_mappings",
  "gpushm_pool_segments", "gpushm_pool_bytes", "gpushm_carved_buffers_total",
  "gpushm_segment_allocations_total", "gpushm_protocol_errors_total",
  "gpushm_clients_dropped_total", "gpushm_open_fds", "gpushm_backend_buffers",
  "gpushm_device_memory_total_bytes", "gpushm_device_memory_free_bytes",
  /* the text form has no line for latency: --prometheus and --json have it */
  "gpushm_request_duration_seconds",
};

static void text_other_metrics(const gpushm_stats_t *s)
{
  bool heading = false;
  char value[48];

  for (size_t i = 0; i < gpushm_stats_metric_count(s); i++) {
    const gpushm_metric_t *m = gpushm_stats_metric(s, i);
    bool shown = false;
    for (size_t k = 0; k < sizeof text_shown_metrics / sizeof text_shown_metrics[0]; k++)
      shown |= strcmp(gpushm_metric_name(m), text_shown_metrics[k]) == 0;
    if (shown)
      continue;
    if (!heading)
      printf("other metrics:\n");
    heading = true;
    printf("  %s", text(gpushm_metric_name(m), 0));
    for (size_t k = 0; k < gpushm_metric_label_count(m); k++) {
      const gpushm_metric_label_t *l = gpushm_metric_label(m, k);
      printf("%s%s=%s", k ? ", " : " (", text(gpushm_metric_label_name(l), 0),
             text(gpushm_metric_label_value(l), 0));
    }
    printf("%s %s%s%s", gpushm_metric_label_count(m) ? ")" : "",
           gpushm_metric_value_text(m, value, sizeof value), *gpushm_metric_unit(m) ? " " : "",
           text(gpushm_metric_unit(m), 0));
    /* a histogram's line says what a line can (its sum, and of how many); its buckets are
     * for plots */
    if (gpushm_metric_type(m) == GPUSHM_METRIC_HISTOGRAM)
      printf(" in %" PRIu64 " observations", gpushm_metric_observations(m));
    printf("\n");
  }
}

/* Where a row by backend and device is: "host", "cuda-fd, device 0". */
static const char *text_where(const gpushm_metric_t *m, char *buf, size_t len)
{
  const char *backend = row_label(m, "backend"), *device = row_label(m, "device");

  snprintf(buf, len, !device || *device == '-' ? "%s" : "%s, device %s",
           text(backend ? backend : "?", 0), device ? device : "");
  return buf;
}

static void text_segments(struct ctl *ctl, const gpushm_stats_t *s)
{
  const gpushm_metric_t *m;
  size_t at = 0;

  while ((m = row_find(s, &at, "gpushm_segments", NULL, NULL, NULL, NULL))) {
    const char *b = row_label(m, "backend"), *d = row_label(m, "device");
    char bytes[32], used[32], pool[32], where[64];
    if (!b || !d)
      continue;
    printf("segments:       %s: %" PRIu64 ", %s (%s holding buffers), %" PRIu64 " mappings; "
           "pool: %" PRIu64 ", %s; %" PRIu64 " buffers carved from %" PRIu64 " allocations\n",
           text_where(m, where, sizeof where), row_whole(m, 0),
           format_size(row_value(s, "gpushm_segment_bytes", "backend", b, "device", d),
                       ctl->bytes, bytes, sizeof bytes),
           format_size(row_value(s, "gpushm_segment_used_bytes", "backend", b, "device", d),
                       ctl->bytes, used, sizeof used),
           row_value(s, "gpushm_segment_mappings", "backend", b, "device", d),
           row_value(s, "gpushm_pool_segments", "backend", b, "device", d),
           format_size(row_value(s, "gpushm_pool_bytes", "backend", b, "device", d), ctl->bytes,
                       pool, sizeof pool),
           row_value(s, "gpushm_carved_buffers_total", "backend", b, "device", d),
           row_value(s, "gpushm_segment_allocations_total", "backend", b, "device", d));
  }
}

static void text_devices(struct ctl *ctl, const gpushm_stats_t *s)
{
  const gpushm_metric_t *m;
  size_t at = 0;

  while ((m = row_find(s, &at, "gpushm_device_memory_total_bytes", NULL, NULL, NULL, NULL))) {
    const char *d = row_label(m, "device"), *name = row_label(m, "name");
    const gpushm_metric_t *f = d ? row_find(s, NULL, "gpushm_device_memory_free_bytes",
                                            "device", d, NULL, NULL) : NULL;
    char total[32], free_memory[32];
    if (!d)
      continue;
    printf("device %s:       %s, %s total, %s\n", text(d, 0), text(name ? name : "", 0),
           format_size(row_whole(m, 0), ctl->bytes, total, sizeof total),
           f ? format_size(row_whole(f, 0), ctl->bytes, free_memory, sizeof free_memory)
             : "free unknown (not in use)");
  }
}

/* Every figure from the rows (the typed fields are frozen); what is not a figure (the
 * daemon's version and instance, the detached processes' listing) from its field. */
static void text_stats(struct ctl *ctl, const gpushm_stats_t *s)
{
  char a[32], age[32], where[64];
  const gpushm_metric_t *m;
  size_t at = 0;
  uint64_t linked = row_value(s, "gpushm_buffers", "state", "linked", NULL, NULL),
           unlinked = row_value(s, "gpushm_buffers", "state", "unlinked", NULL, NULL),
           detached = row_value(s, "gpushm_detached_processes", NULL, NULL, NULL, NULL),
           oneway = row_value(s, "gpushm_oneway_errors_total", NULL, NULL, NULL, NULL),
           fences = row_value(s, "gpushm_fences_raised_total", NULL, NULL, NULL, NULL);

  printf("gpushmd:        %s (instance %016" PRIx64 ")", text(gpushm_stats_daemon_version(s), 0),
         gpushm_stats_instance_id(s));
  if ((m = row_find(s, NULL, "gpushm_uptime_seconds", NULL, NULL, NULL, NULL)))
    printf(", up %s", format_age(row_whole(m, -3), age, sizeof age));
  printf("\n");
  if (!gpushm_stats_metric_count(s)) {
    printf("note:           gpushmd sends no metric rows (older than 0.7): stats --json shows "
           "its figures\n");
    return;
  }
  if (gpushm_daemon_family_version(ctl->conn, "admin") < 2)
    printf("note:           gpushmd is older than 0.8: buffers by backend and devices are not "
           "shown (stats --json shows them)\n");
  printf("clients:        %" PRIu64 " (dropped or refused so far: %" PRIu64 ")\n",
         row_value(s, "gpushm_clients", NULL, NULL, NULL, NULL),
         row_value(s, "gpushm_clients_dropped_total", NULL, NULL, NULL, NULL));
  printf("buffers:        %" PRIu64 " (%" PRIu64 " linked, %" PRIu64 " unlinked but held)\n",
         linked + unlinked, linked, unlinked);
  printf("allocated:      %s\n",
         format_size(row_sum(s, "gpushm_allocated_bytes"), ctl->bytes, a, sizeof a));
  while ((m = row_find(s, &at, "gpushm_backend_buffers", NULL, NULL, NULL, NULL))) {
    const char *b = row_label(m, "backend"), *d = row_label(m, "device");
    if (!b || !d)
      continue;
    printf("  %-20s %" PRIu64 " buffers, %s\n", text_where(m, where, sizeof where),
           row_whole(m, 0),
           format_size(row_value(s, "gpushm_allocated_bytes", "backend", b, "device", d),
                       ctl->bytes, a, sizeof a));
  }
  text_segments(ctl, s);
  if (oneway)
    printf("one-way errors: %" PRIu64 " (last closes or unlinks gpushmd refused: its log says "
           "why)\n", oneway);
  if (detached) {
    printf("detached:       %" PRIu64 " processes may still map buffers after their connection "
           "ended; %s freed by gpushmd is still pinned by them\n", detached,
           format_size(row_value(s, "gpushm_pinned_after_release_bytes", NULL, NULL, NULL, NULL),
                       ctl->bytes, a, sizeof a));
    /* a listing, not a figure: no row carries it */
    for (size_t i = 0; i < gpushm_stats_detached_count(s); i++)
      text_detached(ctl, gpushm_stats_detached(s, i), 0);
  }
  if (fences)
    printf("fences raised:  %" PRIu64 " (releasers died before their GPU wrote the fence; "
           "waiters went on with what their work left)\n", fences);
  printf("requests:       %" PRIu64 " (%" PRIu64 " errors, %" PRIu64 " protocol errors)\n",
         row_sum(s, "gpushm_requests_total"), row_sum(s, "gpushm_request_errors_total"),
         row_value(s, "gpushm_protocol_errors_total", NULL, NULL, NULL, NULL));
  at = 0;
  while ((m = row_find(s, &at, "gpushm_requests_total", NULL, NULL, NULL, NULL))) {
    const char *type = row_label(m, "type");
    if (!type)
      continue;
    printf("  %s %" PRIu64 " (%" PRIu64 " errors)\n", text(type, 20), row_whole(m, 0),
           row_value(s, "gpushm_request_errors_total", "type", type, NULL, NULL));
  }
  text_devices(ctl, s);
  printf("open fds:       %" PRIu64 "\n", row_value(s, "gpushm_open_fds", NULL, NULL, NULL, NULL));
  text_other_metrics(s);
}

int cmd_stats(struct ctl *ctl, int argc, char **argv)
{
  struct textfile tf;
  gpushm_stats_t *s;
  char err[512];
  int r = gpushm_stats(ctl->conn, &s);

  if (r < 0)
    return ctl_fail("stats", r);
  /* --textfile: the output replaces that file whole, or not at all */
  if (ctl->textfile) {
    fflush(stdout);
    if (textfile_begin(&tf, ctl->textfile, err, sizeof err) < 0 ||
        (dup2(tf.fd, STDOUT_FILENO) < 0 && (snprintf(err, sizeof err, "dup2: %s",
                                                     strerror(errno)), 1))) {
      if (tf.fd >= 0)
        textfile_abort(&tf);
      fprintf(stderr, "gpushmctl: stats: %s\n", err);
      gpushm_stats_free(s);
      return EXIT_FAILED;
    }
  }
  if (ctl->prometheus)
    prometheus_stats(ctl, s);
  else if (ctl->json)
    json_stats(s);
  else
    text_stats(ctl, s);
  gpushm_stats_free(s);
  if (ctl->textfile) {
    if (fflush(stdout) != 0 || ferror(stdout)) {
      fprintf(stderr, "gpushmctl: stats: writing %s failed: %s\n", ctl->textfile, strerror(errno));
      textfile_abort(&tf);
      return EXIT_FAILED;
    }
    if (textfile_commit(&tf, err, sizeof err) < 0) {
      fprintf(stderr, "gpushmctl: stats: %s\n", err);
      return EXIT_FAILED;
    }
  }
  return 0;
}


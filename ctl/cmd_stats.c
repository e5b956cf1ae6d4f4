/* SPDX-License-Identifier: MIT */
/* gpushmctl stats and its three renderers: text, --json, --prometheus (and --textfile). */
#include "config.h"
#include "ctl.h"
#include "doctor.h"
#include "dump.h"
#include "escape.h"
#include "fail.h"
#include "format.h"
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

/* ns as seconds, in decimal and exact (no float rounding in a bucket's le). */
static void prom_seconds(uint64_t ns)
{
  char frac[16];
  int n = snprintf(frac, sizeof frac, "%09" PRIu64, ns % 1000000000u);

  while (n > 0 && frac[n - 1] == '0')
    frac[--n] = '\0';
  printf("%" PRIu64 "%s%s", ns / 1000000000u, n ? "." : "", frac);
}

static const char *usage_backend_name(const gpushm_usage_t *u)
{
  return backend_name(gpushm_usage_kind(u), gpushm_usage_backend(u));
}

/* A request type's buckets, if they match the daemon's bounds (else none: a histogram
 * with the wrong le values would be worse than a missing one). */
static bool prom_has_latency(const gpushm_stats_t *s, const gpushm_request_stats_t *rq)
{
  size_t nb = gpushm_stats_latency_bound_count(s);
  return nb && gpushm_request_stats_latency_bucket_count(rq) == nb + 1;
}

static void prom_latency(const gpushm_stats_t *s)
{
  const char *name = "gpushm_request_duration_seconds";
  size_t nb = gpushm_stats_latency_bound_count(s), shown = 0;

  for (size_t i = 0; i < gpushm_stats_request_type_count(s); i++) {
    const gpushm_request_stats_t *rq = gpushm_stats_request_type(s, i);
    if (!prom_has_latency(s, rq))
      continue;
    if (!shown++)
      prom_family(name, "histogram", "Time gpushmd spent on a request, from its arrival to "
                  "its reply's hand-off to the socket, by type.");
    for (size_t b = 0; b <= nb; b++) {
      printf("%s_bucket{type=\"", name);
      prom_label(gpushm_request_stats_type(rq));
      printf("\",le=\"");
      if (b < nb)
        prom_seconds(gpushm_stats_latency_bound_ns(s, b));
      else
        printf("+Inf");
      printf("\"} %" PRIu64 "\n", gpushm_request_stats_latency_le(rq, b));
    }
    printf("%s_sum{type=\"", name);
    prom_label(gpushm_request_stats_type(rq));
    printf("\"} ");
    prom_seconds(gpushm_request_stats_latency_sum_ns(rq));
    printf("\n%s_count{type=\"", name);
    prom_label(gpushm_request_stats_type(rq));
    printf("\"} %" PRIu64 "\n", gpushm_request_stats_latency_le(rq, nb));
  }
}

static const char *open_backend_name(const gpushm_open_stats_t *o)
{
  return backend_name(gpushm_open_stats_kind(o), gpushm_open_stats_backend(o));
}

/* The per-device gauges, labelled with what identifies a GPU across processes and
 * exporters (the ordinal alone differs under CUDA_VISIBLE_DEVICES). */
static void prom_devices(const gpushm_stats_t *s, bool free_memory)
{
  size_t n = gpushm_stats_device_count(s), shown = 0;

  for (size_t i = 0; i < n; i++) {
    const gpushm_device_stats_t *d = gpushm_stats_device(s, i);
    uint64_t v = free_memory ? gpushm_device_stats_free_memory(d)
                             : gpushm_device_stats_total_memory(d);
    uint8_t raw[16];
    char uuid[CTL_UUID_TEXT_LEN + 1] = "";

    /* Free memory is known only where gpushmd holds a context: a 0 there would read as
     * a full GPU, so that series is left out instead. */
    if (free_memory && !v)
      continue;
    if (!shown++)
      prom_family(free_memory ? "gpushm_device_memory_free_bytes"
                              : "gpushm_device_memory_total_bytes", "gauge",
                  free_memory ? "Free device memory (devices gpushmd holds a context on)."
                              : "Device memory.");
    if (gpushm_device_stats_uuid(d, raw) == 0)
      ctl_uuid_text(raw, ctl_is_mig(gpushm_device_stats_name(d)), uuid, sizeof uuid);
    printf("gpushm_device_memory_%s_bytes{device=\"%d\",uuid=\"%s\",name=\"",
           free_memory ? "free" : "total", gpushm_device_stats_ordinal(d), uuid);
    prom_label(gpushm_device_stats_name(d));
    printf("\"} %" PRIu64 "\n", v);
  }
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

/* A metric row's labels as Prometheus writes them: {a="x",b="y"}, or nothing. */
static void prom_labels(const gpushm_metric_t *m)
{
  size_t n = gpushm_metric_label_count(m);

  for (size_t i = 0; i < n; i++) {
    const gpushm_metric_label_t *l = gpushm_metric_label(m, i);
    printf("%s%s=\"", i ? "," : "{", gpushm_metric_label_name(l));
    prom_label(gpushm_metric_label_value(l));
    printf("\"%s", i + 1 == n ? "}" : "");
  }
}

/* The daemon's rows as they come (each metric's samples together), with a HELP and a
 * TYPE line before the first sample of each; then what rows do not carry: the build
 * (this gpushmctl's version too), the latency histograms, the devices. */
static void prometheus_stats(const gpushm_stats_t *s)
{
  const char *previous = "";
  char value[48];

  prom_family("gpushm_build_info", "gauge", "Always 1: the versions of gpushmd and of the "
              "gpushmctl that wrote this.");
  printf("gpushm_build_info{version=\"");
  prom_label(gpushm_stats_daemon_version(s));
  printf("\",ctl_version=\"%s\"} 1\n", PACKAGE_VERSION);
  if (!gpushm_stats_metric_count(s))
    printf("# gpushmd %s sends no metric rows (older than 0.7): only the above and below\n",
           gpushm_stats_daemon_version(s));
  for (size_t i = 0; i < gpushm_stats_metric_count(s); i++) {
    const gpushm_metric_t *m = gpushm_stats_metric(s, i);
    const char *name = gpushm_metric_name(m);
    if (!metric_ok(m))
      continue;
    if (strcmp(name, previous) != 0)
      prom_family(name, gpushm_metric_type(m) == GPUSHM_METRIC_COUNTER ? "counter" : "gauge",
                  gpushm_metric_help(m));
    previous = name;
    printf("%s", name);
    prom_labels(m);
    printf(" %s\n", gpushm_metric_value_text(m, value, sizeof value));
  }
  prom_latency(s);
  prom_devices(s, false);
  prom_devices(s, true);
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
    if (prom_has_latency(s, rq)) {
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
    printf(",\"type\":\"%s\",\"unit\":",
           gpushm_metric_type(m) == GPUSHM_METRIC_COUNTER ? "counter" : "gauge");
    json_string(gpushm_metric_unit(m));
    printf(",\"labels\":{");
    for (size_t k = 0; k < gpushm_metric_label_count(m); k++) {
      const gpushm_metric_label_t *l = gpushm_metric_label(m, k);
      printf("%s", k ? "," : "");
      json_string(gpushm_metric_label_name(l));
      putchar(':');
      json_string(gpushm_metric_label_value(l));
    }
    printf("},\"value\":%s}", gpushm_metric_value_text(m, value, sizeof value));
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
  "gpushm_clients_dropped_total", "gpushm_open_fds",
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
    printf("%s %s%s%s\n", gpushm_metric_label_count(m) ? ")" : "",
           gpushm_metric_value_text(m, value, sizeof value), *gpushm_metric_unit(m) ? " " : "",
           text(gpushm_metric_unit(m), 0));
  }
}

static void text_stats(struct ctl *ctl, const gpushm_stats_t *s)
{
  char a[32], b[32], age[32];
  uint32_t buffers = gpushm_stats_buffers(s), linked = gpushm_stats_buffers_linked(s);

  printf("gpushmd:        %s (instance %016" PRIx64 "), up %s\n",
         text(gpushm_stats_daemon_version(s), 0), gpushm_stats_instance_id(s),
         format_age(gpushm_stats_uptime_ms(s), age, sizeof age));
  printf("clients:        %u (dropped or refused so far: %" PRIu64 ")\n", gpushm_stats_clients(s),
         gpushm_stats_clients_dropped(s));
  printf("buffers:        %u (%u linked, %u unlinked but held)\n", buffers, linked,
         buffers - linked);
  printf("allocated:      %s\n",
         format_size(gpushm_stats_bytes_allocated(s), ctl->bytes, a, sizeof a));
  for (size_t i = 0; i < gpushm_stats_usage_count(s); i++) {
    const gpushm_usage_t *u = gpushm_stats_usage(s, i);
    char where[32];
    snprintf(where, sizeof where, gpushm_usage_device(u) < 0 ? "%s" : "%s, device %d",
             usage_backend_name(u), gpushm_usage_device(u));
    printf("  %-20s %u buffers, %s\n", where, gpushm_usage_buffers(u),
           format_size(gpushm_usage_bytes(u), ctl->bytes, a, sizeof a));
  }
  for (size_t i = 0; i < gpushm_stats_segment_usage_count(s); i++) {
    const gpushm_segment_usage_t *u = gpushm_stats_segment_usage(s, i);
    char used[32], pool[32], where[32];
    snprintf(where, sizeof where, gpushm_segment_usage_device(u) < 0 ? "%s" : "%s, device %d",
             backend_name(GPUSHM_KIND_BUFFER, gpushm_segment_usage_backend(u)),
             gpushm_segment_usage_device(u));
    printf("segments:       %s: %u, %s (%s holding buffers), %u mappings; pool: %u, %s; "
           "%" PRIu64 " buffers carved from %" PRIu64 " allocations\n", where,
           gpushm_segment_usage_segments(u),
           format_size(gpushm_segment_usage_bytes(u), ctl->bytes, a, sizeof a),
           format_size(gpushm_segment_usage_bytes_used(u), ctl->bytes, used, sizeof used),
           gpushm_segment_usage_mappings(u), gpushm_segment_usage_pooled(u),
           format_size(gpushm_segment_usage_pooled_bytes(u), ctl->bytes, pool, sizeof pool),
           gpushm_segment_usage_carved(u), gpushm_segment_usage_driver_allocs(u));
  }
  if (gpushm_stats_oneway_errors(s))
    printf("one-way errors: %" PRIu64 " (last closes or unlinks gpushmd refused: its log says "
           "why)\n", gpushm_stats_oneway_errors(s));
  if (gpushm_stats_detached_total(s)) {
    printf("detached:       %u processes may still map buffers after their connection ended; "
           "%s freed by gpushmd is still pinned by them\n", gpushm_stats_detached_total(s),
           format_size(gpushm_stats_bytes_pinned_after_release(s), ctl->bytes, a, sizeof a));
    for (size_t i = 0; i < gpushm_stats_detached_count(s); i++)
      text_detached(ctl, gpushm_stats_detached(s, i), 0);
  }
  if (gpushm_stats_fences_raised(s))
    printf("fences raised:  %" PRIu64 " (releasers died before their GPU wrote the fence; "
           "waiters went on with what their work left)\n", gpushm_stats_fences_raised(s));
  printf("requests:       %" PRIu64 " (%" PRIu64 " errors, %" PRIu64 " protocol errors)\n",
         gpushm_stats_requests(s), gpushm_stats_request_errors(s), gpushm_stats_protocol_errors(s));
  for (size_t i = 0; i < gpushm_stats_request_type_count(s); i++) {
    const gpushm_request_stats_t *rq = gpushm_stats_request_type(s, i);
    printf("  %s %" PRIu64 " (%" PRIu64 " errors)\n", text(gpushm_request_stats_type(rq), 20),
           gpushm_request_stats_count(rq), gpushm_request_stats_errors(rq));
  }
  for (size_t i = 0; i < gpushm_stats_device_count(s); i++) {
    const gpushm_device_stats_t *d = gpushm_stats_device(s, i);
    uint64_t free_memory = gpushm_device_stats_free_memory(d);
    printf("device %d:       %s, %s total, %s\n", gpushm_device_stats_ordinal(d),
           text(gpushm_device_stats_name(d), 0),
           format_size(gpushm_device_stats_total_memory(d), ctl->bytes, a, sizeof a),
           free_memory ? format_size(free_memory, ctl->bytes, b, sizeof b)
                       : "free unknown (not in use)");
  }
  printf("open fds:       %u\n", gpushm_stats_open_fds(s));
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
    prometheus_stats(s);
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


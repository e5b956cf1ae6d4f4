/* SPDX-License-Identifier: MIT */
/* gpushmctl's commands on buffers and events: list, events, show, create, create-image,
 * unlink. */
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


/* ---- commands ------------------------------------------------------------------- */

/* A listing is sorted by name, then id.  Its rows are formatted in the daemon's
 * order (id order: one sequential pass over the list) and only their order is
 * sorted, on keys holding a copy of each name: 100k names fit in cache, the list they
 * came from does not, and comparing in place cost more than formatting. */
struct sort_key {
  size_t name;  /* offset in the names buffer */
  uint64_t id;
  size_t index; /* in the list */
  size_t row;   /* in the table */
};

static const char *sort_names;

static int by_name(const void *a, const void *b)
{
  const struct sort_key *x = a, *y = b;
  int c = strcmp(sort_names + x->name, sort_names + y->name);
  return c ? c : (x->id < y->id ? -1 : x->id > y->id);
}

/* The row order for keys (order[0] is the header's), or NULL when they are in order
 * already: the daemon lists in id order, which is often name order too. */
static size_t *sorted_rows(struct sort_key *keys, size_t n, const char *names)
{
  size_t i, *order;

  sort_names = names;
  for (i = 1; i < n; i++)
    if (by_name(&keys[i - 1], &keys[i]) > 0)
      break;
  if (i >= n)
    return NULL;
  qsort(keys, n, sizeof *keys, by_name);
  order = xalloc(malloc((n + 1) * sizeof *order));
  order[0] = 0;
  for (i = 0; i < n; i++)
    order[i + 1] = keys[i].row;
  return order;
}

static const char *info_backend_name(const gpushm_buffer_info_t *b)
{
  return backend_name(gpushm_buffer_info_kind(b), gpushm_buffer_info_backend(b));
}

static const char *lifetime_name(const gpushm_buffer_info_t *b)
{
  return gpushm_buffer_info_lifetime(b) == GPUSHM_LIFETIME_SESSION ? "session" : "persistent";
}

/* Whole entries only, so no name is cut inside a character; the rest are counted. */
static void holders_text(const gpushm_buffer_info_t *b, char *out, size_t len)
{
  size_t at = 0, h, n_holders = gpushm_buffer_info_holder_count(b);
  out[0] = '\0';
  for (h = 0; h < n_holders; h++) {
    uint32_t pid = gpushm_holder_pid(gpushm_buffer_info_holder(b, h));
    char comm[32], entry[64];
    int n = snprintf(entry, sizeof entry, "%s%u(%s)", h ? "," : "", pid,
                     process_name(pid, comm, sizeof comm));
    if (n < 0 || at + (size_t)n + sizeof ",+4294967295 more" > len)
      break;
    memcpy(out + at, entry, (size_t)n + 1);
    at += (size_t)n;
  }
  if (gpushm_buffer_info_holders_total(b) > h)
    snprintf(out + at, len - at, "%s+%zu more", h ? "," : "",
             (size_t)(gpushm_buffer_info_holders_total(b) - h));
}

/* Metadata is shown as text when it is UTF-8 without NULs, else in base64. */
static bool metadata_is_text(const uint8_t *data, size_t len)
{
  char copy[GPUSHM_METADATA_MAX + 1];
  size_t at = 0;

  if (len > GPUSHM_METADATA_MAX || memchr(data, 0, len))
    return false;
  memcpy(copy, data, len);
  copy[len] = '\0';
  while (at < len) {
    uint32_t cp;
    size_t bad, n = utf8_next((const unsigned char *)copy + at, &cp, &bad);
    if (!n)
      return false;
    at += n;
  }
  return true;
}

/* out has room for 4 * ((len + 2) / 3) + 1 bytes. */
static char *base64(const uint8_t *data, size_t len, char *out)
{
  static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char *o = out;

  for (size_t i = 0; i < len; i += 3) {
    uint32_t v = (uint32_t)data[i] << 16 | (i + 1 < len ? (uint32_t)data[i + 1] << 8 : 0) |
                 (i + 2 < len ? data[i + 2] : 0);
    *o++ = digits[v >> 18];
    *o++ = digits[v >> 12 & 63];
    *o++ = i + 1 < len ? digits[v >> 6 & 63] : '=';
    *o++ = i + 2 < len ? digits[v & 63] : '=';
  }
  *o = '\0';
  return out;
}

#define METADATA_TEXT_SIZE (GPUSHM_METADATA_MAX / 3 * 4 + 8)

/* Text or base64 of b's metadata into out (room for GPUSHM_METADATA_MAX * 4 / 3 + 4);
 * NULL when it has none. */
static const char *metadata_text(const gpushm_buffer_info_t *b, bool *is_text, char *out)
{
  size_t len;
  const uint8_t *data = gpushm_buffer_info_metadata(b, &len);

  if (!data)
    return NULL;
  /* the daemon keeps no more; whatever sends more is not shown */
  if (len > GPUSHM_METADATA_MAX) {
    *is_text = true;
    snprintf(out, METADATA_TEXT_SIZE, "(%zu bytes, over the limit of %u)", len,
             GPUSHM_METADATA_MAX);
    return out;
  }
  if ((*is_text = metadata_is_text(data, len))) {
    memcpy(out, data, len);
    out[len] = '\0';
    return out;
  }
  return base64(data, len, out);
}

/* "100x30 rgba8-unorm linear" (depth, levels and layers where more than one); false
 * for what is not an image. */
static bool image_text(const gpushm_buffer_info_t *b, char *out, size_t len)
{
  gpushm_image_desc_t d;
  const char *format;
  int n;

  if (gpushm_buffer_info_image(b, &d) < 0)
    return false;
  format = gpushm_format_name((int)d.format);
  n = snprintf(out, len, "%ux%u", d.width, d.height);
  if (d.depth > 1)
    n += snprintf(out + n, len - (size_t)n, "x%u", d.depth);
  n += snprintf(out + n, len - (size_t)n, " %s %s", format ? format : "unknown-format",
                d.tiling == GPUSHM_TILING_LINEAR ? "linear" : "optimal");
  if (d.mip_levels > 1)
    n += snprintf(out + n, len - (size_t)n, " %u-levels", d.mip_levels);
  if (d.array_layers > 1)
    snprintf(out + n, len - (size_t)n, " %u-layers", d.array_layers);
  return true;
}

/* What a holder does with what it holds: of a timeline, a read-write holder may signal
 * and a read-only one only waits; of a ring, producers, attached consumers and observers
 * (read-only, attached to nothing). */
static const char *holder_role(const gpushm_buffer_info_t *b, const gpushm_holder_t *h)
{
  const int rw = gpushm_holder_read_write(h);

  switch (gpushm_buffer_info_kind(b)) {
  case GPUSHM_KIND_TIMELINE:
    return rw ? "signaller" : "waiter";
  case GPUSHM_KIND_RING:
    return rw ? "producer" : gpushm_holder_ring_consumer(h) ? "consumer" : "observer";
  case GPUSHM_KIND_WEIGHTS:
    return "reader";
  default:
    return rw ? "read-write" : "read-only";
  }
}

static void json_buffer(const gpushm_buffer_info_t *b)
{
  gpushm_image_desc_t image;
  char user[64];
  uint32_t owner_uid = gpushm_buffer_info_owner_uid(b);
  uint64_t created = gpushm_buffer_info_created_unix_ms(b);

  printf("{\"name\":");
  json_string(gpushm_buffer_info_name(b));
  printf(",\"id\":%" PRIu64 ",\"backend\":\"%s\",\"device\":%d,\"size\":%" PRIu64
         ",\"allocated\":%" PRIu64 ",\"owner_uid\":%u,\"owner\":",
         gpushm_buffer_info_id(b), info_backend_name(b), gpushm_buffer_info_device(b),
         gpushm_buffer_info_size(b), gpushm_buffer_info_allocated(b), owner_uid);
  json_string(user_name(owner_uid, user, sizeof user));
  printf(",\"owner_gid\":%u,\"mode\":\"%04o\",\"refs\":%u,\"lifetime\":\"%s\",\"linked\":%s,"
         "\"sync\":%s,\"created_unix_ms\":%" PRIu64 ",\"age_s\":%" PRIu64
         ",\"holders_total\":%u,\"holders\":[",
         gpushm_buffer_info_owner_gid(b), gpushm_buffer_info_mode(b), gpushm_buffer_info_refs(b),
         lifetime_name(b), gpushm_buffer_info_linked(b) ? "true" : "false",
         gpushm_buffer_info_sync(b) ? "true" : "false", created, age_ms(created) / 1000,
         gpushm_buffer_info_holders_total(b));
  for (size_t h = 0; h < gpushm_buffer_info_holder_count(b); h++) {
    const gpushm_holder_t *holder = gpushm_buffer_info_holder(b, h);
    char comm[32];
    printf("%s{\"client_id\":%u,\"pid\":%u,\"uid\":%u,\"refs\":%u,\"read_write\":%s,"
           "\"role\":\"%s\",\"process\":", h ? "," : "",
           gpushm_holder_client_id(holder), gpushm_holder_pid(holder), gpushm_holder_uid(holder),
           gpushm_holder_refs(holder), gpushm_holder_read_write(holder) ? "true" : "false",
           holder_role(b, holder));
    json_string(process_name(gpushm_holder_pid(holder), comm, sizeof comm));
    putchar('}');
  }
  printf("]");
  if (gpushm_buffer_info_image(b, &image) == 0) {
    const char *format = gpushm_format_name((int)image.format);
    printf(",\"image\":{\"format\":\"%s\",\"width\":%u,\"height\":%u,\"depth\":%u,"
           "\"mip_levels\":%u,\"array_layers\":%u,\"tiling\":\"%s\",\"usage\":%u,"
           "\"row_pitch\":%" PRIu64 "}",
           format ? format : "unknown", image.width, image.height, image.depth,
           image.mip_levels, image.array_layers,
           image.tiling == GPUSHM_TILING_LINEAR ? "linear" : "optimal", image.usage,
           image.row_pitch);
  }
  printf(",\"metadata\":");
  {
    static char meta[METADATA_TEXT_SIZE];
    bool is_text;
    const char *m = metadata_text(b, &is_text, meta);
    if (m) {
      json_string(m);
      printf(",\"metadata_encoding\":\"%s\"", is_text ? "utf-8" : "base64");
    } else {
      printf("null");
    }
  }
  putchar('}');
}

static void table_buffer(struct ctl *ctl, struct table *t, const gpushm_buffer_info_t *b)
{
  bool event = gpushm_buffer_info_kind(b) == GPUSHM_KIND_EVENT;
  char id[24], dev[24], size[32], user[64], mode[12], refs[24], age[32], holders[512];
  char state[160], image[96];
  bool is_image;

  format_decimal(gpushm_buffer_info_id(b), id);
  if (gpushm_buffer_info_device(b) < 0)
    strcpy(dev, "-");
  else
    format_decimal((uint64_t)gpushm_buffer_info_device(b), dev);
  format_mode(gpushm_buffer_info_mode(b), mode);
  format_decimal(gpushm_buffer_info_refs(b), refs);
  holders_text(b, holders, sizeof holders);
  is_image = image_text(b, image, sizeof image);
  snprintf(state, sizeof state, "%s%s%s",
           gpushm_buffer_info_linked(b) ? (gpushm_buffer_info_sync(b) ? "linked,sync" : "linked")
                                        : "unlinked-held",
           is_image ? " image " : "", is_image ? image : "");
  table_add(t, gpushm_buffer_info_name(b), id, info_backend_name(b), dev,
            event ? "-" : format_size(gpushm_buffer_info_size(b), ctl->bytes, size, sizeof size),
            user_name(gpushm_buffer_info_owner_uid(b), user, sizeof user), mode, refs,
            lifetime_name(b), state,
            format_age(age_ms(gpushm_buffer_info_created_unix_ms(b)), age, sizeof age), holders);
}

static int print_buffers(struct ctl *ctl, const gpushm_buffer_list_t *list, bool events_only)
{
  struct table t = { .cols = 12 };
  size_t n = gpushm_buffer_list_count(list), n_keys = 0, names_len = 0, names_cap = 4096;
  struct sort_key *keys = xalloc(malloc((n ? n : 1) * sizeof *keys));
  char *names = xalloc(malloc(names_cap));
  size_t *order;

  if (!ctl->json) {
    table_reserve(&t, n + 1);
    table_add(&t, "NAME", "ID", "BACKEND", "DEV", "SIZE", "OWNER", "MODE", "REFS", "LIFETIME",
              "STATE", "AGE", "HOLDERS");
  }
  for (size_t i = 0; i < n; i++) {
    const gpushm_buffer_info_t *b = gpushm_buffer_list_get(list, i);
    const char *name = gpushm_buffer_info_name(b);
    size_t len = strlen(name) + 1;
    if (events_only != (gpushm_buffer_info_kind(b) == GPUSHM_KIND_EVENT))
      continue;
    if (names_cap - names_len < len) {
      while (names_cap - names_len < len)
        names_cap *= 2;
      names = xalloc(realloc(names, names_cap));
    }
    memcpy(names + names_len, name, len);
    keys[n_keys] = (struct sort_key){ names_len, gpushm_buffer_info_id(b), i, n_keys + 1 };
    n_keys++;
    names_len += len;
    if (!ctl->json)
      table_buffer(ctl, &t, b);
  }
  order = sorted_rows(keys, n_keys, names);
  if (ctl->json) {
    putchar('[');
    for (size_t k = 0; k < n_keys; k++) {
      if (k)
        putchar(',');
      json_buffer(gpushm_buffer_list_get(list, keys[k].index));
    }
    printf("]\n");
  } else {
    table_print(&t, order);
  }
  free(order);
  free(names);
  free(keys);
  return 0;
}

static int list_buffers(struct ctl *ctl, bool events_only)
{
  gpushm_buffer_list_t *list;
  /* the table leaves metadata out: a long list stays cheap */
  int r = gpushm_list(ctl->conn, (ctl->all ? GPUSHM_LIST_ALL : 0) |
                                   (ctl->json ? GPUSHM_LIST_METADATA : 0), &list);

  if (r < 0)
    return ctl_fail(events_only ? "events" : "list", r);
  print_buffers(ctl, list, events_only);
  gpushm_buffer_list_free(list);
  return 0;
}

int cmd_list(struct ctl *ctl, int argc, char **argv)
{
  return list_buffers(ctl, false);
}

int cmd_events(struct ctl *ctl, int argc, char **argv)
{
  return list_buffers(ctl, true);
}

/* One detached process and its listed buffers (only buffer id `only` where nonzero). */
void text_detached(struct ctl *ctl, const gpushm_detached_t *d, uint64_t only)
{
  char a[32], b[32], age[32], comm[32];

  if (!only)
    printf("  pid %u %s (uid %u, client %u): %u buffers, %s (%s of it freed by gpushmd), "
           "detached %s ago\n", gpushm_detached_pid(d),
           text(process_name(gpushm_detached_pid(d), comm, sizeof comm), 16),
           gpushm_detached_uid(d), gpushm_detached_client_id(d), gpushm_detached_buffers_total(d),
           format_size(gpushm_detached_bytes_total(d), ctl->bytes, a, sizeof a),
           format_size(gpushm_detached_bytes_released(d), ctl->bytes, b, sizeof b),
           format_age(age_ms(gpushm_detached_since_unix_ms(d)), age, sizeof age));
  for (size_t k = 0; k < gpushm_detached_buffer_count(d); k++) {
    const gpushm_detached_buffer_t *db = gpushm_detached_buffer(d, k);
    if (only && gpushm_detached_buffer_id(db) != only)
      continue;
    if (only)
      printf("  pid %-8u %s uid %-6u detached from client %u: may still map it\n",
             gpushm_detached_pid(d), text(process_name(gpushm_detached_pid(d), comm, sizeof comm), 16),
             gpushm_detached_uid(d), gpushm_detached_client_id(d));
    else
      printf("    %s (id %" PRIu64 ", %s, device %d, %s%s)\n", text(gpushm_detached_buffer_name(db), 0),
             gpushm_detached_buffer_id(db),
             backend_name(GPUSHM_KIND_BUFFER, gpushm_detached_buffer_backend(db)),
             gpushm_detached_buffer_device(db),
             format_size(gpushm_detached_buffer_allocated(db), ctl->bytes, a, sizeof a),
             gpushm_detached_buffer_released(db) ? ", freed by gpushmd" : "");
  }
}

/* Processes that held the buffer when their connection ended and may map it still. */
static void show_detached(struct ctl *ctl, uint64_t id)
{
  gpushm_stats_t *s;

  if (gpushm_stats(ctl->conn, &s) < 0)
    return;
  for (size_t i = 0; i < gpushm_stats_detached_count(s); i++)
    text_detached(ctl, gpushm_stats_detached(s, i), id);
  gpushm_stats_free(s);
}

/* Read-only for group or others is kept for host memory and registered memfds (on no
 * device) alone: a reader of device memory or registered NVIDIA memory is sent what
 * maps it read-write (docs/security.md).  Said where the mode is shown, since the mode
 * alone reads as a promise. */
static void advisory_read_only(const gpushm_buffer_info_t *b)
{
  const uint32_t mode = gpushm_buffer_info_mode(b);
  const bool group = (mode & 040) && !(mode & 020), other = (mode & 04) && !(mode & 02);
  const gpushm_backend_t backend = gpushm_buffer_info_backend(b);

  if ((!group && !other) || backend == GPUSHM_BACKEND_HOST ||
      gpushm_buffer_info_kind(b) == GPUSHM_KIND_EVENT ||
      (backend == GPUSHM_BACKEND_EXTERNAL && gpushm_buffer_info_device(b) < 0))
    return;
  printf("            read-only for %s is not enforced: %s hands readers %s that maps it "
         "read-write (docs/security.md)\n", group && other ? "group and others" : group ? "group"
         : "others", backend == GPUSHM_BACKEND_EXTERNAL ? "registered NVIDIA memory" : info_backend_name(b),
         backend == GPUSHM_BACKEND_CUDA_IPC ? "an IPC handle" : "an fd");
}

/* Whether arg is an id: all digits, as show and dump take it. */
bool arg_is_id(const char *arg, uint64_t *id)
{
  char *end;

  if (!isdigit((unsigned char)*arg))
    return false;
  errno = 0;
  *id = strtoull(arg, &end, 10);
  return !*end && !errno;
}

/* The entry arg names in list: by id (when by_id), else by name, where a linked one
 * wins over unlinked ones of that name; NULL if none. */
const gpushm_buffer_info_t *find_listed(const gpushm_buffer_list_t *list, const char *arg,
                                               bool by_id, uint64_t id)
{
  const gpushm_buffer_info_t *b = NULL;

  for (size_t i = 0; i < gpushm_buffer_list_count(list); i++) {
    const gpushm_buffer_info_t *info = gpushm_buffer_list_get(list, i);
    if ((by_id && gpushm_buffer_info_id(info) == id) ||
        (!by_id && strcmp(gpushm_buffer_info_name(info), arg) == 0 &&
         (!b || gpushm_buffer_info_linked(info))))
      b = info;
  }
  return b;
}

/* One line per holder (and how many more the daemon did not list). */
static void print_holders(const gpushm_buffer_info_t *b)
{
  size_t n = gpushm_buffer_info_holder_count(b);

  for (size_t h = 0; h < n; h++) {
    const gpushm_holder_t *holder = gpushm_buffer_info_holder(b, h);
    char comm[32], who[64];
    printf("  pid %-8u %s uid %-6u (%s)  refs %u  client %u  %s\n", gpushm_holder_pid(holder),
           text(process_name(gpushm_holder_pid(holder), comm, sizeof comm), 16),
           gpushm_holder_uid(holder),
           text(user_name(gpushm_holder_uid(holder), who, sizeof who), 0),
           gpushm_holder_refs(holder), gpushm_holder_client_id(holder), holder_role(b, holder));
  }
  if (gpushm_buffer_info_holders_total(b) > n)
    printf("  and %zu more\n", (size_t)gpushm_buffer_info_holders_total(b) - n);
}

/* A sync buffer's or a timeline's counter, live promise and latest broken one, as its
 * control block says (an open of it: read-only, no mapping of its memory; the mode
 * decides, as for any reader), and a timeline's reached value.  Nothing where the
 * caller may not open it or the daemon keeps no promises. */
static void print_sync_state(const gpushm_sync_state_t *st)
{
  printf("counter:    %" PRIu64, st->counter);
  if (st->promised_upto)
    printf("; promised up to %" PRIu64 " by client %u", st->promised_upto,
           st->promiser_client);
  if (st->lost_upto)
    printf("; lost %" PRIu64 "..%" PRIu64 " (client %u went owing them)", st->lost_from + 1,
           st->lost_upto, st->lost_client);
  putchar('\n');
}

static void show_timeline_state(struct ctl *ctl, const gpushm_buffer_info_t *b)
{
  gpushm_sync_state_t st;
  gpushm_timeline_t *tl;

  if (gpushm_timeline_open(ctl->conn, gpushm_buffer_info_name(b), GPUSHM_OPEN_READONLY, &tl) < 0)
    return;
  /* the open by name may have found a newer timeline of that name: said only if not */
  if (gpushm_timeline_id(tl) == gpushm_buffer_info_id(b) && gpushm_timeline_state(tl, &st) == 0) {
    print_sync_state(&st);
    printf("reached:    %" PRIu64 "\n", gpushm_timeline_value(tl));
    if (gpushm_timeline_has_semaphore(tl))
      printf("semaphore:  a plane (a Vulkan timeline semaphore, signalled beside the "
             "counter: Vulkan queues wait on the GPU)\n");
  }
  gpushm_timeline_close(tl);
}

/* Observed (attached to nothing: gpushmctl holds no frame back). */
static void show_ring_state(struct ctl *ctl, const gpushm_buffer_info_t *b)
{
  gpushm_sync_state_t st;
  gpushm_ring_t *ring;

  if (gpushm_ring_open(ctl->conn, gpushm_buffer_info_name(b), GPUSHM_RING_OBSERVER, &ring) < 0)
    return;
  if (gpushm_ring_id(ring) == gpushm_buffer_info_id(b) && gpushm_ring_state(ring, &st) == 0) {
    uint32_t planes = gpushm_ring_consumer_planes(ring);
    print_sync_state(&st);
    printf("reached:    %" PRIu64 "\n", gpushm_ring_presented(ring));
    if (planes)
      printf("planes:     %u consumer%s on a ready plane (Vulkan queues waiting on the GPU)\n",
             planes, planes == 1 ? "" : "s");
  }
  gpushm_ring_close(ring);
}

static void show_sync_state(struct ctl *ctl, const gpushm_buffer_info_t *b)
{
  gpushm_open_opts_t opts;
  gpushm_sync_state_t st;
  gpushm_buffer_t *buf;

  if (!gpushm_buffer_info_sync(b) || gpushm_buffer_info_kind(b) == GPUSHM_KIND_EVENT ||
      !gpushm_daemon_has(ctl->conn, GPUSHM_FEATURE_PROMISES))
    return;
  if (gpushm_buffer_info_kind(b) == GPUSHM_KIND_TIMELINE) {
    show_timeline_state(ctl, b);
    return;
  }
  if (gpushm_buffer_info_kind(b) == GPUSHM_KIND_RING) {
    show_ring_state(ctl, b);
    return;
  }
  gpushm_open_opts_init(&opts);
  opts.flags = GPUSHM_OPEN_READONLY;
  opts.map_device = GPUSHM_DEVICE_NONE;
  if (gpushm_buffer_open_ex(ctl->conn, NULL, gpushm_buffer_info_id(b), &opts, &buf) < 0)
    return;
  if (gpushm_buffer_sync_state(buf, &st) == 0)
    print_sync_state(&st);
  gpushm_buffer_close(buf);
}

/* A weight set: the generation shown and the older ones still held, with their holders
 * (each is an object of its own, listed under the set's name, unlinked). */
static void show_generations(const gpushm_buffer_list_t *list, const gpushm_buffer_info_t *b)
{
  uint64_t generation, newest, manifest;
  uint32_t tensors;
  char size[32];

  if (gpushm_buffer_info_weights(b, &generation, &newest, &tensors, &manifest) < 0)
    return;
  printf("generation: %" PRIu64 "%s; %u tensor%s, manifest %s\n", generation,
         newest == generation ? " (the newest)" : "", tensors, tensors == 1 ? "" : "s",
         format_size(manifest, false, size, sizeof size));
  for (size_t i = 0; i < gpushm_buffer_list_count(list); i++) {
    const gpushm_buffer_info_t *o = gpushm_buffer_list_get(list, i);
    uint64_t g;
    if (o == b || strcmp(gpushm_buffer_info_name(o), gpushm_buffer_info_name(b)) != 0 ||
        gpushm_buffer_info_weights(o, &g, NULL, &tensors, NULL) < 0)
      continue;
    printf("older:      generation %" PRIu64 " (id %" PRIu64 "), %u tensor%s, held by %u:\n", g,
           gpushm_buffer_info_id(o), tensors, tensors == 1 ? "" : "s",
           gpushm_buffer_info_holders_total(o));
    print_holders(o);
  }
}

int cmd_show(struct ctl *ctl, int argc, char **argv)
{
  gpushm_buffer_list_t *list;
  const gpushm_buffer_info_t *b;
  uint64_t id = 0;
  bool by_id = arg_is_id(argv[0], &id);
  int r = gpushm_list(ctl->conn, (ctl->all ? GPUSHM_LIST_ALL : 0) | GPUSHM_LIST_METADATA, &list);

  if (r < 0)
    return ctl_fail("show", r);
  if (!(b = find_listed(list, argv[0], by_id, id))) {
    fprintf(stderr, "gpushmctl: show: no buffer or event '%s' visible to you\n", argv[0]);
    gpushm_buffer_list_free(list);
    return EXIT_FAILED;
  }
  if (ctl->json) {
    json_buffer(b);
    putchar('\n');
  } else {
    char size[32], alloc[32], user[64], age[32];
    uint32_t owner_uid = gpushm_buffer_info_owner_uid(b);
    char device[16] = "-"; /* host memory, as list prints it */
    if (gpushm_buffer_info_device(b) >= 0)
      snprintf(device, sizeof device, "%d", gpushm_buffer_info_device(b));
    printf("name:       %s\nid:         %" PRIu64 "\nbackend:    %s\ndevice:     %s\n",
           text(gpushm_buffer_info_name(b), 0), gpushm_buffer_info_id(b), info_backend_name(b),
           device);
    printf("size:       %s (%s allocated)\n",
           format_size(gpushm_buffer_info_size(b), ctl->bytes, size, sizeof size),
           format_size(gpushm_buffer_info_allocated(b), ctl->bytes, alloc, sizeof alloc));
    printf("owner:      %s (uid %u, gid %u)\nmode:       %04o\nlifetime:   %s\n",
           text(user_name(owner_uid, user, sizeof user), 0), owner_uid,
           gpushm_buffer_info_owner_gid(b), gpushm_buffer_info_mode(b), lifetime_name(b));
    advisory_read_only(b);
    {
      uint64_t slot_size, stride;
      uint32_t slots, consumers;
      if (gpushm_buffer_info_ring(b, &slots, &slot_size, &stride, &consumers) == 0)
        printf("ring:       %u slots of %" PRIu64 " bytes (stride %" PRIu64 "); %u consumer%s\n",
               slots, slot_size, stride, consumers, consumers == 1 ? "" : "s");
    }
    if (gpushm_buffer_info_segment_id(b))
      printf("segment:    %" PRIu64 " (carved: shared with buffers of the same owner, group "
             "and mode)\n", gpushm_buffer_info_segment_id(b));
    {
      gpushm_image_desc_t d;
      char image[96];
      if (image_text(b, image, sizeof image) && gpushm_buffer_info_image(b, &d) == 0) {
        printf("image:      %s", image);
        if (d.tiling == GPUSHM_TILING_LINEAR)
          printf(", row pitch %" PRIu64, d.row_pitch);
        printf(", usage%s%s%s%s%s\n", d.usage & GPUSHM_IMAGE_USAGE_SAMPLED ? " sampled" : "",
               d.usage & GPUSHM_IMAGE_USAGE_STORAGE ? " storage" : "",
               d.usage & GPUSHM_IMAGE_USAGE_COLOR_ATTACHMENT ? " color-attachment" : "",
               d.usage & GPUSHM_IMAGE_USAGE_TRANSFER_SRC ? " transfer-src" : "",
               d.usage & GPUSHM_IMAGE_USAGE_TRANSFER_DST ? " transfer-dst" : "");
      }
      if (gpushm_buffer_info_backend(b) == GPUSHM_BACKEND_EXTERNAL)
        printf("registered: memory a process exported from a graphics API (it lives while "
               "gpushmd or an importer holds it)\n");
    }
    {
      static char meta[METADATA_TEXT_SIZE];
      bool is_text;
      size_t len;
      const char *m = metadata_text(b, &is_text, meta);
      if (m) {
        gpushm_buffer_info_metadata(b, &len);
        /* text() escapes what a terminal would act on, newlines included */
        printf("metadata:   %s%s\n", is_text ? "" : "(base64) ", text(m, 0));
      }
    }
    printf("state:      %s%s\ncreated by: pid %u, %s ago\nreferences: %u\nholders:    %u\n",
           gpushm_buffer_info_linked(b) ? "linked" : "unlinked, still held",
           gpushm_buffer_info_sync(b) ? ", sync" : "", gpushm_buffer_info_creator_pid(b),
           format_age(age_ms(gpushm_buffer_info_created_unix_ms(b)), age, sizeof age),
           gpushm_buffer_info_refs(b), gpushm_buffer_info_holders_total(b));
    show_sync_state(ctl, b);
    print_holders(b);
    show_generations(list, b);
    show_detached(ctl, gpushm_buffer_info_id(b));
  }
  gpushm_buffer_list_free(list);
  return 0;
}


/* Bytes, or with a binary suffix in either case (K or k, M or m, ...; "KiB" and "KB"
 * too).  Digits first: strtoull would take " -1" or "+1" and a minus wraps. */
int parse_size(const char *s, uint64_t *out)
{
  char *end;
  unsigned long long v;
  unsigned shift = 0;

  if (!isdigit((unsigned char)*s))
    return -1;
  errno = 0;
  v = strtoull(s, &end, 10);
  if (errno || end == s)
    return -1;
  if (*end) {
    const char *units = "KMGT", *u = strchr(units, toupper((unsigned char)*end));
    if (!u || (end[1] && strcmp(end + 1, "iB") != 0 && strcmp(end + 1, "B") != 0))
      return -1;
    shift = 10u * (unsigned)(u - units + 1);
    if (v > (UINT64_MAX >> shift))
      return -1;
  }
  *out = v << shift;
  return 0;
}

int check_create(struct ctl *ctl, int argc, char **argv)
{
  uint64_t size;
  (void)ctl;
  (void)argc;
  if (parse_size(argv[1], &size) < 0 || size == 0) {
    fprintf(stderr, "gpushmctl: create: bad size '%s' (bytes, or with K, M, G, T: binary, "
            "either case)\n", argv[1]);
    return EXIT_USAGE;
  }
  return 0;
}

int cmd_create(struct ctl *ctl, int argc, char **argv)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;
  uint64_t size = 0;
  int r;

  parse_size(argv[1], &size); /* checked by check_create */
  gpushm_create_opts_init(&opts);
  opts.backend = ctl->backend;
  opts.device = ctl->device;
  opts.mode = ctl->mode;
  opts.lifetime = ctl->session ? GPUSHM_LIFETIME_SESSION : GPUSHM_LIFETIME_PERSISTENT;
  opts.flags = (ctl->sync ? GPUSHM_CREATE_SYNC : 0) |
               (ctl->strict_mode ? GPUSHM_CREATE_STRICT_MODE : 0);
  opts.group = ctl->group;
  if (ctl->metadata) {
    opts.metadata = ctl->metadata;
    opts.metadata_size = (uint32_t)strnlen(ctl->metadata, GPUSHM_METADATA_MAX + 1);
  }
  if ((r = gpushm_buffer_create(ctl->conn, argv[0], size, &opts, &b)) < 0)
    return ctl_fail("create", r);
  printf("%s %" PRIu64 "\n", text(gpushm_buffer_name(b), 0), gpushm_buffer_id(b));
  gpushm_buffer_close(b);
  return 0;
}

/* WxH, each 1..GPUSHM_LIMIT_IMAGE_DIM (the daemon says which is too large). */
static int parse_extent(const char *arg, uint32_t *w, uint32_t *h)
{
  char *x, *end;
  unsigned long a, b;

  errno = 0;
  a = strtoul(arg, &x, 10);
  if (x == arg || *x != 'x')
    return -1;
  b = strtoul(x + 1, &end, 10);
  if (end == x + 1 || *end || errno || !a || !b || a > UINT32_MAX || b > UINT32_MAX)
    return -1;
  *w = (uint32_t)a;
  *h = (uint32_t)b;
  return 0;
}

int check_create_image(struct ctl *ctl, int argc, char **argv)
{
  uint32_t w, h;
  (void)ctl;
  (void)argc;
  if (parse_extent(argv[1], &w, &h) < 0) {
    fprintf(stderr, "gpushmctl: create-image: bad extent '%s' (WIDTHxHEIGHT)\n", argv[1]);
    return EXIT_USAGE;
  }
  return 0;
}

/* A linear image gpushmd allocates (optimal ones come from a Vulkan process). */
int cmd_create_image(struct ctl *ctl, int argc, char **argv)
{
  gpushm_create_opts_t opts;
  gpushm_image_desc_t d;
  gpushm_buffer_t *b;
  int r;

  (void)argc;
  gpushm_image_desc_init(&d);
  parse_extent(argv[1], &d.width, &d.height); /* checked by check_create_image */
  if (ctl->format)
    d.format = ctl->format;
  gpushm_create_opts_init(&opts);
  opts.backend = ctl->backend;
  opts.device = ctl->device;
  opts.mode = ctl->mode;
  opts.lifetime = ctl->session ? GPUSHM_LIFETIME_SESSION : GPUSHM_LIFETIME_PERSISTENT;
  if ((r = gpushm_image_create(ctl->conn, argv[0], &d, &opts, &b)) < 0)
    return ctl_fail("create-image", r);
  gpushm_buffer_image_desc(b, &d);
  printf("%s %" PRIu64 " %" PRIu64 "\n", text(gpushm_buffer_name(b), 0), gpushm_buffer_id(b),
         d.row_pitch);
  gpushm_buffer_close(b);
  return 0;
}

/* After an unlink: who still holds the buffer, whose memory stays until they let go
 * (the name alone no longer tells it from others unlinked before, hence the id). */
static void report_holders(struct ctl *ctl, const char *name, uint64_t id)
{
  gpushm_buffer_list_t *list;
  const gpushm_buffer_info_t *b;
  char size[32];

  if (gpushm_list(ctl->conn, 0, &list) < 0)
    return;
  if ((b = find_listed(list, name, true, id)) && gpushm_buffer_info_holders_total(b)) {
    uint32_t n = gpushm_buffer_info_holders_total(b);
    const char *who = n == 1 ? "it lets" : "they let";
    printf("unlinked '%s': still held by %u client%s, so ", text(name, 0), n, n == 1 ? "" : "s");
    if (gpushm_buffer_info_kind(b) == GPUSHM_KIND_EVENT)
      printf("the event lives until %s go:\n", who);
    else
      printf("its %s stay allocated until %s go (gpushmctl disconnect CLIENT ends a holder's "
             "connection):\n", format_size(gpushm_buffer_info_allocated(b), ctl->bytes, size,
                                            sizeof size), who);
    print_holders(b);
  }
  gpushm_buffer_list_free(list);
}

int cmd_unlink(struct ctl *ctl, int argc, char **argv)
{
  gpushm_buffer_list_t *list;
  const gpushm_buffer_info_t *b;
  uint64_t id = 0;
  int r;

  (void)argc;
  if (gpushm_list(ctl->conn, 0, &list) == 0) {
    if ((b = find_listed(list, argv[0], false, 0)) && gpushm_buffer_info_linked(b))
      id = gpushm_buffer_info_id(b);
    gpushm_buffer_list_free(list);
  }
  if ((r = gpushm_unlink(ctl->conn, argv[0])) < 0)
    return ctl_fail("unlink", r);
  if (id)
    report_holders(ctl, argv[0], id);
  return 0;
}


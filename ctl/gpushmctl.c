/* SPDX-License-Identifier: MIT */
/* gpushmctl: the admin CLI for gpushmd, built on the public libgpushm API only.
 * Exit status: 0 ok, 1 the operation failed (the daemon's reason on stderr), 2 usage. */
#include "config.h"
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

struct ctl {
  const char *socket;
  bool json, bytes, all, prometheus, session, sync, strict_mode;
  int device;
  uint32_t mode;
  uint32_t backend;
  const char *metadata; /* create --metadata */
  uint32_t format;      /* create-image --format */
  const char *textfile; /* stats --textfile */
  struct dump_request dump;
  gpushm_t *conn;
};

struct cmd_entry {
  const char *name;
  const char *alias;   /* an older name that still works, or NULL */
  const char *args;    /* shown in usage */
  const char *summary;
  const char *options; /* long options it accepts, "," separated, for --help */
  int min_args, max_args;
  int (*run)(struct ctl *ctl, int argc, char **argv);
  /* Optional: checks the arguments before connecting (usage errors exit 2 even with
   * no daemon running). */
  int (*check)(struct ctl *ctl, int argc, char **argv);
  /* run connects by itself (doctor: a failed connect is one of its findings). */
  bool connects_itself;
};

/* ---- output helpers ------------------------------------------------------------ */

static uint64_t now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Against one instant per run: the rows of a listing agree, and a listing of 100k rows
 * reads the clock once (a system call where the vDSO has no usable clock, as in some
 * VMs). */
static uint64_t age_ms(uint64_t since_unix_ms)
{
  static uint64_t now;

  if (!now)
    now = now_ms();
  return now > since_unix_ms ? now - since_unix_ms : 0;
}

/* Names looked up once per invocation: a list of 100k buffers has a handful of owners
 * and holders, and each NSS lookup (a read of /etc/passwd, or a round trip to nscd or
 * sssd) or /proc read costs more than printing the row.  Open addressing on the id;
 * entries are never removed. */
struct name_cache {
  struct name_slot {
    uint32_t id;
    bool used;
    char name[64];
  } *slots;
  size_t n, cap; /* cap: a power of two */
};

/* The slot for id: its entry, or the empty slot to fill (*found false). */
static struct name_slot *name_cache_slot(struct name_cache *c, uint32_t id, bool *found)
{
  size_t i;

  if (c->n + 1 > c->cap / 2) {
    struct name_cache grown = { .cap = c->cap ? 2 * c->cap : 64 };
    grown.slots = xalloc(calloc(grown.cap, sizeof *grown.slots));
    for (size_t k = 0; k < c->cap; k++)
      if (c->slots[k].used) {
        bool dup;
        *name_cache_slot(&grown, c->slots[k].id, &dup) = c->slots[k];
        grown.n++;
      }
    free(c->slots);
    *c = grown;
  }
  for (i = (id * 2654435761u) & (c->cap - 1); c->slots[i].used; i = (i + 1) & (c->cap - 1))
    if (c->slots[i].id == id) {
      *found = true;
      return &c->slots[i];
    }
  *found = false;
  return &c->slots[i];
}

static const char *cached_name(struct name_cache *c, uint32_t id, char *buf, size_t len,
                               void (*look_up)(uint32_t id, char *name, size_t size))
{
  bool found;
  struct name_slot *slot = name_cache_slot(c, id, &found);
  size_t n;

  if (!found) {
    look_up(id, slot->name, sizeof slot->name);
    slot->id = id;
    slot->used = true;
    c->n++;
  }
  /* as the lookup into buf itself would have cut it */
  n = strnlen(slot->name, len - 1);
  memcpy(buf, slot->name, n);
  buf[n] = '\0';
  return buf;
}

static void look_up_user(uint32_t uid, char *buf, size_t len)
{
  struct passwd *pw = getpwuid(uid);
  if (pw)
    snprintf(buf, len, "%s", pw->pw_name);
  else
    snprintf(buf, len, "%u", uid);
}

static const char *user_name(uint32_t uid, char *buf, size_t len)
{
  static struct name_cache users;
  return cached_name(&users, uid, buf, len, look_up_user);
}

/* The process's short name from /proc (same host as the daemon), or "?". */
static void look_up_process(uint32_t pid, char *buf, size_t len)
{
  char path[64];
  FILE *f;

  snprintf(path, sizeof path, "/proc/%u/comm", pid);
  snprintf(buf, len, "?");
  if ((f = fopen(path, "r"))) {
    size_t n = fread(buf, 1, len - 1, f);
    /* The kernel adds one newline; the name before it may hold newlines of its own. */
    if (n > 0) {
      n -= buf[n - 1] == '\n';
      buf[n] = '\0';
    }
    fclose(f);
  }
}

static const char *process_name(uint32_t pid, char *buf, size_t len)
{
  static struct name_cache processes;
  return cached_name(&processes, pid, buf, len, look_up_process);
}

/* Events are no backend to the library, but gpushmctl has always shown them as the
 * wire spells them: "cuda-event" in the backend column. */
static const char *backend_name(gpushm_kind_t kind, gpushm_backend_t backend)
{
  const char *name = kind == GPUSHM_KIND_EVENT ? "cuda-event" : gpushm_backend_name(backend);
  return name ? name : "unknown";
}

/* A table: cells are collected (escaped: any may come from outside), then printed with
 * aligned columns; the last column is cut to fit the terminal when stdout is one.
 * Cells live in one growing buffer with their widths beside them, so that a table of
 * 100k rows costs no allocation per cell and no second measuring pass. */
#define TABLE_MAX_COLS 14
/* A listing of 100k buffers is 1.2M cells: they are kept compact (a cell's width and
 * length fit 16 bits: names are at most 127 bytes, escaped four times that) and rows
 * are written with one stdio call each. */
struct table {
  size_t rows, cap, cols;
  size_t *at; /* per row: its first cell's offset in text (the others follow it) */
  struct table_cell {
    uint16_t width; /* in columns */
    uint16_t bytes; /* in text, without its NUL */
  } *cell;
  char *text;
  size_t len, text_cap;
};

/* Room for rows more rows without growing (a listing knows its size). */
static void table_reserve(struct table *t, size_t rows)
{
  if (t->cap - t->rows >= rows)
    return;
  t->cap = t->rows + rows;
  t->at = xalloc(realloc(t->at, t->cap * sizeof *t->at));
  t->cell = xalloc(realloc(t->cell, t->cap * t->cols * sizeof *t->cell));
}

static void table_append(struct table *t, const char *s, size_t n)
{
  if (t->text_cap - t->len < n + 1) {
    while (t->text_cap - t->len < n + 1)
      t->text_cap = t->text_cap ? 2 * t->text_cap : 4096;
    t->text = xalloc(realloc(t->text, t->text_cap));
  }
  memcpy(t->text + t->len, s, n);
  t->text[t->len + n] = '\0';
  t->len += n + 1;
}

/* Whether text_escape(s, 0) would be s itself: printable ASCII, no backslash. */
static bool plain_ascii(const char *s, size_t *len)
{
  const char *p = s;

  for (; *p; p++)
    if (*p < 0x20 || *p >= 0x7f || *p == '\\')
      return false;
  *len = (size_t)(p - s);
  return true;
}

static void table_add(struct table *t, ...)
{
  va_list ap;
  if (t->rows == t->cap)
    table_reserve(t, t->cap ? t->cap : 16);
  va_start(ap, t);
  for (size_t c = 0; c < t->cols; c++) {
    const char *v = va_arg(ap, const char *);
    size_t cell = t->rows * t->cols + c, n;
    v = v ? v : "";
    if (c == 0)
      t->at[t->rows] = t->len;
    if (plain_ascii(v, &n) && n <= UINT16_MAX) {
      t->cell[cell] = (struct table_cell){ (uint16_t)n, (uint16_t)n };
      table_append(t, v, n);
    } else {
      /* escaping writes at most 4 bytes per byte: a longer source is cut to fit */
      char *cut = strnlen(v, UINT16_MAX / 4 + 1) > UINT16_MAX / 4
                    ? xalloc(strndup(v, UINT16_MAX / 4)) : NULL;
      char *e = text_escape(cut ? cut : v, 0);
      size_t w;
      n = text_span(e, SIZE_MAX, &w);
      t->cell[cell] = (struct table_cell){ (uint16_t)(w < UINT16_MAX ? w : UINT16_MAX), (uint16_t)n };
      table_append(t, e, n);
      free(e);
      free(cut);
    }
  }
  va_end(ap);
  t->rows++;
}

/* Rows in the order given (row indices; NULL: as added). */
static void table_print(struct table *t, const size_t *order)
{
  size_t width[TABLE_MAX_COLS] = { 0 }, term = 0, used = 0, w, line_cap = 256;
  char *line = xalloc(malloc(line_cap));
  struct winsize ws;

  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    term = ws.ws_col;
  for (size_t r = 0; r < t->rows; r++)
    for (size_t c = 0; c < t->cols; c++)
      if (t->cell[r * t->cols + c].width > width[c])
        width[c] = t->cell[r * t->cols + c].width;
  for (size_t c = 0; c + 1 < t->cols; c++)
    used += width[c] + 2;
  for (size_t i = 0; i < t->rows; i++) {
    size_t r = order ? order[i] : i;
    const char *next = t->text + t->at[r];
    size_t len = 0;
    for (size_t c = 0; c < t->cols; c++) {
      const char *cell = next;
      size_t bytes = t->cell[r * t->cols + c].bytes, pad = 0;
      next = cell + bytes + 1;
      w = t->cell[r * t->cols + c].width;
      if (c + 1 < t->cols) {
        pad = width[c] - w + 2;
      } else if (term && used + w > term && term > used + 3) {
        bytes = text_span(cell, term - used - 3, &w);
        pad = 3; /* "..." */
      }
      if (line_cap - len < bytes + pad + 1) {
        while (line_cap - len < bytes + pad + 1)
          line_cap *= 2;
        line = xalloc(realloc(line, line_cap));
      }
      memcpy(line + len, cell, bytes);
      len += bytes;
      memset(line + len, c + 1 < t->cols ? ' ' : '.', pad);
      len += pad;
    }
    line[len++] = '\n';
    fwrite(line, 1, len, stdout);
  }
  free(line);
  free(t->at);
  free(t->cell);
  free(t->text);
}

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
    printf("%s{\"client_id\":%u,\"pid\":%u,\"uid\":%u,\"refs\":%u,\"process\":", h ? "," : "",
           gpushm_holder_client_id(holder), gpushm_holder_pid(holder), gpushm_holder_uid(holder),
           gpushm_holder_refs(holder));
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

static int cmd_list(struct ctl *ctl, int argc, char **argv)
{
  return list_buffers(ctl, false);
}

static int cmd_events(struct ctl *ctl, int argc, char **argv)
{
  return list_buffers(ctl, true);
}

/* One detached process and its listed buffers (only buffer id `only` where nonzero). */
static void text_detached(struct ctl *ctl, const gpushm_detached_t *d, uint64_t only)
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
static bool arg_is_id(const char *arg, uint64_t *id)
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
static const gpushm_buffer_info_t *find_listed(const gpushm_buffer_list_t *list, const char *arg,
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
    printf("  pid %-8u %s uid %-6u (%s)  refs %u  client %u\n", gpushm_holder_pid(holder),
           text(process_name(gpushm_holder_pid(holder), comm, sizeof comm), 16),
           gpushm_holder_uid(holder),
           text(user_name(gpushm_holder_uid(holder), who, sizeof who), 0),
           gpushm_holder_refs(holder), gpushm_holder_client_id(holder));
  }
  if (gpushm_buffer_info_holders_total(b) > n)
    printf("  and %zu more\n", (size_t)gpushm_buffer_info_holders_total(b) - n);
}

static int cmd_show(struct ctl *ctl, int argc, char **argv)
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
    printf("name:       %s\nid:         %" PRIu64 "\nbackend:    %s\ndevice:     %d\n",
           text(gpushm_buffer_info_name(b), 0), gpushm_buffer_info_id(b), info_backend_name(b),
           gpushm_buffer_info_device(b));
    printf("size:       %s (%s allocated)\n",
           format_size(gpushm_buffer_info_size(b), ctl->bytes, size, sizeof size),
           format_size(gpushm_buffer_info_allocated(b), ctl->bytes, alloc, sizeof alloc));
    printf("owner:      %s (uid %u, gid %u)\nmode:       %04o\nlifetime:   %s\n",
           text(user_name(owner_uid, user, sizeof user), 0), owner_uid,
           gpushm_buffer_info_owner_gid(b), gpushm_buffer_info_mode(b), lifetime_name(b));
    advisory_read_only(b);
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
    print_holders(b);
    show_detached(ctl, gpushm_buffer_info_id(b));
  }
  gpushm_buffer_list_free(list);
  return 0;
}

static int cmd_clients(struct ctl *ctl, int argc, char **argv)
{
  gpushm_client_list_t *clients;
  size_t n;
  int r = gpushm_clients(ctl->conn, &clients);

  if (r < 0)
    return ctl_fail("clients", r);
  n = gpushm_client_list_count(clients);
  if (ctl->json) {
    putchar('[');
    for (size_t i = 0; i < n; i++) {
      const gpushm_client_info_t *c = gpushm_client_list_get(clients, i);
      char comm[32], user[64];
      printf("%s{\"client_id\":%u,\"pid\":%u,\"process\":", i ? "," : "",
             gpushm_client_info_client_id(c), gpushm_client_info_pid(c));
      json_string(process_name(gpushm_client_info_pid(c), comm, sizeof comm));
      printf(",\"uid\":%u,\"user\":", gpushm_client_info_uid(c));
      json_string(user_name(gpushm_client_info_uid(c), user, sizeof user));
      printf(",\"gid\":%u,\"name\":", gpushm_client_info_gid(c));
      json_string(gpushm_client_info_name(c));
      printf(",\"buffers_held\":%u,\"bytes_held\":%" PRIu64 ",\"segments_mapped\":%u,"
             "\"segment_bytes_mapped\":%" PRIu64 ",\"connected_unix_ms\":%" PRIu64
             ",\"admin\":%s}", gpushm_client_info_buffers_held(c), gpushm_client_info_bytes_held(c),
             gpushm_client_info_segments_mapped(c), gpushm_client_info_segment_bytes_mapped(c),
             gpushm_client_info_connected_unix_ms(c),
             gpushm_client_info_admin(c) ? "true" : "false");
    }
    printf("]\n");
  } else {
    struct table t = { .cols = 8 };
    table_add(&t, "ID", "PID", "PROCESS", "USER", "CLIENT", "BUFFERS", "BYTES", "CONNECTED");
    for (size_t i = 0; i < n; i++) {
      const gpushm_client_info_t *c = gpushm_client_list_get(clients, i);
      char id[16], pid[16], comm[32], user[64], held[16], bytes[32], age[32];
      snprintf(id, sizeof id, "%u", gpushm_client_info_client_id(c));
      snprintf(pid, sizeof pid, "%u", gpushm_client_info_pid(c));
      snprintf(held, sizeof held, "%u", gpushm_client_info_buffers_held(c));
      table_add(&t, id, pid, process_name(gpushm_client_info_pid(c), comm, sizeof comm),
                user_name(gpushm_client_info_uid(c), user, sizeof user), gpushm_client_info_name(c),
                held, format_size(gpushm_client_info_bytes_held(c), ctl->bytes, bytes, sizeof bytes),
                format_age(age_ms(gpushm_client_info_connected_unix_ms(c)), age, sizeof age));
    }
    table_print(&t, NULL);
  }
  gpushm_client_list_free(clients);
  return 0;
}

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

static int cmd_stats(struct ctl *ctl, int argc, char **argv)
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

/* Bytes, or with a binary suffix in either case (K or k, M or m, ...; "KiB" and "KB"
 * too).  Digits first: strtoull would take " -1" or "+1" and a minus wraps. */
static int parse_size(const char *s, uint64_t *out)
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

static int check_create(struct ctl *ctl, int argc, char **argv)
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

static int cmd_create(struct ctl *ctl, int argc, char **argv)
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

static int check_create_image(struct ctl *ctl, int argc, char **argv)
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
static int cmd_create_image(struct ctl *ctl, int argc, char **argv)
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

static int cmd_unlink(struct ctl *ctl, int argc, char **argv)
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

/* Digits only: strtoul would take "-1" (as ULONG_MAX) and " 1". */
static int parse_client_id(const char *arg, uint32_t *id)
{
  char *end;
  unsigned long v;

  if (!isdigit((unsigned char)*arg))
    return -1;
  errno = 0;
  v = strtoul(arg, &end, 10);
  if (*end || errno || v == 0 || v > UINT32_MAX)
    return -1;
  *id = (uint32_t)v;
  return 0;
}

static int check_disconnect(struct ctl *ctl, int argc, char **argv)
{
  uint32_t id;
  (void)ctl;
  (void)argc;
  if (parse_client_id(argv[0], &id) == 0)
    return 0;
  fprintf(stderr, "gpushmctl: disconnect: bad client id '%s' (a number from 1, as gpushmctl "
          "clients lists them)\n", argv[0]);
  return EXIT_USAGE;
}

static int cmd_disconnect(struct ctl *ctl, int argc, char **argv)
{
  uint32_t id;
  int r;

  (void)argc;
  parse_client_id(argv[0], &id);
  if ((r = gpushm_client_disconnect(ctl->conn, id)) == GPUSHM_E_NOENT) {
    /* others' clients are as invisible as in the listing: say so, not "no such buffer" */
    fprintf(stderr, "gpushmctl: disconnect: no client with id %u among those you may end "
            "(gpushmctl clients lists them)\n", id);
    return EXIT_FAILED;
  }
  if (r < 0)
    return ctl_fail("disconnect", r);
  printf("client %u disconnected: its references are released; host memory nobody else "
         "holds is taken back from that process, device memory it maps stays allocated "
         "until it exits\n", id);
  return 0;
}

static int cmd_ping(struct ctl *ctl, int argc, char **argv)
{
  struct timespec a, b;
  int r;

  clock_gettime(CLOCK_MONOTONIC, &a);
  r = gpushm_ping(ctl->conn);
  clock_gettime(CLOCK_MONOTONIC, &b);
  if (r < 0)
    return ctl_fail("ping", r);
  printf("gpushmd answered in %.1f us\n", (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3);
  return 0;
}

static void print_versions(void)
{
  printf("gpushmctl %s (libgpushm %s)\n", PACKAGE_VERSION, gpushm_version_string());
}

/* This side's versions first: they are known whether or not gpushmd answers. */
static int cmd_version(struct ctl *ctl, int argc, char **argv)
{
  gpushm_stats_t *s;
  int r;

  (void)argc;
  (void)argv;
  print_versions();
  fflush(stdout);
  if ((r = gpushm_connect(ctl->socket, "gpushmctl", &ctl->conn)) < 0)
    return ctl_fail("version: gpushmd could not be reached", r);
  if ((r = gpushm_stats(ctl->conn, &s)) < 0)
    return ctl_fail("version: gpushmd did not say its version", r);
  printf("gpushmd %s\n", text(gpushm_stats_daemon_version(s), 0));
  gpushm_stats_free(s);
  return 0;
}

static int cmd_doctor(struct ctl *ctl, int argc, char **argv)
{
  (void)argc;
  (void)argv;
  if (ctl->backend == GPUSHM_BACKEND_CUDA_FABRIC) {
    /* Its rows (cuda-fabric/...) come with every run; it is for other nodes, so no
     * verdict about this process is given for it. */
    fprintf(stderr, "gpushmctl: doctor judges host, cuda-ipc or cuda-fd; every run reports "
            "cuda-fabric in its own rows\n");
    return EXIT_USAGE;
  }
  return ctl_doctor(ctl->socket, ctl->backend);
}

static int check_dump(struct ctl *ctl, int argc, char **argv)
{
  (void)argc;
  if (ctl->dump.raw && isatty(STDOUT_FILENO)) {
    fprintf(stderr, "gpushmctl: dump: --format raw writes the bytes as they are, and standard "
            "output is a terminal: redirect it to a file or a pipe (gpushmctl dump %s --format "
            "raw > FILE), or leave out --format for hex\n", text(argv[0], 0));
    return EXIT_USAGE;
  }
  return 0;
}

static int cmd_dump(struct ctl *ctl, int argc, char **argv)
{
  gpushm_buffer_list_t *list;
  int r;

  (void)argc;
  ctl->dump.arg = argv[0];
  ctl->dump.by_id = arg_is_id(argv[0], &ctl->dump.id);
  /* the listing says what it is (events and optimal-tiling images are refused before
   * any open); the open itself decides whether this user may read it */
  if ((r = gpushm_list(ctl->conn, 0, &list)) < 0)
    return ctl_fail("dump", r);
  r = ctl_dump(ctl->conn, find_listed(list, argv[0], ctl->dump.by_id, ctl->dump.id), &ctl->dump);
  gpushm_buffer_list_free(list);
  return r;
}

static const struct cmd_entry commands[] = {
  { "list", NULL, "", "list buffers: name, id, backend, size, owner, mode, references, holders",
    "all,json,bytes", 0, 0, cmd_list, NULL, false },
  { "show", NULL, "NAME|ID", "everything known about one buffer or event", "all,json,bytes", 1, 1,
    cmd_show, NULL, false },
  { "clients", NULL, "", "connected clients and what they hold", "json,bytes", 0, 0, cmd_clients,
    NULL, false },
  { "stats", NULL, "", "daemon counters, memory by backend and device", "json,prometheus,bytes,textfile", 0, 0,
    cmd_stats, NULL, false },
  { "create", NULL, "NAME SIZE", "create a buffer (it stays until unlinked)",
    "device,mode,session,backend,sync,metadata,strict-mode", 2, 2, cmd_create, check_create, false },
  { "create-image", NULL, "NAME WIDTHxHEIGHT",
    "create a linear image (prints its name, id and row pitch)",
    "device,mode,session,backend,format", 2, 2, cmd_create_image, check_create_image, false },
  { "unlink", "destroy", "NAME", "remove a buffer's or event's name; memory goes with its last holder",
    "", 1, 1, cmd_unlink, NULL, false },
  { "disconnect", NULL, "CLIENT", "end a client's connection, releasing its references", "", 1, 1,
    cmd_disconnect, check_disconnect, false },
  { "events", NULL, "", "list inter-process events", "all,json", 0, 0, cmd_events, NULL, false },
  { "dump", NULL, "NAME|ID", "print a buffer's bytes (hex as xxd -a, or raw), read-only",
    "offset,length,format", 1, 1, cmd_dump, check_dump, false },
  { "ping", NULL, "", "check that gpushmd answers", "", 0, 0, cmd_ping, NULL, false },
  { "version", NULL, "", "versions of gpushmctl, libgpushm and gpushmd", "", 0, 0, cmd_version,
    NULL, true },
  { "doctor", NULL, "", "which backends work for this process, and why the others do not",
    "backend", 0, 0, cmd_doctor, NULL, true },
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static const struct option long_options[] = {
  { "socket", required_argument, NULL, 's' },
  { "json", no_argument, NULL, 'j' },
  { "bytes", no_argument, NULL, 'b' },
  { "all", no_argument, NULL, 'a' },
  { "prometheus", no_argument, NULL, 'p' },
  { "device", required_argument, NULL, 'd' },
  { "mode", required_argument, NULL, 'm' },
  { "session", no_argument, NULL, 'S' },
  { "backend", required_argument, NULL, 'B' },
  { "sync", no_argument, NULL, 'y' },
  { "strict-mode", no_argument, NULL, 'X' },
  { "metadata", required_argument, NULL, 'M' },
  { "format", required_argument, NULL, 'F' },
  { "textfile", required_argument, NULL, 'T' },
  { "offset", required_argument, NULL, 'O' },
  { "length", required_argument, NULL, 'L' },
  { "help", no_argument, NULL, 'h' },
  { "version", no_argument, NULL, 'V' },
  { NULL, 0, NULL, 0 },
};

/* A command's options, as --help lists them (and as the shell completions in
 * completion/ offer them: tests/integration/test-completion.sh holds the two together). */
static const struct option_help {
  const char *name, *arg, *text;
} option_help[] = {
  { "all", NULL, "every user's buffers (root or the daemon's admin group)" },
  { "json", NULL, "machine-readable output (stable field names)" },
  { "bytes", NULL, "exact byte counts instead of KiB/MiB/GiB" },
  { "prometheus", NULL, "Prometheus text exposition format" },
  { "device", "N", "CUDA device (daemon's ordinal), default 0" },
  { "mode", "MODE", "permission bits, octal, default 0600" },
  { "session", NULL, "unlinked when gpushmctl disconnects (for tests)" },
  { "backend", "B", "host, cuda-ipc, cuda-fd or cuda-fabric (default: gpushmd's default)" },
  { "sync", NULL, "with acquire/release ordering" },
  { "strict-mode", NULL, "refuse a mode the backend cannot keep (read-only for group or others "
    "on device memory: docs/security.md)" },
  { "metadata", "TEXT", "kept with the buffer, shown by show and list --json" },
  { "format", "F", "image format, default rgba8-unorm (docs/graphics.md)" },
  { "textfile", "FILE", "replace FILE whole with the output (node_exporter's textfile "
    "collector; links in its directory are not followed)" },
  { "offset", "N", "start N bytes in (K, M, G, T suffixes), default 0" },
  { "length", "N", "that many bytes (K, M, G, T suffixes), default to the end" },
};

/* --format is an image format to create-image and an output form to dump. */
static const struct option_help dump_format_help = {
  "format", "F", "hex (default: as xxd -a) or raw (the bytes, not to a terminal)"
};

/* Whether name is an item of the comma-separated list (whole items: "mode" is not
 * "strict-mode"). */
static bool has_item(const char *list, const char *name)
{
  size_t n = strlen(name);

  for (const char *p = list; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
    if (strncmp(p, name, n) == 0 && (p[n] == ',' || !p[n]))
      return true;
  }
  return false;
}

/* Columns of NAME ARGS before the summaries: the longest that fits, others on a line
 * of their own. */
#define USAGE_COLUMN 24

static void usage(FILE *out)
{
  fprintf(out, "Usage: gpushmctl [--socket PATH] COMMAND [OPTION]... [ARG]...\n"
               "       gpushmctl --version\n"
               "Inspect and manage the buffers gpushmd shares.\n\nCommands:\n");
  for (size_t i = 0; i < N_COMMANDS; i++) {
    char left[64];
    snprintf(left, sizeof left, "%s%s%s", commands[i].name, *commands[i].args ? " " : "",
             commands[i].args);
    if (strlen(left) > USAGE_COLUMN)
      fprintf(out, "  %s\n  %-*s %s", left, USAGE_COLUMN, "", commands[i].summary);
    else
      fprintf(out, "  %-*s %s", USAGE_COLUMN, left, commands[i].summary);
    if (commands[i].alias)
      fprintf(out, " (also '%s')", commands[i].alias);
    fputc('\n', out);
  }
  fprintf(out, "\n'gpushmctl COMMAND --help' lists a command's options.  The socket is\n"
               "$GPUSHM_SOCKET, else " GPUSHM_DEFAULT_SOCKET ".  Words after '--',\n"
               "and negative numbers anywhere, are arguments, not options.\n"
               "Exit status: 0 ok, 1 the operation failed (doctor: the backend it judges\n"
               "does not work for this process), 2 usage error.\n");
}

#define OPTION_COLUMN 17

static void command_usage(const struct cmd_entry *cmd, FILE *out)
{
  fprintf(out, "Usage: gpushmctl %s%s%s [OPTION]...\n%s\n", cmd->name, *cmd->args ? " " : "",
          cmd->args, cmd->summary);
  for (size_t i = 0; i < sizeof option_help / sizeof option_help[0]; i++) {
    const struct option_help *h = &option_help[i];
    char left[32];
    if (!has_item(cmd->options, h->name))
      continue;
    if (strcmp(h->name, "format") == 0 && strcmp(cmd->name, "dump") == 0)
      h = &dump_format_help;
    snprintf(left, sizeof left, "--%s%s%s", h->name, h->arg ? " " : "", h->arg ? h->arg : "");
    fprintf(out, "  %-*s %s\n", OPTION_COLUMN, left, h->text);
  }
}

/* Output is buffered and mostly written at exit: a full disk or a closed pipe shows
 * only there, and a caller writing a file (gpushm-textfile) must not take a cut-short
 * one for success. */
static void close_stdout(void)
{
  if (fclose(stdout) != 0) {
    fprintf(stderr, "gpushmctl: writing the output failed: %s\n", strerror(errno));
    _exit(EXIT_FAILED);
  }
}

/* Whether the option argv[i] (not of the form --name=VALUE) takes the next word as its
 * value: getopt_long's rules, unambiguous prefixes of long names included. */
static bool takes_value(const char *arg)
{
  size_t n;
  bool value = false, found = false;

  if (arg[1] != '-')
    return arg[1] == 's' && !arg[2]; /* -s PATH; "-sPATH" carries its value */
  arg += 2;
  if (strchr(arg, '='))
    return false;
  n = strlen(arg);
  for (const struct option *o = long_options; o->name; o++) {
    if (strncmp(o->name, arg, n) != 0)
      continue;
    if (!o->name[n])
      return o->has_arg == required_argument; /* an exact match wins */
    value |= o->has_arg == required_argument;
    found = true;
  }
  return found && value;
}

/* The command's words, split into options (with their values) for getopt and arguments:
 * '--' ends the options, and a word that starts with '-' and a digit is an argument
 * (a negative number: "create x -1", "disconnect -1"), so that it reaches the
 * command's own check and its error, not getopt's "invalid option -- '1'".  Options may
 * still come after arguments, as getopt_long allows. */
static void split_words(int argc, char **argv, char **opts, int *n_opts, char **args, int *n_args)
{
  int i = 1;

  *n_opts = *n_args = 0;
  opts[(*n_opts)++] = argv[0];
  for (; i < argc; i++) {
    const char *w = argv[i];
    if (strcmp(w, "--") == 0) {
      i++;
      break;
    }
    if (w[0] != '-' || !w[1] || isdigit((unsigned char)w[1])) {
      args[(*n_args)++] = argv[i];
      continue;
    }
    opts[(*n_opts)++] = argv[i];
    if (takes_value(w) && i + 1 < argc)
      opts[(*n_opts)++] = argv[++i];
  }
  for (; i < argc; i++)
    args[(*n_args)++] = argv[i];
  opts[*n_opts] = NULL;
  args[*n_args] = NULL;
}

/* The command's words, split by split_words(): its options parsed, its arguments
 * checked, then the command run.  A function of its own so that main() frees the word
 * arrays after every way out of it. */
static int run_command(struct ctl *ctl, const struct cmd_entry *cmd, int n_opts, char **opts,
                       char **args, int n_args)
{
  int opt, r;
  uint64_t size;

  optind = 0; /* 0, not 1: GNU getopt then forgets the first scan's state */
  while ((opt = getopt_long(n_opts, opts, "+s:h", long_options, NULL)) != -1) {
    const char *name = NULL;
    int b;
    char *end;
    switch (opt) {
    case 'h':
      command_usage(cmd, stdout);
      return 0;
    case 's': ctl->socket = optarg; continue;
    case 'j': name = "json"; ctl->json = true; break;
    case 'b': name = "bytes"; ctl->bytes = true; break;
    case 'a': name = "all"; ctl->all = true; break;
    case 'p': name = "prometheus"; ctl->prometheus = true; break;
    case 'S': name = "session"; ctl->session = true; break;
    case 'y': name = "sync"; ctl->sync = true; break;
    case 'X': name = "strict-mode"; ctl->strict_mode = true; break;
    case 'M': name = "metadata"; ctl->metadata = optarg; break;
    case 'T': name = "textfile"; ctl->textfile = optarg; break;
    case 'V': name = "version"; break;
    case 'F':
      name = "format";
      if (strcmp(cmd->name, "dump") == 0) {
        if (strcmp(optarg, "hex") != 0 && strcmp(optarg, "raw") != 0) {
          fprintf(stderr, "gpushmctl: dump: unknown format '%s' (hex or raw)\n", optarg);
          return EXIT_USAGE;
        }
        ctl->dump.raw = optarg[0] == 'r';
      } else if (!(ctl->format = (uint32_t)gpushm_format_from_name(optarg))) {
        fprintf(stderr, "gpushmctl: unknown format '%s' (rgba8-unorm, r32-sfloat, ...: "
                "docs/graphics.md)\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case 'O':
    case 'L':
      name = opt == 'O' ? "offset" : "length";
      if (parse_size(optarg, &size) < 0) {
        fprintf(stderr, "gpushmctl: bad %s '%s' (bytes, or with K, M, G, T: binary, either "
                "case)\n", name, optarg);
        return EXIT_USAGE;
      }
      if (opt == 'O')
        ctl->dump.offset = size;
      else
        ctl->dump.length = size, ctl->dump.has_length = true;
      break;
    case 'd':
      name = "device";
      ctl->device = (int)strtol(optarg, &end, 10);
      if (*end || ctl->device < 0) {
        fprintf(stderr, "gpushmctl: bad device '%s'\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case 'm':
      name = "mode";
      ctl->mode = (uint32_t)strtoul(optarg, &end, 8);
      if (*end || !*optarg || ctl->mode > 0777) {
        fprintf(stderr, "gpushmctl: bad mode '%s' (octal, at most 0777)\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case 'B':
      name = "backend";
      b = gpushm_backend_from_name(optarg);
      /* cuda-event names what events report, not a backend to make buffers with */
      if (b > 0 && b != 4)
        ctl->backend = (gpushm_backend_t)b;
      else {
        fprintf(stderr, "gpushmctl: unknown backend '%s' (host, cuda-ipc, cuda-fd or "
                "cuda-fabric)\n", optarg);
        return EXIT_USAGE;
      }
      break;
    default:
      command_usage(cmd, stderr);
      return EXIT_USAGE;
    }
    if (!has_item(cmd->options, name)) {
      fprintf(stderr, "gpushmctl: %s takes no --%s\n", cmd->name, name);
      return EXIT_USAGE;
    }
  }
  /* what getopt left (words after an option that lacked its value) are arguments too */
  for (int i = optind; i < n_opts; i++)
    args[n_args++] = opts[i];
  if (n_args < cmd->min_args || n_args > cmd->max_args) {
    command_usage(cmd, stderr);
    return EXIT_USAGE;
  }
  if (cmd->check && (r = cmd->check(ctl, n_args, args)) != 0)
    return r;
  if (!cmd->connects_itself && (r = gpushm_connect(ctl->socket, "gpushmctl", &ctl->conn)) < 0)
    return ctl_fail("connect", r);
  r = cmd->run(ctl, n_args, args);
  gpushm_disconnect(ctl->conn);
  return r;
}

int main(int argc, char **argv)
{
  struct ctl ctl = { .mode = 0 };
  const struct cmd_entry *cmd = NULL;
  char **opts, **args;
  int opt, r, n_opts, n_args;

  /* LC_CTYPE only: it says whether the terminal takes UTF-8 and how wide characters are;
   * numbers and messages stay in the C locale. */
  setlocale(LC_CTYPE, "");
  escape_init();
  /* A listing of 100k rows into a pipe or file: a few large writes, not one per
   * st_blksize (a terminal keeps its line buffering, which a person reads by). */
  if (!isatty(STDOUT_FILENO))
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
  atexit(close_stdout);
  /* global options come before the command, the command's after it */
  while ((opt = getopt_long(argc, argv, "+s:hV", long_options, NULL)) != -1) {
    if (opt == 's') {
      ctl.socket = optarg;
    } else if (opt == 'h') {
      usage(stdout);
      return 0;
    } else if (opt == 'V') {
      /* this side only: no daemon is asked (gpushmctl version asks it too) */
      print_versions();
      return 0;
    } else {
      usage(stderr);
      return EXIT_USAGE;
    }
  }
  if (optind >= argc) {
    usage(stderr);
    return EXIT_USAGE;
  }
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (strcmp(argv[optind], commands[i].name) == 0 ||
        (commands[i].alias && strcmp(argv[optind], commands[i].alias) == 0))
      cmd = &commands[i];
  if (!cmd) {
    fprintf(stderr, "gpushmctl: unknown command '%s'\n", argv[optind]);
    usage(stderr);
    return EXIT_USAGE;
  }
  argc -= optind;
  argv += optind;
  opts = xalloc(calloc((size_t)argc + 1, sizeof *opts));
  args = xalloc(calloc((size_t)argc + 1, sizeof *args));
  split_words(argc, argv, opts, &n_opts, args, &n_args);
  r = run_command(&ctl, cmd, n_opts, opts, args, n_args);
  free(opts);
  free(args);
  return r;
}

/* SPDX-License-Identifier: MIT */
/* gpushmctl's output: ages against one instant, names of users and processes looked up
 * once, backend names, and aligned tables. */
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


static uint64_t now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Against one instant per run: the rows of a listing agree, and a listing of 100k rows
 * reads the clock once (a system call where the vDSO has no usable clock, as in some
 * VMs). */
uint64_t age_ms(uint64_t since_unix_ms)
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

const char *user_name(uint32_t uid, char *buf, size_t len)
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

const char *process_name(uint32_t pid, char *buf, size_t len)
{
  static struct name_cache processes;
  return cached_name(&processes, pid, buf, len, look_up_process);
}

/* Events are no backend to the library, but gpushmctl has always shown them as the
 * wire spells them: "cuda-event" in the backend column. */
const char *backend_name(gpushm_kind_t kind, gpushm_backend_t backend)
{
  const char *name = kind == GPUSHM_KIND_EVENT      ? "cuda-event"
                     : kind == GPUSHM_KIND_TIMELINE ? "timeline"
                     : kind == GPUSHM_KIND_WEIGHTS  ? "weights"
                                                    : gpushm_backend_name(backend);
  return name ? name : "unknown";
}


/* Room for rows more rows without growing (a listing knows its size). */
void table_reserve(struct table *t, size_t rows)
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

void table_add(struct table *t, ...)
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
void table_print(struct table *t, const size_t *order)
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


/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "protocol.h"
#include "gpushm_limits.h"
#include "util/log.h"
#include "wire.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_LIBSYSTEMD
/* Locations come from log_event's caller, not from this file. */
#define SD_JOURNAL_SUPPRESS_LOCATION
#include <systemd/sd-journal.h>
#endif

static enum log_level current_level = LOG_LEVEL_INFO;

void log_set_level(enum log_level level)
{
  current_level = level;
}

static const char *const level_names[] = { "error", "warn", "info", "debug" };
/* syslog priorities, understood by journald as PRIORITY= and as a "<N>" line prefix */
static const int level_priorities[] = { 3, 4, 6, 7 };

int log_parse_level(const char *name)
{
  for (unsigned i = 0; i < sizeof level_names / sizeof level_names[0]; i++)
    if (strcmp(name, level_names[i]) == 0)
      return (int)i;
  return PROTO_E_INVAL;
}

/* systemd's advice for services: JOURNAL_STREAM is inherited by everything the service
 * starts, so only a stderr that is still the very stream it names is the journal.  A
 * daemon run by hand from such a shell, or with stderr redirected, writes text. */
static bool stderr_is_journal(void)
{
  const char *stream = getenv("JOURNAL_STREAM");
  unsigned long long dev, ino;
  struct stat st;

  if (!stream || sscanf(stream, "%llu:%llu", &dev, &ino) != 2)
    return false;
  if (fstat(STDERR_FILENO, &st) < 0)
    return false;
  return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

/* What a log line may not show as it is: what text from a client may not hold
 * (wire_char_disguising()), and the bidi marks and the line and paragraph separators,
 * which client names may hold but which reorder or break a line. */
static bool unsafe_char(uint32_t c)
{
  return wire_char_disguising(c) || c == 0x061c || c == 0x200e || c == 0x200f ||
         c == 0x2028 || c == 0x2029;
}

/* Client names are checked at Hello, buffer names at create, but reasons may quote what
 * a client sent, and one check missed is enough: a newline there would forge a second
 * log line, and control or bidi characters rewrite what an admin's terminal shows.  So
 * text is escaped here, whatever its callers checked: every byte that is not
 * well-formed UTF-8, and the characters unsafe_char() names, as \xNN per byte;
 * and the backslash, so that an escape in the log is always one of these.  Cut to fit
 * size between characters, never inside one or inside an escape. */
static void escape_text(const char *text, char *out, size_t size)
{
  size_t n = 0;

  for (const unsigned char *p = (const unsigned char *)text; *p;) {
    uint32_t c = 0;
    size_t len = wire_utf8_char((const char *)p, &c);
    bool escape = len == 0 || c == '\\' || unsafe_char(c);
    size_t take = len ? len : 1, room = escape ? 4 * take : take;

    if (n + room >= size)
      break;
    for (size_t i = 0; i < take; i++)
      if (escape)
        n += (size_t)snprintf(out + n, size - n, "\\x%02x", p[i]);
      else
        out[n++] = (char)p[i];
    p += take;
  }
  out[n] = '\0';
}

/* A message (at most 1023 bytes) escaped whole: four bytes for each of its own. */
#define ESCAPED_MAX (4 * 1024)

static void write_stderr_line(const char *prefix, const char *text)
{
  char out[ESCAPED_MAX];

  escape_text(text, out, sizeof out);
  fprintf(stderr, "%s%s\n", prefix, out);
}

#ifdef HAVE_LIBSYSTEMD
/* Room for one "KEY=value" each; longer values are cut (names are far shorter). */
struct journal_entry {
  struct iovec iov[20];
  int n;
  char text[20][600];
};

static void add(struct journal_entry *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct journal_entry *e, const char *fmt, ...)
{
  va_list ap;
  int len;

  if (e->n >= (int)(sizeof e->iov / sizeof e->iov[0]))
    return;
  va_start(ap, fmt);
  len = vsnprintf(e->text[e->n], sizeof e->text[0], fmt, ap);
  va_end(ap);
  if (len < 0)
    return;
  if ((size_t)len >= sizeof e->text[0])
    len = sizeof e->text[0] - 1;
  e->iov[e->n].iov_base = e->text[e->n];
  e->iov[e->n].iov_len = (size_t)len;
  e->n++;
}

static int send_to_journal(const char *file, int line, const char *func, enum log_level level,
                           const struct log_fields *f, const char *message)
{
  struct journal_entry e;
  char code_file[300], code_line[32];
  /* the text fields that may quote a client, escaped as the text log is */
  char shown[sizeof e.text[0] - sizeof "GPUSHM_REASON="];

  escape_text(message, shown, sizeof shown);
  e.n = 0;
  add(&e, "MESSAGE=%s", shown);
  add(&e, "PRIORITY=%d", level_priorities[level]);
  add(&e, "SYSLOG_IDENTIFIER=gpushmd");
  if (f && f->client) {
    add(&e, "GPUSHM_CLIENT_ID=%" PRIu32, f->client->id);
    add(&e, "GPUSHM_CLIENT_PID=%d", (int)f->client->pid);
    add(&e, "GPUSHM_CLIENT_UID=%u", (unsigned)f->client->uid);
    if (f->client->name && f->client->name[0])
      add(&e, "GPUSHM_CLIENT_NAME=%s", f->client->name);
  }
  if (f && f->buffer)
    add(&e, "GPUSHM_BUFFER=%s", f->buffer);
  if (f && f->buffer_id)
    add(&e, "GPUSHM_BUFFER_ID=%" PRIu64, f->buffer_id);
  if (f && f->has_bytes)
    add(&e, "GPUSHM_BYTES=%" PRIu64, f->bytes);
  if (f && f->backend)
    add(&e, "GPUSHM_BACKEND=%s", f->backend);
  if (f && f->has_device)
    add(&e, "GPUSHM_DEVICE=%d", f->device);
  if (f && f->reason) {
    escape_text(f->reason, shown, sizeof shown);
    add(&e, "GPUSHM_REASON=%s", shown);
  }
  if (f && f->cuda_error)
    add(&e, "GPUSHM_CUDA_ERROR=%s", f->cuda_error);
  if (f && f->suppressed)
    add(&e, "GPUSHM_SUPPRESSED=%llu", f->suppressed);
  snprintf(code_file, sizeof code_file, "CODE_FILE=%s", file);
  snprintf(code_line, sizeof code_line, "CODE_LINE=%d", line);
  return sd_journal_sendv_with_location(code_file, code_line, func, e.iov, e.n);
}
#endif

static void emit(const char *file, int line, const char *func, enum log_level level,
                 const struct log_fields *f, const char *message)
{
  static int to_journal = -1;
  char prefix[32];

  if (to_journal < 0)
    to_journal = stderr_is_journal();
#ifdef HAVE_LIBSYSTEMD
  if (to_journal && send_to_journal(file, line, func, level, f, message) >= 0)
    return;
#else
  (void)file;
  (void)line;
  (void)func;
  (void)f;
#endif
  /* The journal stream itself adds timestamps and reads the priority from "<N>". */
  if (to_journal)
    snprintf(prefix, sizeof prefix, "<%d>", level_priorities[level]);
  else
    snprintf(prefix, sizeof prefix, "gpushmd: %s: ", level_names[level]);
  write_stderr_line(prefix, message);
}

static uint64_t monotonic_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* What all connections together may log (GPUSHM_LIMIT_ALL_CLIENT_WARNINGS_PER_INTERVAL). */
static struct log_ratelimit all_clients;

static void say_suppressed(const char *file, int line, const char *func,
                           struct log_ratelimit *rl, const struct log_client *c)
{
  char message[256];

  if (!rl->suppressed)
    return;
  if (rl == &all_clients)
    snprintf(message, sizeof message, "suppressed %llu warnings from clients: more than %u "
             "per %u s from all connections together", rl->suppressed,
             GPUSHM_LIMIT_ALL_CLIENT_WARNINGS_PER_INTERVAL,
             GPUSHM_LIMIT_CLIENT_WARNING_INTERVAL_MS / 1000);
  else if (c)
    snprintf(message, sizeof message, "suppressed %llu warnings from client %u (pid %d, uid %u)",
             rl->suppressed, c->id, (int)c->pid, (unsigned)c->uid);
  else
    snprintf(message, sizeof message, "suppressed %llu warnings from a client", rl->suppressed);
  emit(file, line, func, LOG_LEVEL_WARN,
       LOG_FIELDS(.client = c, .suppressed = rl->suppressed), message);
  rl->suppressed = 0;
}

/* A window opens with the first warning and holds GPUSHM_LIMIT_CLIENT_WARNINGS_PER_INTERVAL;
 * the first warning after it closes first says what it suppressed.  No timer: a client
 * that goes quiet is told about at its next warning or when its connection ends. */
static bool admit(const char *file, int line, const char *func, struct log_ratelimit *rl,
                  const struct log_client *c, unsigned budget)
{
  uint64_t now = monotonic_ms();

  if (rl->logged == 0 || now - rl->window_start_ms >= GPUSHM_LIMIT_CLIENT_WARNING_INTERVAL_MS) {
    say_suppressed(file, line, func, rl, c);
    rl->window_start_ms = now;
    rl->logged = 0;
  }
  if (rl->logged >= budget) {
    rl->suppressed++;
    return false;
  }
  rl->logged++;
  return true;
}

void log_event_at(const char *file, int line, const char *func, enum log_level level,
                  const struct log_fields *f, const char *fmt, ...)
{
  char message[1024];
  va_list ap;

  if (level > current_level)
    return;
  if (f && level <= LOG_LEVEL_WARN) {
    if (f->ratelimit && !admit(file, line, func, f->ratelimit, f->client,
                               GPUSHM_LIMIT_CLIENT_WARNINGS_PER_INTERVAL))
      return;
    if ((f->ratelimit || f->client_caused) &&
        !admit(file, line, func, &all_clients, NULL, GPUSHM_LIMIT_ALL_CLIENT_WARNINGS_PER_INTERVAL))
      return;
  }
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  emit(file, line, func, level, f, message);
}

void log_ratelimit_flush(struct log_ratelimit *rl, const struct log_client *client)
{
  if (LOG_LEVEL_WARN <= current_level)
    say_suppressed(__FILE__, __LINE__, __func__, rl, client);
  rl->suppressed = 0;
  rl->logged = 0;
}

void log_client_warnings_flush(void)
{
  if (LOG_LEVEL_WARN <= current_level)
    say_suppressed(__FILE__, __LINE__, __func__, &all_clients, NULL);
  all_clients = (struct log_ratelimit){ 0 };
}

/* SPDX-License-Identifier: MIT */
/* The daemon's log.  Lines go to stderr as text, or, when stderr is systemd's journal
 * stream (JOURNAL_STREAM names it) and libsystemd is built in, to the journal as
 * entries whose fields (GPUSHM_BUFFER=, GPUSHM_CLIENT_PID=, ...) operators can match
 * on.  A connection's per-request warnings can be rate-limited (struct log_ratelimit). */
#ifndef GPUSHMD_LOG_H
#define GPUSHMD_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

enum log_level { LOG_LEVEL_ERROR = 0, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

void log_set_level(enum log_level level);
/* Parses "error|warn|info|debug"; returns the level or PROTO_E_INVAL. */
int log_parse_level(const char *name);

/* A connection's warning budget: GPUSHM_LIMIT_CLIENT_WARNINGS_PER_INTERVAL per
 * GPUSHM_LIMIT_CLIENT_WARNING_INTERVAL_MS.  Zeroed is ready to use. */
struct log_ratelimit {
  uint64_t window_start_ms; /* CLOCK_MONOTONIC */
  unsigned logged;          /* in this window */
  unsigned long long suppressed;
};

/* Who a line is about.  name may be NULL or empty (before Hello). */
struct log_client {
  uint32_t id;
  pid_t pid;
  uid_t uid;
  const char *name;
};

/* The structured part of a line; members left zero are not sent.  Values from clients
 * (names, reasons quoting them) may be anything: the journal takes them as they are,
 * stderr gets control characters escaped. */
struct log_fields {
  const struct log_client *client; /* GPUSHM_CLIENT_ID/_PID/_UID/_NAME */
  const char *buffer;              /* GPUSHM_BUFFER */
  uint64_t buffer_id;              /* GPUSHM_BUFFER_ID (ids start at 1) */
  uint64_t bytes;                  /* GPUSHM_BYTES, when has_bytes */
  bool has_bytes;
  const char *backend;             /* GPUSHM_BACKEND */
  int device;                      /* GPUSHM_DEVICE, when has_device */
  bool has_device;
  const char *reason;              /* GPUSHM_REASON */
  const char *cuda_error;          /* GPUSHM_CUDA_ERROR */
  unsigned long long suppressed;   /* GPUSHM_SUPPRESSED: the rate limit's summaries */
  /* Set for warnings a client can cause once per request: past the budget they are
   * counted instead of logged, and log_ratelimit_flush() (or the next warning after the
   * interval) says how many.  NULL: always logged. */
  struct log_ratelimit *ratelimit;
  /* Caused by a client although not limited per connection (it ends the connection):
   * counts against the budget all connections share, as every ratelimit line does. */
  bool client_caused;
};

#define LOG_FIELDS(...) (&(const struct log_fields){ __VA_ARGS__ })

void log_event_at(const char *file, int line, const char *func, enum log_level level,
                  const struct log_fields *fields, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* One statement per line, e.g.
 *   log_event(LOG_LEVEL_WARN, LOG_FIELDS(.client = &lc, .reason = why), "... %s", why);
 * fields may be NULL. */
#define log_event(level, ...) log_event_at(__FILE__, __LINE__, __func__, level, __VA_ARGS__)
#define log_msg(level, ...) log_event(level, NULL, __VA_ARGS__)

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)

/* Says how many of client's warnings rl suppressed, if any, and starts rl afresh: when
 * its connection ends. */
void log_ratelimit_flush(struct log_ratelimit *rl, const struct log_client *client);
/* Says how many client warnings the budget all connections share suppressed: as
 * gpushmd stops. */
void log_client_warnings_flush(void);

#endif

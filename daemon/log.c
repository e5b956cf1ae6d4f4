#include "config.h"
#include "gpushm.h"
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum log_level current_level = LOG_LEVEL_INFO;

void log_set_level(enum log_level level)
{
  current_level = level;
}

static const char *const level_names[] = { "error", "warn", "info", "debug" };
/* syslog priorities, understood by journald as a "<N>" line prefix */
static const int level_priorities[] = { 3, 4, 6, 7 };

int log_parse_level(const char *name)
{
  for (unsigned i = 0; i < sizeof level_names / sizeof level_names[0]; i++)
    if (strcmp(name, level_names[i]) == 0)
      return (int)i;
  return GPUSHM_E_INVAL;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
  /* Under systemd stderr is the journal, which adds its own timestamps and reads
   * the priority from a "<N>" prefix. */
  static int to_journal = -1;
  char line[1024];
  va_list ap;

  if (level > current_level)
    return;
  if (to_journal < 0)
    to_journal = getenv("JOURNAL_STREAM") != NULL;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (to_journal)
    fprintf(stderr, "<%d>%s\n", level_priorities[level], line);
  else
    fprintf(stderr, "gpushmd: %s: %s\n", level_names[level], line);
}

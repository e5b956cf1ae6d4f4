/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "fail.h"
#include "escape.h"
#include "gpushm.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Whether the library's message already says what gpushm_strerror(r) would: many start
 * with the same words ("invalid buffer name: use ...") or name the error in their own
 * ("unsupported: ...", "'x' already exists", "no client with id 7"), and printing both
 * said it twice, or called a client a buffer (NOENT's text is "no such buffer"). */
static bool says_its_error(int r, const char *detail)
{
  const char *category = gpushm_strerror(r);

  if (strncasecmp(detail, category, strlen(category)) == 0)
    return true;
  switch (r) {
  case GPUSHM_E_NOENT: return strncmp(detail, "no ", 3) == 0;
  case GPUSHM_E_EXIST: return strstr(detail, "already exists") != NULL;
  case GPUSHM_E_LIMIT: return strstr(detail, "limit") || strstr(detail, "quota");
  case GPUSHM_E_UNSUPPORTED: return strncmp(detail, "unsupported", 11) == 0;
  default: return false;
  }
}

const char *ctl_error_text(int r, const char *detail, char *buf, size_t len)
{
  if (*detail && says_its_error(r, detail))
    snprintf(buf, len, "%s", detail);
  else
    snprintf(buf, len, "%s%s%s", gpushm_strerror(r), *detail ? ": " : "", detail);
  return buf;
}

int ctl_fail(const char *what, int r)
{
  char line[1024];

  fprintf(stderr, "gpushmctl: %s: %s\n", what,
          text(ctl_error_text(r, gpushm_last_error_message(), line, sizeof line), 0));
  return EXIT_FAILED;
}

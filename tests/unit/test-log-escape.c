/* SPDX-License-Identifier: MIT */
/* What gpushmd's text log lets through of a message that quotes a client: printable
 * UTF-8 as it is, and as \xNN escapes every control, bidi or separator character, every
 * byte of ill-formed UTF-8 and the backslash (daemon/util/log.c), so that one check
 * missed upstream cannot forge a log line or rewrite an admin's terminal. */
#include "config.h"
#include "harness.h"
#include "util/log.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[] = "/tmp/gpushm-test-log-XXXXXX";

/* The line the log writes for text, without its "gpushmd: warn: " prefix. */
static const char *logged(const char *text)
{
  static char line[8192];
  const char *prefix = "gpushmd: warn: ";
  FILE *f;
  size_t n;

  CHECK(ftruncate(STDERR_FILENO, 0) == 0 && lseek(STDERR_FILENO, 0, SEEK_SET) == 0);
  log_msg(LOG_LEVEL_WARN, "%s", text);
  fflush(stderr);
  CHECK((f = fopen(path, "r")) != NULL);
  n = fread(line, 1, sizeof line - 1, f);
  fclose(f);
  line[n] = '\0';
  CHECK(strncmp(line, prefix, strlen(prefix)) == 0);
  CHECK(n > 0 && line[n - 1] == '\n' && memchr(line, '\n', n) == line + n - 1);
  line[n - 1] = '\0';
  return line + strlen(prefix);
}

static void expect(const char *text, const char *want)
{
  const char *got = logged(text);

  if (strcmp(got, want) != 0) {
    fprintf(stdout, "logged '%s', want '%s'\n", got, want);
    CHECK(!"the log line as expected");
  }
}

int main(void)
{
  int fd, saved;

  unsetenv("JOURNAL_STREAM"); /* (the text log, not the journal's stream) */
  CHECK((fd = mkstemp(path)) >= 0);
  CHECK((saved = dup(STDERR_FILENO)) >= 0 && dup2(fd, STDERR_FILENO) == STDERR_FILENO);
  close(fd);

  expect("plain 'name-1.x'", "plain 'name-1.x'");
  expect("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80", /* é, 日本, an emoji */
         "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80");
  expect("a\nforged line\r\x1b[2J\x7f", "a\\x0aforged line\\x0d\\x1b[2J\\x7f");
  expect("C1 CSI \xc2\x9b" "2J", "C1 CSI \\xc2\\x9b2J");
  expect("bidi \xe2\x80\xae" "exe.txt \xe2\x81\xa6" "x \xd8\x9c" "y \xe2\x80\x8e",
         "bidi \\xe2\\x80\\xaeexe.txt \\xe2\\x81\\xa6x \\xd8\\x9cy \\xe2\\x80\\x8e");
  expect("line sep \xe2\x80\xa8 para sep \xe2\x80\xa9",
         "line sep \\xe2\\x80\\xa8 para sep \\xe2\\x80\\xa9");
  expect("ill-formed \xff \x80 \xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xe2\x80",
         "ill-formed \\xff \\x80 \\xc0\\xaf \\xed\\xa0\\x80 \\xf4\\x90\\x80\\x80 \\xe2\\x80");
  expect("a backslash \\x41 stays told apart", "a backslash \\x5cx41 stays told apart");
  {
    /* A message longer than the log's line is cut by its formatting: whatever is left
     * of a character cut in two is escaped, never written as half a character. */
    char big[2000];
    const char *got;
    size_t n;

    for (size_t i = 0; i + 3 < sizeof big; i += 3)
      memcpy(big + i, "\xe6\x97\xa5", 3);
    big[sizeof big - 3] = '\0';
    got = logged(big);
    n = strlen(got);
    CHECK(n > 900 && n < 1100);
    for (size_t i = 0; i < n;) {
      if (got[i] == '\\') {
        CHECK(got[i + 1] == 'x');
        i += 4;
      } else {
        CHECK(memcmp(got + i, "\xe6\x97\xa5", 3) == 0);
        i += 3;
      }
    }
  }
  CHECK(dup2(saved, STDERR_FILENO) == STDERR_FILENO);
  unlink(path);
  printf("log escaping: OK\n");
  return 0;
}

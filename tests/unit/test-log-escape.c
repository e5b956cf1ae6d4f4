/* SPDX-License-Identifier: MIT */
/* What gpushmd's text log lets through of a message that quotes a client: printable
 * UTF-8 as it is, and as \xNN escapes every control, bidi or separator character, every
 * byte of ill-formed UTF-8 and the backslash (daemon/util/log.c), so that one check
 * missed upstream cannot forge a log line or rewrite an admin's terminal. */
#include "config.h"
#include "harness.h"
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOSTILE "csi \xc2\x9b" "2J bidi \xe2\x80\xae" " nl \n ill \xff"
#define HOSTILE_ESCAPED "csi \\xc2\\x9b2J bidi \\xe2\\x80\\xae nl \\x0a ill \\xff"

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

/* The value of key= in one native-protocol datagram, or NULL. */
static const char *field(char *datagram, size_t len, const char *key)
{
  size_t klen = strlen(key);

  datagram[len] = '\0';
  for (char *p = datagram; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
    if (strncmp(p, key, klen) == 0 && p[klen] == '=') {
      char *nl = strchr(p, '\n');
      if (nl)
        *nl = '\0';
      return p + klen + 1;
    }
  return NULL;
}

/* In a child (the log picks text or journal once per process): with stderr the journal's
 * stream, MESSAGE and GPUSHM_REASON are escaped as the text line is.  A socket of ours
 * stands where journald's is, in a mount namespace of the child's own (root only). */
static void journal_fields_escaped(void)
{
#ifdef HAVE_LIBSYSTEMD
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  static char datagram[2 * 65536 + 1];
  const char *reason;
  char stream[64];
  struct stat st;
  int status, sock;
  ssize_t n;
  pid_t pid;

  if (geteuid() != 0) {
    printf("journal fields: not checked (not root: no mount namespace)\n");
    return;
  }
  fflush(stdout);
  CHECK((pid = fork()) >= 0);
  if (pid == 0) {
    CHECK(unshare(CLONE_NEWNS) == 0);
    CHECK(mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) == 0);
    CHECK(mount("tmpfs", "/run", "tmpfs", 0, "mode=0755") == 0);
    CHECK(mkdir("/run/systemd", 0755) == 0 && mkdir("/run/systemd/journal", 0755) == 0);
    CHECK((sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) >= 0);
    strcpy(addr.sun_path, "/run/systemd/journal/socket");
    CHECK(bind(sock, (struct sockaddr *)&addr, sizeof addr) == 0);
    CHECK(fstat(STDERR_FILENO, &st) == 0);
    snprintf(stream, sizeof stream, "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    CHECK(setenv("JOURNAL_STREAM", stream, 1) == 0);
    log_event(LOG_LEVEL_WARN, LOG_FIELDS(.reason = HOSTILE), "refused: %s", HOSTILE);
    CHECK((n = recv(sock, datagram, sizeof datagram / 2 - 1, MSG_DONTWAIT)) > 0);
    memcpy(datagram + sizeof datagram / 2, datagram, (size_t)n);
    CHECK(strcmp(field(datagram, (size_t)n, "MESSAGE"), "refused: " HOSTILE_ESCAPED) == 0);
    reason = field(datagram + sizeof datagram / 2, (size_t)n, "GPUSHM_REASON");
    CHECK(reason && strcmp(reason, HOSTILE_ESCAPED) == 0);
    CHECK((n = recv(sock, datagram, 0, MSG_PEEK | MSG_DONTWAIT)) < 0 && errno == EAGAIN);
    _exit(0);
  }
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  printf("journal fields: MESSAGE and GPUSHM_REASON escaped\n");
#endif
}

int main(void)
{
  int fd, saved;

  unsetenv("JOURNAL_STREAM"); /* (the text log, not the journal's stream) */
  CHECK((fd = mkstemp(path)) >= 0);
  CHECK((saved = dup(STDERR_FILENO)) >= 0 && dup2(fd, STDERR_FILENO) == STDERR_FILENO);
  close(fd);
  journal_fields_escaped();

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

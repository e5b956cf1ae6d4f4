/* SPDX-License-Identifier: MIT */
/* With stderr connected to the journal (JOURNAL_STREAM names stderr's device and inode,
 * as systemd sets it for a service), the daemon's lines are journal entries with
 * GPUSHM_* fields: a private mount namespace puts a socket of ours where journald's is,
 * and the test reads the native protocol's datagrams.  Where JOURNAL_STREAM names some
 * other file (a daemon started from a service's shell), stderr keeps its text lines.
 * Needs root (a mount namespace); skipped otherwise. */
#include "config.h"
#include "harness.h"
#include "raw.h"

#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define JOURNAL_SOCKET "/run/systemd/journal/socket"
#define MAX_FIELDS 32
#define MAX_ENTRIES 512

struct field {
  char *key;
  char *value;
};

struct entry {
  struct field f[MAX_FIELDS];
  unsigned n;
};

static struct entry entries[MAX_ENTRIES];
static unsigned n_entries;
static int journal = -1;

/* One native-protocol datagram: "KEY=value\n", or for values that may hold newlines
 * "KEY\n" + 64-bit little-endian length + value + "\n". */
static void parse(const char *p, size_t len)
{
  struct entry *e;
  const char *end = p + len;

  CHECK(n_entries < MAX_ENTRIES);
  e = &entries[n_entries++];
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p)), *eq;
    CHECK(nl != NULL && e->n < MAX_FIELDS);
    eq = memchr(p, '=', (size_t)(nl - p));
    if (eq) {
      e->f[e->n].key = strndup(p, (size_t)(eq - p));
      e->f[e->n].value = strndup(eq + 1, (size_t)(nl - eq - 1));
      p = nl + 1;
    } else {
      uint64_t vlen = 0;
      const unsigned char *l = (const unsigned char *)nl + 1;
      CHECK(end - (const char *)l >= 8);
      for (int i = 7; i >= 0; i--)
        vlen = vlen << 8 | l[i];
      CHECK((uint64_t)(end - (const char *)(l + 8)) >= vlen + 1);
      e->f[e->n].key = strndup(p, (size_t)(nl - p));
      e->f[e->n].value = strndup((const char *)l + 8, (size_t)vlen);
      CHECK(l[8 + vlen] == '\n');
      p = (const char *)l + 8 + vlen + 1;
    }
    CHECK(e->f[e->n].key && e->f[e->n].value);
    e->n++;
  }
}

static void drain(void)
{
  static char buf[256 * 1024];
  ssize_t n;

  while ((n = recv(journal, buf, sizeof buf, MSG_DONTWAIT)) > 0)
    parse(buf, (size_t)n);
  CHECK(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

static const char *get(const struct entry *e, const char *key)
{
  for (unsigned i = 0; i < e->n; i++)
    if (strcmp(e->f[i].key, key) == 0)
      return e->f[i].value;
  return NULL;
}

/* Entries are looked into only where the daemon can send them (libsystemd built in). */
#define ENTRY_CHECK __attribute__((unused))

/* The first entry whose MESSAGE contains text and that has key=value (key NULL: any),
 * waiting up to ~10 s for the daemon to send it. */
ENTRY_CHECK static const struct entry *find(const char *text, const char *key, const char *value)
{
  for (int tries = 0; tries < 1000; tries++) {
    drain();
    for (unsigned i = 0; i < n_entries; i++) {
      const char *m = get(&entries[i], "MESSAGE"), *v = key ? get(&entries[i], key) : "";
      if (m && strstr(m, text) && v && (!key || strcmp(v, value) == 0))
        return &entries[i];
    }
    usleep(10000);
  }
  fprintf(stderr, "no journal entry with '%s' (%s=%s) among %u\n", text, key ? key : "-",
          value ? value : "-", n_entries);
  for (unsigned i = 0; i < n_entries; i++)
    fprintf(stderr, "  %s\n", get(&entries[i], "MESSAGE"));
  exit(1);
}

ENTRY_CHECK static void expect(const struct entry *e, const char *key, const char *value)
{
  const char *v = get(e, key);
  if (!v || strcmp(v, value) != 0) {
    fprintf(stderr, "entry '%s': %s=%s, expected %s\n", get(e, "MESSAGE"), key, v ? v : "(none)",
            value);
    exit(1);
  }
}

ENTRY_CHECK static void expect_u(const struct entry *e, const char *key, unsigned long long value)
{
  char text[32];
  snprintf(text, sizeof text, "%llu", value);
  expect(e, key, text);
}

/* Our socket where journald's would be, seen only by this process and its children. */
static bool fake_journald(void)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  int rcvbuf = 4 << 20;

  if (unshare(CLONE_NEWNS) < 0) {
    test_log("no mount namespace (%s): skipped", strerror(errno));
    return false;
  }
  /* (the type is ignored for a propagation change, but valgrind reads it: not NULL) */
  CHECK(mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) == 0);
  /* A tmpfs over all of /run: /run/systemd/journal need not exist on the host. */
  CHECK(mount("tmpfs", "/run", "tmpfs", 0, "mode=0755") == 0);
  CHECK(mkdir("/run/systemd", 0755) == 0 && mkdir("/run/systemd/journal", 0755) == 0);
  journal = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  CHECK(journal >= 0);
  setsockopt(journal, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  memcpy(addr.sun_path, JOURNAL_SOCKET, sizeof JOURNAL_SOCKET);
  CHECK(bind(journal, (struct sockaddr *)&addr, sizeof addr) == 0);
  return true;
}

/* JOURNAL_STREAM naming path's file, as systemd names the stream it gives stderr. */
static void journal_stream_is(const char *path)
{
  struct stat st;
  char value[64];

  CHECK(stat(path, &st) == 0);
  snprintf(value, sizeof value, "%llu:%llu", (unsigned long long)st.st_dev,
           (unsigned long long)st.st_ino);
  CHECK(setenv("JOURNAL_STREAM", value, 1) == 0);
}

static void touch(const char *path)
{
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  fclose(f);
}

static off_t file_size(const char *path)
{
  struct stat st;
  CHECK(stat(path, &st) == 0);
  return st.st_size;
}

/* A daemon logging to log that refuses one create (a quota warning), then stops. */
static void run_one_refusal(const char *log)
{
  struct test_daemon d = { .log_path = log };
  gpushm_buffer_t *b, *refused;
  gpushm_t *conn;

  daemon_start(&d, "--max-buffers-per-uid", "1", NULL);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_create(conn, "jt.keep", 4096, NULL, &b));
  CHECK_ERR(gpushm_buffer_create(conn, "jt.over", 4096, NULL, &refused), GPUSHM_E_LIMIT);
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

#ifdef HAVE_LIBSYSTEMD
static void test_fields(const char *log)
{
  struct test_daemon d = { .log_path = log };
  const struct entry *e;
  gpushm_buffer_t *b, *refused;
  gpushm_t *conn;
  char pid[16];
  uint64_t id;
  int raw;

  touch(log);
  journal_stream_is(log);
  daemon_start(&d, "--log-level", "debug", "--default-backend", "host",
               "--max-buffers-per-uid", "1", NULL);
  snprintf(pid, sizeof pid, "%d", (int)getpid());

  CHECK_OK(gpushm_connect(d.socket, "journal-test", &conn));
  e = find("connected", "GPUSHM_CLIENT_PID", pid);
  expect(e, "GPUSHM_CLIENT_UID", "0");
  expect(e, "PRIORITY", "7");
  expect(e, "SYSLOG_IDENTIFIER", "gpushmd");
  expect(e, "CODE_FUNC", "session_start");
  CHECK(get(e, "CODE_FILE") && strstr(get(e, "CODE_FILE"), "session.c"));
  CHECK(get(e, "CODE_LINE") && atoi(get(e, "CODE_LINE")) > 0);

  CHECK_OK(gpushm_buffer_create(conn, "jt.buf", 4096, NULL, &b));
  id = gpushm_buffer_id(b);
  e = find("created 'jt.buf'", NULL, NULL);
  expect(e, "GPUSHM_BUFFER", "jt.buf");
  expect_u(e, "GPUSHM_BUFFER_ID", id);
  expect(e, "GPUSHM_BYTES", "4096");
  expect(e, "GPUSHM_BACKEND", "host");
  expect(e, "GPUSHM_CLIENT_PID", pid);
  expect(e, "GPUSHM_CLIENT_NAME", "journal-test");
  expect(e, "PRIORITY", "7");
  CHECK(get(e, "GPUSHM_DEVICE") == NULL); /* host memory is on no device */

  /* A quota refusal: a warning, with the daemon's reason. */
  CHECK_ERR(gpushm_buffer_create(conn, "jt.over", 4096, NULL, &refused), GPUSHM_E_LIMIT);
  e = find("create refused", "GPUSHM_CLIENT_PID", pid);
  expect(e, "PRIORITY", "4");
  expect(e, "GPUSHM_CLIENT_NAME", "journal-test");
  CHECK(get(e, "GPUSHM_REASON") && strstr(get(e, "GPUSHM_REASON"), "already has 1 buffers"));

  /* Unlinked while held, freed at the last close: two entries. */
  CHECK_OK(gpushm_unlink(conn, "jt.buf"));
  e = find("unlinked", "GPUSHM_BUFFER", "jt.buf");
  expect_u(e, "GPUSHM_BUFFER_ID", id);
  CHECK_OK(gpushm_buffer_close(b));
  e = find("freed", "GPUSHM_BUFFER", "jt.buf");
  expect_u(e, "GPUSHM_BUFFER_ID", id);
  CHECK(get(e, "GPUSHM_BYTES") != NULL);

  gpushm_disconnect(conn);
  e = find("disconnected", "GPUSHM_CLIENT_NAME", "journal-test");
  expect(e, "GPUSHM_CLIENT_PID", pid);

  /* A client that sends garbage is dropped, and the entry says why. */
  raw = raw_connect(d.socket);
  CHECK(send(raw, "garbage that is no frame", 24, MSG_NOSIGNAL) == 24);
  e = find("closing it", "GPUSHM_CLIENT_PID", pid);
  expect(e, "PRIORITY", "4");
  CHECK(get(e, "GPUSHM_REASON") && get(e, "GPUSHM_REASON")[0]);
  close(raw);

  daemon_stop(&d);
  /* All of it went to the journal: stderr stayed empty. */
  CHECK(file_size(log) == 0);
  CHECK(unlink(log) == 0);
}

#else
/* Without libsystemd the journal still gets the lines, through stderr, with their
 * priority as a "<N>" prefix. */
static void test_prefixes(const char *log)
{

  touch(log);
  journal_stream_is(log);
  run_one_refusal(log);
  CHECK(file_size(log) > 0);
  CHECK(file_count_lines(log, "<4>client ") == 1);
  drain();
  CHECK(n_entries == 0);
  CHECK(unlink(log) == 0);
}
#endif

/* JOURNAL_STREAM inherited, but stderr is another file: text, and nothing sent. */
static void test_not_the_stream(const char *log, const char *other)
{
  unsigned before;

  touch(log);
  touch(other);
  journal_stream_is(other);
  drain();
  before = n_entries;
  run_one_refusal(log);
  CHECK(file_count_lines(log, "gpushmd: warn: client ") == 1);
  CHECK(file_contains(log, "create refused: uid 0 already has 1 buffers"));
  drain();
  CHECK(n_entries == before);
  CHECK(unlink(log) == 0 && unlink(other) == 0);
}

int main(void)
{
  char dir[] = "/tmp/gpushm-journal.XXXXXX", log[64], other[64];

  if (!fake_journald())
    return TEST_SKIP;
  CHECK(mkdtemp(dir) != NULL);
  snprintf(log, sizeof log, "%s/stderr", dir);
  snprintf(other, sizeof other, "%s/other", dir);
#ifdef HAVE_LIBSYSTEMD
  test_fields(log);
#else
  test_prefixes(log);
#endif
  test_not_the_stream(log, other);
  CHECK(rmdir(dir) == 0);
  return 0;
}

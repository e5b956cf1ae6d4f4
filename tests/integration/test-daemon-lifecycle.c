/* SPDX-License-Identifier: MIT */
/* gpushmd as a process: options, socket ownership (stale replaced, live or foreign
 * refused), shutdown with clients attached, and accept back-off when out of fds. */
#include "config.h"
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_options(const char *out)
{
  CHECK(daemon_run(out, "--help", NULL) == 0 && file_contains(out, "Usage: gpushmd"));
  CHECK(daemon_run(out, "--version", NULL) == 0 && file_contains(out, "gpushmd " PACKAGE_VERSION));
  CHECK(daemon_run(out, "--no-such-option", NULL) == 2);
  CHECK(daemon_run(out, "--max-clients", "lots", NULL) == 2 && file_contains(out, "--max-clients"));
  CHECK(daemon_run(out, "--max-clients", "0", NULL) == 2);
  CHECK(daemon_run(out, "--max-bytes-per-uid", "12Q", NULL) == 2);
  CHECK(daemon_run(out, "--socket-mode", "0999", NULL) == 2);
  CHECK(daemon_run(out, "--log-level", "chatty", NULL) == 2);
  CHECK(daemon_run(out, "stray-argument", NULL) == 2);
}

/* --help: every option's text starts in one column, wrapped lines too, within 80
 * columns; a flag too long for its column stands on a line of its own. */
static void test_help_columns(const char *out)
{
  char line[256];
  size_t column = 0, options = 0;
  FILE *f;

  CHECK(daemon_run(out, "--help", NULL) == 0);
  CHECK((f = fopen(out, "r")) != NULL);
  while (fgets(line, sizeof line, f)) {
    size_t len = strcspn(line, "\n"), at;
    CHECK(len <= 79);
    if ((strncmp(line, "  -", 3) == 0 && line[5] == ' ') || strncmp(line, "      --", 8) == 0)
      at = 6; /* "-x, --name=ARG" or "    --name=ARG": the long flag from here */
    else if (column && strspn(line, " ") == column && len > column)
      at = 0; /* a wrapped line */
    else
      continue;
    at += strcspn(line + at, " \n");
    if (at == len)
      continue; /* a long flag alone */
    at += strspn(line + at, " ");
    if (!column)
      column = at;
    if (at != column)
      fprintf(stderr, "misaligned --help line: %s", line);
    CHECK(at == column);
    options++;
  }
  fclose(f);
  CHECK(options > 20);
}

/* Size suffixes in either case, binary alike: 8k is 8 KiB, as 8K is; on the command
 * line and in the settings file. */
static void test_size_suffixes(void)
{
  struct test_daemon d = { 0 };
  char conf[] = "/tmp/gpushm-test-conf.XXXXXX", arg[64];
  gpushm_buffer_t *b;
  gpushm_t *conn;
  int fd = mkstemp(conf);

  CHECK(fd >= 0);
  CHECK(write(fd, "pool-bytes = 1m\nhost-memory-budget = 1g\n", 40) == 40);
  close(fd);
  snprintf(arg, sizeof arg, "--config=%s", conf);
  daemon_start(&d, arg, "--max-bytes-per-uid", "8k", NULL);
  conn = daemon_connect(&d);
  CHECK_ERR(gpushm_buffer_create(conn, "over", 8193, NULL, &b), GPUSHM_E_LIMIT);
  CHECK(strstr(gpushm_last_error_message(), "(limit 8 KiB; gpushmd's administrator may raise "
               "max-bytes-per-uid in gpushmd.conf)") != NULL);
  CHECK_OK(gpushm_buffer_create(conn, "exact", 8192, NULL, &b));
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_unlink(conn, "exact"));
  gpushm_disconnect(conn);
  daemon_stop(&d);
  CHECK(unlink(conf) == 0);
}

/* A daemon started by hand has no fd store to keep persistent buffers in: its stop
 * says how many it drops, and why, where it happens (the start-up line saying so is
 * long gone from the terminal); a stop that drops none says nothing. */
static void test_stop_drops_persistent(void)
{
  char log[] = "/tmp/gpushm-test-log.XXXXXX";
  int fd = mkstemp(log);
  struct test_daemon d = { .log_path = log };
  gpushm_create_opts_t session;
  gpushm_buffer_t *b;
  gpushm_t *conn;

  CHECK(fd >= 0);
  close(fd);
  unsetenv("NOTIFY_SOCKET"); /* make check may run under a service manager */
  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_create(conn, "kept-1", 1 << 20, NULL, &b));
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_buffer_create(conn, "kept-2", 3 << 20, NULL, &b));
  CHECK_OK(gpushm_buffer_close(b));
  /* neither a session buffer nor an unlinked one is the stop's to drop */
  gpushm_create_opts_init(&session);
  session.lifetime = GPUSHM_LIFETIME_SESSION;
  CHECK_OK(gpushm_buffer_create(conn, "session", 4096, &session, &b));
  CHECK_OK(gpushm_buffer_create(conn, "gone", 4096, NULL, &b));
  CHECK_OK(gpushm_unlink(conn, "gone"));
  daemon_stop(&d);
  gpushm_disconnect(conn);
  CHECK(file_contains(log, "warn: stopping drops 2 persistent buffers (4194304 bytes, 4.0 MiB): "
                           "gpushmd was not run by systemd (no NOTIFY_SOCKET of its own), so no "
                           "fd store "
                           "keeps them for the next start"));
  daemon_start(&d, NULL);
  daemon_stop(&d);
  CHECK(file_count_lines(log, "stopping drops") == 1);
  CHECK(unlink(log) == 0);
}

static void test_socket_ownership(const char *out)
{
  struct test_daemon d = { 0 };
  gpushm_t *conn;
  gpushm_buffer_t *buf;
  int status;

  daemon_start(&d, NULL);
  /* a live daemon's socket is not taken over */
  CHECK(daemon_run(out, "--socket", d.socket, NULL) == 1);
  CHECK(file_contains(out, "another gpushmd"));
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_ping(conn));

  /* a crashed daemon leaves its socket: the next one replaces it */
  CHECK_OK(gpushm_buffer_create(conn, "orphan", 4096, NULL, &buf));
  CHECK(kill(d.pid, SIGKILL) == 0);
  CHECK(waitpid(d.pid, &status, 0) == d.pid);
  CHECK(access(d.socket, F_OK) == 0);
  CHECK_ERR(gpushm_ping(conn), GPUSHM_E_DISCONNECTED);
  CHECK_ERR(gpushm_ping(conn), GPUSHM_E_DISCONNECTED); /* and stays so */
  CHECK_ERR(gpushm_buffer_close(buf), GPUSHM_E_DISCONNECTED); /* unmapped all the same */
  gpushm_disconnect(conn);
  daemon_respawn(&d, NULL);
  conn = daemon_connect(&d);
  CHECK_ERR(gpushm_buffer_open(conn, "orphan", 0, &buf), GPUSHM_E_NOENT); /* a new instance */

  /* SIGINT stops it as cleanly as SIGTERM, with a client still holding a buffer */
  CHECK_OK(gpushm_buffer_create(conn, "held", 4096, NULL, &buf));
  CHECK(kill(d.pid, SIGINT) == 0);
  CHECK(waitpid(d.pid, &status, 0) == d.pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(access(d.socket, F_OK) < 0 && errno == ENOENT);
  CHECK_ERR(gpushm_ping(conn), GPUSHM_E_DISCONNECTED);
  CHECK_ERR(gpushm_buffer_close(buf), GPUSHM_E_DISCONNECTED);
  gpushm_disconnect(conn);

  /* something that is not a socket is never removed */
  {
    int fd = open(d.socket, O_CREAT | O_WRONLY, 0600);
    CHECK(fd >= 0);
    close(fd);
    CHECK(daemon_run(out, "--socket", d.socket, NULL) == 1);
    CHECK(file_contains(out, "not a socket"));
    CHECK(access(d.socket, F_OK) == 0);
    CHECK(unlink(d.socket) == 0);
  }
  /* a path too long for sun_path */
  {
    char path[200];
    memset(path, 'p', sizeof path - 1);
    path[0] = '/';
    path[sizeof path - 1] = '\0';
    CHECK(daemon_run(out, "--socket", path, NULL) == 2 && file_contains(out, "at most 107 bytes"));
  }
  CHECK(rmdir(d.dir) == 0);
}

static void write_file(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  fputs(text, f);
  fclose(f);
}

/* The config file: every option is a key; errors name the line; flags win. */
static void test_config(const char *out)
{
  struct test_daemon d = { 0 };
  char conf[] = "/tmp/gpushm-test-conf.XXXXXX", arg[64];
  gpushm_t *c1;
  gpushm_buffer_t *b;
  const gpushm_buffer_info_t *info;
  int fd = mkstemp(conf);

  CHECK(fd >= 0);
  close(fd);
  write_file(conf, "# limits for this host\n\nmax-buffers-per-uid = 5\n  default-mode=0640  \n"
                   "log-level = warn\nmax-bytes-per-uid = 1M\n");
  snprintf(arg, sizeof arg, "--config=%s", conf);
  daemon_start(&d, arg, "--max-buffers-per-uid", "2", NULL); /* the flag beats the file's 5 */
  c1 = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_create(c1, "moded", 1, NULL, &b));
  /* from the file */
  CHECK((info = find_buffer(c1, "moded")) && gpushm_buffer_info_mode(info) == 0640);
  CHECK_ERR(gpushm_buffer_create(c1, "too-big", 2u << 20, NULL, &b), GPUSHM_E_LIMIT);
  CHECK_OK(gpushm_buffer_create(c1, "second", 1, NULL, &b));
  CHECK_ERR(gpushm_buffer_create(c1, "third", 1, NULL, &b), GPUSHM_E_LIMIT);
  gpushm_disconnect(c1);
  daemon_stop(&d);

  write_file(conf, "max-clients = 4\nsocket-mode = 0999\n");
  CHECK(daemon_run(out, arg, NULL) == 2 && file_contains(out, ":2: socket-mode: invalid value"));
  write_file(conf, "default-backend = cuda\n");
  CHECK(daemon_run(out, arg, NULL) == 2 &&
        file_contains(out, ":1: default-backend: invalid value 'cuda' (expected host, cuda-fd, cuda-ipc, cuda-fabric or auto)"));
  write_file(conf, "allow-legacy-ipc = maybe\n");
  CHECK(daemon_run(out, arg, NULL) == 2 && file_contains(out, ":1: allow-legacy-ipc: invalid value"));
  write_file(conf, "max-clients = 4\nmystery-knob = 1\n");
  CHECK(daemon_run(out, arg, NULL) == 2 && file_contains(out, ":2: mystery-knob: unknown setting"));
  write_file(conf, "max-clients 4\n");
  CHECK(daemon_run(out, arg, NULL) == 2 && file_contains(out, ":1: expected 'key = value'"));
  /* odd files: a NUL byte is named as such, not as an over-long line */
  {
    FILE *f = fopen(conf, "w");
    CHECK(f && fwrite("max-clients = 4\nlog-level = info\0debug\n", 1, 40, f) == 40);
    fclose(f);
  }
  CHECK(daemon_run(out, arg, NULL) == 2 && file_contains(out, ":2: NUL byte in the line"));
  {
    char line[2048];
    memset(line, 'x', sizeof line - 2);
    line[sizeof line - 2] = '\n';
    line[sizeof line - 1] = '\0';
    write_file(conf, line);
  }
  CHECK(daemon_run(out, arg, NULL) == 2 && file_contains(out, ":1: line longer than 1024 bytes"));
  unlink(conf);
  /* a directory or a FIFO is not a settings file: refused at once, never read or waited on */
  CHECK(mkdir(conf, 0700) == 0);
  CHECK(daemon_run(out, arg, NULL) == 2 && file_contains(out, "is a directory, not a settings file"));
  CHECK(rmdir(conf) == 0 && mkfifo(conf, 0600) == 0);
  CHECK(daemon_run(out, arg, NULL) == 2 && file_contains(out, "not a regular file"));
  CHECK(unlink(conf) == 0);

  unlink(conf);
  CHECK(daemon_run(out, arg, NULL) == 2 && file_contains(out, "No such file"));
}

static unsigned long cpu_ticks(pid_t pid)
{
  char path[64], text[1024], *p;
  unsigned long utime, stime;
  FILE *f;
  size_t n;

  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  CHECK((f = fopen(path, "r")) != NULL);
  n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  p = strrchr(text, ')'); /* the command name may contain spaces */
  CHECK(p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime,
                    &stime) == 2);
  return utime + stime;
}

/* Out of fds, the daemon must neither spin on the listening socket nor die; it
 * accepts again once fds free up. */
static void test_emfile_backoff(void)
{
  enum { RAW = 40 };
  struct test_daemon d = { .nofile = 32 };
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  int raw[RAW];
  unsigned long before, after;
  gpushm_t *conn;

  if (getenv("GPUSHM_TEST_VALGRIND")) {
    /* valgrind needs fds of its own under the same limit; the back-off logic is
     * exercised by the plain and sanitizer runs */
    test_log("EMFILE back-off not run under valgrind");
    return;
  }
  daemon_start(&d, NULL);
  memcpy(addr.sun_path, d.socket, strlen(d.socket) + 1);
  for (int i = 0; i < RAW; i++) {
    raw[i] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    CHECK(raw[i] >= 0);
    CHECK(connect(raw[i], (struct sockaddr *)&addr, sizeof addr) == 0);
  }
  usleep(200000);
  before = cpu_ticks(d.pid);
  usleep(1000000);
  after = cpu_ticks(d.pid);
  test_log("daemon used %lu ticks in 1 s while out of fds", after - before);
  CHECK(after - before < 20); /* a spinning loop would use ~100 */
  CHECK(kill(d.pid, 0) == 0);
  for (int i = 0; i < RAW; i++)
    close(raw[i]);
  /* The daemon may accept this connection in the same burst as the closed ones, before
   * it has seen them hang up and freed their fds: then this Hello is refused for lack
   * of fds.  Soon after it must be served. */
  conn = NULL;
  for (int i = 0; i < 300 && gpushm_connect(d.socket, "after-emfile", &conn) < 0; i++)
    usleep(10000);
  CHECK(conn != NULL);
  CHECK_OK(gpushm_ping(conn));
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

int main(void)
{
  char out[] = "/tmp/gpushm-test-out.XXXXXX";
  int fd = mkstemp(out);
  CHECK(fd >= 0);
  close(fd);
  test_options(out);
  test_help_columns(out);
  test_size_suffixes();
  test_stop_drops_persistent();
  test_socket_ownership(out);
  test_config(out);
  test_emfile_backoff();
  unlink(out);
  return 0;
}

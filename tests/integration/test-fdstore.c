/* Persistent buffers survive a daemon killed with SIGKILL, through the file-descriptor
 * store protocol of systemd (FDSTORE=1 / FDSTOREREMOVE=1 on NOTIFY_SOCKET, LISTEN_FDS
 * and LISTEN_FDNAMES on the next start), played here by the test itself; signals that
 * would kill a daemon by default do not; SIGHUP reloads the settings all or nothing.
 * tests/system/ runs the same story under a real systemd. */
#include "config.h"
#include "harness.h"
#include "shm_layout.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_STORED 64

static struct test_daemon d;
static char dir[] = "/tmp/gpushm-fdstore.XXXXXX";
static char notify_path[128];
static int notify_sock;
static struct {
  char name[256];
  int fd;
} store[MAX_STORED];
static int n_store, reloading_seen, ready_seen;

static int store_find(const char *prefix)
{
  for (int i = 0; i < n_store; i++)
    if (strncmp(store[i].name, prefix, strlen(prefix)) == 0)
      return i;
  return -1;
}

static void store_remove(const char *name)
{
  for (int i = 0; i < n_store;) {
    if (strcmp(store[i].name, name) == 0) {
      close(store[i].fd);
      store[i] = store[--n_store];
    } else {
      i++;
    }
  }
}

/* One datagram of the notify protocol: newline-separated assignments, fds with it. */
static int service_manager_step(int timeout_ms)
{
  char text[4096], *line, *save, *fdname = NULL;
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * 16)];
  } control;
  struct iovec iov = { text, sizeof text - 1 };
  struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                        .msg_controllen = sizeof control.buf };
  int fds[16], n_fds = 0, store_it = 0, remove_it = 0;
  struct timeval tv = { 0, timeout_ms * 1000 };
  ssize_t n;

  setsockopt(notify_sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if ((n = recvmsg(notify_sock, &msg, MSG_CMSG_CLOEXEC)) < 0)
    return 0;
  text[n] = '\0';
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      n_fds = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      memcpy(fds, CMSG_DATA(c), sizeof(int) * (size_t)n_fds);
    }
  for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (strcmp(line, "FDSTORE=1") == 0)
      store_it = 1;
    else if (strcmp(line, "FDSTOREREMOVE=1") == 0)
      remove_it = 1;
    else if (strncmp(line, "FDNAME=", 7) == 0)
      fdname = line + 7;
    else if (strcmp(line, "RELOADING=1") == 0)
      reloading_seen++;
    else if (strcmp(line, "READY=1") == 0)
      ready_seen++;
  }
  if (store_it) {
    CHECK(fdname != NULL && n_fds == 1 && n_store < MAX_STORED);
    CHECK(strlen(fdname) < 256 && strchr(fdname, ':') == NULL);
    snprintf(store[n_store].name, sizeof store[n_store].name, "%s", fdname);
    store[n_store++].fd = fds[0];
  } else {
    for (int i = 0; i < n_fds; i++)
      close(fds[i]);
  }
  if (remove_it) {
    CHECK(fdname != NULL);
    store_remove(fdname);
  }
  return 1;
}

/* Everything the daemon has said so far (it says it before answering the request that
 * caused it, so a short quiet period means all of it). */
static void drain(void)
{
  while (service_manager_step(100))
    ;
}

static void pass_store(void *arg)
{
  char names[MAX_STORED * 257] = "", count[16], pid[16];
  int high[MAX_STORED];

  (void)arg;
  /* Out of the way first, so that placing fd 3+i never overwrites one still needed. */
  for (int i = 0; i < n_store; i++)
    CHECK((high[i] = fcntl(store[i].fd, F_DUPFD, 100)) >= 0);
  for (int i = 0; i < n_store; i++) {
    CHECK(dup2(high[i], 3 + i) == 3 + i);
    strcat(names, i ? ":" : "");
    strcat(names, store[i].name);
  }
  snprintf(count, sizeof count, "%d", n_store);
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  setenv("LISTEN_FDS", count, 1);
  setenv("LISTEN_FDNAMES", names, 1);
  setenv("LISTEN_PID", pid, 1);
}

static void fill(void *p, size_t n, unsigned char seed)
{
  for (size_t i = 0; i < n; i++)
    ((unsigned char *)p)[i] = (unsigned char)(seed ^ (i * 13));
}

static int intact(const void *p, size_t n, unsigned char seed)
{
  for (size_t i = 0; i < n; i++)
    if (((const unsigned char *)p)[i] != (unsigned char)(seed ^ (i * 13)))
      return 0;
  return 1;
}

static void kill_daemon(void)
{
  int status;
  CHECK(kill(d.pid, SIGKILL) == 0);
  CHECK(waitpid(d.pid, &status, 0) == d.pid && WIFSIGNALED(status));
}

static void test_restart_keeps_persistent_buffers(void)
{
  gpushm_create_opts_t opts;
  gpushm_t *conn, *holder;
  gpushm_buffer_t *keep, *sync, *session, *gone, *held, *b;
  const gpushm_buffer_info_t *before, *after;
  uint32_t owner_uid, owner_gid;
  uint64_t created_unix_ms;
  uint64_t seq, keep_id;
  int pipe_fds[2];

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  gpushm_create_opts_init(&opts);
  opts.mode = 0640;
  CHECK_OK(gpushm_buffer_create(conn, "keep", 3u << 20, &opts, &keep));
  fill(gpushm_buffer_ptr(keep), 3u << 20, 7);
  keep_id = gpushm_buffer_id(keep);
  CHECK((before = find_buffer(conn, "keep")));
  owner_uid = gpushm_buffer_info_owner_uid(before);
  owner_gid = gpushm_buffer_info_owner_gid(before);
  created_unix_ms = gpushm_buffer_info_created_unix_ms(before);
  opts.flags = GPUSHM_CREATE_SYNC;
  CHECK_OK(gpushm_buffer_create(conn, "keep-sync", 4096, &opts, &sync));
  fill(gpushm_buffer_ptr(sync), 4096, 9);
  for (int i = 0; i < 3; i++)
    CHECK_OK(gpushm_buffer_release(sync, NULL, &seq));
  opts.flags = 0;
  opts.lifetime = GPUSHM_LIFETIME_SESSION;
  CHECK_OK(gpushm_buffer_create(conn, "gone-session", 4096, &opts, &session));
  opts.lifetime = GPUSHM_LIFETIME_PERSISTENT;
  CHECK_OK(gpushm_buffer_create(conn, "gone-unlinked", 4096, &opts, &gone));
  CHECK_OK(gpushm_unlink(conn, "gone-unlinked"));
  CHECK_OK(gpushm_buffer_create(conn, "gone-held", 4096, &opts, &held));
  holder = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(holder, "gone-held", GPUSHM_OPEN_READONLY, &b));
  CHECK_OK(gpushm_unlink(conn, "gone-held"));
  drain();
  /* in the store: exactly the linked persistent buffers, and the sync one's control */
  CHECK(n_store == 3);
  CHECK(store_find("gpushm1.m.") >= 0 && store_find("gpushm1.c.") >= 0);
  for (int i = 0; i < n_store; i++)
    CHECK(strstr(store[i].name, "gone") == NULL);

  kill_daemon();
  /* A read-write holder can scribble the control block's header (it maps the block
   * read-write): the next daemon restores it, keeping the sequence, rather than
   * dropping a buffer its writer wanted gone. */
  {
    struct sync_control *ctl = mmap(NULL, SYNC_CONTROL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
                                    store[store_find("gpushm1.c.")].fd, 0);
    CHECK(ctl != MAP_FAILED);
    CHECK(ctl->magic == SYNC_CONTROL_MAGIC && ctl->layout_version == SHM_LAYOUT_VERSION &&
          ctl->layout_size == sizeof *ctl && ctl->release_seq == 3);
    ctl->magic = 0x1234;
    ctl->layout_version = 77;
    ctl->layout_size = 1u << 20;
    munmap(ctl, SYNC_CONTROL_SIZE);
  }
  /* the store also holds what this daemon will not understand */
  CHECK(pipe(pipe_fds) == 0);
  close(pipe_fds[1]);
  snprintf(store[n_store].name, sizeof store[0].name, "gpushm1.m.garbage");
  store[n_store++].fd = pipe_fds[0];
  snprintf(store[n_store].name, sizeof store[0].name, "gpushm1.c.999999");
  CHECK((store[n_store++].fd = dup(store[store_find("gpushm1.c.")].fd)) >= 0);

  daemon_respawn_with(&d, pass_store, NULL, NULL);
  gpushm_buffer_close(b);
  gpushm_disconnect(holder); /* the old daemon's connections are dead anyway */
  gpushm_disconnect(conn);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(conn, "keep", GPUSHM_OPEN_READONLY, &b));
  CHECK(gpushm_buffer_id(b) == keep_id && gpushm_buffer_size(b) == 3u << 20);
  CHECK(intact(gpushm_buffer_ptr(b), 3u << 20, 7));
  CHECK(intact(gpushm_buffer_ptr(keep), 3u << 20, 7)); /* the old mapping: the same memory */
  CHECK_OK(gpushm_buffer_close(b));
  CHECK((after = find_buffer(conn, "keep")));
  CHECK(gpushm_buffer_info_owner_uid(after) == owner_uid &&
        gpushm_buffer_info_owner_gid(after) == owner_gid &&
        gpushm_buffer_info_mode(after) == 0640 &&
        gpushm_buffer_info_created_unix_ms(after) == created_unix_ms &&
        gpushm_buffer_info_lifetime(after) == GPUSHM_LIFETIME_PERSISTENT &&
        gpushm_buffer_info_refs(after) == 0);
  CHECK_OK(gpushm_buffer_open(conn, "keep-sync", 0, &b));
  CHECK(gpushm_buffer_release_seq(b) == 3 && intact(gpushm_buffer_ptr(b), 4096, 9));
  {
    struct sync_control *ctl = mmap(NULL, SYNC_CONTROL_SIZE, PROT_READ, MAP_SHARED,
                                    store[store_find("gpushm1.c.")].fd, 0);
    CHECK(ctl != MAP_FAILED);
    CHECK(ctl->magic == SYNC_CONTROL_MAGIC && ctl->layout_version == SHM_LAYOUT_VERSION &&
          ctl->layout_size == sizeof *ctl);
    munmap(ctl, SYNC_CONTROL_SIZE);
  }
  CHECK_OK(gpushm_buffer_acquire(b, NULL, 3, 1000));
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_ERR(gpushm_buffer_open(conn, "gone-session", 0, &b), GPUSHM_E_NOENT);
  CHECK_ERR(gpushm_buffer_open(conn, "gone-unlinked", 0, &b), GPUSHM_E_NOENT);
  CHECK_ERR(gpushm_buffer_open(conn, "gone-held", 0, &b), GPUSHM_E_NOENT);
  /* ids go on from the highest that came back */
  CHECK_OK(gpushm_buffer_create(conn, "new", 4096, NULL, &b));
  CHECK(gpushm_buffer_id(b) > keep_id);
  CHECK_OK(gpushm_buffer_close(b));
  drain();
  /* the records it could not use were dropped from the store */
  CHECK(store_find("gpushm1.m.garbage") < 0 && store_find("gpushm1.c.999999") < 0);
  CHECK(n_store == 4);
  /* unlinking withdraws */
  CHECK_OK(gpushm_unlink(conn, "keep"));
  drain();
  CHECK(n_store == 3);
  CHECK_OK(gpushm_unlink(conn, "new"));
  drain();
  CHECK(n_store == 2);
  /* a clean stop leaves the rest for the next daemon */
  gpushm_disconnect(conn);
  CHECK(kill(d.pid, SIGTERM) == 0);
  CHECK(waitpid(d.pid, NULL, 0) == d.pid);
  drain();
  CHECK(n_store == 2);
  gpushm_buffer_close(keep);
  gpushm_buffer_close(sync);
  gpushm_buffer_close(session);
  gpushm_buffer_close(gone);
  gpushm_buffer_close(held);
  while (n_store)
    store_remove(store[0].name);
  rmdir(d.dir);
}

/* The store's capacity (systemd >= 254 says it in $FDSTORE) is crossed: buffers beyond
 * it still work, they are only not deposited, and a freed place is used again. */
static void test_store_capacity(void)
{
  gpushm_t *conn;
  gpushm_buffer_t *b[4];
  char name[16];

  setenv("FDSTORE", "2", 1);
  daemon_start(&d, NULL);
  unsetenv("FDSTORE");
  conn = daemon_connect(&d);
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof name, "cap-%d", i);
    CHECK_OK(gpushm_buffer_create(conn, name, 4096, NULL, &b[i]));
  }
  drain();
  CHECK(n_store == 2 && store_find("gpushm1.m.") >= 0);
  for (int i = 0; i < n_store; i++)
    CHECK(strstr(store[i].name, "cap-2") == NULL);
  CHECK_OK(gpushm_unlink(conn, "cap-0"));
  CHECK_OK(gpushm_buffer_create(conn, "cap-3", 4096, NULL, &b[3]));
  drain();
  CHECK(n_store == 2);
  for (int i = 0; i < 4; i++)
    CHECK_OK(gpushm_buffer_close(b[i]));
  gpushm_disconnect(conn);
  daemon_stop(&d);
  while (n_store)
    store_remove(store[0].name);
}

static void write_file(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  fputs(text, f);
  fclose(f);
}

static void test_signals_and_reload(void)
{
  char conf[200], arg[220], log[200];
  gpushm_t *conn;
  gpushm_buffer_t *b[4];
  const int harmless[] = { SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGPWR };

  snprintf(conf, sizeof conf, "%s/gpushmd.conf", dir);
  snprintf(arg, sizeof arg, "--config=%s", conf);
  write_file(conf, "max-buffers-per-uid = 1\n");
  daemon_start(&d, arg, NULL);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_create(conn, "one", 4096, NULL, &b[0]));
  CHECK_ERR(gpushm_buffer_create(conn, "two", 4096, NULL, &b[1]), GPUSHM_E_LIMIT);
  for (size_t i = 0; i < sizeof harmless / sizeof harmless[0]; i++)
    CHECK(kill(d.pid, harmless[i]) == 0);
  CHECK_OK(gpushm_ping(conn));
  CHECK(waitpid(d.pid, NULL, WNOHANG) == 0);

  drain();
  reloading_seen = ready_seen = 0;
  write_file(conf, "max-buffers-per-uid = 3\n");
  CHECK(kill(d.pid, SIGHUP) == 0);
  drain();
  CHECK(reloading_seen == 1 && ready_seen == 1);
  CHECK_OK(gpushm_buffer_create(conn, "two", 4096, NULL, &b[1]));
  CHECK_OK(gpushm_buffer_create(conn, "three", 4096, NULL, &b[2]));
  /* a bad file changes nothing, not even the settings before the bad line */
  write_file(conf, "max-buffers-per-uid = 9\nmax-clients = lots\n");
  CHECK(kill(d.pid, SIGHUP) == 0);
  drain();
  CHECK_ERR(gpushm_buffer_create(conn, "four", 4096, NULL, &b[3]), GPUSHM_E_LIMIT);
  CHECK(strstr(gpushm_last_error_message(), "limit 3") != NULL);
  CHECK(waitpid(d.pid, NULL, WNOHANG) == 0);
  for (int i = 0; i < 3; i++)
    CHECK_OK(gpushm_buffer_close(b[i]));
  gpushm_disconnect(conn);
  daemon_stop(&d);
  while (n_store)
    store_remove(store[0].name);
  unlink(conf);
  (void)log;
}

int main(void)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };

  CHECK(mkdtemp(dir) != NULL);
  snprintf(notify_path, sizeof notify_path, "%s/notify", dir);
  memcpy(addr.sun_path, notify_path, strlen(notify_path) + 1);
  notify_sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  CHECK(notify_sock >= 0 && bind(notify_sock, (struct sockaddr *)&addr, sizeof addr) == 0);
  /* The daemons inherit it; the test's own libgpushm never looks at it. */
  setenv("NOTIFY_SOCKET", notify_path, 1);
  test_restart_keeps_persistent_buffers();
  test_store_capacity();
  test_signals_and_reload();
  close(notify_sock);
  unlink(notify_path);
  rmdir(dir);
  return 0;
}

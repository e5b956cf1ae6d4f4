/* SPDX-License-Identifier: MIT */
/* What a hostile local user (uid 65534) tries against gpushmd, and why each attempt now
 * fails: widening read-only fds, writing the shared status page or a sync buffer's
 * control block, squatting names, probing buffers it may not see, pinning others'
 * quota, and impostor servers.  Needs root to act as another uid; skips otherwise. */
#include "config.h"
#include "harness.h"
#include "raw.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define NOBODY 65534
#define SIZE (1u << 20)

static struct test_daemon d;

static void fill(void *p, size_t n, unsigned char seed)
{
  for (size_t i = 0; i < n; i++)
    ((unsigned char *)p)[i] = (unsigned char)(seed + i * 7);
}

static int intact(const void *p, size_t n, unsigned char seed)
{
  for (size_t i = 0; i < n; i++)
    if (((const unsigned char *)p)[i] != (unsigned char)(seed + i * 7))
      return 0;
  return 1;
}

#define EXPECT_ERRNO(call, err)                                                        \
  do {                                                                               \
    errno = 0;                                                                       \
    long r_ = (long)(call);                                                          \
    if (r_ != -1 || errno != (err)) {                                                \
      fprintf(stderr, "%s:%d: %s = %ld (%s), expected errno %s\n", __FILE__, __LINE__, \
              #call, r_, strerror(errno), #err);                                     \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

/* Everything a receiver of a read-only fd could try to write through it. */
static void attack_readonly_fd(int fd)
{
  char path[64];
  void *p;

  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  EXPECT_ERRNO(open(path, O_RDWR), EACCES);
  EXPECT_ERRNO(open(path, O_WRONLY), EACCES);
  CHECK(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED &&
        errno == EACCES);
  p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
  CHECK(p != MAP_FAILED);
  EXPECT_ERRNO(mprotect(p, 4096, PROT_READ | PROT_WRITE), EACCES);
  munmap(p, 4096);
  EXPECT_ERRNO(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096), EBADF);
  CHECK(ftruncate(fd, 0) == -1);
  EXPECT_ERRNO(write(fd, "x", 1), EBADF);
  EXPECT_ERRNO(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), EPERM);
  EXPECT_ERRNO(fchmod(fd, 0666), EPERM);
}

/* A read-write holder still cannot resize, re-seal or re-mode the object. */
static void attack_readwrite_fd(int fd)
{
  char path[64];

  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  EXPECT_ERRNO(ftruncate(fd, 0), EPERM);
  EXPECT_ERRNO(ftruncate(fd, 2 * SIZE), EPERM);
  EXPECT_ERRNO(fallocate(fd, 0, 0, 4 * SIZE), EPERM);
  EXPECT_ERRNO(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), EPERM);
  EXPECT_ERRNO(fchmod(fd, 0666), EPERM);
  EXPECT_ERRNO(open(path, O_RDONLY), EACCES);
}

static void close_all(int *fds, unsigned n)
{
  for (unsigned i = 0; i < n; i++)
    close(fds[i]);
}

/* Items 1, 2 and 12: read-only fds of buffers, the status page and control blocks. */
static void nobody_attacks_fds(void)
{
  int fds[GPUSHM_LIMIT_FDS_PER_FRAME], status_fd, sock = raw_connect(d.socket);
  unsigned n;
  gpushm_t *conn;
  gpushm_buffer_t *b;
  uint64_t seq;

  CHECK(raw_hello(sock, "attacker", &status_fd) == 0);
  attack_readonly_fd(status_fd);
  close(status_fd);

  CHECK(raw_open(sock, "ro-target", 1, fds, &n) == 0 && n == 1);
  attack_readonly_fd(fds[0]);
  close_all(fds, n);
  CHECK(raw_open(sock, "rw-target", 0, fds, &n) == 0 && n == 1);
  attack_readwrite_fd(fds[0]);
  close_all(fds, n);
  /* a read-only open of a sync buffer: its memory, then its control block */
  CHECK(raw_open(sock, "sync-target", 1, fds, &n) == 0 && n == 2);
  attack_readonly_fd(fds[0]);
  attack_readonly_fd(fds[1]);
  close_all(fds, n);
  close(sock);

  /* The library's mappings refuse to become writable as well. */
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(conn, "ro-target", GPUSHM_OPEN_READONLY, &b));
  EXPECT_ERRNO(mprotect(gpushm_buffer_ptr(b), 4096, PROT_READ | PROT_WRITE), EACCES);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_buffer_open(conn, "sync-target", GPUSHM_OPEN_READONLY, &b));
  CHECK(gpushm_buffer_release_seq(b) == 5);
  CHECK_ERR(gpushm_buffer_release(b, NULL, &seq), GPUSHM_E_PERM);
  CHECK(gpushm_buffer_release_seq(b) == 5);
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
}

static void test_fds(gpushm_t *conn)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *ro, *rw, *sync;
  uint64_t seq;
  pid_t pid;

  gpushm_create_opts_init(&opts);
  opts.mode = 0644;
  CHECK_OK(gpushm_buffer_create(conn, "ro-target", SIZE, &opts, &ro));
  fill(gpushm_buffer_ptr(ro), SIZE, 1);
  opts.mode = 0666;
  CHECK_OK(gpushm_buffer_create(conn, "rw-target", SIZE, &opts, &rw));
  fill(gpushm_buffer_ptr(rw), SIZE, 3);
  opts.mode = 0644;
  opts.flags = GPUSHM_CREATE_SYNC;
  CHECK_OK(gpushm_buffer_create(conn, "sync-target", SIZE, &opts, &sync));
  fill(gpushm_buffer_ptr(sync), SIZE, 2);
  for (int i = 0; i < 5; i++)
    CHECK_OK(gpushm_buffer_release(sync, NULL, &seq));

  if ((pid = fork_as(NOBODY, NOBODY)) == 0) {
    nobody_attacks_fds();
    _exit(0);
  }
  check_child(pid);
  /* nothing was written, punched or resized */
  CHECK(intact(gpushm_buffer_ptr(ro), SIZE, 1));
  CHECK(intact(gpushm_buffer_ptr(rw), SIZE, 3));
  CHECK(intact(gpushm_buffer_ptr(sync), SIZE, 2));
  CHECK(gpushm_buffer_release_seq(sync) == 5);
  CHECK_OK(gpushm_buffer_close(ro));
  CHECK_OK(gpushm_buffer_close(rw));
  CHECK_OK(gpushm_buffer_close(sync));
}

/* Item 5: a squatter's buffer is not joined by open-or-create. */
static void test_squatting(gpushm_t *conn)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b, *again;
  uint32_t uid, gid;
  pid_t pid;

  if ((pid = fork_as(NOBODY, NOBODY)) == 0) {
    gpushm_t *mine = daemon_connect(&d);
    gpushm_create_opts_init(&opts);
    opts.mode = 0666;
    CHECK_OK(gpushm_buffer_create(mine, "frames", SIZE, &opts, &b));
    strcpy(gpushm_buffer_ptr(b), "planted by the squatter");
    CHECK_OK(gpushm_buffer_close(b));
    gpushm_disconnect(mine);
    _exit(0);
  }
  check_child(pid);
  gpushm_create_opts_init(&opts);
  opts.flags = GPUSHM_CREATE_OPEN_EXISTING;
  CHECK_ERR(gpushm_buffer_create(conn, "frames", SIZE, &opts, &b), GPUSHM_E_EXIST);
  CHECK(strstr(gpushm_last_error_message(), "belongs to another user") != NULL);
  /* opening by name is the explicit way, and the owner can be checked */
  CHECK_OK(gpushm_buffer_open(conn, "frames", GPUSHM_OPEN_READONLY, &b));
  CHECK_OK(gpushm_buffer_owner(b, &uid, &gid));
  CHECK(uid == NOBODY && gid == NOBODY);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_unlink(conn, "frames"));
  /* one's own buffer is still joined */
  CHECK_OK(gpushm_buffer_create(conn, "own-frames", SIZE, &opts, &b));
  CHECK_OK(gpushm_buffer_create(conn, "own-frames", SIZE, &opts, &again));
  CHECK(again == b);
  CHECK_OK(gpushm_buffer_owner(b, &uid, NULL));
  CHECK(uid == 0);
  CHECK_OK(gpushm_buffer_close(again));
  CHECK_OK(gpushm_unlink(conn, "own-frames"));
  CHECK_OK(gpushm_buffer_close(b));
}

/* Item 7: what may not be seen is answered exactly like what does not exist. */
static void nobody_probes(uint64_t hidden_id, uint64_t unused_id)
{
  gpushm_t *conn = daemon_connect(&d);
  gpushm_buffer_t *b;
  gpushm_event_t *ev;
  char missing[256], expected[256];

  /* told that it may not see everything, in the same words either way */
  CHECK_ERR(gpushm_buffer_open(conn, "hidden", GPUSHM_OPEN_READONLY, &b), GPUSHM_E_NOENT);
  snprintf(expected, sizeof expected, "no buffer named 'hidden' that uid %d may open (one whose "
           "owner and mode keep it from uid %d is not shown either)", NOBODY, NOBODY);
  CHECK(strcmp(gpushm_last_error_message(), expected) == 0);
  CHECK_ERR(gpushm_buffer_open(conn, "absent", GPUSHM_OPEN_READONLY, &b), GPUSHM_E_NOENT);
  snprintf(missing, sizeof missing, "no buffer named 'absent' that uid %d may open (one whose "
           "owner and mode keep it from uid %d is not shown either)", NOBODY, NOBODY);
  CHECK(strcmp(gpushm_last_error_message(), missing) == 0);
  CHECK_ERR(gpushm_buffer_open_id(conn, hidden_id, GPUSHM_OPEN_READONLY, &b), GPUSHM_E_NOENT);
  snprintf(expected, sizeof expected, "no buffer with id %llu", (unsigned long long)hidden_id);
  CHECK(strcmp(gpushm_last_error_message(), expected) == 0);
  CHECK_ERR(gpushm_buffer_open_id(conn, unused_id, GPUSHM_OPEN_READONLY, &b), GPUSHM_E_NOENT);
  snprintf(missing, sizeof missing, "no buffer with id %llu", (unsigned long long)unused_id);
  CHECK(strcmp(gpushm_last_error_message(), missing) == 0);
  /* the kind is not given away either */
  CHECK_ERR(gpushm_event_open(conn, "hidden", &ev), GPUSHM_E_NOENT);
  CHECK_ERR(gpushm_unlink(conn, "hidden"), GPUSHM_E_NOENT);
  CHECK(strcmp(gpushm_last_error_message(), "no buffer named 'hidden'") == 0);
  /* a global name's existence cannot be hidden from a create, but nothing more */
  CHECK_ERR(gpushm_buffer_create(conn, "hidden", 4096, NULL, &b), GPUSHM_E_EXIST);
  CHECK(strcmp(gpushm_last_error_message(), "'hidden' already exists") == 0);
  gpushm_disconnect(conn);
}

static void test_info_leak(gpushm_t *conn)
{
  gpushm_buffer_t *b;
  pid_t pid;
  uint64_t id;

  CHECK_OK(gpushm_buffer_create(conn, "hidden", 4096, NULL, &b)); /* 0600 */
  id = gpushm_buffer_id(b);
  if ((pid = fork_as(NOBODY, NOBODY)) == 0) {
    nobody_probes(id, id + 1000000);
    _exit(0);
  }
  check_child(pid);
  CHECK_OK(gpushm_unlink(conn, "hidden"));
  CHECK_OK(gpushm_buffer_close(b));
}

/* Item 8: an unlinked buffer counts against those who still hold it. */
static void test_pinning(void)
{
  struct test_daemon q = { 0 };
  gpushm_create_opts_t opts;
  static gpushm_t *conn; /* reachable in forked children too (valgrind) */
  gpushm_buffer_t *pinned, *b;
  pid_t pid;

  daemon_start(&q, "--max-bytes-per-uid", "8M", NULL);
  conn = daemon_connect(&q);
  if ((pid = fork_as(NOBODY, NOBODY)) == 0) {
    gpushm_t *mine = daemon_connect(&q);
    gpushm_create_opts_init(&opts);
    opts.mode = 0644;
    CHECK_OK(gpushm_buffer_create(mine, "pinned", 6u << 20, &opts, &b));
    CHECK_OK(gpushm_buffer_close(b));
    gpushm_disconnect(mine);
    _exit(0);
  }
  check_child(pid);
  CHECK_OK(gpushm_buffer_open(conn, "pinned", GPUSHM_OPEN_READONLY, &pinned));
  if ((pid = fork_as(NOBODY, NOBODY)) == 0) {
    gpushm_t *mine = daemon_connect(&q);
    CHECK_OK(gpushm_unlink(mine, "pinned"));
    /* the owner's quota is free again although the reader pins the memory */
    CHECK_OK(gpushm_buffer_create(mine, "again", 6u << 20, NULL, &b));
    CHECK_OK(gpushm_buffer_close(b));
    CHECK_OK(gpushm_unlink(mine, "again"));
    gpushm_disconnect(mine);
    _exit(0);
  }
  check_child(pid);
  /* the pinning reader pays: 6 MiB held + 4 MiB asked > 8 MiB */
  CHECK_ERR(gpushm_buffer_create(conn, "mine", 4u << 20, NULL, &b), GPUSHM_E_LIMIT);
  CHECK(strstr(gpushm_last_error_message(), "uid 0 would hold") != NULL);
  CHECK_OK(gpushm_buffer_close(pinned));
  CHECK_OK(gpushm_buffer_create(conn, "mine", 4u << 20, NULL, &b));
  CHECK_OK(gpushm_unlink(conn, "mine"));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  daemon_stop(&q);
}

/* Opens name read-only over a raw connection and keeps the fd it was sent; with
 * send_close, gives the reference back properly first (else the connection just ends).
 * Reports 'r', waits for the owner to free the buffer, then checks what the fd holds. */
static void keep_fd_past_close(const char *name, bool send_close, int ready, int go)
{
  int fds[GPUSHM_LIMIT_FDS_PER_FRAME], status_fd, sock = raw_connect(d.socket);
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__CloseRequest close_req = GPUSHM__CLOSE_REQUEST__INIT;
  Gpushm__Reply *reply;
  const unsigned char *p;
  struct stat st;
  unsigned n;
  char c;

  CHECK(raw_hello(sock, "keeper", &status_fd) == 0);
  close(status_fd);
  req.body_case = GPUSHM__REQUEST__BODY_OPEN;
  {
    Gpushm__OpenRequest open = GPUSHM__OPEN_REQUEST__INIT;
    open.key_case = GPUSHM__OPEN_REQUEST__KEY_NAME;
    open.name = (char *)name;
    open.read_only = 1;
    req.open = &open;
    CHECK((reply = raw_call(sock, &req, fds, &n)) != NULL && reply->status == 0 && n == 1);
    close_req.id = reply->open->info->id;
    gpushm__reply__free_unpacked(reply, NULL);
  }
  p = mmap(NULL, SIZE, PROT_READ, MAP_SHARED, fds[0], 0);
  CHECK(p != MAP_FAILED && intact(p, SIZE, 0x4b));
  if (send_close) {
    int none[GPUSHM_LIMIT_FDS_PER_FRAME]; /* a close's reply carries none */
    close_req.read_only = 1;
    req.body_case = GPUSHM__REQUEST__BODY_CLOSE;
    req.close = &close_req;
    CHECK((reply = raw_call(sock, &req, none, &n)) != NULL && reply->status == 0 && n == 0);
    gpushm__reply__free_unpacked(reply, NULL);
  }
  close(sock);
  CHECK(write(ready, "r", 1) == 1);
  CHECK(read(go, &c, 1) == 1);
  CHECK(fstat(fds[0], &st) == 0);
  CHECK(st.st_blocks == 0);                /* no pages left to charge to anyone */
  CHECK(p[0] == 0 && p[SIZE - 1] == 0);    /* nor any of the owner's data */
  munmap((void *)p, SIZE);
  close(fds[0]);
}

static int only_owner_holds(const struct test_daemon *daemon, void *name)
{
  gpushm_t *c = daemon_connect(daemon);
  const gpushm_buffer_info_t *b = find_buffer(c, name);
  int one = b && gpushm_buffer_info_refs(b) == 1;
  gpushm_disconnect(c);
  return one;
}

/* Issue 29, item 1: uid 65534 keeps the fd of another user's host buffer past its close
 * (or past its connection) and waits for the owner to free it.  Its pages used to stay
 * allocated, charged to gpushmd's cgroup outside its budget, until gpushmd was
 * OOM-killed; now they are taken back as the buffer is freed. */
static void test_kept_fd(gpushm_t *conn)
{
  for (int send_close = 0; send_close < 2; send_close++) {
    gpushm_create_opts_t opts;
    gpushm_buffer_t *b;
    int ready[2], go[2];
    pid_t pid;
    char c;

    gpushm_create_opts_init(&opts);
    opts.backend = GPUSHM_BACKEND_HOST;
    opts.mode = 0644;
    CHECK_OK(gpushm_buffer_create(conn, "kept", SIZE * 2, &opts, &b)); /* past the carve limit */
    fill(gpushm_buffer_ptr(b), SIZE, 0x4b);
    CHECK(pipe(ready) == 0 && pipe(go) == 0);
    if ((pid = fork_as(NOBODY, NOBODY)) == 0) {
      keep_fd_past_close("kept", send_close, ready[1], go[0]);
      _exit(0);
    }
    CHECK(read(ready[0], &c, 1) == 1);
    /* once the daemon has seen the keeper's close (or end), the owner's is the last */
    CHECK(wait_until(only_owner_holds, &d, (void *)"kept"));
    CHECK_OK(gpushm_unlink(conn, "kept"));
    CHECK_OK(gpushm_buffer_close(b));
    CHECK_OK(gpushm_ping(conn)); /* the close may be one-way: answered in order after it */
    CHECK(write(go[1], "g", 1) == 1);
    check_child(pid);
    close(ready[0]), close(ready[1]), close(go[0]), close(go[1]);
  }
  test_log("host memory whose fd uid 65534 kept past its close, or past its connection, "
           "holds no pages once freed");
}

static uint32_t own_client_id(gpushm_t *conn)
{
  gpushm_client_list_t *clients;
  uint32_t id = 0;

  /* A fresh connection has the highest id among this process's. */
  CHECK_OK(gpushm_clients(conn, &clients));
  for (size_t i = 0; i < gpushm_client_list_count(clients); i++) {
    const gpushm_client_info_t *c = gpushm_client_list_get(clients, i);
    if (gpushm_client_info_pid(c) == (uint32_t)getpid() && gpushm_client_info_client_id(c) > id)
      id = gpushm_client_info_client_id(c);
  }
  gpushm_client_list_free(clients);
  CHECK(id != 0);
  return id;
}

/* Item 8: an admin ends a holder's connection; users cannot end others'. */
static void test_disconnect(gpushm_t *conn)
{
  int to_parent[2], to_child[2];
  gpushm_create_opts_t opts;
  gpushm_buffer_t *shared;
  const gpushm_buffer_info_t *info;
  uint32_t victim, root_client = own_client_id(conn);
  pid_t pid;
  char go;

  gpushm_create_opts_init(&opts);
  opts.mode = 0644;
  CHECK_OK(gpushm_buffer_create(conn, "shared", SIZE, &opts, &shared));
  CHECK(pipe(to_parent) == 0 && pipe(to_child) == 0);
  if ((pid = fork_as(NOBODY, NOBODY)) == 0) {
    gpushm_t *mine = daemon_connect(&d), *other = daemon_connect(&d);
    gpushm_buffer_t *b;
    uint32_t id;
    CHECK_OK(gpushm_buffer_open(mine, "shared", GPUSHM_OPEN_READONLY, &b));
    /* another uid's client is as good as absent; one's own may be ended */
    CHECK_ERR(gpushm_client_disconnect(mine, root_client), GPUSHM_E_NOENT);
    id = own_client_id(other);
    CHECK_OK(gpushm_client_disconnect(mine, id));
    CHECK_ERR(gpushm_ping(other), GPUSHM_E_DISCONNECTED);
    id = own_client_id(mine);
    CHECK(write(to_parent[1], &id, sizeof id) == sizeof id);
    CHECK(read(to_child[0], &go, 1) == 1);
    CHECK_ERR(gpushm_ping(mine), GPUSHM_E_DISCONNECTED);
    CHECK(strstr(gpushm_last_error_message(), "disconnected by uid 0") != NULL);
    /* what it had mapped stays readable */
    CHECK(intact(gpushm_buffer_ptr(b), SIZE, 4));
    gpushm_buffer_close(b);
    gpushm_disconnect(other);
    gpushm_disconnect(mine);
    _exit(0);
  }
  fill(gpushm_buffer_ptr(shared), SIZE, 4);
  CHECK(read(to_parent[0], &victim, sizeof victim) == sizeof victim);
  CHECK((info = find_buffer(conn, "shared")) && gpushm_buffer_info_refs(info) == 2);
  CHECK_OK(gpushm_client_disconnect(conn, victim));
  CHECK((info = find_buffer(conn, "shared")) && gpushm_buffer_info_refs(info) == 1);
  CHECK_ERR(gpushm_client_disconnect(conn, victim), GPUSHM_E_NOENT);
  CHECK(write(to_child[1], "g", 1) == 1);
  check_child(pid);
  CHECK_OK(gpushm_unlink(conn, "shared"));
  CHECK_OK(gpushm_buffer_close(shared));
}

/* Item 6, client side: a server run by another user is refused before anything is
 * sent to it. */
static void test_impostor_server(void)
{
  char dir[] = "/tmp/gpushm-impostor.XXXXXX", path[128];
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  int ready[2];
  gpushm_t *conn;
  pid_t pid;
  char c;

  CHECK(mkdtemp(dir) != NULL && chown(dir, NOBODY, NOBODY) == 0);
  snprintf(path, sizeof path, "%s/gpushmd.sock", dir);
  CHECK(pipe(ready) == 0);
  if ((pid = fork_as(NOBODY, NOBODY)) == 0) {
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0), client;
    memcpy(addr.sun_path, path, strlen(path) + 1);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0 && listen(fd, 4) == 0);
    chmod(path, 0666);
    CHECK(write(ready[1], "r", 1) == 1);
    /* hangs up on whoever trusts it enough to say hello */
    for (int i = 0; i < 2; i++)
      if ((client = accept(fd, NULL, NULL)) >= 0)
        close(client);
    _exit(0);
  }
  CHECK(read(ready[0], &c, 1) == 1);
  CHECK_ERR(gpushm_connect(path, "victim", &conn), GPUSHM_E_PERM);
  CHECK(strstr(gpushm_last_error_message(), "runs as uid 65534") != NULL);
  /* trusting that uid explicitly gets past the check (and to the impostor's hang-up) */
  setenv("GPUSHM_DAEMON_UID", "65534", 1);
  CHECK_ERR(gpushm_connect(path, "victim", &conn), GPUSHM_E_DISCONNECTED);
  unsetenv("GPUSHM_DAEMON_UID");
  check_child(pid);
  unlink(path);
  rmdir(dir);
}

/* Item 6, daemon side: socket directories others could replace are refused. */
static void test_unsafe_socket_dirs(void)
{
  char base[] = "/tmp/gpushm-dirs.XXXXXX", dir[200], sock[300], out[250];

  CHECK(mkdtemp(base) != NULL);
  snprintf(out, sizeof out, "%s/out", base);
  snprintf(dir, sizeof dir, "%s/nobodys", base);
  CHECK(mkdir(dir, 0755) == 0 && chown(dir, NOBODY, NOBODY) == 0);
  snprintf(sock, sizeof sock, "%s/gpushmd.sock", dir);
  CHECK(daemon_run(out, "--socket", sock, NULL) == 1);
  CHECK(file_contains(out, "belongs to uid 65534"));
  CHECK(access(sock, F_OK) < 0);

  snprintf(dir, sizeof dir, "%s/open", base);
  CHECK(mkdir(dir, 0755) == 0 && chmod(dir, 01777) == 0);
  snprintf(sock, sizeof sock, "%s/gpushmd.sock", dir);
  CHECK(daemon_run(out, "--socket", sock, NULL) == 1);
  CHECK(file_contains(out, "is writable by everyone"));

  snprintf(dir, sizeof dir, "%s/group", base);
  CHECK(mkdir(dir, 0755) == 0 && chmod(dir, 0775) == 0);
  snprintf(sock, sizeof sock, "%s/gpushmd.sock", dir);
  CHECK(daemon_run(out, "--socket", sock, NULL) == 1);
  CHECK(file_contains(out, "is writable by its group"));

  /* a symlink someone else owns, even to a safe directory */
  snprintf(dir, sizeof dir, "%s/safe", base);
  CHECK(mkdir(dir, 0755) == 0);
  snprintf(sock, sizeof sock, "%s/link", base);
  CHECK(symlink(dir, sock) == 0 && lchown(sock, NOBODY, NOBODY) == 0);
  snprintf(sock, sizeof sock, "%s/link/gpushmd.sock", base);
  CHECK(daemon_run(out, "--socket", sock, NULL) == 1);
  CHECK(file_contains(out, "symlink"));
  CHECK(file_contains(out, "belongs to uid 65534"));

  /* issue 29, item 5: the directories a path lacks are made only once the way to them
   * is checked: through someone else's link into a root-only directory, nothing is
   * created there */
  snprintf(dir, sizeof dir, "%s/rootonly", base);
  CHECK(mkdir(dir, 0700) == 0);
  snprintf(sock, sizeof sock, "%s/trap", base);
  CHECK(symlink(dir, sock) == 0 && lchown(sock, NOBODY, NOBODY) == 0);
  snprintf(sock, sizeof sock, "%s/trap/made/here/gpushmd.sock", base);
  CHECK(daemon_run(out, "--socket", sock, NULL) == 1);
  CHECK(file_contains(out, "symlink") && file_contains(out, "belongs to uid 65534"));
  snprintf(sock, sizeof sock, "%s/made", dir);
  CHECK(access(sock, F_OK) < 0 && errno == ENOENT);
  /* and a missing directory in a directory someone else owns is not made either */
  snprintf(sock, sizeof sock, "%s/nobodys/made/gpushmd.sock", base);
  CHECK(daemon_run(out, "--socket", sock, NULL) == 1);
  CHECK(file_contains(out, "belongs to uid 65534"));
  snprintf(sock, sizeof sock, "%s/nobodys/made", base);
  CHECK(access(sock, F_OK) < 0 && errno == ENOENT);
  /* a good path: what is missing is made */
  snprintf(sock, sizeof sock, "%s/safe/a/b/gpushmd.sock", base);
  {
    struct test_daemon q = { 0 };
    snprintf(q.dir, sizeof q.dir, "%s/safe/a/b", base);
    snprintf(q.socket, sizeof q.socket, "%s", sock);
    daemon_respawn(&q, NULL); /* on q.socket: serves there once it is made */
    daemon_stop(&q);
  }

  snprintf(sock, sizeof sock, "rm -rf %s", base);
  CHECK(system(sock) == 0);
}

/* File scope: forked children must still see it as reachable (valgrind's leak check
 * runs in them too). */
static gpushm_t *root_conn;

int main(void)
{
  if (geteuid() != 0) {
    test_log("needs root to act as uid 65534; skipping");
    return TEST_SKIP;
  }
  daemon_start(&d, NULL);
  root_conn = daemon_connect(&d);
  test_fds(root_conn);
  test_squatting(root_conn);
  test_info_leak(root_conn);
  test_disconnect(root_conn);
  test_kept_fd(root_conn);
  gpushm_disconnect(root_conn);
  daemon_stop(&d);
  test_pinning();
  test_impostor_server();
  test_unsafe_socket_dirs();
  return 0;
}

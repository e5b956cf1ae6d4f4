/* SPDX-License-Identifier: MIT */
/* Persistent cuda-fd buffers survive gpushmd killed with SIGKILL: each one's exported fd
 * waits in systemd's fd store (played by this test over NOTIFY_SOCKET, tests/fdstore.c)
 * and the next daemon imports it again on the device with the recorded UUID.  Data are
 * checked on the device (cuMemcpyDtoH): a buffer a consumer process maps through the
 * kill, and writes while no daemon runs; one nobody maps, kept by the store's fd alone.
 * Then ids, owners, modes (another uid reads the 0644 one and is refused the 0600 one),
 * unlink withdrawing the record; a record whose import fails dropped with a log line
 * while the rest are served; and with the fake driver a device that is gone and one
 * whose ordinal changed.  Consumers are separate processes started with exec.  Skips (77)
 * where there is no CUDA driver or device; tests/gpu/test-cuda-persist-fake.sh runs it
 * against the fake driver. */
#include "config.h"
#include "cuda-test.h"
#include "fdstore.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1ull << 20)
#define CHUNK (16 * MiB)

static struct test_daemon d;
static const char *self;
static int fake;
static char dir[] = "/tmp/gpushm-persist.XXXXXX";
static char daemon_log[200];


/* --- roles run in child processes (exec'ed) ------------------------------------ */

/* Maps a buffer, checks it and says 'r' on fd argv[4]; told (a byte on fd argv[5]),
 * overwrites it through that mapping with seed argv[6] (no daemon runs by then) and
 * says 'w'; told again, ends. */
static int role_holder(char **argv)
{
  int ready = atoi(argv[4]), go = atoi(argv[5]);
  gpushm_t *conn;
  gpushm_buffer_t *b;
  char c;

  cuda_test_setup(0);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(conn, argv[2], 0, &b));
  CHECK(cuda_test_verify(cuda_test_dptr(b), gpushm_buffer_size(b), (uint32_t)strtoul(argv[3], NULL, 0)));
  CHECK(write(ready, "r", 1) == 1);
  CHECK(read(go, &c, 1) == 1);
  cuda_test_fill(cuda_test_dptr(b), gpushm_buffer_size(b), (uint32_t)strtoul(argv[6], NULL, 0));
  CHECK(write(ready, "w", 1) == 1);
  CHECK(read(go, &c, 1) == 1);
  /* unmaps; the release goes to a daemon that is gone, which is not this test's point */
  gpushm_buffer_close(b);
  gpushm_disconnect(conn);
  return 0;
}

/* Becomes uid 65534 after exec, where the test binary's directory need not be open to
 * it; what must be loaded first (the driver) is loaded before. */
static void become_nobody(void)
{
  CHECK(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(65534) == 0);
}

/* As another uid: opens read-only and checks every word.  The library loads its driver
 * on its first import, so one open as root comes first, on a connection of its own. */
static int role_readonly_consumer(char **argv)
{
  gpushm_t *conn;
  gpushm_buffer_t *b;

  cuda_test_setup(0);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(conn, argv[2], GPUSHM_OPEN_READONLY, &b));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  become_nobody();
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(conn, argv[2], GPUSHM_OPEN_READONLY, &b));
  CHECK(cuda_test_verify(cuda_test_dptr(b), gpushm_buffer_size(b), (uint32_t)strtoul(argv[3], NULL, 0)));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  return 0;
}

/* As another uid: the name does not even say it exists. */
static int role_refused(char **argv)
{
  gpushm_t *conn;
  gpushm_buffer_t *b;

  become_nobody();
  conn = daemon_connect(&d);
  CHECK_ERR(gpushm_buffer_open(conn, argv[2], GPUSHM_OPEN_READONLY, &b), GPUSHM_E_NOENT);
  gpushm_disconnect(conn);
  return 0;
}

/* argv: the role, then up to five arguments (NULL ends them). */
static pid_t spawn(const char *role, const char *a, const char *b, const char *c, const char *e,
                   const char *f)
{
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    setenv("GPUSHM_SOCKET", d.socket, 1);
    execl(self, self, role, a, b, c, e, f, (char *)NULL);
    _exit(127);
  }
  return pid;
}

/* --- the daemon, killed and restarted ------------------------------------------- */

/* How the next daemon differs from the one killed. */
struct restart {
  const char *faults;  /* GPUSHM_CUDA_FAULTS */
  const char *devices; /* the fake driver's device count */
  bool reverse;        /* the fake driver numbers its devices backwards */
};

/* In the new daemon's child, before exec: the store's fds and names as systemd passes
 * them, its differences, and its log into daemon_log for the test to read. */
static void in_restarted(void *arg)
{
  const struct restart *r = arg;
  int fd = open(daemon_log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

  CHECK(fd >= 0 && dup2(fd, 2) == 2);
  close(fd);
  fdstore_pass(NULL);
  if (r->faults)
    setenv("GPUSHM_CUDA_FAULTS", r->faults, 1);
  if (r->devices)
    setenv("GPUSHM_FAKE_CUDA_DEVICES", r->devices, 1);
  if (r->reverse)
    setenv("GPUSHM_FAKE_CUDA_REVERSE_ORDER", "1", 1);
}

static void kill_daemon(void)
{
  int status;
  CHECK(kill(d.pid, SIGKILL) == 0);
  CHECK(waitpid(d.pid, &status, 0) == d.pid && WIFSIGNALED(status));
}

/* Restarts the daemon from the store; a new connection to it. */
static gpushm_t *restart(const struct restart *r)
{
  daemon_respawn_with(&d, in_restarted, (void *)r, NULL);
  return daemon_connect(&d);
}

/* What the daemon said while starting, into the test's log. */
static void show_daemon_log(void)
{
  char line[512];
  FILE *f = fopen(daemon_log, "r");
  if (!f)
    return;
  while (fgets(line, sizeof line, f))
    fprintf(stderr, "# gpushmd: %s", line);
  fclose(f);
}

static gpushm_buffer_t *create(gpushm_t *conn, const char *name, uint64_t size, uint32_t mode,
                               int device, gpushm_lifetime_t lifetime)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;

  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FD;
  opts.device = device;
  opts.mode = mode;
  opts.lifetime = lifetime;
  CHECK_OK(gpushm_buffer_create(conn, name, size, &opts, &b));
  CHECK(gpushm_buffer_backend(b) == GPUSHM_BACKEND_CUDA_FD && gpushm_buffer_ptr(b) != NULL);
  return b;
}

/* What the daemon says about a buffer, all of which must survive a restart. */
struct snapshot {
  uint64_t id, size, allocated, created_unix_ms;
  uint32_t owner_uid, owner_gid, mode;
  int32_t device;
  uint8_t uuid[16];
};

static struct snapshot snap(gpushm_t *conn, const char *name)
{
  const gpushm_buffer_info_t *info = find_buffer(conn, name);
  struct snapshot s;

  CHECK(info != NULL);
  CHECK(gpushm_buffer_info_backend(info) == GPUSHM_BACKEND_CUDA_FD &&
        gpushm_buffer_info_lifetime(info) == GPUSHM_LIFETIME_PERSISTENT &&
        gpushm_buffer_info_linked(info));
  s.id = gpushm_buffer_info_id(info);
  s.size = gpushm_buffer_info_size(info);
  s.allocated = gpushm_buffer_info_allocated(info);
  s.created_unix_ms = gpushm_buffer_info_created_unix_ms(info);
  s.owner_uid = gpushm_buffer_info_owner_uid(info);
  s.owner_gid = gpushm_buffer_info_owner_gid(info);
  s.mode = gpushm_buffer_info_mode(info);
  s.device = gpushm_buffer_info_device(info);
  CHECK_OK(gpushm_buffer_info_device_uuid(info, s.uuid));
  return s;
}

/* Everything but the ordinal, which may differ from one daemon to the next. */
static void check_same(const struct snapshot *a, const struct snapshot *b)
{
  CHECK(a->id == b->id && a->size == b->size && a->allocated == b->allocated);
  CHECK(a->created_unix_ms == b->created_unix_ms && a->owner_uid == b->owner_uid &&
        a->owner_gid == b->owner_gid && a->mode == b->mode);
  CHECK(memcmp(a->uuid, b->uuid, 16) == 0);
}

static int record_index(const char *name)
{
  char suffix[160];
  snprintf(suffix, sizeof suffix, ".%s", name);
  for (int i = 0; i < fdstore_n; i++) {
    size_t n = strlen(fdstore[i].name), m = strlen(suffix);
    if (n > m && strcmp(fdstore[i].name + n - m, suffix) == 0)
      return i;
  }
  return -1;
}

static uint64_t device_free(const struct test_daemon *daemon)
{
  gpushm_stats_t *s = daemon_stats(daemon);
  uint64_t free_memory;
  CHECK(gpushm_stats_device_count(s) >= 1);
  free_memory = gpushm_device_stats_free_memory(gpushm_stats_device(s, 0));
  gpushm_stats_free(s);
  return free_memory;
}

static int free_at_least(const struct test_daemon *daemon, void *bytes)
{
  return device_free(daemon) >= *(uint64_t *)bytes;
}

/* --- tests ------------------------------------------------------------------------- */

static void test_survives_sigkill(void)
{
  const uint64_t big = fake ? 8 * MiB : 256 * MiB, odd = 3 * MiB + 4100;
  struct snapshot mapped_was, idle_was, s;
  gpushm_buffer_t *mapped, *idle, *host, *session, *b, *again;
  gpushm_create_opts_t opts;
  gpushm_stats_t *stats;
  gpushm_t *conn;
  uint64_t bytes, host_id, free_then;
  int ready[2], go[2];
  char c, ready_text[16], go_text[16];
  pid_t holder;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  mapped = create(conn, "kept-mapped", big, 0644, 0, GPUSHM_LIFETIME_PERSISTENT);
  cuda_test_fill(cuda_test_dptr(mapped), big, 0x1111);
  /* not a whole number of granules: the allocated size must come back as it was */
  idle = create(conn, "kept-idle", odd, 0600, 0, GPUSHM_LIFETIME_PERSISTENT);
  cuda_test_fill(cuda_test_dptr(idle), odd, 0x2222);
  gpushm_create_opts_init(&opts);
  CHECK_OK(gpushm_buffer_create(conn, "kept-host", 4096, &opts, &host));
  memset(gpushm_buffer_ptr(host), 0x5a, 4096);
  host_id = gpushm_buffer_id(host);
  session = create(conn, "not-kept", 2 * MiB, 0600, 0, GPUSHM_LIFETIME_SESSION);
  mapped_was = snap(conn, "kept-mapped");
  idle_was = snap(conn, "kept-idle");
  CHECK(idle_was.allocated > odd && idle_was.device == 0);
  /* from here on nothing maps it but the daemon, then only the store's fd keeps it */
  CHECK_OK(gpushm_buffer_close(idle));

  CHECK(pipe(ready) == 0 && pipe(go) == 0);
  snprintf(ready_text, sizeof ready_text, "%d", ready[1]);
  snprintf(go_text, sizeof go_text, "%d", go[0]);
  holder = spawn("holder", "kept-mapped", "0x1111", ready_text, go_text, "0x3333");
  close(ready[1]); /* a consumer that dies is then an end of file, not a hang */
  close(go[0]);
  CHECK(read(ready[0], &c, 1) == 1 && c == 'r');
  CHECK_OK(gpushm_buffer_close(mapped)); /* the consumer is the one process mapping it */
  fdstore_drain();
  /* in the store: the persistent buffers, device and host (carved: its segment's memory
   * and slot table); not the session one */
  CHECK(fdstore_n == 4 && fdstore_count("gpushm1.d.") == 2 &&
        fdstore_count("gpushm1.s.") == 1 && fdstore_count("gpushm1.t.") == 1);
  CHECK(record_index("kept-mapped") >= 0 && record_index("kept-idle") >= 0 &&
        record_index("not-kept") < 0);

  kill_daemon();
  /* no daemon now: the consumer writes through the mapping it still has */
  CHECK(write(go[1], "w", 1) == 1);
  CHECK(read(ready[0], &c, 1) == 1 && c == 'w');
  gpushm_buffer_close(host); /* the old daemon's: their releases go nowhere */
  gpushm_buffer_close(session);
  gpushm_disconnect(conn);

  conn = restart(&(struct restart){ 0 });
  show_daemon_log();
  CHECK(!file_contains(daemon_log, "dropping"));
  /* the consumer's write is there: the same memory, reopened by name */
  CHECK_OK(gpushm_buffer_open(conn, "kept-mapped", 0, &b));
  CHECK(gpushm_buffer_id(b) == mapped_was.id && gpushm_buffer_size(b) == big &&
        gpushm_buffer_backend(b) == GPUSHM_BACKEND_CUDA_FD);
  CHECK(cuda_test_verify(cuda_test_dptr(b), big, 0x3333));
  s = snap(conn, "kept-mapped");
  check_same(&mapped_was, &s);
  CHECK_OK(gpushm_buffer_open(conn, "kept-idle", 0, &again));
  CHECK(gpushm_buffer_id(again) == idle_was.id && gpushm_buffer_size(again) == odd);
  CHECK(cuda_test_verify(cuda_test_dptr(again), odd, 0x2222));
  s = snap(conn, "kept-idle");
  check_same(&idle_was, &s);
  CHECK_OK(gpushm_buffer_open(conn, "kept-host", 0, &host));
  CHECK(gpushm_buffer_id(host) == host_id && ((unsigned char *)gpushm_buffer_ptr(host))[4095] == 0x5a);
  CHECK_OK(gpushm_buffer_close(host));
  CHECK_ERR(gpushm_buffer_open(conn, "not-kept", 0, &session), GPUSHM_E_NOENT);
  test_log("cuda-fd: %llu MiB mapped by a consumer through a SIGKILL of gpushmd and a "
           "%llu-byte one mapped by nobody came back with their data, ids, owners and modes",
           (unsigned long long)(big >> 20), (unsigned long long)odd);

  /* the consumer lets go: the new daemon's import keeps the memory */
  CHECK(write(go[1], "x", 1) == 1);
  check_child(holder);
  CHECK(cuda_test_verify(cuda_test_dptr(b), big, 0x3333));
  /* the owner's mode bits still decide who gets the fd */
  check_child(spawn("readonly-consumer", "kept-mapped", "0x3333", NULL, NULL, NULL));
  check_child(spawn("refused", "kept-idle", NULL, NULL, NULL, NULL));

  /* ids go on above the ones that came back */
  CHECK_OK(gpushm_buffer_create(conn, "new", 4096, &opts, &host));
  CHECK(gpushm_buffer_id(host) > mapped_was.id && gpushm_buffer_id(host) > idle_was.id &&
        gpushm_buffer_id(host) > host_id);
  CHECK_OK(gpushm_unlink(conn, "new"));
  CHECK_OK(gpushm_buffer_close(host));

  /* unlinking withdraws the record; the last close releases the imported handle and
   * closes the daemon's fd, and with the store's gone too the device has the memory
   * back (the fake driver does not count imports: there only the daemon's books) */
  stats = daemon_stats(&d);
  bytes = gpushm_stats_bytes_allocated(stats);
  gpushm_stats_free(stats);
  free_then = device_free(&d) + idle_was.allocated;
  CHECK_OK(gpushm_unlink(conn, "kept-idle"));
  CHECK_OK(gpushm_buffer_close(again));
  fdstore_drain();
  CHECK(fdstore_n == 3 && record_index("kept-idle") < 0 && record_index("kept-mapped") >= 0);
  stats = daemon_stats(&d);
  CHECK(gpushm_stats_bytes_allocated(stats) == bytes - idle_was.allocated);
  gpushm_stats_free(stats);
  if (!fake)
    CHECK(wait_until(free_at_least, &d, &free_then));

  /* a clean stop leaves the rest deposited for the next daemon */
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  daemon_stop(&d);
  fdstore_drain();
  CHECK(fdstore_n == 3);
  fdstore_clear();
  close(ready[0]);
  close(go[1]);
}

/* A cuda-fd sync buffer comes back with its control block (release sequence) and its
 * fence (in its allocation): the next acquire needs nothing re-released.  The fake
 * driver's stream wait fails where the fence is short of the number (a real stream
 * would hang), so a fence that came back at 0 shows. */
static void test_sync_survives(void)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;
  gpushm_t *conn;
  uint64_t seq, id;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FD;
  opts.flags = GPUSHM_CREATE_SYNC;
  opts.lifetime = GPUSHM_LIFETIME_PERSISTENT;
  CHECK_OK(gpushm_buffer_create(conn, "kept-sync", 2 * MiB, &opts, &b));
  id = gpushm_buffer_id(b);
  cuda_test_fill(cuda_test_dptr(b), 2 * MiB, 0x4444);
  CHECK_OK(gpushm_buffer_release(b, NULL, &seq));
  CHECK_OK(gpushm_buffer_release(b, NULL, &seq));
  CHECK(seq == 2);
  CHECK_OK(gpushm_buffer_close(b)); /* waits for the fence write */
  fdstore_drain();
  CHECK(fdstore_n == 2 && fdstore_count("gpushm1.d.") == 1 && fdstore_count("gpushm1.c.") == 1);
  kill_daemon();
  gpushm_disconnect(conn);

  conn = restart(&(struct restart){ 0 });
  show_daemon_log();
  CHECK(!file_contains(daemon_log, "dropping"));
  CHECK_OK(gpushm_buffer_open(conn, "kept-sync", 0, &b));
  CHECK(gpushm_buffer_id(b) == id && gpushm_buffer_sync_method(b, NULL) == GPUSHM_SYNC_GPU_FENCE);
  CHECK(gpushm_buffer_release_seq(b) == 2);
  CHECK_OK(gpushm_buffer_acquire(b, NULL, 2, 1000));
  CU_CHECK(CU_CALL(&drv, cuCtxSynchronize));
  CHECK(cuda_test_verify(cuda_test_dptr(b), 2 * MiB, 0x4444));
  CHECK_OK(gpushm_buffer_release(b, NULL, &seq));
  CHECK(seq == 3);
  CHECK_OK(gpushm_buffer_acquire(b, NULL, 3, 1000));
  CHECK_OK(gpushm_unlink(conn, "kept-sync"));
  CHECK_OK(gpushm_buffer_close(b));
  fdstore_drain();
  CHECK(fdstore_n == 0);
  test_log("cuda-fd sync buffer: release sequence and fence came back through a SIGKILL");
  gpushm_disconnect(conn);
  daemon_stop(&d);
  fdstore_clear();
}

/* A record whose import fails is dropped, with a line in the log, and the daemon serves
 * the rest. */
static void test_failed_import(void)
{
  const char *names[2] = { "first", "second" };
  gpushm_buffer_t *b;
  gpushm_t *conn;
  int lost;
  char want[200];

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  for (int i = 0; i < 2; i++) {
    b = create(conn, names[i], 2 * MiB, 0600, 0, GPUSHM_LIFETIME_PERSISTENT);
    cuda_test_fill(cuda_test_dptr(b), 2 * MiB, 0x4444u + (uint32_t)i);
    CHECK_OK(gpushm_buffer_close(b));
  }
  CHECK_OK(gpushm_buffer_create(conn, "host", 4096, NULL, &b));
  CHECK_OK(gpushm_buffer_close(b));
  fdstore_drain();
  CHECK(fdstore_n == 4); /* two device records; the host one's segment and slot table */
  gpushm_disconnect(conn);
  kill_daemon();

  /* records come back in the store's order: the second device record's import fails */
  lost = record_index("first") < record_index("second") ? 1 : 0;
  conn = restart(&(struct restart){ .faults = "cuMemImportFromShareableHandle="
                                              "CUDA_ERROR_INVALID_HANDLE@2" });
  show_daemon_log();
  snprintf(want, sizeof want, "dropping persistent cuda-fd buffer '%s'", names[lost]);
  CHECK(file_contains(daemon_log, want));
  CHECK(file_contains(daemon_log, "cuMemImportFromShareableHandle"));
  CHECK_ERR(gpushm_buffer_open(conn, names[lost], 0, &b), GPUSHM_E_NOENT);
  CHECK_OK(gpushm_buffer_open(conn, names[!lost], 0, &b));
  CHECK(cuda_test_verify(cuda_test_dptr(b), 2 * MiB, 0x4444u + (uint32_t)!lost));
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_buffer_open(conn, "host", 0, &b));
  CHECK_OK(gpushm_buffer_close(b));
  fdstore_drain();
  CHECK(fdstore_n == 3 && record_index(names[lost]) < 0 && record_index(names[!lost]) >= 0);
  gpushm_disconnect(conn);
  daemon_stop(&d);
  fdstore_clear();
  test_log("cuda-fd: a record whose import failed was dropped and logged; the rest served");
}

/* Fake driver only (it can make devices go away and renumber them): a buffer whose
 * device is gone is dropped; one whose device has another ordinal follows its UUID. */
static void test_devices_change(void)
{
  struct snapshot was, s;
  gpushm_buffer_t *b;
  gpushm_t *conn;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  b = create(conn, "on-0", 2 * MiB, 0600, 0, GPUSHM_LIFETIME_PERSISTENT);
  cuda_test_fill(cuda_test_dptr(b), 2 * MiB, 0x5050);
  CHECK_OK(gpushm_buffer_close(b));
  b = create(conn, "on-1", 2 * MiB, 0600, 1, GPUSHM_LIFETIME_PERSISTENT);
  cuda_test_fill(cuda_test_dptr(b), 2 * MiB, 0x5151);
  CHECK_OK(gpushm_buffer_close(b));
  was = snap(conn, "on-1");
  CHECK(was.device == 1);
  fdstore_drain();
  CHECK(fdstore_n == 2);
  gpushm_disconnect(conn);
  kill_daemon();

  /* device 1 has gone */
  conn = restart(&(struct restart){ .devices = "1" });
  show_daemon_log();
  CHECK(file_contains(daemon_log, "dropping persistent cuda-fd buffer 'on-1'"));
  CHECK(file_contains(daemon_log, "is not on this host"));
  CHECK_ERR(gpushm_buffer_open(conn, "on-1", 0, &b), GPUSHM_E_NOENT);
  CHECK_OK(gpushm_buffer_open(conn, "on-0", 0, &b));
  CHECK(cuda_test_verify(cuda_test_dptr(b), 2 * MiB, 0x5050));
  CHECK_OK(gpushm_buffer_close(b));
  fdstore_drain();
  CHECK(fdstore_n == 1 && record_index("on-1") < 0);
  CHECK_OK(gpushm_unlink(conn, "on-0"));
  gpushm_disconnect(conn);
  daemon_stop(&d);
  fdstore_clear();

  /* two devices, numbered the other way round at the next start */
  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  b = create(conn, "moves", 2 * MiB, 0600, 1, GPUSHM_LIFETIME_PERSISTENT);
  cuda_test_fill(cuda_test_dptr(b), 2 * MiB, 0x1010);
  CHECK_OK(gpushm_buffer_close(b));
  was = snap(conn, "moves");
  fdstore_drain();
  CHECK(fdstore_n == 1);
  gpushm_disconnect(conn);
  kill_daemon();
  conn = restart(&(struct restart){ .reverse = true });
  show_daemon_log();
  CHECK(!file_contains(daemon_log, "dropping"));
  s = snap(conn, "moves");
  check_same(&was, &s);
  CHECK(was.device == 1 && s.device == 0); /* the daemon's ordinal for that UUID now */
  CHECK_OK(gpushm_buffer_open(conn, "moves", 0, &b));
  CHECK(gpushm_buffer_device(b) == 1); /* this process still numbers it 1 */
  CHECK(cuda_test_verify(cuda_test_dptr(b), 2 * MiB, 0x1010));
  /* the record is rebuilt from the UUID, not the ordinal: unlink withdraws it */
  CHECK_OK(gpushm_unlink(conn, "moves"));
  CHECK_OK(gpushm_buffer_close(b));
  fdstore_drain();
  CHECK(fdstore_n == 0);
  gpushm_disconnect(conn);
  daemon_stop(&d);
  test_log("cuda-fd (fake driver): a buffer of a device that is gone was dropped; one whose "
           "device was renumbered followed its UUID");
}

int main(int argc, char **argv)
{
  self = "/proc/self/exe";
  if (argc > 1) {
    /* a child role: the daemon's socket comes through GPUSHM_SOCKET */
    snprintf(d.socket, sizeof d.socket, "%s", getenv("GPUSHM_SOCKET"));
    if (strcmp(argv[1], "holder") == 0)
      return role_holder(argv);
    if (strcmp(argv[1], "readonly-consumer") == 0)
      return role_readonly_consumer(argv);
    if (strcmp(argv[1], "refused") == 0)
      return role_refused(argv);
    return 2;
  }
  self = test_self_path();
  fake = getenv("GPUSHM_CUDA_LIBRARY") && strstr(getenv("GPUSHM_CUDA_LIBRARY"), "fake");
  if (fake)
    setenv("GPUSHM_FAKE_CUDA_DEVICES", "2", 1); /* for test_devices_change */
  cuda_test_setup(1);
  CHECK(mkdtemp(dir) != NULL);
  snprintf(daemon_log, sizeof daemon_log, "%s/gpushmd.log", dir);
  fdstore_open(dir);

  test_survives_sigkill();
  test_sync_survives();
  test_failed_import();
  if (fake)
    test_devices_change();

  fdstore_close();
  unlink(daemon_log);
  rmdir(dir);
  CU_CALL(&drv, cuDevicePrimaryCtxRelease, 0);
  return 0;
}

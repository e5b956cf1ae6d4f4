/* SPDX-License-Identifier: MIT */
/* Persistent buffers survive a daemon killed with SIGKILL, through the file-descriptor
 * store protocol of systemd (FDSTORE=1 / FDSTOREREMOVE=1 on NOTIFY_SOCKET, LISTEN_FDS
 * and LISTEN_FDNAMES on the next start), played by the test itself (tests/fdstore.c);
 * signals that would kill a daemon by default do not; SIGHUP reloads the settings all or
 * nothing.  tests/system/ runs the same story under a real systemd; cuda-fd buffers are
 * tests/gpu/test-cuda-persist's. */
#include "config.h"
#include "fdstore.h"
#include "harness.h"
#include "shm_layout.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static struct test_daemon d;
static char dir[] = "/tmp/gpushm-fdstore.XXXXXX";

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
  /* a carved buffer's segment came and went: its memory and slot table (systemd reads
   * the notify socket as it goes; its queue holds 10 datagrams) */
  fdstore_drain();
  CHECK(fdstore_count(".s.") == 0 && fdstore_count(".t.") == 0);
  CHECK_OK(gpushm_buffer_create(conn, "gone-held", 4096, &opts, &held));
  holder = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(holder, "gone-held", GPUSHM_OPEN_READONLY, &b));
  CHECK_OK(gpushm_unlink(conn, "gone-held"));
  fdstore_drain();
  /* in the store: exactly the linked persistent buffers, and the sync one's control */
  CHECK(fdstore_n == 3);
  CHECK(fdstore_find("gpushm1.m.") >= 0 && fdstore_find("gpushm1.c.") >= 0);
  for (int i = 0; i < fdstore_n; i++)
    CHECK(strstr(fdstore[i].name, "gone") == NULL);

  kill_daemon();
  /* A read-write holder can scribble the control block's header (it maps the block
   * read-write): the next daemon restores it, keeping the sequence, rather than
   * dropping a buffer its writer wanted gone. */
  {
    struct sync_control *ctl = mmap(NULL, SYNC_CONTROL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
                                    fdstore[fdstore_find("gpushm1.c.")].fd, 0);
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
  snprintf(fdstore[fdstore_n].name, sizeof fdstore[0].name, "gpushm1.m.garbage");
  fdstore[fdstore_n++].fd = pipe_fds[0];
  snprintf(fdstore[fdstore_n].name, sizeof fdstore[0].name, "gpushm1.c.999999");
  CHECK((fdstore[fdstore_n++].fd = dup(fdstore[fdstore_find("gpushm1.c.")].fd)) >= 0);
  /* device records: one not in the daemon's own spelling, one whose device (a made-up
   * UUID) is on no host: both dropped, without CUDA as with it */
  snprintf(fdstore[fdstore_n].name, sizeof fdstore[0].name, "gpushm1.d.0x63.3.0.0.0.600.1000."
           "200000.1.%s.dev-garbage", "00000000000000000000000000000000");
  CHECK((fdstore[fdstore_n++].fd = dup(pipe_fds[0])) >= 0);
  snprintf(fdstore[fdstore_n].name, sizeof fdstore[0].name, "gpushm1.d.63.3.0.0.0.600.1000."
           "200000.1.%s.dev-gone", "0123456789abcdef0123456789abcdef");
  CHECK((fdstore[fdstore_n++].fd = dup(pipe_fds[0])) >= 0);

  daemon_respawn_with(&d, fdstore_pass, NULL, NULL);
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
                                    fdstore[fdstore_find("gpushm1.c.")].fd, 0);
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
  fdstore_drain();
  /* the records it could not use were dropped from the store; "new" is carved: its
   * segment is kept as its memory and its slot table */
  CHECK(fdstore_find("gpushm1.m.garbage") < 0 && fdstore_find("gpushm1.c.999999") < 0);
  CHECK(fdstore_count(".dev-") == 0);
  CHECK(fdstore_n == 5 && fdstore_find("gpushm1.s.") >= 0 && fdstore_find("gpushm1.t.") >= 0);
  /* unlinking withdraws: a carved buffer's segment goes with its last persistent slot */
  CHECK_OK(gpushm_unlink(conn, "keep"));
  fdstore_drain();
  CHECK(fdstore_n == 4);
  CHECK_OK(gpushm_unlink(conn, "new"));
  fdstore_drain();
  CHECK(fdstore_n == 2 && fdstore_find("gpushm1.s.") < 0 && fdstore_find("gpushm1.t.") < 0);
  /* a clean stop leaves the rest for the next daemon */
  gpushm_disconnect(conn);
  CHECK(kill(d.pid, SIGTERM) == 0);
  CHECK(waitpid(d.pid, NULL, 0) == d.pid);
  fdstore_drain();
  CHECK(fdstore_n == 2);
  gpushm_buffer_close(keep);
  gpushm_buffer_close(sync);
  gpushm_buffer_close(session);
  gpushm_buffer_close(gone);
  gpushm_buffer_close(held);
  fdstore_clear();
  rmdir(d.dir);
}

/* The store's capacity (systemd >= 254 says it in $FDSTORE) is crossed: buffers beyond
 * it still work, they are only not deposited, and a freed place is used again.  Buffers
 * past the carve limit take a record each; carved ones share their segment's two. */
static void test_store_capacity(void)
{
  gpushm_t *conn;
  gpushm_buffer_t *b[4], *small[3];
  char name[16];

  setenv("FDSTORE", "2", 1);
  daemon_start(&d, NULL);
  unsetenv("FDSTORE");
  conn = daemon_connect(&d);
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof name, "cap-%d", i);
    CHECK_OK(gpushm_buffer_create(conn, name, 2u << 20, NULL, &b[i]));
  }
  fdstore_drain();
  CHECK(fdstore_n == 2 && fdstore_find("gpushm1.m.") >= 0);
  for (int i = 0; i < fdstore_n; i++)
    CHECK(strstr(fdstore[i].name, "cap-2") == NULL);
  CHECK_OK(gpushm_unlink(conn, "cap-0"));
  CHECK_OK(gpushm_buffer_create(conn, "cap-3", 2u << 20, NULL, &b[3]));
  fdstore_drain();
  CHECK(fdstore_n == 2 && fdstore_count("cap-3") == 1);
  /* a carved buffer needs its segment's two records: no room for them */
  CHECK_OK(gpushm_buffer_create(conn, "cap-small-0", 4096, NULL, &small[0]));
  fdstore_drain();
  CHECK(fdstore_n == 2 && fdstore_find("gpushm1.s.") < 0);
  for (int i = 0; i < 4; i++) {
    CHECK_OK(gpushm_buffer_close(b[i]));
    snprintf(name, sizeof name, "cap-%d", i);
    if (i)
      CHECK_OK(gpushm_unlink(conn, name));
  }
  CHECK_OK(gpushm_unlink(conn, "cap-small-0"));
  CHECK_OK(gpushm_buffer_close(small[0]));
  fdstore_drain();
  CHECK(fdstore_n == 0);
  /* room for two records: three carved buffers of one segment fit in them */
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof name, "small-%d", i);
    CHECK_OK(gpushm_buffer_create(conn, name, 4096, NULL, &small[i]));
  }
  fdstore_drain();
  CHECK(fdstore_n == 2 && fdstore_find("gpushm1.s.") >= 0 && fdstore_find("gpushm1.t.") >= 0);
  for (int i = 0; i < 3; i++)
    CHECK_OK(gpushm_buffer_close(small[i]));
  gpushm_disconnect(conn);
  daemon_stop(&d);
  fdstore_clear();
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

  fdstore_drain();
  fdstore_reloading_seen = fdstore_ready_seen = 0;
  write_file(conf, "max-buffers-per-uid = 3\n");
  CHECK(kill(d.pid, SIGHUP) == 0);
  fdstore_drain();
  CHECK(fdstore_reloading_seen == 1 && fdstore_ready_seen == 1);
  CHECK_OK(gpushm_buffer_create(conn, "two", 4096, NULL, &b[1]));
  CHECK_OK(gpushm_buffer_create(conn, "three", 4096, NULL, &b[2]));
  /* a bad file changes nothing, not even the settings before the bad line */
  write_file(conf, "max-buffers-per-uid = 9\nmax-clients = lots\n");
  CHECK(kill(d.pid, SIGHUP) == 0);
  fdstore_drain();
  CHECK_ERR(gpushm_buffer_create(conn, "four", 4096, NULL, &b[3]), GPUSHM_E_LIMIT);
  CHECK(strstr(gpushm_last_error_message(), "limit 3") != NULL);
  CHECK(waitpid(d.pid, NULL, WNOHANG) == 0);
  for (int i = 0; i < 3; i++)
    CHECK_OK(gpushm_buffer_close(b[i]));
  gpushm_disconnect(conn);
  daemon_stop(&d);
  fdstore_clear();
  unlink(conf);
  (void)log;
}

/* Metadata goes into the store beside its buffer (a sealed memfd: FDNAME is too short
 * for it), or for a carved buffer into its segment's slot table, and comes back byte for
 * byte; a buffer whose metadata record is missing is dropped, as one whose control block
 * is; unlinking withdraws it. */
static void test_metadata_survives_restart(void)
{
  static uint8_t meta[GPUSHM_METADATA_MAX], meta2[7] = { 'm', 0, 1, 2, 0xff, 'x', 0 };
  gpushm_create_opts_t opts;
  gpushm_t *conn;
  gpushm_buffer_t *b, *k[4];
  const void *got;
  size_t len;
  int x, seals;

  for (size_t i = 0; i < sizeof meta; i++)
    meta[i] = (uint8_t)(i * 7 + 3);
  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  gpushm_create_opts_init(&opts);
  opts.metadata = meta;
  opts.metadata_size = sizeof meta;
  CHECK_OK(gpushm_buffer_create(conn, "meta", 2u << 20, &opts, &k[0]));
  CHECK_OK(gpushm_buffer_create(conn, "meta-carved", 4096, &opts, &k[3]));
  opts.metadata = meta2;
  opts.metadata_size = sizeof meta2;
  opts.flags = GPUSHM_CREATE_SYNC;
  CHECK_OK(gpushm_buffer_create(conn, "meta-sync", 4096, &opts, &k[1]));
  opts.flags = 0;
  CHECK_OK(gpushm_buffer_create(conn, "meta-lost", 2u << 20, &opts, &k[2]));
  fdstore_drain();
  /* three memory records, a control block, three metadata records; the carved one's
   * segment: its memory and its slot table */
  CHECK(fdstore_n == 9 && fdstore_count(".x.") == 3 && fdstore_count(".s.") == 1);
  /* what the store keeps cannot be changed by whoever gets the fd */
  CHECK((x = fdstore_find("gpushm1.x.")) >= 0);
  seals = fcntl(fdstore[x].fd, F_GET_SEALS);
  CHECK(seals >= 0 && (seals & (F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL)) ==
                        (F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL));
  CHECK(write(fdstore[x].fd, "z", 1) < 0);
  kill_daemon();
  {
    char lost[64];
    snprintf(lost, sizeof lost, "gpushm1.x.%llu", (unsigned long long)gpushm_buffer_id(k[2]));
    fdstore_remove(lost);
  }
  daemon_respawn_with(&d, fdstore_pass, NULL, NULL);
  for (int i = 0; i < 4; i++)
    gpushm_buffer_close(k[i]);
  gpushm_disconnect(conn);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(conn, "meta", GPUSHM_OPEN_READONLY, &b));
  CHECK((got = gpushm_buffer_metadata(b, &len)) && len == sizeof meta &&
        memcmp(got, meta, len) == 0);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_buffer_open(conn, "meta-carved", GPUSHM_OPEN_READONLY, &b));
  CHECK((got = gpushm_buffer_metadata(b, &len)) && len == sizeof meta &&
        memcmp(got, meta, len) == 0);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_buffer_open(conn, "meta-sync", 0, &b));
  CHECK((got = gpushm_buffer_metadata(b, &len)) && len == sizeof meta2 &&
        memcmp(got, meta2, len) == 0);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_ERR(gpushm_buffer_open(conn, "meta-lost", 0, &b), GPUSHM_E_NOENT);
  fdstore_drain();
  CHECK(fdstore_n == 7 && fdstore_count(".x.") == 2);
  CHECK_OK(gpushm_unlink(conn, "meta"));
  CHECK_OK(gpushm_unlink(conn, "meta-sync"));
  CHECK_OK(gpushm_unlink(conn, "meta-carved"));
  fdstore_drain();
  CHECK(fdstore_n == 0);
  gpushm_disconnect(conn);
  daemon_stop(&d);
  fdstore_clear();
}

/* A slot table, as the daemon writes it (daemon/registry/slot_store.c, version 1): a
 * 256-byte header whose first word is its magic and whose device is 36 bytes in, then
 * 160-byte entries whose name starts 32 bytes in. */
#define TABLE_HEADER 256u
#define TABLE_DEVICE 36u /* after magic, version, segment id, bytes, slot, backend */
#define TABLE_ENTRY 160u
#define ENTRY_NAME 32u

/* The first stored record whose name starts with prefix, mapped read-write (what any
 * holder of its fd can do), whole: *len bytes. */
static uint8_t *map_stored(const char *prefix, size_t *len)
{
  struct stat st;
  uint8_t *map;
  int i;

  CHECK((i = fdstore_find(prefix)) >= 0 && fstat(fdstore[i].fd, &st) == 0);
  map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fdstore[i].fd, 0);
  CHECK(map != MAP_FAILED);
  *len = (size_t)st.st_size;
  return map;
}

/* What a hostile or broken store could hand a restarted daemon: a slot table entry
 * that is not whole drops that buffer alone; a table that is not one the daemon wrote
 * drops its segment's buffers, and both records leave the store. */
static void test_slot_table_damage(void)
{
  gpushm_t *conn;
  gpushm_buffer_t *b;
  char name[16];
  uint8_t *map, *seg_map;
  size_t len, seg_len;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof name, "dmg-%d", i);
    CHECK_OK(gpushm_buffer_create(conn, name, 4096, NULL, &b));
    memset(gpushm_buffer_ptr(b), 0xa5, 4096);
    CHECK_OK(gpushm_buffer_close(b));
  }
  gpushm_disconnect(conn);
  fdstore_drain();
  kill_daemon();
  map = map_stored("gpushm1.t.", &len);
  for (size_t off = TABLE_HEADER; off + TABLE_ENTRY <= len; off += TABLE_ENTRY)
    if (strcmp((char *)map + off + ENTRY_NAME, "dmg-1") == 0) {
      memset(map + off + ENTRY_NAME, 'x', TABLE_ENTRY - ENTRY_NAME); /* no end to the name */
      break;
    }
  daemon_respawn_with(&d, fdstore_pass, NULL, NULL);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(conn, "dmg-0", GPUSHM_OPEN_READONLY, &b));
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_ERR(gpushm_buffer_open(conn, "dmg-1", GPUSHM_OPEN_READONLY, &b), GPUSHM_E_NOENT);
  CHECK_OK(gpushm_buffer_open(conn, "dmg-2", GPUSHM_OPEN_READONLY, &b));
  CHECK_OK(gpushm_buffer_close(b));
  /* The last daemon's clients may still map the whole segment and write where the
   * dropped buffer was (as this does, through the store's copy of its memfd): nothing
   * new is carved from an adopted segment. */
  seg_map = map_stored("gpushm1.s.", &seg_len);
  CHECK_OK(gpushm_buffer_create(conn, "dmg-new", 4096, NULL, &b));
  memset(seg_map, 0x5a, seg_len);
  munmap(seg_map, seg_len);
  for (int i = 0; i < 4096; i++)
    CHECK(((const uint8_t *)gpushm_buffer_ptr(b))[i] == 0);
  CHECK_OK(gpushm_unlink(conn, "dmg-new"));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  fdstore_drain();
  kill_daemon();
  /* a host segment's table naming a device (out of any range: counted by device, it
   * would index past the counters) */
  *(int32_t *)(map + TABLE_DEVICE) = 1000;
  munmap(map, len);
  daemon_respawn_with(&d, fdstore_pass, NULL, NULL);
  conn = daemon_connect(&d);
  CHECK_ERR(gpushm_buffer_open(conn, "dmg-0", GPUSHM_OPEN_READONLY, &b), GPUSHM_E_NOENT);
  fdstore_drain();
  CHECK(fdstore_find("gpushm1.s.") < 0 && fdstore_find("gpushm1.t.") < 0);
  /* and one that is not the daemon's magic */
  CHECK_OK(gpushm_buffer_create(conn, "dmg-3", 4096, NULL, &b));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  fdstore_drain();
  kill_daemon();
  map = map_stored("gpushm1.t.", &len);
  *(uint32_t *)map ^= 1u;
  munmap(map, len);
  daemon_respawn_with(&d, fdstore_pass, NULL, NULL);
  conn = daemon_connect(&d);
  CHECK_ERR(gpushm_buffer_open(conn, "dmg-3", GPUSHM_OPEN_READONLY, &b), GPUSHM_E_NOENT);
  gpushm_disconnect(conn);
  fdstore_drain();
  CHECK(fdstore_find("gpushm1.s.") < 0 && fdstore_find("gpushm1.t.") < 0);
  daemon_stop(&d);
  fdstore_clear();
  test_log("a slot table entry that is not whole drops its buffer, and its slot is not "
           "carved again; a table that is not the daemon's, its segment and both records");
}

static atomic_bool draining;

/* systemd reads the notify socket as the daemon writes it: so does this while buffers
 * are made (the socket queues 10 datagrams; a daemon past them waits). */
static void *drain(void *arg)
{
  (void)arg;
  while (atomic_load(&draining))
    fdstore_drain();
  return NULL;
}

/* Issue 37: 100,000 default (persistent, 4 KiB, host) buffers under an fd store take
 * fewer than 1,000 fds, the daemon's and the store's, and all come back after a
 * SIGKILL with their data: carved buffers persist through their segments (memory and
 * slot table, two records each), not one record apiece.  Under valgrind, 10,000. */
static void test_many_carved_buffers(void)
{
  const unsigned n = getenv("GPUSHM_TEST_VALGRIND") ? 10000u : 100000u;
  gpushm_stats_t *st;
  gpushm_buffer_t *b;
  gpushm_t *conn;
  pthread_t th;
  char name[32];
  unsigned fds;

  daemon_start(&d, "--max-buffers-per-uid", "200000", NULL);
  conn = daemon_connect(&d);
  atomic_store(&draining, true);
  CHECK(pthread_create(&th, NULL, drain, NULL) == 0);
  for (unsigned i = 0; i < n; i++) {
    snprintf(name, sizeof name, "many-%u", i);
    CHECK_OK(gpushm_buffer_create(conn, name, 4096, NULL, &b));
    *(uint32_t *)gpushm_buffer_ptr(b) = i * 2654435761u;
    CHECK_OK(gpushm_buffer_close(b));
  }
  atomic_store(&draining, false);
  CHECK(pthread_join(th, NULL) == 0);
  fdstore_drain();
  st = daemon_stats(&d);
  fds = gpushm_stats_open_fds(st);
  gpushm_stats_free(st);
  test_log("%u carved persistent buffers: %d store records, %u daemon fds", n, fdstore_n, fds);
  CHECK(fdstore_n < 1000 && fds < 1000);
  CHECK(fdstore_count(".m.") == 0 && fdstore_count(".s.") == fdstore_count(".t."));
  gpushm_disconnect(conn);

  kill_daemon();
  daemon_respawn_with(&d, fdstore_pass, NULL, "--max-buffers-per-uid", "200000", NULL);
  conn = daemon_connect(&d);
  st = daemon_stats(&d);
  CHECK(gpushm_stats_buffers(st) == n);
  fds = gpushm_stats_open_fds(st);
  gpushm_stats_free(st);
  CHECK(fds < 1000);
  for (unsigned i = 0; i < n; i += n / 1000) {
    snprintf(name, sizeof name, "many-%u", i);
    CHECK_OK(gpushm_buffer_open(conn, name, GPUSHM_OPEN_READONLY, &b));
    CHECK(gpushm_buffer_size(b) == 4096 &&
          *(const uint32_t *)gpushm_buffer_ptr(b) == i * 2654435761u);
    CHECK_OK(gpushm_buffer_close(b));
  }
  test_log("all %u back after a SIGKILL, data intact; the new daemon holds %u fds", n, fds);
  gpushm_disconnect(conn);
  daemon_stop(&d);
  fdstore_clear();
}

int main(void)
{
  CHECK(mkdtemp(dir) != NULL);
  fdstore_open(dir);
  test_restart_keeps_persistent_buffers();
  test_store_capacity();
  test_signals_and_reload();
  test_metadata_survives_restart();
  test_slot_table_damage();
  test_many_carved_buffers();
  fdstore_close();
  rmdir(dir);
  return 0;
}

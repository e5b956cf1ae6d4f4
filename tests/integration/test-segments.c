/* SPDX-License-Identifier: MIT */
/* Segments (docs/segments.md), with the host backend and, where it is built, the fake
 * CUDA driver:
 *  - two permission classes never share a segment (backend, device, uid, gid and mode
 *    permuted), one class's buffers do;
 *  - a consumer keeps reading its buffer while others in its segment are created and
 *    freed, and a reused slot comes back zeroed;
 *  - 2000 host buffers cost the daemon a handful of fds, not 2000;
 *  - the idle-mapping limit and the pool limit are crossed, and the warm-slot limits
 *    (GPUSHM_LIMIT_WARM_*: what of a freed host slot's memory stays committed);
 *  - a segment is freed only once its last mapper has unmapped it (device free memory
 *    back to its baseline after everyone closes, and after a mapper is SIGKILLed), and
 *    a buffer opened in a segment this process maps costs no driver call;
 *  - an allocation that runs out of device memory takes the warm pools back. */
#include "config.h"
#include "gpushm_limits.h"
#include "harness.h"

#include <dirent.h>
#include <grp.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define KiB 1024u
#define MiB (1024u * 1024u)

static const char *fake_lib;
static bool real_gpu; /* one device, the driver's own */

static gpushm_buffer_t *create_flags(gpushm_t *conn, const char *name, uint64_t size,
                                     gpushm_backend_t backend, int device, uint32_t mode,
                                     uint32_t flags)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;

  gpushm_create_opts_init(&opts);
  opts.backend = backend;
  opts.device = device;
  opts.mode = mode;
  opts.flags = flags;
  CHECK_OK(gpushm_buffer_create(conn, name, size, &opts, &b));
  return b;
}

static gpushm_buffer_t *create(gpushm_t *conn, const char *name, uint64_t size,
                               gpushm_backend_t backend, int device, uint32_t mode)
{
  return create_flags(conn, name, size, backend, device, mode, 0);
}

static uint64_t segment_of(gpushm_t *conn, const char *name)
{
  const gpushm_buffer_info_t *info = find_buffer(conn, name);
  CHECK(info != NULL);
  return gpushm_buffer_info_segment_id(info);
}

/* Sums a segment_usage field over backend's rows (every backend: 0). */
#define SEGMENT_SUM(stats, backend, field)                                                 \
  ({                                                                                       \
    uint64_t sum_ = 0;                                                                     \
    for (size_t i_ = 0; i_ < gpushm_stats_segment_usage_count(stats); i_++) {              \
      const gpushm_segment_usage_t *u_ = gpushm_stats_segment_usage(stats, i_);            \
      if (!(backend) || gpushm_segment_usage_backend(u_) == (backend))                     \
        sum_ += gpushm_segment_usage_##field(u_);                                          \
    }                                                                                      \
    sum_;                                                                                  \
  })

struct class_case {
  uid_t uid;
  gid_t gid;
  uint32_t mode;
  gpushm_backend_t backend;
  int device;
};

/* Creates three buffers of the case's class (as its uid and gid) and keeps them. */
static void create_class(const struct test_daemon *d, const struct class_case *c, unsigned i)
{
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *conn;
    /* The driver loads as root: the test's directory may be closed to other uids (the
     * GPU host's mktemp -d is), and the fake driver lies there. */
    if (c->backend != GPUSHM_BACKEND_HOST) {
      gpushm_local_device_list_t *devices;
      CHECK_OK(gpushm_local_devices(&devices));
      gpushm_local_device_list_free(devices);
    }
    CHECK(setgroups(0, NULL) == 0 && setgid(c->gid) == 0 && setuid(c->uid) == 0);
    conn = daemon_connect(d);
    for (unsigned j = 0; j < 3; j++) {
      char name[32];
      snprintf(name, sizeof name, "class%u-%u", i, j);
      /* persistent: they outlive this process, for the listing */
      gpushm_buffer_close(create(conn, name, 4 * KiB, c->backend, c->device, c->mode));
    }
    gpushm_disconnect(conn);
    _exit(0);
  }
  check_child(pid);
}

static void test_classes(bool cuda)
{
  const struct class_case cases[] = {
    { 0, 0, 0600, GPUSHM_BACKEND_HOST, 0 },
    { 0, 0, 0640, GPUSHM_BACKEND_HOST, 0 },      /* mode */
    { 0, 100, 0600, GPUSHM_BACKEND_HOST, 0 },    /* gid */
    { 65534, 0, 0600, GPUSHM_BACKEND_HOST, 0 },  /* uid */
    { 65534, 65534, 0644, GPUSHM_BACKEND_HOST, 0 },
    { 0, 0, 0600, GPUSHM_BACKEND_CUDA_FD, 0 },   /* backend */
    { 0, 0, 0600, GPUSHM_BACKEND_CUDA_IPC, 0 },
    { 0, 0, 0600, GPUSHM_BACKEND_CUDA_FD, 1 },   /* device */
    { 65534, 0, 0600, GPUSHM_BACKEND_CUDA_FD, 0 },
  };
  const unsigned n = cuda ? sizeof cases / sizeof cases[0] : 5;
  unsigned n_tested = 0;
  uint64_t seg[sizeof cases / sizeof cases[0]];
  struct test_daemon d = { 0 };
  gpushm_t *conn;

  daemon_start(&d, "--allow-legacy-ipc", "yes", NULL);
  for (unsigned i = 0; i < n; i++)
    if (!(real_gpu && cases[i].device > 0))
      create_class(&d, &cases[i], i);
  conn = daemon_connect(&d);
  for (unsigned i = 0; i < n; i++) {
    char name[32];
    if (real_gpu && cases[i].device > 0) {
      seg[i] = 0; /* the second device's case needs two */
      continue;
    }
    n_tested++;
    snprintf(name, sizeof name, "class%u-0", i);
    seg[i] = segment_of(conn, name);
    CHECK(seg[i] != 0);
    for (unsigned j = 1; j < 3; j++) { /* one class: one segment */
      snprintf(name, sizeof name, "class%u-%u", i, j);
      CHECK(segment_of(conn, name) == seg[i]);
    }
    for (unsigned k = 0; k < i; k++) /* another class: never */
      CHECK(seg[k] != seg[i]);
  }
  gpushm_disconnect(conn);
  daemon_stop(&d);
  test_log("%u classes, %u segments", n_tested, n_tested);
}

static void fill(gpushm_buffer_t *b, unsigned char v)
{
  memset(gpushm_buffer_ptr(b), v, gpushm_buffer_size(b));
}

static bool all_are(const unsigned char *p, size_t n, unsigned char v)
{
  for (size_t i = 0; i < n; i++)
    if (p[i] != v)
      return false;
  return true;
}

/* A consumer reads its buffer over and over while the producer churns its segment. */
static void test_churn(void)
{
  struct test_daemon d = { 0 };
  gpushm_t *conn;
  gpushm_buffer_t *keep, *b;
  int go[2], done[2];
  pid_t pid;
  char c;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  keep = create(conn, "keep", 4 * KiB, GPUSHM_BACKEND_HOST, 0, 0644);
  fill(keep, 0x5a);
  CHECK(pipe(go) == 0 && pipe(done) == 0);
  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *consumer = daemon_connect(&d);
    gpushm_buffer_t *mine;
    unsigned reads = 0;
    close(go[1]);
    CHECK_OK(gpushm_buffer_open(consumer, "keep", GPUSHM_OPEN_READONLY, &mine));
    CHECK(write(done[1], "r", 1) == 1);
    /* until the producer is done: read, and read again */
    for (;;) {
      CHECK(all_are(gpushm_buffer_ptr(mine), 4 * KiB, 0x5a));
      reads++;
      struct timeval tv = { 0, 0 };
      fd_set set;
      FD_ZERO(&set);
      FD_SET(go[0], &set);
      if (select(go[0] + 1, &set, NULL, NULL, &tv) > 0)
        break;
    }
    CHECK(reads > 0);
    CHECK_OK(gpushm_buffer_close(mine));
    gpushm_disconnect(consumer);
    _exit(0);
  }
  close(go[0]);
  CHECK(read(done[0], &c, 1) == 1);
  for (int i = 0; i < 300; i++) {
    char name[32];
    snprintf(name, sizeof name, "churn-%d", i);
    b = create(conn, name, 4 * KiB, GPUSHM_BACKEND_HOST, 0, 0644);
    if (i == 0)
      CHECK(segment_of(conn, name) == segment_of(conn, "keep"));
    /* whatever a slot held before, a new buffer starts zeroed */
    CHECK(all_are(gpushm_buffer_ptr(b), 4 * KiB, 0));
    fill(b, 0xff);
    CHECK_OK(gpushm_buffer_close_unlink(b));
  }
  close(go[1]);
  check_child(pid);
  CHECK(all_are(gpushm_buffer_ptr(keep), 4 * KiB, 0x5a));
  CHECK_OK(gpushm_buffer_close_unlink(keep));
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

/* Bytes of memory the daemon's segment id holds (its memfd's blocks, seen through
 * /proc/PID/fd: the suite runs as root). */
static uint64_t segment_bytes(const struct test_daemon *d, uint64_t id)
{
  char dir[64], path[400], link[256], want[64];
  struct dirent *e;
  struct stat st;
  uint64_t bytes = UINT64_MAX;
  DIR *fds;

  snprintf(dir, sizeof dir, "/proc/%d/fd", (int)d->pid);
  snprintf(want, sizeof want, "/memfd:gpushm-segment-%llu ", (unsigned long long)id);
  CHECK((fds = opendir(dir)) != NULL);
  while ((e = readdir(fds))) {
    ssize_t n;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if ((n = readlink(path, link, sizeof link - 1)) <= 0)
      continue;
    link[n] = '\0';
    if (strncmp(link, want, strlen(want)) == 0 && stat(path, &st) == 0)
      bytes = (uint64_t)st.st_blocks * 512;
  }
  closedir(fds);
  CHECK(bytes != UINT64_MAX); /* the daemon holds the segment */
  return bytes;
}

static int segment_empty(const struct test_daemon *daemon, void *id)
{
  return segment_bytes(daemon, *(const uint64_t *)id) == 0;
}

/* A freed slot of host memory stays committed within GPUSHM_LIMIT_WARM_SLOT and
 * GPUSHM_LIMIT_WARM_BYTES of its segment, is zero for its next holder, and the rest is
 * given back: all of a segment's once it is emptied. */
static void test_warm_slots(void)
{
  enum { MAX_SLOTS = 512 };
  static gpushm_buffer_t *b[MAX_SLOTS];
  const uint64_t page = 4 * KiB, warm_max = GPUSHM_LIMIT_WARM_BYTES / page;
  struct test_daemon d = { 0 };
  uint64_t seg = 0, big_seg;
  unsigned n = 0, first = 0, in_seg;
  gpushm_buffer_t *big;
  gpushm_t *conn;
  char name[32];

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  /* Until a segment holds more 4 KiB slots than are kept warm (segments double: 16, 16,
   * 32, 64, 128 slots; each fills before the next is made) */
  for (uint64_t last = 0; n - first <= warm_max + 1; n++) {
    CHECK(n < MAX_SLOTS);
    snprintf(name, sizeof name, "warm-%u", n);
    b[n] = create(conn, name, page, GPUSHM_BACKEND_HOST, 0, 0600);
    fill(b[n], 0xa5);
    if ((seg = segment_of(conn, name)) != last)
      first = n;
    last = seg;
  }
  in_seg = n - first;
  CHECK(in_seg > warm_max + 1);
  CHECK(segment_bytes(&d, seg) == in_seg * page);
  /* all but the first freed: one held, warm_max kept, the others given back */
  for (unsigned i = first + 1; i < n; i++)
    CHECK_OK(gpushm_buffer_close_unlink(b[i]));
  CHECK_OK(gpushm_ping(conn)); /* after the one-way closes */
  CHECK(segment_bytes(&d, seg) == (1 + warm_max) * page);
  /* warm slots come back zeroed, and cost no new page; then a cold one does */
  for (unsigned i = 0; i < warm_max; i++) {
    snprintf(name, sizeof name, "again-%u", i);
    b[first + 1 + i] = create(conn, name, page, GPUSHM_BACKEND_HOST, 0, 0600);
    CHECK(segment_of(conn, name) == seg);
    CHECK(all_are(gpushm_buffer_ptr(b[first + 1 + i]), page, 0));
  }
  CHECK(segment_bytes(&d, seg) == (1 + warm_max) * page);
  b[first + 1 + warm_max] = create(conn, "cold", page, GPUSHM_BACKEND_HOST, 0, 0600);
  CHECK(segment_of(conn, "cold") == seg);
  CHECK(all_are(gpushm_buffer_ptr(b[first + 1 + warm_max]), page, 0));
  CHECK(segment_bytes(&d, seg) == (2 + warm_max) * page);
  test_log("a segment of %u 4 KiB slots, all freed but one: %llu slots kept committed, as many "
           "reused with no new page", in_seg, (unsigned long long)warm_max);

  /* the slot-size limit: a freed slot of GPUSHM_LIMIT_WARM_SLOT stays, one larger goes */
  for (int larger = 0; larger < 2; larger++) {
    uint64_t size = GPUSHM_LIMIT_WARM_SLOT * (larger ? 2 : 1);
    snprintf(name, sizeof name, "big-%d", larger);
    big = create(conn, name, size, GPUSHM_BACKEND_HOST, 0, 0600);
    fill(big, 0x3c);
    big_seg = segment_of(conn, name);
    CHECK(segment_bytes(&d, big_seg) >= size);
    CHECK_OK(gpushm_buffer_close_unlink(big)); /* its segment stays mapped here, idle */
    CHECK_OK(gpushm_ping(conn));
    CHECK(segment_bytes(&d, big_seg) == (larger ? 0 : size));
  }

  /* emptied (everything closed, nothing mapped): the pooled segment holds no memory */
  for (unsigned i = 0; i <= first + 1 + warm_max; i++)
    CHECK_OK(gpushm_buffer_close_unlink(b[i]));
  gpushm_disconnect(conn);
  /* the daemon sees the connection end when it sees it: no request orders after that */
  CHECK(wait_until(segment_empty, &d, &seg));
  test_log("past GPUSHM_LIMIT_WARM_SLOT a freed slot is given back; an emptied segment "
           "keeps nothing");
  daemon_stop(&d);
}

/* Host buffers share memfds: 2000 of them cost the daemon a few fds. */
static void test_host_fds(void)
{
  struct test_daemon d = { 0 };
  gpushm_stats_t *before, *after;
  gpushm_t *conn;
  uint32_t grew;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  before = daemon_stats(&d);
  for (int i = 0; i < 2000; i++) {
    char name[32];
    snprintf(name, sizeof name, "many-%d", i);
    CHECK_OK(gpushm_buffer_close(create(conn, name, 4 * KiB, GPUSHM_BACKEND_HOST, 0, 0600)));
  }
  after = daemon_stats(&d);
  grew = gpushm_stats_open_fds(after) - gpushm_stats_open_fds(before);
  test_log("2000 host buffers: %u more daemon fds, %llu segments", grew,
           (unsigned long long)SEGMENT_SUM(after, GPUSHM_BACKEND_HOST, segments));
  CHECK(gpushm_stats_buffers(after) == 2000);
  CHECK(grew <= 16);
  gpushm_stats_free(before);
  gpushm_stats_free(after);
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

/* A process keeps GPUSHM_LIMIT_IDLE_SEGMENTS idle segments mapped, no more. */
static void test_idle_limit(void)
{
  const unsigned n = GPUSHM_LIMIT_IDLE_SEGMENTS + 4;
  struct test_daemon d = { 0 };
  gpushm_stats_t *s;
  gpushm_t *conn;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  for (unsigned i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "idle-%u", i);
    /* a mode each: a class, and so a segment, each */
    CHECK_OK(gpushm_buffer_close(create(conn, name, 4 * KiB, GPUSHM_BACKEND_HOST, 0, 0600 + i)));
  }
  s = daemon_stats(&d);
  CHECK(SEGMENT_SUM(s, GPUSHM_BACKEND_HOST, segments) == n);
  CHECK(SEGMENT_SUM(s, GPUSHM_BACKEND_HOST, mappings) == GPUSHM_LIMIT_IDLE_SEGMENTS);
  gpushm_stats_free(s);
  { /* who maps them: this connection */
    gpushm_client_list_t *clients;
    const gpushm_client_info_t *me = NULL;
    CHECK_OK(gpushm_clients(conn, &clients));
    for (size_t i = 0; i < gpushm_client_list_count(clients); i++)
      if (gpushm_client_info_pid(gpushm_client_list_get(clients, i)) == (uint32_t)getpid())
        me = gpushm_client_list_get(clients, i);
    CHECK(me && gpushm_client_info_segments_mapped(me) == GPUSHM_LIMIT_IDLE_SEGMENTS);
    CHECK(gpushm_client_info_segment_bytes_mapped(me) >= GPUSHM_LIMIT_IDLE_SEGMENTS * 4 * KiB);
    gpushm_client_list_free(clients);
  }
  gpushm_disconnect(conn); /* and the rest go with the connection */
  s = daemon_stats(&d);
  CHECK(SEGMENT_SUM(s, GPUSHM_BACKEND_HOST, mappings) == 0);
  gpushm_stats_free(s);
  daemon_stop(&d);
}

/* Empty segments are pooled up to --pool-bytes per class; a create takes from the pool. */
static void test_pool_limit(void)
{
  struct test_daemon d = { 0 };
  gpushm_buffer_t *b[40];
  gpushm_stats_t *s;
  gpushm_t *conn;
  uint64_t allocs, pooled;

  daemon_start(&d, "--pool-bytes", "128K", NULL);
  conn = daemon_connect(&d);
  /* 64 KiB, 64 KiB and 128 KiB segments of 4 KiB slots */
  for (int i = 0; i < 40; i++) {
    char name[32];
    snprintf(name, sizeof name, "pool-%d", i);
    b[i] = create(conn, name, 4 * KiB, GPUSHM_BACKEND_HOST, 0, 0600);
  }
  for (int i = 0; i < 40; i++)
    CHECK_OK(gpushm_buffer_close_unlink(b[i]));
  gpushm_disconnect(conn);
  s = daemon_stats(&d);
  pooled = SEGMENT_SUM(s, GPUSHM_BACKEND_HOST, pooled_bytes);
  allocs = SEGMENT_SUM(s, GPUSHM_BACKEND_HOST, driver_allocs);
  test_log("3 segments emptied: %llu bytes pooled", (unsigned long long)pooled);
  CHECK(allocs == 3);
  CHECK(pooled == 128 * KiB && SEGMENT_SUM(s, GPUSHM_BACKEND_HOST, segments) == 0);
  gpushm_stats_free(s);
  conn = daemon_connect(&d);
  b[0] = create(conn, "from-the-pool", 4 * KiB, GPUSHM_BACKEND_HOST, 0, 0600);
  s = daemon_stats(&d);
  CHECK(SEGMENT_SUM(s, GPUSHM_BACKEND_HOST, driver_allocs) == allocs);
  CHECK(SEGMENT_SUM(s, GPUSHM_BACKEND_HOST, pooled_bytes) < pooled);
  gpushm_stats_free(s);
  CHECK_OK(gpushm_buffer_close_unlink(b[0]));
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

static uint64_t device_free(const struct test_daemon *d)
{
  gpushm_stats_t *s = daemon_stats(d);
  uint64_t v = gpushm_device_stats_free_memory(gpushm_stats_device(s, 0));
  gpushm_stats_free(s);
  return v;
}

/* Device free memory back to a baseline, within slack bytes: exactly, with the fake
 * driver; on a GPU less than half a segment may stay missing, since a context keeps
 * some of its own bookkeeping for address ranges it mapped (64 KiB measured on an H100,
 * driver 580) while a segment that was not freed would miss all of its bytes. */
struct free_want {
  uint64_t baseline, slack;
};

static int free_is(const struct test_daemon *d, void *arg)
{
  const struct free_want *w = arg;
  return device_free(d) + w->slack >= w->baseline;
}

/* wait_until(free_is), saying by how much it missed */
static int free_back_to(const struct test_daemon *d, const struct free_want *want)
{
  uint64_t now;

  if (wait_until(free_is, d, (void *)want))
    return 1;
  now = device_free(d);
  fprintf(stderr, "device free memory %llu bytes, baseline %llu: %lld bytes still in use "
          "(%llu allowed)\n", (unsigned long long)now, (unsigned long long)want->baseline,
          (long long)(want->baseline - now), (unsigned long long)want->slack);
  return 0;
}

/* A consumer process, forked before this one touches CUDA (which does not survive a
 * fork): waits for a byte, opens every name, says so, waits again; 'c' closes them and
 * keeps the connection (idle mappings), end of file disconnects. */
static pid_t consumer(const struct test_daemon *d, const char *const *names, int ready,
                      const int go_pipe[2], int other_go)
{
  pid_t pid = fork();
  int go = go_pipe[0];
  CHECK(pid >= 0);
  if (pid == 0) {
    /* the parent's closing its end is then an end of file here (and in no other) */
    close(go_pipe[1]);
    if (other_go >= 0)
      close(other_go);
    gpushm_t *conn = daemon_connect(d);
    gpushm_buffer_t *b[4];
    unsigned n = 0;
    char c;
    CHECK(read(go, &c, 1) == 1);
    for (; *names; names++, n++)
      CHECK_OK(gpushm_buffer_open(conn, *names, GPUSHM_OPEN_READONLY, &b[n]));
    CHECK(write(ready, "r", 1) == 1);
    while (read(go, &c, 1) == 1) {
      for (unsigned i = 0; i < n; i++)
        CHECK_OK(gpushm_buffer_close(b[i]));
      n = 0;
      CHECK(write(ready, "c", 1) == 1);
    }
    gpushm_disconnect(conn);
    CHECK(write(ready, "d", 1) == 1);
    pause(); /* until killed: the mappings went with the connection already */
    _exit(0);
  }
  return pid;
}

/* Device memory as the daemon sees it, once it holds still (contexts of processes that
 * just exited go back a little later). */
static uint64_t settled_free(const struct test_daemon *d)
{
  uint64_t was = device_free(d), now;
  while (usleep(100000), (now = device_free(d)) != was)
    was = now;
  return now;
}

static int segments_gone(const struct test_daemon *d, void *arg)
{
  gpushm_stats_t *s = daemon_stats(d);
  int gone = SEGMENT_SUM(s, GPUSHM_BACKEND_CUDA_FD, segments) == 0;
  (void)arg;
  gpushm_stats_free(s);
  return gone;
}

static void test_freed_after_last_mapper(void)
{
  static const char *const both[] = { "a", "b", NULL }, *const just_a[] = { "a", NULL };
  struct test_daemon d = { 0 };
  gpushm_t *conn;
  gpushm_buffer_t *a, *b;
  int ready[2], go[2], ready2[2], go2[2];
  struct free_want want = { 0, 0 };
  gpushm_stats_t *s;
  pid_t pid, killed, warm;
  char c;

  /* No pool: a segment nobody holds goes straight back to the driver. */
  daemon_start(&d, "--pool-bytes", "0", NULL);
  /* A buffer opened in a segment the process maps costs no driver call: each consumer
   * imports the segment of both its buffers once, and a second import fails. */
  setenv("GPUSHM_CUDA_FAULTS", "cuMemImportFromShareableHandle=CUDA_ERROR_INVALID_VALUE@2", 1);
  CHECK(pipe(ready) == 0 && pipe(go) == 0 && pipe(ready2) == 0 && pipe(go2) == 0);
  pid = consumer(&d, both, ready[1], go, go2[1]);
  killed = consumer(&d, just_a, ready2[1], go2, go[1]);
  /* The daemon's context, made by a process of its own: CUDA here only after the forks. */
  if ((warm = fork()) == 0) {
    gpushm_t *w = daemon_connect(&d);
    CHECK_OK(gpushm_buffer_close_unlink(create(w, "warm", 1, GPUSHM_BACKEND_CUDA_FD, 0, 0600)));
    gpushm_disconnect(w);
    _exit(0);
  }
  check_child(warm);
  /* This process imports a buffer of its own allocation (below), then two segments, one
   * after the other: a fourth import fails. */
  setenv("GPUSHM_CUDA_FAULTS", "cuMemImportFromShareableHandle=CUDA_ERROR_INVALID_VALUE@4", 1);
  conn = daemon_connect(&d);
  /* This process's context, which lives as long as it does, is part of the baseline: a
   * buffer past the carve limit (an allocation of its own, freed at its last close) makes
   * it without mapping a segment. */
  CHECK_OK(gpushm_buffer_close_unlink(create(conn, "context", 2 * GPUSHM_LIMIT_CARVE_DEVICE,
                                             GPUSHM_BACKEND_CUDA_FD, 0, 0600)));
  gpushm_disconnect(conn);
  CHECK(wait_until(segments_gone, &d, NULL));
  want.baseline = settled_free(&d);

  conn = daemon_connect(&d);
  a = create(conn, "a", MiB, GPUSHM_BACKEND_CUDA_FD, 0, 0644);
  b = create(conn, "b", MiB, GPUSHM_BACKEND_CUDA_FD, 0, 0644);
  CHECK(segment_of(conn, "a") == segment_of(conn, "b"));
  if (getenv("GPUSHM_SEGMENTS_REAL_GPU")) {
    s = daemon_stats(&d);
    want.slack = SEGMENT_SUM(s, GPUSHM_BACKEND_CUDA_FD, bytes) / 2;
    gpushm_stats_free(s);
    CHECK(want.slack > 0);
  }
  CHECK(write(go[1], "o", 1) == 1);
  CHECK(read(ready[0], &c, 1) == 1 && c == 'r');
  CHECK_OK(gpushm_buffer_close_unlink(a));
  CHECK_OK(gpushm_buffer_close_unlink(b));
  gpushm_disconnect(conn);
  CHECK(write(go[1], "c", 1) == 1); /* the consumer closes both, and stays */
  CHECK(read(ready[0], &c, 1) == 1 && c == 'c');
  s = daemon_stats(&d);
  CHECK(gpushm_stats_buffers(s) == 0);
  /* no buffer left, and still allocated: its idle mapping */
  CHECK(SEGMENT_SUM(s, GPUSHM_BACKEND_CUDA_FD, segments) == 1);
  CHECK(SEGMENT_SUM(s, GPUSHM_BACKEND_CUDA_FD, mappings) == 1);
  gpushm_stats_free(s);
  close(go[1]); /* it disconnects: the segment goes back to the driver */
  CHECK(read(ready[0], &c, 1) == 1 && c == 'd');
  CHECK(wait_until(segments_gone, &d, NULL));
  kill(pid, SIGKILL); /* and with it its context: everything is back */
  waitpid(pid, NULL, 0);
  CHECK(free_back_to(&d, &want));

  /* A mapper SIGKILLed while it holds a buffer in the segment. */
  conn = daemon_connect(&d);
  a = create(conn, "a", MiB, GPUSHM_BACKEND_CUDA_FD, 0, 0644);
  CHECK(write(go2[1], "o", 1) == 1);
  CHECK(read(ready2[0], &c, 1) == 1 && c == 'r');
  CHECK_OK(gpushm_buffer_close_unlink(a));
  gpushm_disconnect(conn);
  s = daemon_stats(&d);
  CHECK(SEGMENT_SUM(s, GPUSHM_BACKEND_CUDA_FD, segments) == 1); /* the consumer holds "a" */
  gpushm_stats_free(s);
  kill(killed, SIGKILL);
  waitpid(killed, NULL, 0);
  CHECK(wait_until(segments_gone, &d, NULL));
  CHECK(free_back_to(&d, &want));
  unsetenv("GPUSHM_CUDA_FAULTS");
  close(go2[1]);
  daemon_stop(&d);
  test_log("device memory back to %llu MiB free after the last mapper unmapped, and after "
           "one was SIGKILLed", (unsigned long long)(want.baseline >> 20));
}

/* A reused slot of device memory comes back zeroed: the creator's library clears it (the
 * fake driver's device memory is this process's memory, read here directly). */
static void test_device_slot_cleared(void)
{
  struct test_daemon d = { 0 };
  gpushm_buffer_t *b;
  gpushm_t *conn;
  void *first;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  b = create(conn, "dirty", 64 * KiB, GPUSHM_BACKEND_CUDA_FD, 0, 0600);
  CHECK(all_are(gpushm_buffer_ptr(b), 64 * KiB, 0)); /* a new allocation */
  first = gpushm_buffer_ptr(b);
  memset(first, 0xab, 64 * KiB);
  CHECK_OK(gpushm_buffer_close_unlink(b));
  b = create(conn, "clean", 64 * KiB, GPUSHM_BACKEND_CUDA_FD, 0, 0600);
  CHECK(gpushm_buffer_ptr(b) == first); /* the same slot, mapped once */
  CHECK(all_are(gpushm_buffer_ptr(b), 64 * KiB, 0));
  memset(first, 0xcd, 64 * KiB);
  CHECK_OK(gpushm_buffer_close_unlink(b));
  /* a creator that overwrites it anyway skips the clear, and sees what the slot held */
  b = create_flags(conn, "overwritten", 64 * KiB, GPUSHM_BACKEND_CUDA_FD, 0, 0600,
                   GPUSHM_CREATE_UNINITIALIZED);
  CHECK(gpushm_buffer_ptr(b) == first);
  CHECK(all_are(gpushm_buffer_ptr(b), 64 * KiB, 0xcd));
  CHECK_OK(gpushm_buffer_close_unlink(b));
  b = create(conn, "clean-again", 64 * KiB, GPUSHM_BACKEND_CUDA_FD, 0, 0600);
  CHECK(gpushm_buffer_ptr(b) == first && all_are(first, 64 * KiB, 0));
  CHECK_OK(gpushm_buffer_close_unlink(b));
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

/* GPUSHM_CREATE_UNINITIALIZED as uid 65534, after root left a secret in a freed slot of
 * the same size, backend and device (a warm slot, for host memory): the attacker's create
 * gets a slot of its own class, never root's, so it reads zeros.  And in root's own
 * class, host memory is zeroed whatever the flag says. */
static void test_uninitialized_attack(void)
{
  static const gpushm_backend_t backends[] = { GPUSHM_BACKEND_HOST, GPUSHM_BACKEND_CUDA_FD };
  struct test_daemon d = { 0 };
  gpushm_buffer_t *b;
  gpushm_t *conn;
  pid_t pid;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  for (unsigned i = 0; i < 2; i++) {
    b = create(conn, "root-secret", 64 * KiB, backends[i], 0, 0644);
    memset(gpushm_buffer_ptr(b), 0x5e, 64 * KiB);
    CHECK_OK(gpushm_buffer_close_unlink(b));
  }
  CHECK((pid = fork()) >= 0);
  if (pid == 0) {
    gpushm_local_device_list_t *devices;
    gpushm_t *mine;

    CHECK_OK(gpushm_local_devices(&devices)); /* the fake driver loads as root */
    gpushm_local_device_list_free(devices);
    CHECK(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(65534) == 0);
    mine = daemon_connect(&d);
    for (unsigned i = 0; i < 2; i++)
      for (int mode = 0600; mode <= 0644; mode += 0044) { /* 0600, 0644 */
        char name[32];
        snprintf(name, sizeof name, "attacker-%u-%o", i, (unsigned)mode);
        gpushm_buffer_t *a = create_flags(mine, name, 64 * KiB, backends[i], 0, (uint32_t)mode,
                                          GPUSHM_CREATE_UNINITIALIZED);
        CHECK(all_are(gpushm_buffer_ptr(a), 64 * KiB, 0));
        CHECK_OK(gpushm_buffer_close_unlink(a));
      }
    gpushm_disconnect(mine);
    _exit(0);
  }
  check_child(pid);
  b = create_flags(conn, "root-again", 64 * KiB, GPUSHM_BACKEND_HOST, 0, 0644,
                   GPUSHM_CREATE_UNINITIALIZED);
  CHECK(all_are(gpushm_buffer_ptr(b), 64 * KiB, 0));
  CHECK_OK(gpushm_buffer_close_unlink(b));
  { /* only a buffer's bytes are its creator's to write: other kinds refuse the flag */
    gpushm_create_opts_t opts;
    gpushm_timeline_t *tl;
    gpushm_event_t *ev;
    gpushm_ring_t *ring;

    gpushm_create_opts_init(&opts);
    opts.flags = GPUSHM_CREATE_UNINITIALIZED;
    CHECK_ERR(gpushm_timeline_create(conn, "tl", &opts, &tl), GPUSHM_E_INVAL);
    CHECK(strstr(gpushm_last_error_message(), "a timeline starts from state") != NULL);
    CHECK_ERR(gpushm_event_create(conn, "ev", &opts, &ev), GPUSHM_E_INVAL);
    CHECK_ERR(gpushm_ring_create(conn, "ring", 4, 4096, &opts, &ring), GPUSHM_E_INVAL);
    CHECK(strstr(gpushm_last_error_message(), "a ring starts from state") != NULL);
  }
  gpushm_disconnect(conn);
  daemon_stop(&d);
  test_log("uid 65534's uninitialized creates after root freed host and device slots of "
           "0x5e: zeros; root's own uninitialized host create: zeros; events, timelines and "
           "rings refuse the flag");
}

static void test_oom_with_warm_pool(void)
{
  struct test_daemon d = { 0 };
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b[64], *other;
  gpushm_stats_t *s;
  gpushm_t *conn;
  int n = 0, r;

  setenv("GPUSHM_FAKE_CUDA_MEMORY", "16777216", 1);
  /* the device runs out, not the uid's quota (half of it by default) */
  daemon_start(&d, "--pool-bytes", "1G", "--allow-legacy-ipc", "yes",
               "--max-device-bytes-per-uid", "0", NULL);
  conn = daemon_connect(&d);
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_IPC;
  /* one class takes all the device has */
  for (;;) {
    char name[32];
    snprintf(name, sizeof name, "hog-%d", n);
    if ((r = gpushm_buffer_create(conn, name, MiB, &opts, &b[n])) < 0)
      break;
    CHECK(++n < 64);
  }
  CHECK_ERR(r, GPUSHM_E_NOMEM);
  CHECK(n >= 4);
  for (int i = 0; i < n; i++)
    CHECK_OK(gpushm_buffer_close_unlink(b[i]));
  gpushm_disconnect(conn);
  s = daemon_stats(&d);
  CHECK(SEGMENT_SUM(s, GPUSHM_BACKEND_CUDA_IPC, pooled) > 0);
  gpushm_stats_free(s);
  /* another class needs memory: the pool gives it back */
  conn = daemon_connect(&d);
  opts.mode = 0640;
  CHECK_OK(gpushm_buffer_create(conn, "other", 4 * MiB, &opts, &other));
  s = daemon_stats(&d);
  test_log("pooled after another class's create: %llu bytes",
           (unsigned long long)SEGMENT_SUM(s, GPUSHM_BACKEND_CUDA_IPC, pooled_bytes));
  CHECK(SEGMENT_SUM(s, GPUSHM_BACKEND_CUDA_IPC, pooled) == 0);
  gpushm_stats_free(s);
  CHECK_OK(gpushm_buffer_close_unlink(other));
  gpushm_disconnect(conn);
  daemon_stop(&d);
  unsetenv("GPUSHM_FAKE_CUDA_MEMORY");
}

int main(void)
{
  fake_lib = getenv("GPUSHM_FAKE_CUDA_LIB");
  if (getenv("GPUSHM_SEGMENTS_REAL_GPU")) {
    /* tests/gpu/test-cuda-segments.sh: the device half with the real driver, one GPU */
    real_gpu = true;
    test_classes(true);
    test_freed_after_last_mapper();
    return 0;
  }
  test_churn();
  test_warm_slots();
  test_host_fds();
  test_idle_limit();
  test_pool_limit();
  if (!fake_lib || access(fake_lib, R_OK) != 0) {
    test_classes(false);
    test_log("no fake CUDA driver: device segments not tested");
    return 0;
  }
  /* daemon and this process (and its children) use the fake driver, two devices */
  setenv("GPUSHM_CUDA_LIBRARY", fake_lib, 1);
  setenv("GPUSHM_FAKE_CUDA_DEVICES", "2", 1);
  test_classes(true);
  /* In a child: this process must load the driver only in the next test, which arms a
   * fault for it. */
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    test_device_slot_cleared();
    test_uninitialized_attack();
    test_oom_with_warm_pool();
    _exit(0);
  }
  check_child(pid);
  test_freed_after_last_mapper();
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* Pipelined opens and creates (gpushm_buffer_open_start(), gpushm_buffer_create_start(),
 * gpushm_pending_finish()), with the host backend and, where it is built, the fake CUDA
 * driver's cuda-fd:
 *  - a stream of creates and opens, finished in order and out of it, with a call of the
 *    connection's own (a ping) between start and finish, each handle the one asked for;
 *  - what the daemon refuses comes back from the finish, with its own message, after
 *    another call failed meanwhile; what the start can check is refused by the start;
 *  - GPUSHM_LIMIT_PENDING_PER_CONN crossed; an open of a handle the connection has
 *    costs no request; a finish without out closes;
 *  - uid 65534 cannot open through a start what it cannot open;
 *  - threads sharing a connection, each pipelining;
 *  - the daemon killed with starts out: each finish says so;
 *  - a segment that a reply on its way names is not unmapped meanwhile (the idle limit
 *    crossed with a create out; another connection's last user of it gone);
 *  - a start before fork() is refused in the child; a default map device is the
 *    starting thread's, whichever thread reads the reply; a call that read another
 *    start's refusal on the way still succeeds with no error of its own. */
#include "config.h"
#include "gpushm_limits.h"
#include "harness.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define KiB 1024u

static gpushm_backend_t backend = GPUSHM_BACKEND_HOST;

static uint64_t requests(const struct test_daemon *d)
{
  gpushm_stats_t *s = daemon_stats(d);
  uint64_t n = gpushm_stats_requests(s);
  gpushm_stats_free(s);
  return n;
}

static gpushm_create_opts_t opts_of(uint32_t mode)
{
  gpushm_create_opts_t o;
  gpushm_create_opts_init(&o);
  o.backend = backend;
  o.mode = mode;
  return o;
}

/* Host memory is written here; device memory (the fake driver's, this process's
 * memory) too. */
static void fill(gpushm_buffer_t *b, unsigned value)
{
  unsigned *p = gpushm_buffer_ptr(b);
  CHECK(p != NULL);
  for (unsigned i = 0; i < 4 * KiB / sizeof *p; i++)
    p[i] = value;
}

static unsigned first_word(gpushm_buffer_t *b)
{
  const unsigned *p = gpushm_buffer_ptr(b);
  CHECK(p != NULL);
  return p[4 * KiB / sizeof *p - 1];
}

static void test_stream(void)
{
  enum { N = 8 };
  struct test_daemon d = { 0 };
  gpushm_pending_t *pc[N], *po[N];
  gpushm_buffer_t *made[N], *seen[N];
  gpushm_create_opts_t o = opts_of(0600);
  gpushm_t *producer, *consumer;
  char name[32];

  daemon_start(&d, NULL);
  producer = daemon_connect(&d);
  consumer = daemon_connect(&d);
  for (unsigned i = 0; i < N; i++) {
    snprintf(name, sizeof name, "stream-%u", i);
    CHECK_OK(gpushm_buffer_create_start(producer, name, 4 * KiB, &o, &pc[i]));
  }
  CHECK_OK(gpushm_ping(producer)); /* reads past all eight replies, keeping them */
  /* out of order: the last first, then the rest */
  CHECK_OK(gpushm_pending_finish(pc[N - 1], &made[N - 1]));
  for (unsigned i = 0; i < N - 1; i++)
    CHECK_OK(gpushm_pending_finish(pc[i], &made[i]));
  for (unsigned i = 0; i < N; i++) {
    snprintf(name, sizeof name, "stream-%u", i);
    CHECK(strcmp(gpushm_buffer_name(made[i]), name) == 0);
    CHECK(gpushm_buffer_size(made[i]) == 4 * KiB);
    CHECK(gpushm_buffer_backend(made[i]) == backend);
    fill(made[i], 100 + i);
    CHECK_OK(gpushm_buffer_open_start(consumer, name, GPUSHM_OPEN_READONLY, &po[i]));
  }
  for (unsigned i = N; i-- > 0;) {
    snprintf(name, sizeof name, "stream-%u", i);
    CHECK_OK(gpushm_pending_finish(po[i], &seen[i]));
    CHECK(strcmp(gpushm_buffer_name(seen[i]), name) == 0);
    CHECK(gpushm_buffer_is_readonly(seen[i]));
    CHECK(gpushm_buffer_id(seen[i]) == gpushm_buffer_id(made[i]));
    CHECK(first_word(seen[i]) == 100 + i);
    CHECK(gpushm_buffer_info_my_refs(find_buffer(consumer, name)) == 1);
    CHECK_OK(gpushm_buffer_close(seen[i]));
    CHECK_OK(gpushm_buffer_close_unlink(made[i]));
  }
  CHECK_OK(gpushm_ping(producer));
  for (unsigned i = 0; i < N; i++) {
    snprintf(name, sizeof name, "stream-%u", i);
    CHECK(find_buffer(consumer, name) == NULL);
  }
  gpushm_disconnect(producer);
  gpushm_disconnect(consumer);
  daemon_stop(&d);
}

static void test_refusals_and_limit(void)
{
  struct test_daemon d = { 0 };
  gpushm_pending_t *p[GPUSHM_PENDING_MAX + 1], *dup, *missing, *cached, *given_up;
  gpushm_create_opts_t o = opts_of(0600);
  gpushm_buffer_t *b, *again;
  gpushm_t *conn;
  uint64_t before, per_look;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_create(conn, "taken", 4 * KiB, &o, &b));

  /* the daemon's refusals come from the finish, each with its own message, although a
   * failed call came between */
  CHECK_OK(gpushm_buffer_create_start(conn, "taken", 4 * KiB, &o, &dup));
  CHECK_OK(gpushm_buffer_open_start(conn, "nobody-made-this", 0, &missing));
  CHECK_ERR(gpushm_unlink(conn, "nor-this"), GPUSHM_E_NOENT);
  CHECK_ERR(gpushm_pending_finish(missing, &again), GPUSHM_E_NOENT);
  CHECK(again == NULL);
  CHECK(strstr(gpushm_last_error_message(), "nobody-made-this") != NULL);
  CHECK_ERR(gpushm_pending_finish(dup, &again), GPUSHM_E_EXIST);
  CHECK(strstr(gpushm_last_error_message(), "taken") != NULL);

  /* what a start checks itself */
  CHECK_ERR(gpushm_buffer_create_start(conn, "-bad", 4 * KiB, &o, &dup), GPUSHM_E_NAME);
  CHECK(dup == NULL);
  CHECK_ERR(gpushm_buffer_open_start(conn, NULL, 0, &dup), GPUSHM_E_NAME);
  CHECK_ERR(gpushm_buffer_open_start(conn, "taken", 0, NULL), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_buffer_open_start(conn, "taken", 0x40000000u, &dup), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_pending_finish(NULL, &again), GPUSHM_E_INVAL);

  /* an open of a handle this connection has: answered at once, no request */
  before = requests(&d);
  per_look = requests(&d) - before; /* (what asking for the count costs) */
  before += per_look;
  CHECK_OK(gpushm_buffer_open_start(conn, "taken", 0, &cached));
  CHECK_OK(gpushm_pending_finish(cached, &again));
  CHECK(again == b);
  CHECK(requests(&d) == before + per_look);
  CHECK_OK(gpushm_buffer_close(again));

  /* the limit, crossed; one finished makes room */
  for (unsigned i = 0; i < GPUSHM_PENDING_MAX; i++) {
    char name[32];
    snprintf(name, sizeof name, "many-%u", i);
    CHECK_OK(gpushm_buffer_create_start(conn, name, 4 * KiB, &o, &p[i]));
  }
  CHECK_ERR(gpushm_buffer_create_start(conn, "one-too-many", 4 * KiB, &o, &p[GPUSHM_PENDING_MAX]),
            GPUSHM_E_LIMIT);
  CHECK(strstr(gpushm_last_error_message(), "GPUSHM_PENDING_MAX") != NULL);
  CHECK_ERR(gpushm_buffer_open_start(conn, "many-0", 0, &p[GPUSHM_PENDING_MAX]),
            GPUSHM_E_LIMIT);
  CHECK_OK(gpushm_pending_finish(p[0], &again));
  CHECK_OK(gpushm_buffer_create_start(conn, "one-more", 4 * KiB, &o, &p[GPUSHM_PENDING_MAX]));
  for (unsigned i = 1; i <= GPUSHM_PENDING_MAX; i++) {
    gpushm_buffer_t *x;
    CHECK_OK(gpushm_pending_finish(p[i], &x));
    CHECK_OK(gpushm_buffer_close_unlink(x));
  }
  CHECK_OK(gpushm_buffer_close_unlink(again));

  /* a start made before fork() is the parent's: refused in the child, which leaves it
   * alone; the parent finishes it */
  {
    gpushm_pending_t *before_fork;
    pid_t pid;

    CHECK_OK(gpushm_buffer_open_start(conn, "taken-by-parent", 0, &before_fork));
    CHECK((pid = fork()) >= 0);
    if (pid == 0) {
      CHECK_ERR(gpushm_pending_finish(before_fork, &again), GPUSHM_E_INVAL);
      CHECK(strstr(gpushm_last_error_message(), "fork()") != NULL);
      _exit(0);
    }
    check_child(pid);
    CHECK_ERR(gpushm_pending_finish(before_fork, &again), GPUSHM_E_NOENT);
    CHECK(strstr(gpushm_last_error_message(), "taken-by-parent") != NULL);
  }

  /* a start given up on: the finish without out closes what it opened */
  CHECK_OK(gpushm_buffer_create_start(conn, "given-up", 4 * KiB, &o, &given_up));
  CHECK_OK(gpushm_pending_finish(given_up, NULL));
  CHECK(gpushm_buffer_info_my_refs(find_buffer(conn, "given-up")) == 0);
  CHECK_OK(gpushm_unlink(conn, "given-up"));

  CHECK_OK(gpushm_buffer_close_unlink(b));
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

/* uid 65534 starts opens of root's 0600 buffer, read-write and read-only, and of its
 * 0644 buffer read-write: each finish is refused as gpushm_buffer_open() is. */
static void test_attack(void)
{
  struct test_daemon d = { 0 };
  gpushm_create_opts_t private = opts_of(0600), readable = opts_of(0644);
  gpushm_buffer_t *secret, *shown;
  gpushm_t *conn;
  pid_t pid;

  if (backend != GPUSHM_BACKEND_HOST)
    return; /* (the fake driver loads as root only: the rule is the daemon's, either way) */
  daemon_start(&d, NULL);
  CHECK(chmod(d.dir, 0755) == 0);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_create(conn, "secret", 4 * KiB, &private, &secret));
  CHECK_OK(gpushm_buffer_create(conn, "shown", 4 * KiB, &readable, &shown));
  fill(secret, 7);
  CHECK((pid = fork_as(65534, 65534)) >= 0);
  if (pid == 0) {
    gpushm_t *nobody = daemon_connect(&d);
    gpushm_pending_t *rw, *ro, *shown_rw, *shown_ro;
    gpushm_buffer_t *got = (gpushm_buffer_t *)1;

    CHECK_OK(gpushm_buffer_open_start(nobody, "secret", 0, &rw));
    CHECK_OK(gpushm_buffer_open_start(nobody, "secret", GPUSHM_OPEN_READONLY, &ro));
    CHECK_OK(gpushm_buffer_open_start(nobody, "shown", 0, &shown_rw));
    CHECK_OK(gpushm_buffer_open_start(nobody, "shown", GPUSHM_OPEN_READONLY, &shown_ro));
    CHECK(gpushm_pending_finish(rw, &got) < 0 && got == NULL);
    CHECK(gpushm_pending_finish(ro, &got) < 0 && got == NULL);
    CHECK(gpushm_pending_finish(shown_rw, &got) < 0 && got == NULL);
    CHECK_OK(gpushm_pending_finish(shown_ro, &got)); /* what it may do, it may */
    CHECK(gpushm_buffer_is_readonly(got));
    CHECK_OK(gpushm_buffer_close(got));
    gpushm_disconnect(nobody);
    _exit(0);
  }
  check_child(pid);
  CHECK(first_word(secret) == 7);
  CHECK(gpushm_buffer_info_refs(find_buffer(conn, "secret")) == 1);
  CHECK_OK(gpushm_buffer_close_unlink(secret));
  CHECK_OK(gpushm_buffer_close_unlink(shown));
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

struct worker {
  gpushm_t *conn;
  unsigned id;
};

/* Each thread pipelines creates and opens of its own names on the shared connection,
 * with pings between: every reply reaches the start it answers. */
static void *pipeline(void *arg)
{
  const struct worker *w = arg;
  gpushm_create_opts_t o = opts_of(0600);

  for (unsigned round = 0; round < 100; round++) {
    gpushm_pending_t *c[3], *op;
    gpushm_buffer_t *b[3], *again;
    char name[3][48];

    for (unsigned i = 0; i < 3; i++) {
      snprintf(name[i], sizeof name[i], "w%u-r%u-%u", w->id, round, i);
      CHECK_OK(gpushm_buffer_create_start(w->conn, name[i], 4 * KiB, &o, &c[i]));
    }
    if (round % 3 == 0)
      CHECK_OK(gpushm_ping(w->conn));
    for (unsigned i = 0; i < 3; i++) {
      CHECK_OK(gpushm_pending_finish(c[(i + round) % 3], &b[(i + round) % 3]));
      CHECK(strcmp(gpushm_buffer_name(b[(i + round) % 3]), name[(i + round) % 3]) == 0);
    }
    CHECK_OK(gpushm_buffer_open_start(w->conn, name[1], 0, &op)); /* cached: ours */
    CHECK_OK(gpushm_pending_finish(op, &again));
    CHECK(again == b[1]);
    CHECK_OK(gpushm_buffer_close(again));
    for (unsigned i = 0; i < 3; i++)
      CHECK_OK(gpushm_buffer_close_unlink(b[i]));
  }
  return NULL;
}

static void test_threads(void)
{
  enum { THREADS = 4 };
  struct test_daemon d = { 0 };
  struct worker w[THREADS];
  pthread_t t[THREADS];
  gpushm_t *conn;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  for (unsigned i = 0; i < THREADS; i++) {
    w[i] = (struct worker){ conn, i };
    CHECK(pthread_create(&t[i], NULL, pipeline, &w[i]) == 0);
  }
  for (unsigned i = 0; i < THREADS; i++)
    CHECK(pthread_join(t[i], NULL) == 0);
  CHECK_OK(gpushm_ping(conn));
  {
    gpushm_stats_t *s = daemon_stats(&d);
    CHECK(gpushm_stats_buffers(s) == 0);
    gpushm_stats_free(s);
  }
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

static void test_daemon_killed(void)
{
  struct test_daemon d = { 0 };
  gpushm_create_opts_t o = opts_of(0600);
  gpushm_pending_t *p[3];
  gpushm_buffer_t *b;
  gpushm_t *conn;
  int status;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_create(conn, "there", 4 * KiB, &o, &b));
  CHECK(kill(d.pid, SIGSTOP) == 0); /* the starts go out; no reply comes */
  CHECK_OK(gpushm_buffer_create_start(conn, "never-0", 4 * KiB, &o, &p[0]));
  CHECK_OK(gpushm_buffer_open_start(conn, "never-1", 0, &p[1]));
  CHECK_OK(gpushm_buffer_create_start(conn, "never-2", 4 * KiB, &o, &p[2]));
  CHECK(kill(d.pid, SIGKILL) == 0);
  CHECK(waitpid(d.pid, &status, 0) == d.pid);
  CHECK_ERR(gpushm_pending_finish(p[1], NULL), GPUSHM_E_DISCONNECTED);
  CHECK_ERR(gpushm_pending_finish(p[0], NULL), GPUSHM_E_DISCONNECTED);
  CHECK_ERR(gpushm_buffer_open_start(conn, "there-again", 0, &p[1]), GPUSHM_E_DISCONNECTED);
  CHECK_ERR(gpushm_pending_finish(p[2], NULL), GPUSHM_E_DISCONNECTED);
  (void)gpushm_buffer_close(b);
  gpushm_disconnect(conn);
  unlink(d.socket);
  rmdir(d.dir);
}

static unsigned segments_mapped(gpushm_t *conn)
{
  gpushm_client_list_t *clients;
  unsigned n = 0;
  CHECK_OK(gpushm_clients(conn, &clients));
  for (size_t i = 0; i < gpushm_client_list_count(clients); i++)
    if (gpushm_client_info_pid(gpushm_client_list_get(clients, i)) == (uint32_t)getpid())
      n += gpushm_client_info_segments_mapped(gpushm_client_list_get(clients, i));
  gpushm_client_list_free(clients);
  return n;
}

/* One segment per class (a mode each).  Sixteen idle, the least recently used the
 * class of a create that is out (the daemon answers "you map it already"); another
 * close then passes the idle limit: that segment must stay until the reply is taken. */
static void test_segment_named_by_a_reply(void)
{
  const unsigned classes = GPUSHM_LIMIT_IDLE_SEGMENTS + 1;
  struct test_daemon d = { 0 };
  gpushm_buffer_t *held[GPUSHM_LIMIT_IDLE_SEGMENTS + 1], *b;
  gpushm_create_opts_t o;
  gpushm_pending_t *p;
  gpushm_t *conn;
  char name[32];

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  for (unsigned i = 0; i < classes; i++) {
    o = opts_of(0600 + i);
    snprintf(name, sizeof name, "class-%u", i);
    CHECK_OK(gpushm_buffer_create(conn, name, 4 * KiB, &o, &held[i]));
  }
  for (unsigned i = 1; i < classes; i++) /* class 1 idle first: least recently used */
    CHECK_OK(gpushm_buffer_close_unlink(held[i]));
  CHECK(segments_mapped(conn) == classes);
  o = opts_of(0600 + 1);
  CHECK_OK(gpushm_buffer_create_start(conn, "in-class-1", 4 * KiB, &o, &p));
  CHECK_OK(gpushm_buffer_close_unlink(held[0])); /* the seventeenth idle segment */
  CHECK_OK(gpushm_pending_finish(p, &b));
  fill(b, 42);
  CHECK(first_word(b) == 42);
  CHECK_OK(gpushm_buffer_close_unlink(b));
  /* the limit holds again once nothing is out */
  CHECK(segments_mapped(conn) == GPUSHM_LIMIT_IDLE_SEGMENTS);
  gpushm_disconnect(conn);
  daemon_stop(&d);
}


/* A reply on connection b may say "b maps this segment already" where the process
 * maps it through a (seg->conn == a): the first reply on b attached it, the library
 * told b to unmap it, and the second open on b was answered before that reached the
 * daemon.  a has nothing out, so evict() unmaps the segment meanwhile. */
static void test_reply_names_another_connections_segment(void)
{
  struct test_daemon d = { 0 };
  gpushm_create_opts_t o = opts_of(0600);
  gpushm_buffer_t *x, *h1, *h2 = NULL;
  gpushm_pending_t *p1, *p2;
  gpushm_t *a, *b;

  daemon_start(&d, NULL);
  a = daemon_connect(&d);
  b = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_create(a, "x", 4 * KiB, &o, &x)); /* its segment: a's */
  fill(x, 9);
  CHECK_OK(gpushm_buffer_open_start(b, "x", 0, &p1)); /* attaches the segment to b */
  CHECK_OK(gpushm_buffer_open_start(b, "x", 0, &p2)); /* "b maps it already" */
  CHECK_OK(gpushm_pending_finish(p1, &h1));           /* b told to unmap it */
  CHECK_OK(gpushm_buffer_close(h1));
  gpushm_disconnect(a);
  CHECK_OK(gpushm_buffer_close(x)); /* the segment's last user: unmapped (a is gone) */
  CHECK_OK(gpushm_pending_finish(p2, &h2));
  CHECK(first_word(h2) == 9);
  CHECK_OK(gpushm_buffer_close_unlink(h2));
  gpushm_disconnect(b);
  daemon_stop(&d);
}

/* The fake driver's contexts are 0x1000 + device, current per thread. */
static void make_current(int device)
{
  typedef int (*gpa_fn)(const char *, void **, int, unsigned long long, void *);
  void *lib = dlopen(getenv("GPUSHM_FAKE_CUDA_LIB"), RTLD_NOW);
  gpa_fn gpa = lib ? (gpa_fn)dlsym(lib, "cuGetProcAddress_v2") : NULL;
  int (*set)(void *) = NULL;
  int status;

  CHECK(gpa && gpa("cuCtxSetCurrent", (void **)&set, 12000, 0, &status) == 0 && set);
  CHECK(set(device < 0 ? NULL : (void *)(uintptr_t)(0x1000 + device)) == 0);
}

static void *ping_conn(void *arg)
{
  CHECK_OK(gpushm_ping(arg)); /* a thread with no context current reads the reply */
  return NULL;
}

/* An open started on a thread whose current context is device 1's maps for device 1,
 * as gpushm_buffer_open() there would, whoever reads its reply. */
static void test_map_device_of_the_start(void)
{
  struct test_daemon d = { 0 };
  gpushm_create_opts_t o = opts_of(0600);
  gpushm_buffer_t *made, *sync, *piped;
  gpushm_pending_t *p;
  gpushm_t *producer, *consumer;
  pthread_t t;

  daemon_start(&d, NULL);
  producer = daemon_connect(&d);
  consumer = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_create(producer, "on-0", 4 * KiB, &o, &made));
  CHECK(gpushm_buffer_map_device(made) == 0);
  make_current(1);
  CHECK_OK(gpushm_buffer_open(consumer, "on-0", GPUSHM_OPEN_READONLY, &sync));
  test_log("synchronous open, device 1 current: mapped for device %d",
           gpushm_buffer_map_device(sync));
  CHECK_OK(gpushm_buffer_close(sync));
  CHECK_OK(gpushm_ping(consumer));
  CHECK_OK(gpushm_buffer_open_start(consumer, "on-0", GPUSHM_OPEN_READONLY, &p));
  CHECK(pthread_create(&t, NULL, ping_conn, consumer) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK_OK(gpushm_pending_finish(p, &piped));
  test_log("pipelined open, device 1 current, reply read by another thread: mapped for "
           "device %d", gpushm_buffer_map_device(piped));
  CHECK(gpushm_buffer_map_device(piped) == 1);
  CHECK_OK(gpushm_buffer_close(piped));
  make_current(-1);
  CHECK_OK(gpushm_buffer_close_unlink(made));
  gpushm_disconnect(producer);
  gpushm_disconnect(consumer);
  daemon_stop(&d);
}

/* A call that succeeds leaves "" as the last error, though it read a refusal that was
 * another start's. */
static void test_error_left_by_a_success(void)
{
  struct test_daemon d = { 0 };
  gpushm_pending_t *p;
  gpushm_t *conn;

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open_start(conn, "nobody-made-this", 0, &p));
  CHECK_OK(gpushm_ping(conn));
  test_log("after a successful ping: '%s'", gpushm_last_error_message());
  CHECK(gpushm_last_error_message()[0] == '\0');
  CHECK_ERR(gpushm_pending_finish(p, NULL), GPUSHM_E_NOENT);
  gpushm_disconnect(conn);
  daemon_stop(&d);
}

int main(void)
{
  const char *fake_lib = getenv("GPUSHM_FAKE_CUDA_LIB");

  test_error_left_by_a_success();
  test_stream();
  test_refusals_and_limit();
  test_attack();
  test_threads();
  test_daemon_killed();
  test_segment_named_by_a_reply();
  test_reply_names_another_connections_segment();
  if (!fake_lib || access(fake_lib, R_OK) != 0) {
    test_log("no fake CUDA driver: cuda-fd not tested");
    return 0;
  }
  setenv("GPUSHM_CUDA_LIBRARY", fake_lib, 1);
  setenv("GPUSHM_FAKE_CUDA_DEVICES", "2", 1);
  backend = GPUSHM_BACKEND_CUDA_FD;
  test_map_device_of_the_start();
  test_stream();
  test_refusals_and_limit();
  test_segment_named_by_a_reply();
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* Weight sets (docs/weights.md), on host memory (tests/gpu/ has device memory):
 *  - a publish and an open from another connection: the generation's number, every
 *    tensor's name, place and words, found by name; the publisher's own handle;
 *  - generations: a reader holding generation 1 reads it unchanged after 2 is
 *    published and its writer dropped its buffers; a fresh open gets 2; the holder of 1
 *    sees newest() = 2 and wait_newer() returns at once; a thread waiting in
 *    wait_newer() on 2 wakes when 3 comes (how late, printed); gpushmctl show says the
 *    newest and who holds each older one; once every holder of 1 let go, its buffers
 *    are freed (the daemon's object count back where it was);
 *  - published buffers take no new writer (another connection's read-write open of one
 *    is refused), and a buffer another connection holds read-write is not published;
 *    a publish after a generation that is not the current one is refused (two
 *    publishers); a weight set's name opens no buffer and a buffer's name takes no
 *    publish;
 *  - permissions, attacked as uid 65534 (where the test is root): a 0600 set is not
 *    seen; a 0644 set is read but not published to; its buffers open neither
 *    read-write nor through a generation the attacker does not hold, nor as buffers of
 *    a generation that has none of that id; the manifest's fd stays what the publisher
 *    sealed (no writable mapping, mprotect, /proc/self/fd reopen, ftruncate, fallocate);
 *    a buffer less readable than its set is not published;
 *  - lying manifests, published raw past the library: an element past its buffer, a
 *    misaligned one, a name twice, a buffer index past the generation's: published (the
 *    daemon never parses a manifest), refused at every open, naming the tensor; a memfd
 *    not sealed, an fd that is no memfd, and a tensor count past
 *    GPUSHM_LIMIT_WEIGHT_TENSORS, refused at publish;
 *  - limits: GPUSHM_LIMIT_WEIGHT_GENERATIONS generations alive, then a refusal; more
 *    than GPUSHM_LIMIT_WEIGHT_BUFFERS buffers (in a builder, and published raw); a
 *    manifest past GPUSHM_LIMIT_WEIGHT_MANIFEST bytes;
 *  - a publisher SIGKILLed after its publish (its session buffers unlinked with it):
 *    readers read its generation whole; one SIGKILLed before it: the set stays where
 *    it was; a session set's creator gone (after another connection published its
 *    second generation): the set's name goes, and a waiter for a newer generation hears
 *    so;
 *  - copies into the reader's own memory (gpushm_weights_copy()): see test_copy() and
 *    test_copy_strided();
 *  - 1,000 generations published, followed by a reader and dropped: gpushmd's objects
 *    back where they were, its fds within 2 (segments kept warm), its resident memory
 *    within 2 MiB (printed; not checked under ASan or valgrind, whose quarantines keep
 *    what is freed). */
#include "config.h"
#include "gpushm-weights.h"
#include "harness.h"
#include "raw.h"
#include "shm_layout.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct test_daemon d;

#define ROWS 64
#define COLS 32
#define TENSORS 3 /* per generation: "w0", "w1" (one buffer), "bias" (another) */

static gpushm_buffer_t *create_host(gpushm_t *conn, const char *name, uint64_t size,
                                    uint32_t mode, gpushm_lifetime_t lifetime)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;

  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_HOST;
  opts.mode = mode;
  opts.lifetime = lifetime;
  CHECK_OK(gpushm_buffer_create(conn, name, size, &opts, &b));
  return b;
}

/* What word i of generation g's tensor t holds. */
static uint32_t word(uint64_t g, unsigned t, size_t i)
{
  return (uint32_t)(g * 1000003u + t * 7919u + i);
}

struct generation {
  gpushm_buffer_t *weights, *bias;
};

/* Generation g of set name: two float32 matrices in one buffer, a bias in another,
 * written, published (mode for the first), the writer's handles kept in *out. */
static int publish_generation(gpushm_t *conn, const char *set, uint64_t g, uint32_t mode,
                              gpushm_lifetime_t lifetime, uint64_t after, struct generation *out,
                              gpushm_weights_t **published)
{
  const int64_t shape[2] = { ROWS, COLS }, bias_shape[1] = { COLS };
  const uint64_t matrix = ROWS * COLS * 4;
  gpushm_weights_publish_opts_t opts;
  gpushm_weights_builder_t *b;
  gpushm_tensor_desc_t desc;
  char name[64];
  uint32_t wi, bi;
  int r;

  snprintf(name, sizeof name, "%s-g%llu-w", set, (unsigned long long)g);
  out->weights = create_host(conn, name, 2 * matrix, mode, lifetime);
  snprintf(name, sizeof name, "%s-g%llu-b", set, (unsigned long long)g);
  out->bias = create_host(conn, name, COLS * 4, mode, lifetime);
  for (unsigned t = 0; t < 2; t++)
    for (size_t i = 0; i < ROWS * COLS; i++)
      ((uint32_t *)gpushm_buffer_ptr(out->weights))[t * ROWS * COLS + i] = word(g, t, i);
  for (size_t i = 0; i < COLS; i++)
    ((uint32_t *)gpushm_buffer_ptr(out->bias))[i] = word(g, 2, i);
  CHECK_OK(gpushm_weights_builder_new(&b));
  CHECK_OK(gpushm_weights_builder_add_buffer(b, out->weights, &wi));
  CHECK_OK(gpushm_weights_builder_add_buffer(b, out->bias, &bi));
  gpushm_tensor_desc_init(&desc);
  desc.dtype = (gpushm_dlpack_dtype_t){ GPUSHM_DLPACK_FLOAT, 32, 1 };
  desc.ndim = 2;
  desc.shape = shape;
  CHECK_OK(gpushm_weights_builder_add_tensor(b, "w0", wi, &desc));
  desc.offset = matrix;
  CHECK_OK(gpushm_weights_builder_add_tensor(b, "w1", wi, &desc));
  desc.offset = 0;
  desc.ndim = 1;
  desc.shape = bias_shape;
  CHECK_OK(gpushm_weights_builder_add_tensor(b, "bias", bi, &desc));
  gpushm_weights_publish_opts_init(&opts);
  opts.mode = mode;
  opts.lifetime = lifetime;
  opts.after = after;
  r = gpushm_weights_publish(conn, set, b, &opts, published);
  gpushm_weights_builder_free(b);
  return r;
}

static void drop_generation(struct generation *g)
{
  CHECK_OK(gpushm_buffer_close_unlink(g->weights));
  CHECK_OK(gpushm_buffer_close_unlink(g->bias));
}

/* Every tensor of w right: names, shapes, places, words of generation g. */
static void check_generation(gpushm_weights_t *w, uint64_t g)
{
  static const char *const names[TENSORS] = { "w0", "w1", "bias" };

  CHECK(gpushm_weights_generation(w) == g);
  CHECK(gpushm_weights_tensor_count(w) == TENSORS);
  CHECK(gpushm_weights_buffer_count(w) == 2);
  for (unsigned t = 0; t < TENSORS; t++) {
    gpushm_weight_tensor_t info;
    const uint32_t *p;
    long k = gpushm_weights_find(w, names[t]);
    size_t n = t < 2 ? ROWS * COLS : COLS;

    CHECK(k >= 0);
    CHECK_OK(gpushm_weights_tensor(w, (size_t)k, &info));
    CHECK(strcmp(info.name, names[t]) == 0 && info.name_len == strlen(names[t]));
    CHECK(info.desc.ndim == (t < 2 ? 2u : 1u) && info.desc.shape[0] == (t < 2 ? ROWS : COLS));
    CHECK(info.desc.strides[info.desc.ndim - 1] == 1);
    CHECK(info.desc.dtype.code == GPUSHM_DLPACK_FLOAT && info.desc.dtype.bits == 32);
    CHECK_OK(gpushm_weights_tensor_ptr(w, (size_t)k, (void **)&p));
    for (size_t i = 0; i < n; i++)
      CHECK(p[i] == word(g, t, i));
  }
  CHECK_ERR(gpushm_weights_find(w, "w2"), GPUSHM_E_NOENT);
}

static uint64_t requests(void)
{
  gpushm_stats_t *s = daemon_stats(&d);
  uint64_t n = gpushm_stats_requests(s);
  gpushm_stats_free(s);
  return n;
}

static size_t objects(void)
{
  gpushm_stats_t *s = daemon_stats(&d);
  size_t n = gpushm_stats_buffers(s);
  gpushm_stats_free(s);
  return n;
}

/* objects() once it is expected, or what it is after 10 s: a buffer's close is one-way
 * (not waited for), so a count asked on another connection may come before it. */
static size_t objects_settled(size_t expected)
{
  size_t n = objects();

  for (int i = 0; i < 10000 && n != expected; i++) {
    usleep(1000);
    n = objects();
  }
  return n;
}

#define CHECK_OBJECTS(n) CHECK(objects_settled(n) == (n))

struct waiter {
  gpushm_weights_t *w;
  int result;
  double woke_ms;
};

static void *wait_newer_thread(void *arg)
{
  struct waiter *wt = arg;
  wt->result = gpushm_weights_wait_newer(wt->w, 10000);
  wt->woke_ms = test_clock_ms();
  return NULL;
}

static void test_generations(void)
{
  gpushm_t *writer = daemon_connect(&d), *reader = daemon_connect(&d);
  struct generation g1, g2, g3;
  gpushm_weights_t *mine, *r1, *r2;
  struct waiter wt = { 0 };
  size_t baseline = objects();
  pthread_t th;
  double published;

  CHECK_OK(publish_generation(writer, "model", 1, 0644, GPUSHM_LIFETIME_PERSISTENT, 0, &g1,
                              &mine));
  CHECK(gpushm_weights_generation(mine) == 1 && gpushm_weights_newest(mine) == 1);
  check_generation(mine, 1);
  CHECK_OK(gpushm_weights_close(mine));
  CHECK_OK(gpushm_weights_open(reader, "model", &r1));
  check_generation(r1, 1);
  CHECK_ERR(gpushm_weights_wait_newer(r1, 0), GPUSHM_E_TIMEOUT);

  /* 2 published, 1's buffers dropped by their writer: its holder still reads 1 */
  CHECK_OK(publish_generation(writer, "model", 2, 0644, GPUSHM_LIFETIME_PERSISTENT, 1, &g2,
                              NULL));
  drop_generation(&g1);
  check_generation(r1, 1);
  CHECK(gpushm_weights_newest(r1) == 2);
  CHECK_OK(gpushm_weights_wait_newer(r1, 0));
  CHECK_OK(gpushm_weights_open(reader, "model", &r2));
  check_generation(r2, 2);

  /* a waiter on 2 wakes when 3 comes */
  wt.w = r2;
  CHECK(pthread_create(&th, NULL, wait_newer_thread, &wt) == 0);
  usleep(50000);
  published = test_clock_ms();
  CHECK_OK(publish_generation(writer, "model", 3, 0644, GPUSHM_LIFETIME_PERSISTENT, 2, &g3,
                              NULL));
  CHECK(pthread_join(th, NULL) == 0);
  CHECK_OK(wt.result);
  test_log("weights: a waiter for a generation newer than 2 woke %.2f ms after the publish of "
           "3 returned", wt.woke_ms - published);

  /* two publishers: the second, still after 2, is refused */
  {
    struct generation late;
    CHECK_ERR(publish_generation(writer, "model", 4, 0644, GPUSHM_LIFETIME_PERSISTENT, 2, &late,
                                 NULL), GPUSHM_E_EXIST);
    CHECK(strstr(gpushm_last_error_message(), "is at generation 3, not 2"));
    drop_generation(&late);
  }

  /* gpushmctl shows the newest and who holds the older ones */
  ctl_show_says(d.socket, "model", "generation: 3 (the newest); 3 tensors, manifest");
  ctl_show_says(d.socket, "model", "older:      generation 1 (id");
  ctl_show_says(d.socket, "model", "older:      generation 2 (id");
  ctl_show_says(d.socket, "model", "reader");
  /* generation 1 goes with its last holder; 2 and 3 stay */
  CHECK_OK(gpushm_weights_close(r1));
  CHECK_OK(gpushm_weights_close(r2));
  drop_generation(&g2);
  CHECK_OBJECTS(baseline + 3); /* 3 and its two buffers */
  drop_generation(&g3);
  CHECK_OBJECTS(baseline + 3); /* unlinked, pinned by generation 3 */
  CHECK_OK(gpushm_unlink(writer, "model"));
  CHECK_OBJECTS(baseline);
  gpushm_disconnect(reader);
  gpushm_disconnect(writer);
  test_log("weights: generations 1 to 3 published over each other's readers; each read "
           "whole by its holders until they let go, then freed with its buffers");
}

/* A generation of one uint8 tensor over all of buf. */
static int publish_named(gpushm_t *conn, const char *set, gpushm_buffer_t *buf, uint32_t mode,
                         const char *tensor, gpushm_weights_t **out);

static int publish_one(gpushm_t *conn, const char *set, gpushm_buffer_t *buf, uint32_t mode,
                       gpushm_weights_t **out)
{
  return publish_named(conn, set, buf, mode, "all", out);
}

/* A generation of one uint8 tensor named tensor over all of buf. */
static int publish_named(gpushm_t *conn, const char *set, gpushm_buffer_t *buf, uint32_t mode,
                         const char *tensor, gpushm_weights_t **out)
{
  const int64_t shape[1] = { (int64_t)gpushm_buffer_size(buf) };
  gpushm_weights_publish_opts_t opts;
  gpushm_weights_builder_t *b;
  gpushm_tensor_desc_t desc;
  uint32_t i;
  int r;

  CHECK_OK(gpushm_weights_builder_new(&b));
  CHECK_OK(gpushm_weights_builder_add_buffer(b, buf, &i));
  gpushm_tensor_desc_init(&desc);
  desc.ndim = 1;
  desc.shape = shape;
  CHECK_OK(gpushm_weights_builder_add_tensor(b, tensor, i, &desc));
  gpushm_weights_publish_opts_init(&opts);
  opts.mode = mode;
  r = gpushm_weights_publish(conn, set, b, &opts, out);
  gpushm_weights_builder_free(b);
  return r;
}

static void test_writers(void)
{
  gpushm_t *writer = daemon_connect(&d), *other = daemon_connect(&d);
  gpushm_buffer_t *b, *x, *theirs;
  struct generation g;
  gpushm_weights_t *w;

  CHECK_OK(publish_generation(writer, "frozen", 1, 0644, GPUSHM_LIFETIME_SESSION, 0, &g, NULL));
  /* published memory takes no new writer; readers still open it */
  CHECK_ERR(gpushm_buffer_open(other, "frozen-g1-w", 0, &b), GPUSHM_E_PERM);
  CHECK(strstr(gpushm_last_error_message(), "published weights"));
  CHECK_OK(gpushm_buffer_open(other, "frozen-g1-w", GPUSHM_OPEN_READONLY, &b));
  CHECK_OK(gpushm_buffer_close(b));
  /* a buffer another connection writes is not published until it lets go */
  x = create_host(writer, "frozen-x", 4096, 0666, GPUSHM_LIFETIME_SESSION);
  CHECK_OK(gpushm_buffer_open(other, "frozen-x", 0, &theirs));
  CHECK_ERR(publish_one(writer, "frozen", x, 0, NULL), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "is open read-write by client"));
  CHECK_OK(gpushm_buffer_close(theirs));
  CHECK_OK(gpushm_ping(other)); /* its close was one-way: gpushmd has it now */
  CHECK_OK(publish_one(writer, "frozen", x, 0, &w));
  CHECK(gpushm_weights_generation(w) == 2);
  CHECK_OK(gpushm_weights_close(w));
  /* one object, one name: a set is no buffer, a buffer's name takes no publish */
  CHECK_ERR(gpushm_buffer_open(other, "frozen", GPUSHM_OPEN_READONLY, &b), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_weights_open(other, "frozen-x", &w), GPUSHM_E_INVAL);
  CHECK_ERR(publish_one(writer, "frozen-g1-b", x, 0, NULL), GPUSHM_E_EXIST);
  /* a buffer its set's readers could not read */
  {
    gpushm_buffer_t *private = create_host(writer, "frozen-private", 4096, 0600,
                                           GPUSHM_LIFETIME_SESSION);
    CHECK_ERR(publish_one(writer, "frozen", private, 0, NULL), GPUSHM_E_INVAL);
    CHECK(strstr(gpushm_last_error_message(), "less readable than weight set 'frozen'"));
    CHECK_OK(gpushm_buffer_close(private));
  }
  gpushm_disconnect(other);
  CHECK_OK(gpushm_buffer_close(g.weights)); /* the connection ends with its last handle */
  CHECK_OK(gpushm_buffer_close(g.bias));
  CHECK_OK(gpushm_buffer_close(x));
  gpushm_disconnect(writer); /* a session set: gone with it, once gpushmd sees it go */
  other = daemon_connect(&d);
  for (int i = 0; i < 500 && gpushm_weights_open(other, "frozen", &w) == 0; i++) {
    CHECK_OK(gpushm_weights_close(w));
    usleep(10000);
  }
  CHECK_ERR(gpushm_weights_open(other, "frozen", &w), GPUSHM_E_NOENT);
  gpushm_disconnect(other);
  test_log("weights: published buffers take no new writer; a buffer another connection "
           "writes, or one less readable than its set, is not published; kinds kept apart");
}

/* The manifest's and the control block's fds as a reader gets them: nothing in them
 * can be changed by their receiver. */
static void check_unwritable(int fd, size_t size)
{
  char path[64];
  int again;
  void *p;

  CHECK(mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
  CHECK((p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0)) != MAP_FAILED);
  CHECK(mprotect(p, size, PROT_READ | PROT_WRITE) < 0 && errno == EACCES);
  munmap(p, size);
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  if ((again = open(path, O_RDWR)) >= 0) { /* then the seals hold it */
    CHECK(write(again, "x", 1) < 0);
    close(again);
  }
  CHECK(ftruncate(fd, 0) < 0);
  CHECK(fallocate(fd, 0, 0, 2 * size + 4096) < 0);
  CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) < 0);
}

static int raw_weights_connection(void)
{
  int sock = raw_connect(d.socket), status_fd;

  CHECK(raw_hello_features(sock, "weights-raw", GPUSHM_FEATURE_SEGMENTS | GPUSHM_FEATURE_WEIGHTS,
                           &status_fd) == 0);
  close(status_fd);
  return sock;
}

static void test_permissions(void)
{
  gpushm_t *owner = daemon_connect(&d);
  struct generation secret, public;
  gpushm_buffer_t *outside = create_host(owner, "public-outside", 4096, 0644,
                                         GPUSHM_LIFETIME_SESSION);
  gpushm_weights_t *mine;
  uint64_t public_id, outside_id = gpushm_buffer_id(outside);
  pid_t pid;

  CHECK_OK(publish_generation(owner, "secret", 1, 0600, GPUSHM_LIFETIME_SESSION, 0, &secret,
                              NULL));
  CHECK_OK(publish_generation(owner, "public", 1, 0644, GPUSHM_LIFETIME_SESSION, 0, &public,
                              &mine));
  public_id = gpushm_weights_id(mine);
  pid = geteuid() == 0 ? fork_as(65534, 65534) : fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *conn = daemon_connect(&d);
    gpushm_weights_t *w;
    gpushm_buffer_t *b;
    int sock = raw_weights_connection(), fds[GPUSHM_LIMIT_FDS_PER_FRAME];
    unsigned n_fds = 0;

    if (geteuid() != 0)
      CHECK_ERR(gpushm_weights_open(conn, "secret", &w), GPUSHM_E_NOENT);
    CHECK_OK(gpushm_weights_open(conn, "public", &w));
    check_generation(w, 1);
    if (geteuid() != 0) {
      gpushm_buffer_t *own = create_host(conn, "nobody-weights", 4096, 0644,
                                         GPUSHM_LIFETIME_SESSION);
      CHECK_ERR(publish_one(conn, "public", own, 0, NULL), GPUSHM_E_PERM);
      CHECK(strstr(gpushm_last_error_message(), "denies publishing to uid 65534"));
      /* names it may not see: taken, and nothing more (no kind, mode or owner) */
      CHECK_ERR(publish_one(conn, "secret", own, 0, NULL), GPUSHM_E_EXIST);
      CHECK(strstr(gpushm_last_error_message(), "'secret' already exists") &&
            !strstr(gpushm_last_error_message(), "mode") &&
            !strstr(gpushm_last_error_message(), "weight set"));
      CHECK_ERR(publish_one(conn, "secret-g1-w", own, 0, NULL), GPUSHM_E_EXIST);
      CHECK(!strstr(gpushm_last_error_message(), "buffer"));
    }
    CHECK_ERR(gpushm_buffer_open(conn, "public-g1-w", 0, &b), GPUSHM_E_PERM);
    /* past the library: a buffer through a generation it does not hold, and one the
     * generation does not have */
    {
      Gpushm__Request req = GPUSHM__REQUEST__INIT;
      Gpushm__OpenRequest o = GPUSHM__OPEN_REQUEST__INIT;
      Gpushm__Reply *reply;

      o.key_case = GPUSHM__OPEN_REQUEST__KEY_ID;
      o.id = outside_id;
      o.read_only = true;
      o.via_weights = public_id;
      req.body_case = GPUSHM__REQUEST__BODY_OPEN;
      req.open = &o;
      CHECK((reply = raw_call(sock, &req, NULL, &n_fds)) != NULL);
      CHECK(-reply->status == GPUSHM_E_NOENT && strstr(reply->message, "holds no weight-set"));
      gpushm__reply__free_unpacked(reply, NULL);
      CHECK(raw_open_kind(sock, "public", 0, GPUSHM__KIND__KIND_WEIGHTS, 1, false, fds,
                          &n_fds) == 0 && n_fds == 2);
      CHECK((reply = raw_call(sock, &req, NULL, &n_fds)) != NULL);
      CHECK(-reply->status == GPUSHM_E_NOENT && strstr(reply->message, "has no buffer"));
      gpushm__reply__free_unpacked(reply, NULL);
      o.read_only = false; /* and never read-write */
      CHECK((reply = raw_call(sock, &req, NULL, &n_fds)) != NULL);
      CHECK(-reply->status == GPUSHM_E_INVAL);
      gpushm__reply__free_unpacked(reply, NULL);
      /* what came with the open: unwritable */
      {
        struct stat st;
        CHECK(fstat(fds[0], &st) == 0);
        check_unwritable(fds[0], (size_t)st.st_size);
        CHECK((fcntl(fds[0], F_GET_SEALS) & (F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK)) ==
              (F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK));
        check_unwritable(fds[1], SYNC_CONTROL_SIZE);
      }
    }
    CHECK_OK(gpushm_weights_close(w));
    gpushm_disconnect(conn);
    _exit(0);
  }
  check_child(pid);
  CHECK_OK(gpushm_weights_close(mine));
  gpushm_disconnect(owner);
  test_log("weights: attacked%s: a 0600 set is not seen, a 0644 one is read and not "
           "published to; its buffers open neither read-write nor through a generation not "
           "held; its manifest and control block cannot be written, remapped or resized",
           geteuid() == 0 ? " as uid 65534" : "");
}

/* A manifest of one tensor, packed by protobuf-c: anything a hostile publisher may send. */
static int packed_manifest(const char *name, uint32_t bits, int64_t extent, uint32_t buffer,
                           uint64_t offset, bool twice, bool seal)
{
  Gpushm__WeightManifest m = GPUSHM__WEIGHT_MANIFEST__INIT;
  Gpushm__WeightTensor t = GPUSHM__WEIGHT_TENSOR__INIT, *ts[2] = { &t, &t };
  int64_t shape[1] = { extent };
  uint8_t buf[512];
  size_t len;
  int fd = memfd_create("lie", MFD_CLOEXEC | MFD_ALLOW_SEALING);

  m.version = 1;
  m.n_tensors = twice ? 2 : 1;
  m.tensors = ts;
  t.name = (char *)name;
  t.dtype_code = GPUSHM_DLPACK_FLOAT;
  t.dtype_bits = bits;
  t.dtype_lanes = 1;
  t.n_shape = 1;
  t.shape = shape;
  t.buffer = buffer;
  t.offset = offset;
  len = gpushm__weight_manifest__pack(&m, buf);
  CHECK(fd >= 0 && write(fd, buf, len) == (ssize_t)len);
  if (seal)
    CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK) == 0);
  return fd;
}

static uint32_t declared_tensors = 1; /* what raw_publish() says its manifest names */

/* A raw publish of set over buffer_ids with fd: the reply's status (0 or positive). */
static int raw_publish(int sock, const char *set, uint64_t *buffer_ids, size_t n, int fd,
                       char *why, size_t why_len)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__PublishRequest p = GPUSHM__PUBLISH_REQUEST__INIT;
  Gpushm__Reply *reply;
  int fds[GPUSHM_LIMIT_FDS_PER_FRAME], status;
  unsigned n_fds = 0;

  p.name = (char *)set;
  p.buffers = buffer_ids;
  p.n_buffers = n;
  p.tensors = declared_tensors;
  p.mode = 0644;
  req.body_case = GPUSHM__REQUEST__BODY_PUBLISH;
  req.publish = &p;
  CHECK((reply = raw_call_fd(sock, &req, fd, fds, &n_fds)) != NULL);
  status = reply->status;
  snprintf(why, why_len, "%s", reply->message ? reply->message : "");
  for (unsigned i = 0; i < n_fds; i++)
    close(fds[i]);
  gpushm__reply__free_unpacked(reply, NULL);
  return status;
}

static void test_lies(void)
{
  static const struct {
    const char *set, *name;
    uint32_t bits;
    int64_t extent;
    uint32_t buffer;
    uint64_t offset;
    bool twice;
    const char *said;
  } lies[] = {
    { "lie-past", "t", 32, 2000, 0, 0, false, "outside" },
    { "lie-misaligned", "t", 32, 4, 0, 2, false, "align" },
    { "lie-twice", "t", 32, 4, 0, 0, true, "twice" },
    { "lie-buffer", "t", 32, 4, 1, 0, false, "buffer" },
  };
  gpushm_t *reader = daemon_connect(&d);
  int sock = raw_weights_connection();
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__CreateRequest c = GPUSHM__CREATE_REQUEST__INIT;
  Gpushm__Reply *reply;
  uint64_t id, many[GPUSHM_LIMIT_WEIGHT_BUFFERS + 1];
  unsigned n_fds = 0;
  char why[256];
  int fd, p[2];

  c.name = "lie-memory";
  c.size = 4096;
  c.backend = GPUSHM__BACKEND__BACKEND_HOST;
  c.mode = 0644;
  c.lifetime = GPUSHM__LIFETIME__LIFETIME_SESSION;
  req.body_case = GPUSHM__REQUEST__BODY_CREATE;
  req.create = &c;
  CHECK((reply = raw_call(sock, &req, NULL, &n_fds)) != NULL && reply->status == 0);
  id = reply->open->info->id;
  gpushm__reply__free_unpacked(reply, NULL);
  for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
    gpushm_weights_t *w;

    fd = packed_manifest(lies[i].name, lies[i].bits, lies[i].extent, lies[i].buffer,
                         lies[i].offset, lies[i].twice, true);
    CHECK(raw_publish(sock, lies[i].set, &id, 1, fd, why, sizeof why) == 0);
    close(fd);
    CHECK_ERR(gpushm_weights_open(reader, lies[i].set, &w), GPUSHM_E_INVAL);
    CHECK(strstr(gpushm_last_error_message(), lies[i].set));
    if (!strstr(gpushm_last_error_message(), lies[i].said)) {
      fprintf(stderr, "%s: %s\n", lies[i].set, gpushm_last_error_message());
      CHECK(!"the refusal says why");
    }
  }
  /* a true manifest under a false count (the one listings show) */
  {
    gpushm_weights_t *w;

    fd = packed_manifest("t", 32, 4, 0, 0, false, true);
    declared_tensors = 1000000;
    CHECK(raw_publish(sock, "lie-count", &id, 1, fd, why, sizeof why) == 0);
    declared_tensors = 1;
    close(fd);
    CHECK_ERR(gpushm_weights_open(reader, "lie-count", &w), GPUSHM_E_INVAL);
    CHECK(strstr(gpushm_last_error_message(), "lie-count") &&
          strstr(gpushm_last_error_message(), "declared 1000000 tensors, its manifest names 1"));
    /* a count past the limit: gpushmd's own check, before it keeps anything */
    fd = packed_manifest("t", 32, 4, 0, 0, false, true);
    declared_tensors = GPUSHM_LIMIT_WEIGHT_TENSORS + 1;
    CHECK(raw_publish(sock, "lie-too-many", &id, 1, fd, why, sizeof why) == -GPUSHM_E_LIMIT);
    declared_tensors = 1;
    close(fd);
    CHECK(strstr(why, "GPUSHM_LIMIT_WEIGHT_TENSORS"));
  }
  /* manifests that could change, or are no memfd, or too large */
  fd = packed_manifest("t", 32, 4, 0, 0, false, false);
  CHECK(raw_publish(sock, "lie-unsealed", &id, 1, fd, why, sizeof why) == -GPUSHM_E_INVAL);
  CHECK(strstr(why, "not sealed"));
  close(fd);
  CHECK(pipe(p) == 0);
  CHECK(raw_publish(sock, "lie-pipe", &id, 1, p[0], why, sizeof why) == -GPUSHM_E_INVAL);
  CHECK(strstr(why, "no memfd"));
  close(p[0]);
  close(p[1]);
  fd = memfd_create("huge", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  CHECK(ftruncate(fd, (off_t)GPUSHM_LIMIT_WEIGHT_MANIFEST + 1) == 0);
  CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK) == 0);
  CHECK(raw_publish(sock, "lie-huge", &id, 1, fd, why, sizeof why) == -GPUSHM_E_LIMIT);
  close(fd);
  fd = packed_manifest("t", 32, 4, 0, 0, false, true);
  for (size_t i = 0; i < GPUSHM_LIMIT_WEIGHT_BUFFERS + 1; i++)
    many[i] = id;
  CHECK(raw_publish(sock, "lie-many", many, GPUSHM_LIMIT_WEIGHT_BUFFERS + 1, fd, why,
                    sizeof why) == -GPUSHM_E_LIMIT);
  CHECK(strstr(why, "GPUSHM_LIMIT_WEIGHT_BUFFERS"));
  close(fd);
  close(sock);
  gpushm_disconnect(reader);
  test_log("weights: manifests that lie (an element past its buffer, misaligned, a name "
           "twice, a buffer not in the generation, a false tensor count) published raw and "
           "refused at open, naming the set and why; unsealed, non-memfd and oversized "
           "manifests, more than %u tensors and more than %u "
           "buffers refused at publish", GPUSHM_LIMIT_WEIGHT_TENSORS,
           GPUSHM_LIMIT_WEIGHT_BUFFERS);
}

/* The builder's own limit: GPUSHM_LIMIT_WEIGHT_BUFFERS distinct buffers, then a refusal
 * (gpushmd's is crossed in test_lies, past the library); the same buffer again is its
 * index, not a new one. */
static void test_builder_buffer_limit(void)
{
  gpushm_t *writer = daemon_connect(&d);
  gpushm_buffer_t *bufs[GPUSHM_LIMIT_WEIGHT_BUFFERS + 1];
  gpushm_weights_builder_t *b;
  uint32_t index;
  char name[64];

  CHECK_OK(gpushm_weights_builder_new(&b));
  for (unsigned i = 0; i <= GPUSHM_LIMIT_WEIGHT_BUFFERS; i++) {
    snprintf(name, sizeof name, "builder-limit-%u", i);
    bufs[i] = create_host(writer, name, 4096, 0600, GPUSHM_LIFETIME_SESSION);
    if (i < GPUSHM_LIMIT_WEIGHT_BUFFERS) {
      CHECK_OK(gpushm_weights_builder_add_buffer(b, bufs[i], &index));
      CHECK(index == i);
    }
  }
  CHECK_ERR(gpushm_weights_builder_add_buffer(b, bufs[GPUSHM_LIMIT_WEIGHT_BUFFERS], &index),
            GPUSHM_E_LIMIT);
  CHECK(strstr(gpushm_last_error_message(), "at most"));
  CHECK_OK(gpushm_weights_builder_add_buffer(b, bufs[7], &index));
  CHECK(index == 7);
  gpushm_weights_builder_free(b);
  for (unsigned i = 0; i <= GPUSHM_LIMIT_WEIGHT_BUFFERS; i++)
    CHECK_OK(gpushm_buffer_close_unlink(bufs[i]));
  test_log("weights: a builder takes %u buffers and refuses one more",
           GPUSHM_LIMIT_WEIGHT_BUFFERS);
  gpushm_disconnect(writer);
}

static void test_generation_limit(void)
{
  gpushm_t *writer = daemon_connect(&d), *reader = daemon_connect(&d);
  gpushm_weights_t *held[GPUSHM_LIMIT_WEIGHT_GENERATIONS];
  gpushm_buffer_t *b;
  char name[64];

  for (unsigned g = 0; g <= GPUSHM_LIMIT_WEIGHT_GENERATIONS; g++) {
    snprintf(name, sizeof name, "held-%u", g);
    b = create_host(writer, name, 4096, 0644, GPUSHM_LIFETIME_SESSION);
    if (g == GPUSHM_LIMIT_WEIGHT_GENERATIONS) {
      CHECK_ERR(publish_one(writer, "held", b, 0644, NULL), GPUSHM_E_LIMIT);
      CHECK(strstr(gpushm_last_error_message(), "GPUSHM_LIMIT_WEIGHT_GENERATIONS"));
      break;
    }
    CHECK_OK(publish_one(writer, "held", b, 0644, NULL));
    CHECK_OK(gpushm_weights_open(reader, "held", &held[g]));
  }
  CHECK_OK(gpushm_weights_close(held[0])); /* room for one more */
  CHECK_OK(publish_one(writer, "held", b, 0644, NULL));
  for (unsigned g = 1; g < GPUSHM_LIMIT_WEIGHT_GENERATIONS; g++)
    CHECK_OK(gpushm_weights_close(held[g]));
  gpushm_disconnect(reader);
  gpushm_disconnect(writer);
  test_log("weights: %u generations alive, held by a reader: the next publish refused until "
           "one goes", GPUSHM_LIMIT_WEIGHT_GENERATIONS);
}

/* A publisher: generation g of "killed" (persistent), its buffers its session's; says
 * 'p' once published (publish 1) or once written and about to publish (0), then waits. */
static void publisher_child(int report, uint64_t g, bool publish)
{
  gpushm_t *conn = daemon_connect(&d);
  struct generation gen;

  if (publish) {
    CHECK_OK(publish_generation(conn, "killed", g, 0644, GPUSHM_LIFETIME_PERSISTENT, 0, &gen,
                                NULL));
  } else {
    gen.weights = create_host(conn, "killed-unpublished", 4096, 0644, GPUSHM_LIFETIME_SESSION);
  }
  CHECK(write(report, "p", 1) == 1);
  pause();
}

static void test_killed(void)
{
  gpushm_t *reader = daemon_connect(&d);
  gpushm_weights_t *w;
  struct waiter wt = { 0 };
  pthread_t th;

  for (int publish = 1; publish >= 0; publish--) {
    int p[2];
    char c;
    pid_t pid;

    CHECK(pipe(p) == 0);
    CHECK((pid = fork()) >= 0);
    if (pid == 0) {
      close(p[0]);
      publisher_child(p[1], 1, publish);
    }
    close(p[1]);
    CHECK(read(p[0], &c, 1) == 1);
    close(p[0]);
    kill(pid, SIGKILL);
    CHECK(waitpid(pid, NULL, 0) == pid);
    /* its session buffers went with it, unless a generation keeps them */
    CHECK_OK(gpushm_weights_open(reader, "killed", &w));
    check_generation(w, 1);
    CHECK_OK(gpushm_weights_close(w));
  }
  /* a session set goes with its creator, and its waiters hear so */
  {
    gpushm_t *creator = daemon_connect(&d);
    struct generation gen;

    CHECK_OK(publish_generation(creator, "fleeting", 1, 0644, GPUSHM_LIFETIME_SESSION, 0, &gen,
                                NULL));
    /* generation 2 by another connection: the set is still its creator's session's */
    {
      struct generation other;
      CHECK_OK(publish_generation(reader, "fleeting", 2, 0644, GPUSHM_LIFETIME_SESSION, 1,
                                  &other, NULL));
      drop_generation(&other);
    }
    CHECK_OK(gpushm_weights_open(reader, "fleeting", &wt.w));
    CHECK(pthread_create(&th, NULL, wait_newer_thread, &wt) == 0);
    usleep(20000);
    CHECK_OK(gpushm_buffer_close(gen.weights)); /* its connection ends with its last handle */
    CHECK_OK(gpushm_buffer_close(gen.bias));
    gpushm_disconnect(creator);
    CHECK(pthread_join(th, NULL) == 0);
    CHECK(wt.result == GPUSHM_E_NOENT);
    CHECK(gpushm_weights_newest(wt.w) == GPUSHM_WEIGHTS_GONE);
    check_generation(wt.w, 2); /* still whole for its holder */
    CHECK_OK(gpushm_weights_close(wt.w));
  }
  CHECK_OK(gpushm_unlink(reader, "killed"));
  gpushm_disconnect(reader);
  test_log("weights: a publisher SIGKILLed after its publish: its generation read whole "
           "(its session buffers kept by it); one SIGKILLed before: the set unchanged; a "
           "session set gone with its creator, its waiter told");
}

/* The daemon's open fds and resident kB now. */
static void daemon_footprint(unsigned *fds, unsigned long *rss_kb)
{
  char path[64], line[256];
  struct dirent *e;
  DIR *dir;
  FILE *f;

  snprintf(path, sizeof path, "/proc/%d/fd", (int)d.pid);
  CHECK((dir = opendir(path)) != NULL);
  for (*fds = 0; (e = readdir(dir)) != NULL;)
    *fds += e->d_name[0] != '.';
  closedir(dir);
  snprintf(path, sizeof path, "/proc/%d/status", (int)d.pid);
  CHECK((f = fopen(path, "r")) != NULL);
  *rss_kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %lu kB", rss_kb) == 1)
      break;
  fclose(f);
}

/* A daemon built with AddressSanitizer, or run under valgrind, keeps what is freed
 * aside for a while (their quarantines): its resident memory says nothing of leaks. */
#if defined(__SANITIZE_ADDRESS__)
#define ASAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN_BUILD 1
#endif
#endif
#ifndef ASAN_BUILD
#define ASAN_BUILD 0
#endif

/* 1,000 generations published over a reader that follows each, each dropped by its
 * writer once published: the daemon's fds and memory come back where they were, and
 * nothing is left but the newest generation. */
static void test_churn(void)
{
  enum { WARMUP = 50 };
  const bool valgrind = getenv("GPUSHM_TEST_VALGRIND") != NULL;
  const unsigned generations = 1000;
  gpushm_t *writer = daemon_connect(&d), *reader = daemon_connect(&d);
  gpushm_weights_t *held = NULL, *next;
  unsigned fds0 = 0, fds1;
  unsigned long rss0 = 0, rss1;
  size_t objects0 = 0;
  double t0 = 0;

  for (unsigned g = 1; g <= generations + WARMUP; g++) {
    struct generation gen;

    if (g == WARMUP + 1) { /* allocators warm, the daemon's tables grown */
      daemon_footprint(&fds0, &rss0);
      objects0 = objects();
      t0 = test_clock_ms();
    }
    CHECK_OK(publish_generation(writer, "churn", g, 0644, GPUSHM_LIFETIME_SESSION,
                                g > 1 ? g - 1 : 0, &gen, NULL));
    CHECK_OK(gpushm_weights_open(reader, "churn", &next));
    if (held) {
      CHECK(gpushm_weights_newest(held) == g);
      CHECK_OK(gpushm_weights_close(held));
    }
    held = next;
    drop_generation(&gen);
  }
  check_generation(held, generations + WARMUP);
  daemon_footprint(&fds1, &rss1);
  test_log("weights: %u generations published, followed and dropped in %.0f ms: gpushmd's "
           "fds %u -> %u, resident %lu -> %lu kB, objects %zu -> %zu", generations,
           test_clock_ms() - t0, fds0, fds1, rss0, rss1, objects0, objects());
  /* a segment or two more or less kept warm (its memfd), not one a generation */
  CHECK(fds1 <= fds0 + 2);
  CHECK_OBJECTS(objects0);
  if (!valgrind && !ASAN_BUILD)
    CHECK(rss1 <= rss0 + 2048); /* allocator slack, not a generation's worth each */
  CHECK_OK(gpushm_weights_close(held));
  gpushm_disconnect(reader);
  gpushm_disconnect(writer);
}

/* A child forked after its parent opened a generation closes its copy: refused with the
 * reason, its memory freed, the parent's open untouched (nothing said on the parent's
 * connection: the parent still reads the generation, which gpushmd keeps until the
 * parent closes it). */
static void test_forked_child(void)
{
  gpushm_t *writer = daemon_connect(&d), *reader = daemon_connect(&d);
  size_t baseline = objects(), held;
  struct generation g1;
  gpushm_weights_t *r;
  int status;
  pid_t pid;

  CHECK_OK(publish_generation(writer, "forked", 1, 0644, GPUSHM_LIFETIME_PERSISTENT, 0, &g1,
                              NULL));
  CHECK_OK(gpushm_weights_open(reader, "forked", &r));
  check_generation(r, 1); /* its buffers opened and mapped before the fork */
  drop_generation(&g1);   /* the reader's open alone keeps them */
  held = objects();
  CHECK(held > baseline);
  CHECK((pid = fork()) >= 0);
  if (pid == 0) {
    int rc = gpushm_weights_close(r);
    _exit(rc == GPUSHM_E_INVAL &&
                  strstr(gpushm_last_error_message(), "opened by the parent of this process")
              ? 0
              : 1);
  }
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK_OBJECTS(held);
  check_generation(r, 1);
  CHECK_OK(gpushm_weights_close(r));
  CHECK_OK(gpushm_weights_open(reader, "forked", &r)); /* the set's name still there */
  CHECK_OK(gpushm_weights_close(r));
  test_log("weights: a child's close of its parent's generation refused with the reason; the "
           "parent still read it, gpushmd kept it (%zu objects) until the parent closed it",
           held - baseline);
  gpushm_disconnect(reader);
  gpushm_disconnect(writer);
}

/* gpushm_weights_copy() on host memory without a stream (the CPU copies): into places
 * of the reader's own, tensors neighbours in both memories (merged into one copy), a
 * vector laid out backwards (stride -1: element 0 at its end), a tensor skipped (its
 * place untouched, its buffer never opened); the wrong number of places, and a forked
 * child's copy, refused with the reason. */
static void test_copy(void)
{
  const int64_t shape[2] = { ROWS, COLS }, vec[1] = { COLS }, back[1] = { -1 };
  const uint64_t matrix = ROWS * COLS * 4;
  gpushm_t *writer = daemon_connect(&d), *reader = daemon_connect(&d);
  gpushm_buffer_t *main_buf = create_host(writer, "copy-main", 2 * matrix + COLS * 4, 0644,
                                          GPUSHM_LIFETIME_PERSISTENT);
  gpushm_buffer_t *skip_buf = create_host(writer, "copy-skip", COLS * 4, 0644,
                                          GPUSHM_LIFETIME_PERSISTENT);
  uint32_t *src = gpushm_buffer_ptr(main_buf), *matrices, rev[COLS], skipped[COLS];
  gpushm_weights_builder_t *b;
  gpushm_tensor_desc_t desc;
  gpushm_weights_t *w;
  void *dst[4];
  uint64_t asked, stats_cost;
  uint32_t mi, si;
  int status;
  pid_t pid;

  for (size_t i = 0; i < 2 * ROWS * COLS + COLS; i++)
    src[i] = word(9, 0, i);
  CHECK_OK(gpushm_weights_builder_new(&b));
  CHECK_OK(gpushm_weights_builder_add_buffer(b, main_buf, &mi));
  CHECK_OK(gpushm_weights_builder_add_buffer(b, skip_buf, &si));
  gpushm_tensor_desc_init(&desc);
  desc.dtype = (gpushm_dlpack_dtype_t){ GPUSHM_DLPACK_FLOAT, 32, 1 };
  desc.ndim = 2;
  desc.shape = shape;
  CHECK_OK(gpushm_weights_builder_add_tensor(b, "w0", mi, &desc));
  desc.ndim = 1;
  desc.shape = vec;
  CHECK_OK(gpushm_weights_builder_add_tensor(b, "skipped", si, &desc));
  desc.ndim = 2;
  desc.shape = shape;
  desc.offset = matrix;
  CHECK_OK(gpushm_weights_builder_add_tensor(b, "w1", mi, &desc));
  desc.ndim = 1;
  desc.shape = vec;
  desc.strides = back;
  desc.offset = 2 * matrix + (COLS - 1) * 4; /* element 0 the buffer's last word */
  CHECK_OK(gpushm_weights_builder_add_tensor(b, "rev", mi, &desc));
  CHECK_OK(gpushm_weights_publish(writer, "copied", b, NULL, NULL));
  gpushm_weights_builder_free(b);
  CHECK_OK(gpushm_buffer_close_unlink(main_buf));
  CHECK_OK(gpushm_buffer_close_unlink(skip_buf));

  CHECK_OK(gpushm_weights_open(reader, "copied", &w));
  CHECK((matrices = malloc(2 * matrix)) != NULL);
  memset(matrices, 0, 2 * matrix);
  memset(skipped, 0xee, sizeof skipped);
  dst[0] = matrices;                   /* "w0" */
  dst[1] = NULL;                       /* "skipped" */
  dst[2] = (char *)matrices + matrix;  /* "w1", right after w0: one copy with it */
  dst[3] = &rev[COLS - 1];             /* where "rev"'s element 0 goes */
  CHECK_ERR(gpushm_weights_copy(w, dst, 3, NULL), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "3 places for the 4 tensors") != NULL);
  CHECK_ERR(gpushm_weights_copy(w, NULL, 4, NULL), GPUSHM_E_INVAL);
  asked = requests();
  stats_cost = requests() - asked; /* what asking for the count costs in requests */
  asked += stats_cost;
  CHECK_OK(gpushm_weights_copy(w, dst, 4, NULL));
  CHECK(requests() - asked == stats_cost + 1); /* one buffer opened: the skipped one not */
  for (size_t i = 0; i < 2 * ROWS * COLS; i++)
    CHECK(matrices[i] == word(9, 0, i));
  for (size_t i = 0; i < COLS; i++) /* rev[k] is element COLS - 1 - k: src's word 2RC + k */
    CHECK(rev[i] == word(9, 0, 2 * ROWS * COLS + i));
  for (size_t i = 0; i < COLS; i++)
    CHECK(skipped[i] == 0xeeeeeeeeu);
  CHECK((pid = fork()) >= 0);
  if (pid == 0)
    _exit(gpushm_weights_copy(w, dst, 4, NULL) == GPUSHM_E_INVAL &&
                  strstr(gpushm_last_error_message(), "before fork()")
              ? 0
              : 1);
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK_OK(gpushm_weights_close(w));
  free(matrices);
  test_log("weights: copied into the reader's own memory: neighbours, a backwards vector, "
           "a tensor skipped (its buffer left unopened); a wrong count and a forked child "
           "refused");
  gpushm_disconnect(reader);
  gpushm_disconnect(writer);
}

/* gpushm_weights_copy() of tensors whose elements do not fill the bytes they span: a
 * column of a matrix laid out backwards (stride -COLS), every other element of every other
 * row (strides 2 * COLS, 2).  Only their elements are written: what lies between them in
 * the destination (the engine's other data, a fused weight's other parts) stays.  One
 * whose elements are both apart and repeated (strides 2, 2), which block by block would
 * take more copies than its memory has elements, is refused. */
static void test_copy_strided(void)
{
  const int64_t col_shape[1] = { ROWS }, col_strides[1] = { -COLS };
  const int64_t sub_shape[2] = { ROWS / 2, COLS / 2 }, sub_strides[2] = { 2 * COLS, 2 };
  const int64_t rep_shape[2] = { ROWS, ROWS }, rep_strides[2] = { 2, 2 };
  const uint64_t matrix = ROWS * COLS * 4;
  gpushm_t *writer = daemon_connect(&d), *reader = daemon_connect(&d);
  gpushm_buffer_t *bufs[3] = {
    create_host(writer, "strided-col", matrix, 0644, GPUSHM_LIFETIME_PERSISTENT),
    create_host(writer, "strided-sub", matrix, 0644, GPUSHM_LIFETIME_PERSISTENT),
    create_host(writer, "strided-rep", matrix, 0644, GPUSHM_LIFETIME_PERSISTENT),
  };
  uint32_t *col, *sub, index[3];
  gpushm_weights_builder_t *b;
  gpushm_tensor_desc_t desc;
  gpushm_weights_t *w;
  void *dst[3];

  for (unsigned k = 0; k < 3; k++) {
    for (size_t i = 0; i < ROWS * COLS; i++)
      ((uint32_t *)gpushm_buffer_ptr(bufs[k]))[i] = word(11, k, i);
  }
  CHECK_OK(gpushm_weights_builder_new(&b));
  CHECK_OK(gpushm_weights_builder_add_buffer(b, bufs[0], &index[0]));
  CHECK_OK(gpushm_weights_builder_add_buffer(b, bufs[1], &index[1]));
  CHECK_OK(gpushm_weights_builder_add_buffer(b, bufs[2], &index[2]));
  gpushm_tensor_desc_init(&desc);
  desc.dtype = (gpushm_dlpack_dtype_t){ GPUSHM_DLPACK_FLOAT, 32, 1 };
  desc.ndim = 1;
  desc.shape = col_shape;
  desc.strides = col_strides;
  desc.offset = ((ROWS - 1) * COLS + 1) * 4; /* column 1, element 0 in the last row */
  CHECK_OK(gpushm_weights_builder_add_tensor(b, "col", index[0], &desc));
  desc.ndim = 2;
  desc.shape = sub_shape;
  desc.strides = sub_strides;
  desc.offset = 0;
  CHECK_OK(gpushm_weights_builder_add_tensor(b, "sub", index[1], &desc));
  desc.shape = rep_shape;
  desc.strides = rep_strides;
  CHECK_OK(gpushm_weights_builder_add_tensor(b, "rep", index[2], &desc));
  CHECK_OK(gpushm_weights_publish(writer, "strided", b, NULL, NULL));
  gpushm_weights_builder_free(b);
  CHECK_OK(gpushm_buffer_close_unlink(bufs[0]));
  CHECK_OK(gpushm_buffer_close_unlink(bufs[1]));
  CHECK_OK(gpushm_buffer_close_unlink(bufs[2]));

  CHECK_OK(gpushm_weights_open(reader, "strided", &w));
  CHECK((col = malloc(matrix)) != NULL && (sub = malloc(matrix)) != NULL);
  memset(col, 0xee, matrix);
  memset(sub, 0xee, matrix);
  dst[gpushm_weights_find(w, "col")] = &col[(ROWS - 1) * COLS + 1];
  dst[gpushm_weights_find(w, "sub")] = sub;
  dst[gpushm_weights_find(w, "rep")] = NULL;
  CHECK_OK(gpushm_weights_copy(w, dst, 3, NULL));
  for (size_t i = 0; i < ROWS * COLS; i++) {
    const size_t r = i / COLS, c = i % COLS;
    CHECK(col[i] == (c == 1 ? word(11, 0, i) : 0xeeeeeeeeu));
    CHECK(sub[i] == (r % 2 == 0 && c % 2 == 0 ? word(11, 1, i) : 0xeeeeeeeeu));
  }
  dst[gpushm_weights_find(w, "rep")] = sub;
  CHECK_ERR(gpushm_weights_copy(w, dst, 3, NULL), GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(gpushm_last_error_message(), "both apart and overlapping"));
  CHECK_OK(gpushm_weights_close(w));
  free(col);
  free(sub);
  test_log("weights: strided tensors copied block by block, what lies between their "
           "elements in the destination left alone; one both apart and repeated refused");
  gpushm_disconnect(reader);
  gpushm_disconnect(writer);
}

/* ---- recycling ------------------------------------------------------------------------ */

#define RECYCLED 4096u

static void stamp(gpushm_buffer_t *buf, uint32_t g)
{
  for (size_t i = 0; i < RECYCLED / 4; i++)
    ((uint32_t *)gpushm_buffer_ptr(buf))[i] = g;
}

/* Opens set through reader: generation g, every word g; *opens: the round trips besides
 * the generation's (its buffer's open, where not kept; the release of one kept that it
 * does not name). */
static gpushm_weights_t *open_recycled(gpushm_t *reader, const char *set, uint64_t g,
                                       unsigned *opens)
{
  gpushm_weights_t *w;
  uint64_t asked = requests(), stats_cost = requests() - asked;
  uint32_t *p;

  asked += stats_cost;
  CHECK_OK(gpushm_weights_open(reader, set, &w));
  CHECK(gpushm_weights_generation(w) == g);
  CHECK_OK(gpushm_weights_tensor_ptr(w, 0, (void **)&p));
  *opens = (unsigned)(requests() - asked - stats_cost - 1); /* less the generation's */
  for (size_t i = 0; i < RECYCLED / 4; i++)
    CHECK(p[i] == g);
  return w;
}

struct released_waiter {
  gpushm_weights_t *w;
  uint64_t generation;
  int result;
  double woke_ms;
};

static void *wait_released_thread(void *arg)
{
  struct released_waiter *rw = arg;
  rw->result = gpushm_weights_wait_released(rw->w, rw->generation, 10000);
  rw->woke_ms = test_clock_ms();
  return NULL;
}

/* A publisher double-buffering a set in buffers A and B (generation n written into the
 * buffers of n - 2 once nobody holds n - 2), a reader following it on one connection:
 * the publisher's wait for a release sleeps until the reader's close, and is not held
 * back by the buffers the reader keeps; the reader maps each buffer once — from the
 * first generation that names a buffer again, the next takes over the buffers kept of
 * the one closed before, no round trip — except one a tensor still holds an open of;
 * a publisher that stops recycling gets its memory back at the reader's next open. */
static void test_recycle(void)
{
  gpushm_t *writer = daemon_connect(&d), *reader = daemon_connect(&d);
  gpushm_buffer_t *a = create_host(writer, "rc-a", RECYCLED, 0644, GPUSHM_LIFETIME_SESSION);
  gpushm_buffer_t *b = create_host(writer, "rc-b", RECYCLED, 0644, GPUSHM_LIFETIME_SESSION);
  gpushm_buffer_t *c, *tensor;
  gpushm_weights_t *pub[7], *r[7];
  struct released_waiter rw = { 0 };
  size_t baseline = objects();
  unsigned opens;
  pthread_t th;
  double closed;

  stamp(a, 1);
  CHECK_OK(publish_one(writer, "recycled", a, 0644, &pub[1]));
  CHECK(gpushm_weights_oldest(pub[1]) == 1);
  r[1] = open_recycled(reader, "recycled", 1, &opens);
  CHECK(opens == 1);
  stamp(b, 2);
  CHECK_OK(publish_one(writer, "recycled", b, 0644, &pub[2]));
  CHECK_OK(gpushm_weights_close(pub[1]));
  CHECK_ERR(gpushm_weights_wait_released(pub[2], 2, 0), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "held through w itself"));
  CHECK_ERR(gpushm_weights_wait_released(pub[2], 1, 20), GPUSHM_E_TIMEOUT);
  CHECK(strstr(gpushm_last_error_message(), "generation 1 of 'recycled' is still held"));
  CHECK(gpushm_weights_oldest(pub[2]) == 1);

  /* the publisher asleep until the reader, on 2 now, lets go of 1 */
  rw.w = pub[2];
  rw.generation = 1;
  CHECK(pthread_create(&th, NULL, wait_released_thread, &rw) == 0);
  CHECK_OK(gpushm_weights_wait_newer(r[1], 0));
  r[2] = open_recycled(reader, "recycled", 2, &opens);
  CHECK(opens == 1);
  usleep(50000);
  closed = test_clock_ms();
  CHECK_OK(gpushm_weights_close(r[1]));
  CHECK(pthread_join(th, NULL) == 0);
  CHECK_OK(rw.result);
  CHECK(gpushm_weights_oldest(pub[2]) == 2);
  test_log("weights: a publisher waiting for generation 1's release woke %.2f ms after its "
           "reader's close returned", rw.woke_ms - closed);

  /* 3 in A: the reader sees a buffer named again (mapped afresh this once) */
  stamp(a, 3);
  CHECK_OK(publish_one(writer, "recycled", a, 0644, &pub[3]));
  CHECK_OK(gpushm_weights_close(pub[2]));
  r[3] = open_recycled(reader, "recycled", 3, &opens);
  CHECK(opens == 1);
  CHECK_OK(gpushm_weights_close(r[2])); /* B kept, mapped */
  CHECK_OK(gpushm_weights_wait_released(pub[3], 2, 5000)); /* the kept B holds nothing */

  /* 4 in B: taken over, no round trip; a tensor of it takes an open of its own */
  stamp(b, 4);
  CHECK_OK(publish_one(writer, "recycled", b, 0644, &pub[4]));
  CHECK_OK(gpushm_weights_close(pub[3]));
  r[4] = open_recycled(reader, "recycled", 4, &opens);
  CHECK(opens == 0);
  CHECK_OK(gpushm_weights_buffer(r[4], 0, &tensor));
  CHECK_OK(gpushm_buffer_ref(tensor));
  CHECK_OK(gpushm_weights_close(r[3])); /* A kept */
  CHECK_OK(gpushm_weights_wait_released(pub[4], 3, 5000));

  /* 5 in A: taken over; B, a tensor's, not kept at 4's close: 6 in B maps it again */
  stamp(a, 5);
  CHECK_OK(publish_one(writer, "recycled", a, 0644, &pub[5]));
  CHECK_OK(gpushm_weights_close(pub[4]));
  r[5] = open_recycled(reader, "recycled", 5, &opens);
  CHECK(opens == 0);
  CHECK_OK(gpushm_weights_close(r[4]));
  CHECK_OK(gpushm_weights_wait_released(pub[5], 4, 5000)); /* tensors hold memory only */
  CHECK(((uint32_t *)gpushm_buffer_ptr(tensor))[0] == 4);
  CHECK_OK(gpushm_buffer_close(tensor));
  stamp(b, 6);
  CHECK_OK(publish_one(writer, "recycled", b, 0644, &pub[6]));
  CHECK_OK(gpushm_weights_close(pub[5]));
  r[6] = open_recycled(reader, "recycled", 6, &opens);
  CHECK(opens == 1);
  CHECK_OK(gpushm_weights_close(r[5])); /* A kept */

  /* the publisher moves to C and drops A and B: the reader lets go of A, kept, at its
   * next open, and of B with 6 */
  c = create_host(writer, "rc-c", RECYCLED, 0644, GPUSHM_LIFETIME_SESSION);
  stamp(c, 7);
  CHECK_OK(publish_one(writer, "recycled", c, 0644, NULL));
  CHECK_OK(gpushm_weights_close(pub[6]));
  CHECK_OK(gpushm_buffer_close_unlink(a));
  CHECK_OK(gpushm_buffer_close_unlink(b));
  CHECK_OBJECTS(baseline + 3); /* A (kept), B (pinned by 6), 6, 7 and C */
  r[0] = open_recycled(reader, "recycled", 7, &opens);
  CHECK(opens == 2); /* C's open, and A's release */
  CHECK_OBJECTS(baseline + 2); /* A gone */
  CHECK_OK(gpushm_weights_close(r[6]));
  CHECK_OBJECTS(baseline);     /* 6 and B gone */
  CHECK_OK(gpushm_weights_close(r[0]));
  CHECK_OBJECTS(baseline);     /* 7 not recycled: C not kept, and named */
  CHECK_OK(gpushm_buffer_close_unlink(c));
  CHECK_OK(gpushm_unlink(writer, "recycled"));
  CHECK_OBJECTS(baseline - 2);
  gpushm_disconnect(reader);
  gpushm_disconnect(writer);
  test_log("weights: a set double-buffered in two buffers followed by a reader that mapped "
           "each once; its publisher's waits for releases not held back by them, nor by a "
           "tensor's; a publisher moving on got its memory back at the reader's next open");
}

/* A double-buffered set's generation g: written into buffer g % 2 of two and published. */
static void republish(gpushm_t *writer, const char *set, gpushm_buffer_t *const two[2],
                      uint32_t g)
{
  stamp(two[g % 2], g);
  CHECK_OK(publish_one(writer, set, two[g % 2], 0644, NULL));
}

/* A connection keeps the buffers of GPUSHM_LIMIT_WEIGHT_SETS_KEPT sets, one more pushing
 * the least recently used out (its next generation mapped afresh); a reader that lets
 * go of a set's last generation keeps nothing of it, and one that disconnects lets go
 * of what it kept. */
static void test_recycle_limits(void)
{
  enum { SETS = GPUSHM_LIMIT_WEIGHT_SETS_KEPT + 1 };
  gpushm_t *writer = daemon_connect(&d), *reader = daemon_connect(&d);
  gpushm_buffer_t *two[SETS][2];
  gpushm_weights_t *held[SETS], *w;
  size_t baseline = objects();
  unsigned opens;
  char set[32], name[48];

  /* each set at generation 4, its reader holding 3 and keeping 2's buffer */
  for (unsigned k = 0; k < SETS; k++) {
    snprintf(set, sizeof set, "double-%u", k);
    for (unsigned b = 0; b < 2; b++) {
      snprintf(name, sizeof name, "%s-%u", set, b);
      two[k][b] = create_host(writer, name, RECYCLED, 0644, GPUSHM_LIFETIME_SESSION);
    }
    republish(writer, set, two[k], 1);
    held[k] = open_recycled(reader, set, 1, &opens);
    for (uint32_t g = 2; g <= 3; g++) {
      republish(writer, set, two[k], g);
      w = open_recycled(reader, set, g, &opens);
      CHECK(opens == 1); /* 3's buffer named again: mapped afresh this once */
      CHECK_OK(gpushm_weights_close(held[k]));
      held[k] = w;
    }
    republish(writer, set, two[k], 4);
  }
  for (unsigned k = SETS; k-- > 0;) {
    snprintf(set, sizeof set, "double-%u", k);
    w = open_recycled(reader, set, 4, &opens);
    CHECK(opens == (k == 0 ? 1u : 0u)); /* 0's pushed out when SETS - 1 was first opened */
    CHECK_OK(gpushm_weights_close(held[k]));
    CHECK_OK(gpushm_weights_close(w));
  }
  for (unsigned k = 0; k < SETS; k++) {
    snprintf(set, sizeof set, "double-%u", k);
    CHECK_OK(gpushm_unlink(writer, set));
    CHECK_OK(gpushm_buffer_close_unlink(two[k][0]));
    CHECK_OK(gpushm_buffer_close_unlink(two[k][1]));
  }
  CHECK_OBJECTS(baseline); /* the reader let go of every set's last: nothing kept */

  /* a reader holding 3, keeping 2's buffer, disconnects */
  for (unsigned b = 0; b < 2; b++) {
    snprintf(name, sizeof name, "gone-%u", b);
    two[0][b] = create_host(writer, name, RECYCLED, 0644, GPUSHM_LIFETIME_SESSION);
  }
  baseline = objects();
  republish(writer, "gone", two[0], 1);
  held[0] = open_recycled(reader, "gone", 1, &opens);
  for (uint32_t g = 2; g <= 3; g++) {
    republish(writer, "gone", two[0], g);
    w = open_recycled(reader, "gone", g, &opens);
    CHECK_OK(gpushm_weights_close(held[0]));
    held[0] = w;
  }
  CHECK_OK(gpushm_unlink(writer, "gone"));
  CHECK_OK(gpushm_buffer_close_unlink(two[0][0]));
  CHECK_OK(gpushm_buffer_close_unlink(two[0][1]));
  CHECK_OBJECTS(baseline + 1); /* 3 (holding its buffer) and 2's buffer, kept */
  gpushm_disconnect(reader);
  CHECK_OBJECTS(baseline);     /* 2's buffer gone: 3 held still */
  CHECK_OK(gpushm_weights_close(held[0]));
  CHECK_OBJECTS(baseline - 2);
  gpushm_disconnect(writer);
  test_log("weights: %u sets' buffers kept by one connection, the %u-th pushing the least "
           "recently used out; nothing kept once a reader let go of a set's last "
           "generation, or disconnected", GPUSHM_LIMIT_WEIGHT_SETS_KEPT, SETS);
}

/* A reader's connection decodes a generation's manifest once for the generations it
 * holds of a set that carry the same bytes over buffers of the same sizes (a recycling
 * publisher's): shared (one decoding: the same name pointers), never where a byte
 * differs (a name of the same length). */
static void test_manifest_shared(void)
{
  gpushm_t *writer = daemon_connect(&d), *reader = daemon_connect(&d);
  gpushm_buffer_t *buf = create_host(writer, "shared-manifest", RECYCLED, 0644,
                                     GPUSHM_LIFETIME_SESSION);
  gpushm_weight_tensor_t t[4];
  gpushm_weights_t *r[4];
  static const char *const names[4] = { "", "left", "rite", "rite" };

  for (unsigned g = 1; g <= 3; g++) {
    CHECK_OK(publish_named(writer, "shared", buf, 0644, names[g], NULL));
    CHECK_OK(gpushm_weights_open(reader, "shared", &r[g]));
    CHECK(gpushm_weights_find(r[g], names[g]) == 0);
    CHECK_ERR(gpushm_weights_find(r[g], g == 1 ? "rite" : "left"), GPUSHM_E_NOENT);
    CHECK_OK(gpushm_weights_tensor(r[g], 0, &t[g]));
  }
  CHECK(t[1].name != t[2].name); /* "left" and "rite": each decoded */
  CHECK(t[2].name == t[3].name); /* the same bytes: one decoding */
  for (unsigned g = 1; g <= 3; g++)
    CHECK_OK(gpushm_weights_close(r[g]));
  CHECK_OK(gpushm_unlink(writer, "shared"));
  CHECK_OK(gpushm_buffer_close_unlink(buf));
  gpushm_disconnect(reader);
  gpushm_disconnect(writer);
  test_log("weights: generations of the same manifest bytes decoded once by their reader; "
           "one that differs in a byte decoded anew");
}

int main(void)
{
  daemon_start(&d, NULL);
  test_manifest_shared();
  test_recycle();
  test_recycle_limits();
  test_copy();
  test_copy_strided();
  test_generations();
  test_writers();
  test_permissions();
  test_lies();
  test_builder_buffer_limit();
  test_generation_limit();
  test_killed();
  test_forked_child();
  test_churn();
  daemon_stop(&d);
  return 0;
}

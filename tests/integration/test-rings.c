/* SPDX-License-Identifier: MIT */
/* Frame rings (docs/rings.md): slots of memory, a ready timeline and a done timeline per
 * consumer, as one named object.
 *  - shape: geometry (slots, slot size, stride) as created; 1 or 65 slots, a slot of 0
 *    bytes, sync or open-existing refused with the reason; a ring's name opens no buffer
 *    or timeline; a name with '#' (the daemon's own, for done timelines) is no client's;
 *  - frames: a producer and a consumer on two connections; frame numbers and slots;
 *    what the producer wrote is what the consumer reads; a producer that laps its
 *    slowest consumer waits (and times out saying which frame the consumer holds); a
 *    consumer that came late takes frames presented after it came; GPUSHM_RING_LATEST
 *    skips to the latest; releases out of order or of frames not held are refused;
 *  - permissions, attacked as uid 65534 (where the test is root): a consumer of a 0644
 *    ring reads every frame across processes; it cannot open the ring to produce, and
 *    every fd it is sent for the ring (memory, control block) is read-only for good; its
 *    own done timeline is read-write to it alone; a raw attach to a ring it does not hold,
 *    an open of another consumer's done timeline read-write or (not the ring's writer)
 *    read-only, a create of a '#' name: all refused;
 *  - deaths: a consumer SIGKILLed while holding a frame is no longer waited for (the
 *    producer's blocked acquire goes on); a producer SIGKILLed mid-stream releases a
 *    waiting consumer with GPUSHM_E_LOST, and the next producer's frames come through;
 *  - the consumer limit (GPUSHM_LIMIT_RING_CONSUMERS) crossed; the per-uid object limit
 *    counts a consumer's done timeline;
 *  - streams through the fake driver: a producer's acquire queues its waits on the
 *    consumers' done timelines and a consumer's acquire its wait on the ready one, with
 *    no CPU wait (promises made ahead), and stream presents and releases write the
 *    fences;
 *  - gpushmctl show names a ring's slots and consumers. */
#include "config.h"
#include "harness.h"
#include "gpushm-graphics.h"
#include "raw.h"
#include "shm_layout.h"

#include <dlfcn.h>
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

#define SLOT_BYTES 4096u

static struct test_daemon d;
static const char *log_path; /* gpushmd's (test_log_file()) */
static bool have_fake_cuda;

static gpushm_ring_t *create(gpushm_t *conn, const char *name, uint32_t slots, uint32_t mode)
{
  gpushm_create_opts_t opts;
  gpushm_ring_t *ring;

  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_HOST;
  opts.mode = mode;
  opts.lifetime = GPUSHM_LIFETIME_SESSION;
  CHECK_OK(gpushm_ring_create(conn, name, slots, SLOT_BYTES, &opts, &ring));
  return ring;
}

/* Frame f's content: every word says f. */
static void fill(gpushm_ring_t *ring, const gpushm_ring_frame_t *f)
{
  uint64_t *w = gpushm_ring_slot_ptr(ring, f->slot);
  CHECK(w != NULL);
  for (unsigned i = 0; i < SLOT_BYTES / 8; i++)
    w[i] = f->frame;
}

static void verify(gpushm_ring_t *ring, const gpushm_ring_frame_t *f)
{
  const uint64_t *w = gpushm_ring_slot_ptr(ring, f->slot);
  CHECK(w != NULL);
  for (unsigned i = 0; i < SLOT_BYTES / 8; i++)
    CHECK(w[i] == f->frame);
}

static void produce(gpushm_ring_t *ring, uint64_t expect_frame)
{
  gpushm_ring_frame_t f;

  CHECK_OK(gpushm_ring_acquire_slot(ring, 5000, &f));
  CHECK(f.frame == expect_frame && f.slot == (expect_frame - 1) % gpushm_ring_slots(ring));
  CHECK(f.offset == f.slot * gpushm_ring_slot_stride(ring));
  fill(ring, &f);
  CHECK_OK(gpushm_ring_present(ring, &f));
}

/* A close is one-way: the daemon takes it in its own time. */
static void wait_consumers(gpushm_ring_t *ring, uint32_t n)
{
  for (int tries = 0; gpushm_ring_consumers(ring) != n; tries++) {
    CHECK(tries < 2000);
    usleep(1000);
  }
}

static void test_shape(gpushm_t *conn)
{
  gpushm_ring_t *ring = create(conn, "shape", 3, 0600), *other;
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;
  gpushm_timeline_t *tl;

  CHECK(gpushm_daemon_has(conn, GPUSHM_FEATURE_RINGS));
  CHECK(gpushm_ring_slots(ring) == 3 && gpushm_ring_slot_size(ring) == SLOT_BYTES);
  CHECK(gpushm_ring_slot_stride(ring) == GPUSHM_RING_SLOT_ALIGN);
  CHECK(gpushm_buffer_size(gpushm_ring_buffer(ring)) == 3ull * GPUSHM_RING_SLOT_ALIGN);
  CHECK((char *)gpushm_ring_slot_ptr(ring, 2) - (char *)gpushm_ring_slot_ptr(ring, 0) ==
        2 * GPUSHM_RING_SLOT_ALIGN);
  CHECK(gpushm_ring_slot_ptr(ring, 3) == NULL);
  CHECK(gpushm_ring_is_producer(ring) && gpushm_ring_consumers(ring) == 0);
  CHECK(gpushm_ring_presented(ring) == 0);
  CHECK(strcmp(gpushm_ring_name(ring), "shape") == 0 && gpushm_ring_id(ring));

  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_HOST;
  CHECK_ERR(gpushm_ring_create(conn, "bad", 1, SLOT_BYTES, &opts, &other), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "a ring has 2 to 64 slots"));
  CHECK_ERR(gpushm_ring_create(conn, "bad", 65, SLOT_BYTES, &opts, &other), GPUSHM_E_LIMIT);
  CHECK(strstr(gpushm_last_error_message(), "GPUSHM_LIMIT_RING_SLOTS"));
  CHECK_ERR(gpushm_ring_create(conn, "bad", 2, 0, &opts, &other), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_ring_create(conn, "bad", 2, 1ull << 44, &opts, &other), GPUSHM_E_INVAL);
  opts.flags = GPUSHM_CREATE_SYNC;
  CHECK_ERR(gpushm_ring_create(conn, "bad", 2, SLOT_BYTES, &opts, &other), GPUSHM_E_INVAL);
  opts.flags = GPUSHM_CREATE_OPEN_EXISTING;
  CHECK_ERR(gpushm_ring_create(conn, "bad", 2, SLOT_BYTES, &opts, &other), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_ring_create(conn, "bad#1.2", 2, SLOT_BYTES, NULL, &other), GPUSHM_E_NAME);
  CHECK_ERR(gpushm_ring_create(conn, "shape", 2, SLOT_BYTES, NULL, &other), GPUSHM_E_EXIST);
  /* kinds: one namespace, no name of one kind opens another */
  CHECK_ERR(gpushm_buffer_open(conn, "shape", 0, &b), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "'shape' is a ring, not a buffer"));
  CHECK_ERR(gpushm_timeline_open(conn, "shape", 0, &tl), GPUSHM_E_INVAL);
  CHECK_OK(gpushm_timeline_create(conn, "not-a-ring", NULL, &tl));
  CHECK_ERR(gpushm_ring_open(conn, "not-a-ring", 0, &other), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "'not-a-ring' is a timeline, not a ring"));
  CHECK_OK(gpushm_timeline_close_unlink(tl));
  CHECK_ERR(gpushm_ring_open(conn, "nowhere", 0, &other), GPUSHM_E_NOENT);
  CHECK_ERR(gpushm_ring_open(conn, "shape", 0x8, &other), GPUSHM_E_INVAL);
  CHECK_OK(gpushm_ring_close_unlink(ring));
  /* a ring of images: each slot one linear image, the description the ring's */
  {
    gpushm_image_desc_t desc, got;
    gpushm_memory_info_t info = { .size = sizeof info };
    gpushm_ring_t *cons;
    gpushm_image_desc_init(&desc);
    desc.width = 160;
    desc.height = 90;
    gpushm_create_opts_init(&opts);
    opts.backend = GPUSHM_BACKEND_HOST;
    CHECK_OK(gpushm_ring_create_images(conn, "pictures", 3, &desc, &opts, &ring));
    CHECK_OK(gpushm_buffer_image_desc(gpushm_ring_buffer(ring), &got));
    CHECK(got.width == 160 && got.height == 90 && got.row_pitch >= 640);
    CHECK(gpushm_ring_slot_size(ring) == got.row_pitch * 90 && gpushm_ring_slots(ring) == 3);
    /* a graphics consumer: the memory for its API to import, slots at their offsets */
    gpushm_t *viewer = daemon_connect(&d);
    CHECK_OK(gpushm_ring_open(viewer, "pictures", GPUSHM_RING_UNMAPPED, &cons));
    CHECK_OK(gpushm_buffer_memory_info(gpushm_ring_buffer(cons), &info));
    CHECK(info.handle_type == GPUSHM_EXTERNAL_HOST_POINTER && (info.access & GPUSHM_OPEN_READONLY));
    CHECK(info.data_size == 3 * gpushm_ring_slot_stride(cons));
    {
      /* the ring's memory exports as a buffer's; its frames go round only as frames */
      gpushm_export_desc_t ex = { .size = sizeof ex };
      CHECK_OK(gpushm_buffer_export(gpushm_ring_buffer(cons), GPUSHM_EXPORT_HOST_POINTER, 0, 0,
                                    &ex));
      CHECK_ERR(gpushm_buffer_release(gpushm_ring_buffer(ring), NULL, NULL), GPUSHM_E_INVAL);
      CHECK(strstr(gpushm_last_error_message(), "is a frame ring"));
    }
    CHECK_ERR(gpushm_ring_open(viewer, "pictures", GPUSHM_RING_UNMAPPED | GPUSHM_MAP_DEVICE(0),
                               &other), GPUSHM_E_INVAL);
    CHECK_OK(gpushm_ring_close(cons));
    gpushm_disconnect(viewer);
    desc.tiling = GPUSHM_TILING_OPTIMAL;
    CHECK_ERR(gpushm_ring_create_images(conn, "optimal", 3, &desc, &opts, &other),
              GPUSHM_E_UNSUPPORTED);
    CHECK_OK(gpushm_ring_close_unlink(ring));
  }
  test_log("shape: geometry as created; bad slot counts, sizes, flags and names refused; a "
           "ring of images");
}

static void test_frames(gpushm_t *conn)
{
  gpushm_ring_t *ring = create(conn, "frames", 3, 0600), *cons, *late;
  gpushm_t *conn2 = daemon_connect(&d), *conn3 = daemon_connect(&d);
  gpushm_ring_frame_t f, g, held;
  double t0;

  CHECK_OK(gpushm_ring_open(conn2, "frames", 0, &cons));
  CHECK(!gpushm_ring_is_producer(cons) && gpushm_ring_consumers(ring) == 1);
  /* a consumer's calls on a producer's handle and the other way round */
  CHECK_ERR(gpushm_ring_acquire_frame(ring, 0, 0, &f), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_ring_acquire_slot(cons, 0, &f), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "acquiring a slot is a producer's"));
  CHECK_ERR(gpushm_ring_acquire_frame(cons, 0, 20, &f), GPUSHM_E_TIMEOUT);
  for (uint64_t i = 1; i <= 3; i++)
    produce(ring, i);
  CHECK(gpushm_ring_presented(ring) == 3 && gpushm_ring_presented(cons) == 3);
  /* a lap ahead of the consumer, which holds frame 1: the producer waits */
  t0 = test_clock_ms();
  CHECK_ERR(gpushm_ring_acquire_slot(ring, 50, &f), GPUSHM_E_TIMEOUT);
  CHECK(test_clock_ms() - t0 >= 49);
  CHECK(strstr(gpushm_last_error_message(), "slot 0 (frame 4) still held by consumer "));
  CHECK_OK(gpushm_ring_acquire_frame(cons, 0, 0, &held));
  CHECK(held.frame == 1 && held.slot == 0);
  verify(cons, &held);
  CHECK_ERR(gpushm_ring_release(cons, &(gpushm_ring_frame_t){ .frame = 2 }), GPUSHM_E_INVAL);
  CHECK_OK(gpushm_ring_release(cons, &held));
  CHECK_ERR(gpushm_ring_release(cons, &held), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "not one this consumer holds"));
  produce(ring, 4);
  CHECK_OK(gpushm_ring_acquire_frame(cons, 0, 0, &g));
  CHECK(g.frame == 2 && g.slot == 1);
  verify(cons, &g);
  CHECK_OK(gpushm_ring_release(cons, &g));
  /* acquired and not presented: one frame at a time */
  CHECK_OK(gpushm_ring_acquire_slot(ring, 0, &f));
  CHECK(f.frame == 5);
  CHECK_ERR(gpushm_ring_acquire_slot(ring, 0, &g), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_ring_present(ring, &(gpushm_ring_frame_t){ .frame = 6 }), GPUSHM_E_INVAL);
  fill(ring, &f);
  CHECK_OK(gpushm_ring_present(ring, &f));
  /* a late consumer takes the frames after it came */
  CHECK_OK(gpushm_ring_open(conn3, "frames", 0, &late));
  wait_consumers(ring, 2);
  CHECK_ERR(gpushm_ring_acquire_frame(late, 0, 0, &g), GPUSHM_E_TIMEOUT);
  /* the first consumer skips 3 and 4 to the latest, 5, and its release covers them */
  CHECK_OK(gpushm_ring_acquire_frame(cons, GPUSHM_RING_LATEST, 0, &g));
  CHECK(g.frame == 5 && g.slot == 1);
  verify(cons, &g);
  CHECK_OK(gpushm_ring_release(cons, &g));
  CHECK_ERR(gpushm_ring_acquire_frame(cons, 0x10, 0, &g), GPUSHM_E_INVAL);
  produce(ring, 6);
  CHECK_OK(gpushm_ring_acquire_frame(late, 0, 0, &held));
  CHECK(held.frame == 6 && held.slot == 2);
  verify(late, &held);
  CHECK_OK(gpushm_ring_acquire_frame(cons, 0, 0, &g));
  CHECK(g.frame == 6);
  CHECK_OK(gpushm_ring_release(cons, &g));
  produce(ring, 7); /* needs frame 4 released by both: the late one never had it */
  produce(ring, 8); /* needs 5 */
  /* 9 needs 6, which the late consumer holds */
  CHECK_ERR(gpushm_ring_acquire_slot(ring, 20, &f), GPUSHM_E_TIMEOUT);
  /* a consumer that closes is waited for no more */
  CHECK_OK(gpushm_ring_close(late));
  produce(ring, 9);
  wait_consumers(ring, 1);
  CHECK_OK(gpushm_ring_close(cons));
  wait_consumers(ring, 0);
  CHECK_OK(gpushm_ring_close_unlink(ring));
  gpushm_disconnect(conn2);
  gpushm_disconnect(conn3);
  test_log("frames: numbers and slots in turn; the producer waits for its slowest consumer; "
           "late consumers start at the next frame; LATEST skips");
}

/* What a receiver can do with an fd sent for a read-only open: nothing that writes. */
static void check_fd_read_only(int fd, size_t len)
{
  char path[64];
  void *p;

  CHECK(mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
  CHECK((p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0)) != MAP_FAILED);
  CHECK(mprotect(p, len, PROT_READ | PROT_WRITE) < 0 && errno == EACCES);
  munmap(p, len);
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  CHECK(open(path, O_RDWR) < 0);
  CHECK(ftruncate(fd, 0) < 0);
  CHECK(fallocate(fd, 0, 0, 2 * len) < 0);
  CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, len) < 0);
}

#define CROSS_FRAMES 200

static void test_permissions(gpushm_t *conn)
{
  /* static: the forked child inherits them, and a leak check must find them */
  static gpushm_ring_t *ring, *priv;
  gpushm_t *conn2 = daemon_connect(&d);
  gpushm_ring_t *mine;
  uint64_t ring_id, other_done;
  int ready[2], go[2];
  char byte = 0;
  pid_t pid;

  ring = create(conn, "shared", 4, 0644);
  priv = create(conn, "private", 2, 0600);
  ring_id = gpushm_ring_id(ring);
  /* another consumer (this uid), whose done timeline the attacker goes after */
  CHECK_OK(gpushm_ring_open(conn2, "shared", 0, &mine));
  {
    int status_fd = -1, sock = raw_connect(d.socket), fds[GPUSHM_LIMIT_FDS_PER_FRAME];
    unsigned n;
    CHECK(sock >= 0 && raw_hello_features(sock, "probe", GPUSHM_FEATURE_RINGS |
                                          GPUSHM_FEATURE_TIMELINES | GPUSHM_FEATURE_PROMISES,
                                          &status_fd) == 0);
    CHECK(raw_open_kind(sock, "shared", 0, GPUSHM__KIND__KIND_RING, true, false, fds, &n) == 0);
    CHECK(n == 2);
    {
      struct sync_control *ctl = mmap(NULL, SYNC_CONTROL_SIZE, PROT_READ, MAP_SHARED, fds[1], 0);
      CHECK(ctl != MAP_FAILED);
      CHECK(ring_table_of(ctl)->consumers == 1);
      other_done = ring_table_of(ctl)->done_id[0];
      munmap(ctl, SYNC_CONTROL_SIZE);
    }
    close(fds[0]);
    close(fds[1]);
    close(status_fd);
    close(sock);
  }
  CHECK(other_done != 0);
  CHECK(pipe(ready) == 0 && pipe(go) == 0);
  pid = geteuid() == 0 ? fork_as(65534, 65534) : fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *c = daemon_connect(&d);
    gpushm_ring_t *r, *p;
    gpushm_ring_frame_t f;
    int sock = raw_connect(d.socket), fds[GPUSHM_LIMIT_FDS_PER_FRAME], status_fd;
    unsigned n;

    close(ready[0]);
    close(go[1]);
    if (geteuid() != 0) {
      CHECK_ERR(gpushm_ring_open(c, "private", 0, &r), GPUSHM_E_NOENT);
      CHECK_ERR(gpushm_ring_open(c, "shared", GPUSHM_RING_PRODUCER, &p), GPUSHM_E_PERM);
    }
    CHECK_OK(gpushm_ring_open(c, "shared", 0, &r));
    /* every fd the daemon sends it for the ring is read-only */
    CHECK(sock >= 0 && raw_hello_features(sock, "attacker", GPUSHM_FEATURE_RINGS |
                                          GPUSHM_FEATURE_TIMELINES | GPUSHM_FEATURE_PROMISES,
                                          &status_fd) == 0);
    CHECK(raw_open_kind(sock, NULL, ring_id, GPUSHM__KIND__KIND_TIMELINE, false, true, fds, &n) ==
          -GPUSHM_E_NOENT); /* holds no ring yet */
    CHECK(raw_open_kind(sock, "shared", 0, GPUSHM__KIND__KIND_RING, true, false, fds, &n) == 0);
    CHECK(n == 2);
    check_fd_read_only(fds[0], 4 * (size_t)gpushm_ring_slot_stride(r));
    check_fd_read_only(fds[1], SYNC_CONTROL_SIZE);
    close(fds[0]);
    close(fds[1]);
    if (geteuid() != 0) {
      /* another consumer's done timeline: not to write, and not to read (not the ring's
       * writer); nor by the name only gpushmd spells */
      CHECK(raw_open_kind(sock, NULL, other_done, GPUSHM__KIND__KIND_TIMELINE, false, false, fds,
                          &n) == -GPUSHM_E_NOENT);
      CHECK(raw_open_kind(sock, NULL, other_done, GPUSHM__KIND__KIND_TIMELINE, true, false, fds,
                          &n) == -GPUSHM_E_NOENT);
      CHECK(raw_open_kind(sock, NULL, ring_id, GPUSHM__KIND__KIND_RING, false, false, fds, &n) ==
            -GPUSHM_E_PERM);
    }
    CHECK(raw_open_kind(sock, "shared#1.1", 0, GPUSHM__KIND__KIND_TIMELINE, true, false, fds,
                        &n) == -GPUSHM_E_NAME);
    /* its own done timeline: read-write, its own */
    CHECK(raw_open_kind(sock, NULL, ring_id, GPUSHM__KIND__KIND_TIMELINE, false, true, fds, &n) ==
          0);
    CHECK(n == 1);
    {
      void *p2 = mmap(NULL, SYNC_CONTROL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
      CHECK(p2 != MAP_FAILED);
      munmap(p2, SYNC_CONTROL_SIZE);
    }
    close(fds[0]);
    close(sock);
    /* the frames, across processes */
    CHECK(write(ready[1], &byte, 1) == 1);
    for (uint64_t i = 1; i <= CROSS_FRAMES; i++) {
      CHECK_OK(gpushm_ring_acquire_frame(r, 0, 10000, &f));
      CHECK(f.frame == i);
      verify(r, &f);
      CHECK_OK(gpushm_ring_release(r, &f));
    }
    CHECK(read(go[0], &byte, 1) == 1);
    CHECK_OK(gpushm_ring_close(r));
    gpushm_disconnect(c);
    _exit(0);
  }
  close(ready[1]);
  close(go[0]);
  CHECK(read(ready[0], &byte, 1) == 1);
  /* conn2's and the child's library's (its raw attach went with its socket) */
  wait_consumers(ring, 2);
  CHECK_OK(gpushm_ring_close(mine)); /* the producer then waits for the child alone */
  for (uint64_t i = 1; i <= CROSS_FRAMES; i++)
    produce(ring, i);
  CHECK(write(go[1], &byte, 1) == 1);
  check_child(pid);
  close(ready[0]);
  close(go[1]);
  wait_consumers(ring, 0);
  /* a uid that may read a ring takes at most GPUSHM_LIMIT_RING_CONSUMERS_PER_UID places
   * in it; and once the ring is unlinked, its producer still waits for the consumers it
   * finds (a consumer of another uid attached, the name gone before the producer looked) */
  if (geteuid() == 0) {
    CHECK(pipe(ready) == 0 && pipe(go) == 0);
    pid = fork_as(65534, 65534);
    if (pid == 0) {
      gpushm_t *cs[GPUSHM_LIMIT_RING_CONSUMERS_PER_UID + 1];
      gpushm_ring_t *rs[GPUSHM_LIMIT_RING_CONSUMERS_PER_UID + 1];
      gpushm_ring_frame_t f;
      close(ready[0]);
      close(go[1]);
      for (unsigned i = 0; i <= GPUSHM_LIMIT_RING_CONSUMERS_PER_UID; i++)
        cs[i] = daemon_connect(&d);
      for (unsigned i = 0; i < GPUSHM_LIMIT_RING_CONSUMERS_PER_UID; i++)
        CHECK_OK(gpushm_ring_open(cs[i], "shared", 0, &rs[i]));
      CHECK_ERR(gpushm_ring_open(cs[GPUSHM_LIMIT_RING_CONSUMERS_PER_UID], "shared", 0,
                                 &rs[GPUSHM_LIMIT_RING_CONSUMERS_PER_UID]), GPUSHM_E_LIMIT);
      CHECK(strstr(gpushm_last_error_message(), "GPUSHM_LIMIT_RING_CONSUMERS_PER_UID"));
      for (unsigned i = 1; i < GPUSHM_LIMIT_RING_CONSUMERS_PER_UID; i++)
        CHECK_OK(gpushm_ring_close(rs[i]));
      CHECK(write(ready[1], &byte, 1) == 1);
      CHECK_OK(gpushm_ring_acquire_frame(rs[0], 0, 10000, &f)); /* and holds it */
      CHECK(write(ready[1], &byte, 1) == 1);
      CHECK(read(go[0], &byte, 1) == 1);
      CHECK_OK(gpushm_ring_close(rs[0]));
      for (unsigned i = 0; i <= GPUSHM_LIMIT_RING_CONSUMERS_PER_UID; i++)
        gpushm_disconnect(cs[i]);
      _exit(0);
    }
    close(ready[1]);
    close(go[0]);
    CHECK(read(ready[0], &byte, 1) == 1);
    CHECK_OK(gpushm_unlink(conn, "shared"));
    wait_consumers(ring, 1);
    {
      uint64_t first = gpushm_ring_presented(ring) + 1;
      gpushm_ring_frame_t f;
      for (uint64_t i = first; i < first + 4; i++)
        produce(ring, i);
      CHECK(read(ready[0], &byte, 1) == 1); /* the child holds frame `first` */
      CHECK_ERR(gpushm_ring_acquire_slot(ring, 30, &f), GPUSHM_E_TIMEOUT);
    }
    CHECK(write(go[1], &byte, 1) == 1);
    check_child(pid);
    close(ready[0]);
    close(go[1]);
    CHECK_OK(gpushm_ring_close(ring));
  } else {
    CHECK_OK(gpushm_ring_close_unlink(ring));
  }
  CHECK_OK(gpushm_ring_close_unlink(priv));
  gpushm_disconnect(conn2);
  test_log("permissions as uid %u: %d frames of a 0644 ring read across processes; the ring's "
           "fds read-only; no producer open, no other consumer's done timeline, no '#' name",
           geteuid() == 0 ? 65534u : (unsigned)geteuid(), CROSS_FRAMES);
}

/* A child that opens name as a consumer (or a producer) on its own connection, says so,
 * and then acts as told: consumer: takes one frame and holds it; producer: presents
 * frames up to `frames`, then waits to be killed. */
static pid_t child(const char *name, bool producer, uint64_t frames, int *report)
{
  int pipefd[2];
  char byte = 1;
  pid_t pid;

  CHECK(pipe(pipefd) == 0);
  CHECK((pid = fork()) >= 0);
  if (pid == 0) {
    gpushm_t *c = daemon_connect(&d);
    gpushm_ring_t *r;
    gpushm_ring_frame_t f;

    close(pipefd[0]);
    CHECK_OK(gpushm_ring_open(c, name, producer ? GPUSHM_RING_PRODUCER : 0, &r));
    if (producer) {
      for (uint64_t i = 0; i < frames; i++) {
        CHECK_OK(gpushm_ring_acquire_slot(r, 5000, &f));
        fill(r, &f);
        CHECK_OK(gpushm_ring_present(r, &f));
      }
    } else {
      CHECK_OK(gpushm_ring_acquire_frame(r, 0, 10000, &f));
    }
    CHECK(write(pipefd[1], &byte, 1) == 1);
    for (;;)
      pause();
  }
  close(pipefd[1]);
  *report = pipefd[0];
  return pid;
}

static double kill_child(pid_t pid, int report)
{
  double at = test_clock_ms();
  int status;

  CHECK(kill(pid, SIGKILL) == 0);
  CHECK(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status));
  close(report);
  return at;
}

struct acquirer {
  pthread_t thread;
  gpushm_ring_t *ring;
  bool producer;
  int result;
  gpushm_ring_frame_t f;
  double returned_ms;
};

static void *acquire_thread(void *arg)
{
  struct acquirer *a = arg;
  a->result = a->producer ? gpushm_ring_acquire_slot(a->ring, 20000, &a->f)
                          : gpushm_ring_acquire_frame(a->ring, 0, 20000, &a->f);
  a->returned_ms = test_clock_ms();
  return NULL;
}

static void test_deaths(gpushm_t *conn)
{
  gpushm_ring_t *ring = create(conn, "mortal", 2, 0600), *cons;
  struct acquirer a = { .ring = ring, .producer = true };
  double killed;
  int report;
  char byte;
  pid_t pid;

  uint64_t base;

  /* a consumer killed holding frame 1: the producer's acquire of frame 3 goes on */
  pid = child("mortal", false, 0, &report);
  while (gpushm_ring_consumers(ring) < 1)
    usleep(1000);
  produce(ring, 1);
  CHECK(read(report, &byte, 1) == 1);
  produce(ring, 2);
  CHECK(pthread_create(&a.thread, NULL, acquire_thread, &a) == 0);
  usleep(50000);
  killed = kill_child(pid, report);
  CHECK(pthread_join(a.thread, NULL) == 0);
  CHECK_OK(a.result);
  CHECK(a.f.frame == 3);
  wait_consumers(ring, 0);
  test_log("deaths: a producer waiting on a consumer killed holding a frame went on %.1f ms "
           "after the kill", a.returned_ms - killed);
  CHECK_OK(gpushm_ring_present(ring, &a.f));
  CHECK_OK(gpushm_ring_close_unlink(ring));

  /* a producer killed mid-stream: the consumer's wait ends with GPUSHM_E_LOST */
  {
    gpushm_create_opts_t opts;
    gpushm_ring_t *keep;
    gpushm_create_opts_init(&opts);
    opts.backend = GPUSHM_BACKEND_HOST;
    opts.lifetime = GPUSHM_LIFETIME_PERSISTENT;
    CHECK_OK(gpushm_ring_create(conn, "orphan", 2, SLOT_BYTES, &opts, &keep));
    /* its creator promised the first frames as it made it; its close ends that stream:
     * they count as lost, and frames go on after them */
    CHECK_OK(gpushm_ring_close(keep));
  }
  {
    gpushm_sync_state_t st;
    gpushm_ring_t *watch;
    CHECK_OK(gpushm_ring_open(conn, "orphan", GPUSHM_RING_OBSERVER, &watch));
    for (int tries = 0; gpushm_ring_state(watch, &st) == 0 && st.promised_upto; tries++) {
      CHECK(tries < 2000); /* the break is gpushmd's, in its time */
      usleep(1000);
    }
    base = st.counter;
    CHECK(base == 1 + GPUSHM_RING_PROMISE_AHEAD && st.lost_upto == base);
    CHECK_OK(gpushm_ring_close(watch));
  }
  CHECK_OK(gpushm_ring_open(conn, "orphan", 0, &cons));
  pid = child("orphan", true, 2, &report);
  CHECK(read(report, &byte, 1) == 1);
  {
    gpushm_ring_frame_t f;
    CHECK_OK(gpushm_ring_acquire_frame(cons, 0, 0, &f));
    CHECK(f.frame == base + 1);
    verify(cons, &f);
    CHECK_OK(gpushm_ring_release(cons, &f));
    CHECK_OK(gpushm_ring_acquire_frame(cons, 0, 0, &f));
    CHECK_OK(gpushm_ring_release(cons, &f));
  }
  a = (struct acquirer){ .ring = cons, .producer = false };
  CHECK(pthread_create(&a.thread, NULL, acquire_thread, &a) == 0);
  usleep(50000);
  killed = kill_child(pid, report);
  CHECK(pthread_join(a.thread, NULL) == 0);
  CHECK(a.result == GPUSHM_E_LOST);
  test_log("deaths: a consumer waiting for frame 3 returned GPUSHM_E_LOST %.1f ms after its "
           "producer was killed", a.returned_ms - killed);
  CHECK(a.returned_ms - killed < 1000);
  /* the next producer's frames come through, numbered on from the loss */
  {
    gpushm_ring_t *next;
    gpushm_ring_frame_t f, g;
    gpushm_t *conn2 = daemon_connect(&d);
    CHECK_OK(gpushm_ring_open(conn2, "orphan", GPUSHM_RING_PRODUCER, &next));
    gpushm_sync_state_t st;
    CHECK_OK(gpushm_ring_state(cons, &st));
    CHECK_OK(gpushm_ring_acquire_slot(next, 1000, &f));
    CHECK(f.frame == st.lost_upto + 1 && st.lost_upto > base + 2); /* after what it lost */
    fill(next, &f);
    CHECK_OK(gpushm_ring_present(next, &f));
    CHECK_OK(gpushm_ring_acquire_frame(cons, 0, 1000, &g));
    CHECK(g.frame == f.frame);
    verify(cons, &g);
    CHECK_OK(gpushm_ring_release(cons, &g));
    CHECK_OK(gpushm_ring_close_unlink(next));
    gpushm_disconnect(conn2);
  }
  CHECK_OK(gpushm_ring_close(cons));
  test_log("deaths: the next producer's frames came through");
}

static void test_limits(gpushm_t *conn)
{
  gpushm_ring_t *ring = create(conn, "crowded", 2, 0600), *cons[GPUSHM_LIMIT_RING_CONSUMERS + 1];
  gpushm_t *conns[GPUSHM_LIMIT_RING_CONSUMERS + 1];

  for (unsigned i = 0; i <= GPUSHM_LIMIT_RING_CONSUMERS; i++)
    conns[i] = daemon_connect(&d);
  for (unsigned i = 0; i < GPUSHM_LIMIT_RING_CONSUMERS; i++)
    CHECK_OK(gpushm_ring_open(conns[i], "crowded", 0, &cons[i]));
  CHECK(gpushm_ring_consumers(ring) == GPUSHM_LIMIT_RING_CONSUMERS);
  CHECK_ERR(gpushm_ring_open(conns[GPUSHM_LIMIT_RING_CONSUMERS], "crowded", 0,
                             &cons[GPUSHM_LIMIT_RING_CONSUMERS]),
            GPUSHM_E_LIMIT);
  CHECK(strstr(gpushm_last_error_message(), "GPUSHM_LIMIT_RING_CONSUMERS"));
  /* the producer waits for every one of them */
  produce(ring, 1);
  produce(ring, 2);
  for (unsigned i = 0; i < GPUSHM_LIMIT_RING_CONSUMERS; i++) {
    gpushm_ring_frame_t f, g;
    CHECK_ERR(gpushm_ring_acquire_slot(ring, 0, &g), GPUSHM_E_TIMEOUT);
    CHECK_OK(gpushm_ring_acquire_frame(cons[i], 0, 0, &f));
    CHECK_OK(gpushm_ring_release(cons[i], &f));
  }
  produce(ring, 3);
  for (unsigned i = 0; i < GPUSHM_LIMIT_RING_CONSUMERS; i++) {
    CHECK_OK(gpushm_ring_close(cons[i]));
    gpushm_disconnect(conns[i]);
  }
  gpushm_disconnect(conns[GPUSHM_LIMIT_RING_CONSUMERS]);
  CHECK_OK(gpushm_ring_close_unlink(ring));
  test_log("limits: %u consumers attached and waited for; one more refused: %s",
           GPUSHM_LIMIT_RING_CONSUMERS, "GPUSHM_LIMIT_RING_CONSUMERS");
  (void)conn;
}

/* A consumer's done timeline counts against its uid's objects. */
static void test_object_limit(void)
{
  struct test_daemon small = { .log_path = log_path };
  gpushm_t *prod, *cons;
  gpushm_ring_t *ring, *c;
  gpushm_timeline_t *tl;

  daemon_start(&small, "--max-buffers-per-uid", "2", NULL);
  prod = daemon_connect(&small);
  cons = daemon_connect(&small);
  CHECK_OK(gpushm_ring_create(prod, "counted", 2, SLOT_BYTES, NULL, &ring));
  CHECK_OK(gpushm_timeline_create(prod, "counted-too", NULL, &tl));
  /* the same uid: two objects already */
  CHECK_ERR(gpushm_ring_open(cons, "counted", 0, &c), GPUSHM_E_LIMIT);
  CHECK_OK(gpushm_timeline_close_unlink(tl));
  /* The close_unlink is one-way and cons another connection: gpushmd serves connections
   * in the order its poll lists them, not the order they sent in, and may run cons's
   * open first (it did under valgrind).  A round trip on prod orders the two. */
  CHECK_OK(gpushm_ping(prod));
  CHECK_OK(gpushm_ring_open(cons, "counted", 0, &c));
  CHECK_OK(gpushm_ring_close(c));
  CHECK_OK(gpushm_ring_close_unlink(ring));
  gpushm_disconnect(prod);
  gpushm_disconnect(cons);
  daemon_stop(&small);
  test_log("the object limit (--max-buffers-per-uid 2) counted a consumer's done timeline");
}

static unsigned long fake_count(const char *symbol)
{
  void *lib = dlopen(getenv("GPUSHM_FAKE_CUDA_LIB"), RTLD_NOW | RTLD_NOLOAD);
  unsigned long (*count)(void);
  unsigned long n;

  if (!lib)
    return 0; /* not loaded yet: nothing counted */
  CHECK((count = (unsigned long (*)(void))dlsym(lib, symbol)));
  n = count();
  dlclose(lib);
  return n;
}

/* Streams, through the fake driver: nothing waits on the CPU. */
static void test_streams(gpushm_t *conn)
{
  gpushm_ring_t *ring = create(conn, "streamed", 2, 0600), *cons;
  gpushm_t *conn2 = daemon_connect(&d);
  gpushm_ring_frame_t f, g;
  unsigned long queued;

  /* frame 1 before the producer did anything: its creator promised it, so a consumer's
   * stream queues the wait at once */
  {
    gpushm_ring_t *early = create(conn, "streamed-early", 2, 0600), *c;
    CHECK_OK(gpushm_ring_open(conn2, "streamed-early", 0, &c));
    queued = fake_count("gpushm_fake_cuda_waits_queued");
    CHECK_OK(gpushm_ring_acquire_frame_stream(c, NULL, 0, 0, &g));
    CHECK(g.frame == 1 && fake_count("gpushm_fake_cuda_waits_queued") == queued + 1);
    CHECK_OK(gpushm_ring_acquire_slot(early, 0, &f));
    CHECK_OK(gpushm_ring_present_stream(early, NULL, &f));
    CHECK_OK(gpushm_ring_close(c));
    CHECK_OK(gpushm_ring_close_unlink(early));
  }
  CHECK_OK(gpushm_ring_open(conn2, "streamed", 0, &cons));
  for (uint64_t i = 1; i <= 2; i++) {
    CHECK_OK(gpushm_ring_acquire_slot_stream(ring, NULL, 0, &f));
    CHECK(f.frame == i);
    CHECK_OK(gpushm_ring_present_stream(ring, NULL, &f));
  }
  CHECK_OK(gpushm_ring_acquire_frame_stream(cons, NULL, 0, 0, &g));
  CHECK(g.frame == 1);
  /* frame 3 needs frame 1 released, which the consumer holds: with no time to wait on
   * the CPU, the wait goes to the stream (the consumer promised its releases) */
  queued = fake_count("gpushm_fake_cuda_waits_queued");
  CHECK_OK(gpushm_ring_acquire_slot_stream(ring, NULL, 0, &f));
  CHECK(f.frame == 3 && fake_count("gpushm_fake_cuda_waits_queued") == queued + 1);
  CHECK_OK(gpushm_ring_present_stream(ring, NULL, &f));
  CHECK_OK(gpushm_ring_acquire_frame_stream(cons, NULL, 0, 0, &g));
  CHECK(g.frame == 2);
  CHECK_OK(gpushm_ring_release_stream(cons, NULL, &g));
  /* frame 4, not presented yet: the consumer's stream waits for it (promised ahead) */
  queued = fake_count("gpushm_fake_cuda_waits_queued");
  CHECK_OK(gpushm_ring_acquire_frame_stream(cons, NULL, 0, 0, &g));
  CHECK(g.frame == 3);
  CHECK_OK(gpushm_ring_release_stream(cons, NULL, &g));
  CHECK_OK(gpushm_ring_acquire_frame_stream(cons, NULL, 0, 0, &g));
  CHECK(g.frame == 4 && fake_count("gpushm_fake_cuda_waits_queued") == queued + 1);
  CHECK_OK(gpushm_ring_acquire_slot_stream(ring, NULL, 0, &f));
  CHECK(f.frame == 4);
  CHECK_OK(gpushm_ring_present_stream(ring, NULL, &f));
  CHECK_OK(gpushm_ring_release_stream(cons, NULL, &g));
  CHECK(gpushm_ring_presented(cons) == 4);
  {
    gpushm_sync_state_t st;
    CHECK_OK(gpushm_ring_state(cons, &st));
    CHECK(st.counter == 4 && st.promised_upto == 1 + GPUSHM_RING_PROMISE_AHEAD);
  }
  CHECK_OK(gpushm_ring_close(cons));
  CHECK_OK(gpushm_ring_close_unlink(ring));
  gpushm_disconnect(conn2);
  CHECK(fake_count("gpushm_fake_cuda_host_registered") == 0);
  test_log("streams (fake driver): acquires queue their waits, presents and releases write "
           "the fences, no CPU wait");
}

static void test_ctl(gpushm_t *conn)
{
  gpushm_ring_t *ring = create(conn, "shown", 3, 0600), *cons;
  gpushm_t *conn2 = daemon_connect(&d);

  CHECK_OK(gpushm_ring_open(conn2, "shown", 0, &cons));
  produce(ring, 1);
  ctl_show_says(d.socket, "shown",
                "ring:       3 slots of 4096 bytes (stride 65536); 1 consumer\n");
  ctl_show_says(d.socket, "shown", "counter:    1; promised up to 4097 by client");
  ctl_show_says(d.socket, "shown", "reached:    1\n");
  /* its holders, each in its role */
  ctl_show_says(d.socket, "shown", "  producer\n");
  ctl_show_says(d.socket, "shown", "  consumer\n");
  CHECK_OK(gpushm_ring_close(cons));
  CHECK_OK(gpushm_ring_close_unlink(ring));
  gpushm_disconnect(conn2);
}

/* One role a connection: a producer's connection does not consume, a consumer's does
 * not produce, and consumes once; a consumer's close detaches it whatever else its
 * connection holds of the ring (an observer's handle). */
static void test_roles(gpushm_t *conn)
{
  gpushm_ring_t *ring = create(conn, "roles", 2, 0600), *cons, *again, *watch, *prod;
  gpushm_t *conn2 = daemon_connect(&d);
  gpushm_ring_frame_t f;

  CHECK_ERR(gpushm_ring_open(conn, "roles", 0, &cons), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "this connection produces into ring 'roles'"));
  CHECK_OK(gpushm_ring_open(conn2, "roles", GPUSHM_RING_OBSERVER, &watch));
  CHECK_OK(gpushm_ring_open(conn2, "roles", 0, &cons));
  CHECK_ERR(gpushm_ring_open(conn2, "roles", 0, &again), GPUSHM_E_EXIST);
  CHECK(strstr(gpushm_last_error_message(), "one consumer a connection"));
  CHECK_ERR(gpushm_ring_open(conn2, "roles", GPUSHM_RING_PRODUCER, &prod), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "produce on a connection of its own"));
  CHECK(gpushm_ring_consumers(ring) == 1);
  produce(ring, 1);
  produce(ring, 2);
  CHECK_OK(gpushm_ring_acquire_frame(cons, 0, 0, &f));
  CHECK_OK(gpushm_ring_close(cons)); /* holding frame 1; the observer stays */
  CHECK_OK(gpushm_ring_acquire_slot(ring, 5000, &f)); /* not waited for any more */
  CHECK(f.frame == 3);
  CHECK_OK(gpushm_ring_present(ring, &f));
  wait_consumers(ring, 0);
  CHECK(gpushm_ring_presented(watch) == 3);
  CHECK_OK(gpushm_ring_close(watch));
  CHECK_OK(gpushm_ring_close_unlink(ring));
  gpushm_disconnect(conn2);
  test_log("roles: one a connection; a consumer's close detaches it beside an observer");
}

/* A producer evicts a consumer that holds a frame too long: it goes on, the consumer is
 * told.  Its table, which every producer can write, cannot hold another producer up. */
static void test_evict(gpushm_t *conn)
{
  gpushm_ring_t *ring = create(conn, "evicting", 2, 0600), *cons;
  gpushm_t *conn2 = daemon_connect(&d);
  gpushm_ring_frame_t f, g;
  unsigned long long consumer = 0;
  const char *at;

  CHECK_OK(gpushm_ring_open(conn2, "evicting", 0, &cons));
  produce(ring, 1);
  produce(ring, 2);
  CHECK_OK(gpushm_ring_acquire_frame(cons, 0, 0, &g)); /* held */
  CHECK_ERR(gpushm_ring_acquire_slot(ring, 20, &f), GPUSHM_E_TIMEOUT);
  CHECK((at = strstr(gpushm_last_error_message(), "still held by consumer ")));
  CHECK(sscanf(at, "still held by consumer %llu", &consumer) == 1 && consumer);
  CHECK_ERR(gpushm_ring_evict(cons, consumer), GPUSHM_E_INVAL); /* a consumer's handle */
  CHECK_ERR(gpushm_ring_evict(ring, consumer + 1000), GPUSHM_E_NOENT);
  CHECK_OK(gpushm_ring_evict(ring, consumer));
  CHECK_OK(gpushm_ring_acquire_slot(ring, 5000, &f));
  CHECK(f.frame == 3);
  CHECK_OK(gpushm_ring_present(ring, &f));
  CHECK(gpushm_ring_consumers(ring) == 0);
  CHECK_ERR(gpushm_ring_acquire_frame(cons, 0, 0, &g), GPUSHM_E_PERM);
  CHECK(strstr(gpushm_last_error_message(), "evicted"));
  CHECK(file_count_lines(log_path, "evicted its consumer") >= 1);
  CHECK_OK(gpushm_ring_close(cons));
  /* another producer leaves the table's count odd: this one's acquire says so, in time */
  {
    int sock = raw_connect(d.socket), fds[GPUSHM_LIMIT_FDS_PER_FRAME], status_fd;
    struct sync_control *ctl;
    unsigned n;
    CHECK(sock >= 0 && raw_hello_features(sock, "scribbler", GPUSHM_FEATURE_RINGS,
                                          &status_fd) == 0);
    CHECK(raw_open_kind(sock, "evicting", 0, GPUSHM__KIND__KIND_RING, false, false, fds, &n) == 0);
    CHECK((ctl = mmap(NULL, SYNC_CONTROL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fds[n - 1],
                      0)) != MAP_FAILED);
    ring_table_of(ctl)->generation |= 1;
    CHECK_ERR(gpushm_ring_acquire_slot(ring, 1000, &f), GPUSHM_E_PROTO);
    CHECK(strstr(gpushm_last_error_message(), "table of consumers"));
    ring_table_of(ctl)->generation++;
    CHECK_OK(gpushm_ring_acquire_slot(ring, 1000, &f));
    CHECK_OK(gpushm_ring_present(ring, &f));
    munmap(ctl, SYNC_CONTROL_SIZE);
    for (unsigned i = 0; i < n; i++)
      close(fds[i]);
    close(status_fd);
    close(sock);
  }
  CHECK_OK(gpushm_ring_close_unlink(ring));
  gpushm_disconnect(conn2);
  test_log("evict: a producer evicted a consumer holding a frame and went on; a table left "
           "mid-change by another producer is an error, not a hang");
}

int main(void)
{
  const char *fake_lib = getenv("GPUSHM_FAKE_CUDA_LIB");
  gpushm_t *conn;

  have_fake_cuda = fake_lib && access(fake_lib, R_OK) == 0;
  if (have_fake_cuda) {
    setenv("GPUSHM_CUDA_LIBRARY", fake_lib, 1);
    setenv("GPUSHM_FAKE_CUDA_QUEUE_WAITS", "1", 1);
  }
  d.log_path = log_path = test_log_file("rings");
  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  test_shape(conn);
  test_frames(conn);
  test_permissions(conn);
  test_deaths(conn);
  test_limits(conn);
  if (have_fake_cuda)
    test_streams(conn);
  else
    test_log("built without CUDA headers: no fake driver, streams not tried");
  test_ctl(conn);
  test_roles(conn);
  test_evict(conn);
  gpushm_disconnect(conn);
  daemon_stop(&d);
  test_object_limit();
  return 0;
}

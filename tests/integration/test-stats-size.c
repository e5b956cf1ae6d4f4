/* SPDX-License-Identifier: MIT */
/* A stats reply at the limits: every device gpushmd can count (GPUSHM_LIMIT_DEVICES,
 * the fake driver's), every backend on each, every request type, and as many detached
 * processes as stats lists (GPUSHM_LIMIT_DETACHED_LISTED), each holding buffers with
 * the longest names.  That is more than a frame: a reader before 0.8 is refused it as
 * too large, as it always was; libgpushm 0.8 gets it whole, in a sealed memfd that
 * nobody can change while it is read. */
#include "config.h"
#include "harness.h"
#include "raw.h"
#include "gpushm-admin.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static struct test_daemon d;
static char long_names[GPUSHM_LIMIT_DETACHED_BUFFERS_LISTED][GPUSHM_LIMIT_NAME_LEN + 1];

/* A process that maps the long-named buffers and stays, its connection ended by the
 * parent: a detached process, listed with its buffers. */
static pid_t holder(int ready_fd)
{
  pid_t pid = fork();

  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *conn = daemon_connect(&d);
    gpushm_buffer_t *b;
    for (unsigned i = 0; i < GPUSHM_LIMIT_DETACHED_BUFFERS_LISTED; i++)
      CHECK_OK(gpushm_buffer_open(conn, long_names[i], GPUSHM_OPEN_READONLY, &b));
    CHECK(write(ready_fd, "r", 1) == 1);
    pause();
    _exit(0);
  }
  return pid;
}

static Gpushm__Reply *raw_stats(int sock, bool in_memfd, int *fds, unsigned *n_fds)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__StatsRequest body = GPUSHM__STATS_REQUEST__INIT;

  body.all_rows = true;
  body.reply_in_memfd = in_memfd;
  req.body_case = GPUSHM__REQUEST__BODY_STATS;
  req.stats = &body;
  *n_fds = 0;
  return raw_call(sock, &req, fds, n_fds);
}

int main(void)
{
  const char *fake = getenv("GPUSHM_FAKE_CUDA_LIB");
  static const gpushm_backend_t backends[] = { GPUSHM_BACKEND_HOST, GPUSHM_BACKEND_CUDA_IPC,
                                               GPUSHM_BACKEND_CUDA_FD };
  pid_t holders[GPUSHM_LIMIT_DETACHED_LISTED];
  int pipe_fds[2], sock, status_fd, fds[GPUSHM_LIMIT_FDS_PER_FRAME], seals;
  unsigned n_fds, device_rows = 0;
  gpushm_t *conn;
  gpushm_stats_t *s;
  Gpushm__Reply *r;
  Gpushm__StatsReply *spilled;
  struct stat st;
  void *p;
  char c;

  if (!fake || access(fake, R_OK) != 0)
    return 77; /* the fake driver is what has GPUSHM_LIMIT_DEVICES devices */
  setenv("GPUSHM_CUDA_LIBRARY", fake, 1);
  setenv("GPUSHM_FAKE_CUDA_DEVICES", "32", 1);
  _Static_assert(GPUSHM_LIMIT_DEVICES == 32, "the fake driver is asked for that many");
  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  /* every backend on every device, in a segment and in an allocation of its own */
  for (int dev = 0; dev < (int)GPUSHM_LIMIT_DEVICES; dev++)
    for (size_t k = 0; k < sizeof backends / sizeof backends[0]; k++)
      for (uint64_t size = 4096; size <= (8u << 20); size *= 2048) {
        gpushm_create_opts_t o;
        gpushm_buffer_t *b;
        char name[64];
        gpushm_create_opts_init(&o);
        o.backend = backends[k];
        o.device = dev;
        snprintf(name, sizeof name, "b-%zu-%d-%llu", k, dev, (unsigned long long)size);
        CHECK_OK(gpushm_buffer_create(conn, name, size, &o, &b));
        CHECK_OK(gpushm_buffer_close(b));
      }
  for (unsigned i = 0; i < GPUSHM_LIMIT_DETACHED_BUFFERS_LISTED; i++) {
    gpushm_buffer_t *b;
    memset(long_names[i], 'a' + (int)i, GPUSHM_LIMIT_NAME_LEN);
    CHECK_OK(gpushm_buffer_create(conn, long_names[i], 4096, NULL, &b));
    CHECK_OK(gpushm_buffer_close(b));
  }
  /* the request types: a failed unlink and an unknown client's disconnect count too */
  CHECK_ERR(gpushm_unlink(conn, "nobody"), GPUSHM_E_NOENT);
  CHECK(gpushm_client_disconnect(conn, 999999) < 0);
  CHECK_OK(gpushm_ping(conn));
  CHECK(pipe(pipe_fds) == 0);
  for (unsigned i = 0; i < GPUSHM_LIMIT_DETACHED_LISTED; i++) {
    holders[i] = holder(pipe_fds[1]);
    CHECK(read(pipe_fds[0], &c, 1) == 1);
    CHECK_OK(gpushm_client_disconnect(conn, client_id_of(conn, holders[i])));
  }

  /* a reader before 0.8 cannot get it: more than a frame */
  sock = raw_connect(d.socket);
  CHECK(raw_hello(sock, "gpushm-0.7.0", &status_fd) == 0);
  close(status_fd);
  CHECK((r = raw_stats(sock, false, fds, &n_fds)) != NULL);
  CHECK(r->status == -GPUSHM_E_LIMIT && n_fds == 0);
  gpushm__reply__free_unpacked(r, NULL);
  /* one that takes a memfd gets one, sealed: it cannot write, resize or unseal it */
  CHECK((r = raw_stats(sock, true, fds, &n_fds)) != NULL);
  CHECK(r->status == 0 && r->stats && r->stats->in_memfd && n_fds == 1);
  gpushm__reply__free_unpacked(r, NULL);
  CHECK(fstat(fds[0], &st) == 0 && st.st_size > (off_t)GPUSHM_LIMIT_FRAME_BODY);
  seals = fcntl(fds[0], F_GET_SEALS);
  CHECK(seals >= 0 && (seals & F_SEAL_WRITE) && (seals & F_SEAL_SHRINK) &&
        (seals & F_SEAL_GROW) && (seals & F_SEAL_SEAL));
  CHECK(write(fds[0], "x", 1) < 0 && errno == EPERM);
  CHECK(ftruncate(fds[0], 0) < 0 && errno == EPERM);
  CHECK(mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0) ==
        MAP_FAILED);
  CHECK((p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fds[0], 0)) != MAP_FAILED);
  CHECK((spilled = gpushm__stats_reply__unpack(NULL, (size_t)st.st_size, p)) != NULL);
  CHECK(!spilled->in_memfd && spilled->n_devices == GPUSHM_LIMIT_DEVICES &&
        spilled->n_detached == GPUSHM_LIMIT_DETACHED_LISTED);
  gpushm__stats_reply__free_unpacked(spilled, NULL);
  munmap(p, (size_t)st.st_size);
  close(fds[0]);
  close(sock);

  /* and libgpushm reads it whole, rows with their help */
  CHECK_OK(gpushm_stats(conn, &s));
  CHECK(gpushm_stats_detached_total(s) == GPUSHM_LIMIT_DETACHED_LISTED);
  CHECK(gpushm_stats_device_count(s) == GPUSHM_LIMIT_DEVICES);
  for (size_t i = 0; i < gpushm_stats_metric_count(s); i++) {
    const gpushm_metric_t *m = gpushm_stats_metric(s, i);
    CHECK(*gpushm_metric_help(m));
    device_rows += strcmp(gpushm_metric_name(m), "gpushm_device_memory_total_bytes") == 0;
  }
  CHECK(device_rows == GPUSHM_LIMIT_DEVICES);
  test_log("stats at the limits: %zu rows; more than a frame (refused to a 0.7 reader), "
           "whole in a sealed memfd to libgpushm", gpushm_stats_metric_count(s));
  gpushm_stats_free(s);

  for (unsigned i = 0; i < GPUSHM_LIMIT_DETACHED_LISTED; i++) {
    kill(holders[i], SIGKILL);
    waitpid(holders[i], NULL, 0);
  }
  gpushm_disconnect(conn);
  daemon_stop(&d);
  return 0;
}

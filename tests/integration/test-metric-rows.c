/* SPDX-License-Identifier: MIT */
/* Metric rows describe themselves: gpushmctl stats shows rows it has never heard of, in
 * all three forms, so that a new counter in gpushmd needs nothing from the tools.  A
 * stand-in daemon answers gpushmctl's hello and stats with rows no gpushmd sends (a
 * counter with a label, a gauge in seconds with an exponent, a histogram, and a row whose
 * name would inject lines into Prometheus text), and the output is checked for each.
 * It plays a 0.8 daemon (admin family 2) and one before (no families): gpushmctl says
 * once what such a daemon's rows lack, since it renders rows alone. */
#include "config.h"
#include "harness.h"
#include "gpushm.h"
#include "gpushm.pb-c.h"
#include "protocol.h"
#include "server/status.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static uint8_t rx[WIRE_RECV_BUF], tx[WIRE_FRAME_MAX];
static bool plays_08; /* lists the admin family at version 2 */
static struct status_page_owner page_owner;

static Gpushm__Request *receive(int fd)
{
  struct wire_frame frame;
  const char *why = NULL;
  int r = wire_recv_frame(fd, rx, WIRE_TYPE_REQUEST, 0, &frame, &why);

  if (r == -ECONNRESET)
    return NULL;
  CHECK(r == 0);
  return gpushm__request__unpack(NULL, frame.header.body_len, frame.body);
}

static void reply(int fd, Gpushm__Reply *msg, const int *fds, unsigned n_fds)
{
  long len = wire_encode(tx, WIRE_TYPE_REPLY, &msg->base, n_fds);
  CHECK(len > 0 && wire_send_frame(fd, tx, (size_t)len, fds, n_fds, 0) == 0);
}

static void answer_hello(int fd, uint64_t id)
{
  Gpushm__Reply r = GPUSHM__REPLY__INIT;
  Gpushm__HelloReply h = GPUSHM__HELLO_REPLY__INIT;
  char err[128];
  int page;

  CHECK(status_page_export(&page_owner, &page, err, sizeof err) == 0);
  h.protocol_version = GPUSHM_PROTOCOL_VERSION;
  h.min_version = h.max_version = GPUSHM_PROTOCOL_VERSION;
  h.daemon_version = "9.9-stand-in";
  h.instance_id = 42;
  if (plays_08) {
    static Gpushm__RequestFamily admin = GPUSHM__REQUEST_FAMILY__INIT;
    static Gpushm__RequestFamily *families[] = { &admin };
    admin.name = "admin";
    admin.version = 2;
    h.families = families;
    h.n_families = 1;
  }
  r.request_id = id;
  r.body_case = GPUSHM__REPLY__BODY_HELLO;
  r.hello = &h;
  reply(fd, &r, &page, 1);
  close(page);
}

/* How the stand-in sends its stats: in the frame, or (0.8) in a memfd: sealed, as
 * gpushmd sends one; unsealed; or larger than GPUSHM_LIMIT_STATS_REPLY. */
static enum { IN_FRAME, IN_MEMFD, IN_UNSEALED_MEMFD, IN_OVERSIZED_MEMFD } stats_via;

static int stats_memfd(const Gpushm__StatsReply *s)
{
  size_t len = gpushm__stats_reply__get_packed_size(s);
  uint8_t *packed = malloc(len);
  int fd = memfd_create("stand-in-stats", MFD_CLOEXEC | MFD_ALLOW_SEALING);

  CHECK(packed && fd >= 0);
  gpushm__stats_reply__pack(s, packed);
  CHECK(write(fd, packed, len) == (ssize_t)len);
  free(packed);
  if (stats_via == IN_OVERSIZED_MEMFD)
    CHECK(ftruncate(fd, (off_t)GPUSHM_LIMIT_STATS_REPLY + 1) == 0);
  if (stats_via != IN_UNSEALED_MEMFD)
    CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0);
  return fd;
}

static void answer_stats(int fd, uint64_t id)
{
  enum { ROWS = 6 };
  static const uint64_t bounds[] = { 500, 1000 }, buckets[] = { 2, 1, 1 },
                        descending[] = { 1000, 500 };
  Gpushm__Reply r = GPUSHM__REPLY__INIT;
  Gpushm__StatsReply s = GPUSHM__STATS_REPLY__INIT, pointer = GPUSHM__STATS_REPLY__INIT;
  Gpushm__Metric rows[ROWS], *ptrs[ROWS];
  Gpushm__MetricLabel kind = GPUSHM__METRIC_LABEL__INIT, *kinds[1] = { &kind };
  int memfd = -1;

  for (int i = 0; i < ROWS; i++) {
    gpushm__metric__init(&rows[i]);
    ptrs[i] = &rows[i];
  }
  kind.name = "kind";
  kind.value = "blue \"sky\"";
  rows[0].name = "gpushm_widgets_total";
  rows[0].help = "Widgets made.";
  rows[0].type = GPUSHM__METRIC_TYPE__METRIC_COUNTER;
  rows[0].n_labels = 1;
  rows[0].labels = kinds;
  rows[0].value = 7;
  rows[1].name = "gpushm_widget_age_seconds";
  rows[1].help = "Age of the oldest widget.";
  rows[1].unit = "seconds";
  rows[1].value = 1500;
  rows[1].exponent = -3;
  rows[2].name = "gpushm_x 1\ninjected_total";
  rows[2].help = "A row no exposition may carry.";
  rows[2].value = 1;
  /* A histogram gpushmctl has never heard of, as the daemon sends one: a row a series,
   * the sum in the value, bounds in the unit's thousandths, the help on its first row
   * only (the library lends it to the second). */
  for (int i = 3; i <= 4; i++) {
    rows[i].name = "gpushm_widget_wait_seconds";
    rows[i].help = i == 3 ? "Time a widget waited." : "";
    rows[i].type = GPUSHM__METRIC_TYPE__METRIC_HISTOGRAM;
    rows[i].unit = "seconds";
    rows[i].exponent = -3;
    rows[i].value = 2250;
    rows[i].count = 4;
    rows[i].n_bounds = 2;
    rows[i].bounds = (uint64_t *)bounds;
    rows[i].n_buckets = 3;
    rows[i].buckets = (uint64_t *)buckets;
  }
  rows[4].n_labels = 1;
  rows[4].labels = kinds;
  /* one whose bounds descend: Prometheus would reject the scrape, so it is left out */
  rows[5] = rows[3];
  rows[5].name = "gpushm_widget_broken_seconds";
  rows[5].help = "Bounds out of order.";
  rows[5].bounds = (uint64_t *)descending;
  s.daemon_version = "9.9-stand-in";
  s.n_metrics = ROWS;
  s.metrics = ptrs;
  r.request_id = id;
  r.body_case = GPUSHM__REPLY__BODY_STATS;
  r.stats = &s;
  if (stats_via != IN_FRAME) {
    memfd = stats_memfd(&s);
    pointer.in_memfd = true;
    r.stats = &pointer;
  }
  reply(fd, &r, &memfd, memfd >= 0);
  if (memfd >= 0)
    close(memfd);
}

/* Runs gpushmctl stats with flag against the stand-in; returns what it printed. */
static char *ctl_stats_status(const char *socket_path, int listener, const char *flag,
                             int expected_status)
{
  static char out[65536];
  char ctl[4096];
  int pipe_fds[2], conn, status;
  size_t used = 0;
  ssize_t n;
  pid_t pid;
  Gpushm__Request *req;

  snprintf(ctl, sizeof ctl, "%s/ctl/gpushmctl", getenv("GPUSHM_TEST_BUILDDIR"));
  CHECK(pipe(pipe_fds) == 0);
  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dup2(pipe_fds[1], 1);
    dup2(pipe_fds[1], 2);
    setenv("GPUSHM_SOCKET", socket_path, 1);
    execl(ctl, ctl, "stats", flag, (char *)NULL);
    _exit(127);
  }
  close(pipe_fds[1]);
  CHECK((conn = accept4(listener, NULL, NULL, SOCK_CLOEXEC)) >= 0);
  while ((req = receive(conn))) {
    if (req->body_case == GPUSHM__REQUEST__BODY_HELLO)
      answer_hello(conn, req->request_id);
    else if (req->body_case == GPUSHM__REQUEST__BODY_STATS)
      answer_stats(conn, req->request_id);
    gpushm__request__free_unpacked(req, NULL);
  }
  close(conn);
  while ((n = read(pipe_fds[0], out + used, sizeof out - 1 - used)) > 0)
    used += (size_t)n;
  out[used] = '\0';
  close(pipe_fds[0]);
  CHECK(waitpid(pid, &status, 0) == pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != expected_status) {
    fprintf(stderr, "gpushmctl stats %s: status %#x, printed:\n%s\n", flag, status, out);
    exit(1);
  }
  return out;
}

static char *ctl_stats(const char *socket_path, int listener, const char *flag)
{
  return ctl_stats_status(socket_path, listener, flag, 0);
}

static void expect(const char *out, const char *needle, bool present)
{
  if ((strstr(out, needle) != NULL) != present) {
    fprintf(stderr, "%s '%s' in:\n%s\n", present ? "missing" : "unexpected", needle, out);
    exit(1);
  }
}

int main(void)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  char dir[] = "/tmp/gpushm-rows.XXXXXX", err[128];
  const char *out;
  int listener;

  CHECK(getenv("GPUSHM_TEST_BUILDDIR"));
  CHECK(mkdtemp(dir));
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s/stand-in.sock", dir);
  CHECK(status_page_create(&page_owner, err, sizeof err) == 0);
  CHECK((listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)) >= 0);
  CHECK(bind(listener, (struct sockaddr *)&addr, sizeof addr) == 0 && listen(listener, 4) == 0);

  out = ctl_stats(addr.sun_path, listener, "--prometheus");
  expect(out, "# HELP gpushm_widgets_total Widgets made.\n# TYPE gpushm_widgets_total counter\n",
         true);
  expect(out, "\ngpushm_widgets_total{kind=\"blue \\\"sky\\\"\"} 7\n", true);
  expect(out, "# TYPE gpushm_widget_age_seconds gauge\ngpushm_widget_age_seconds 1.5\n", true);
  expect(out, "injected", false);
  out = ctl_stats(addr.sun_path, listener, "--json");
  expect(out, "{\"name\":\"gpushm_widgets_total\",\"type\":\"counter\",\"unit\":\"\","
              "\"labels\":{\"kind\":\"blue \\\"sky\\\"\"},\"value\":7}", true);
  expect(out, "\"name\":\"gpushm_widget_age_seconds\",\"type\":\"gauge\",\"unit\":\"seconds\","
              "\"labels\":{},\"value\":1.5}", true);
  out = ctl_stats(addr.sun_path, listener, "--bytes");
  expect(out, "other metrics:\n", true);
  expect(out, "  gpushm_widgets_total (kind=blue \"sky\") 7\n", true);
  expect(out, "  gpushm_widget_age_seconds 1.5 seconds\n", true);
  expect(out, "  gpushm_widget_wait_seconds 2.25 seconds in 4 observations\n", true);
  expect(out, "  gpushm_widget_wait_seconds (kind=blue \"sky\") 2.25 seconds in 4 "
              "observations\n", true);
  test_log("rows gpushmctl does not know: shown in its text, --json and --prometheus; a row "
           "named to inject lines left out of the exposition");

  /* a histogram: one family, its TYPE histogram, its help from its first row, a row per
   * series; one whose bounds descend is left out */
  out = ctl_stats(addr.sun_path, listener, "--prometheus");
  expect(out, "# HELP gpushm_widget_wait_seconds Time a widget waited.\n"
              "# TYPE gpushm_widget_wait_seconds histogram\n"
              "gpushm_widget_wait_seconds_bucket{le=\"0.5\"} 2\n"
              "gpushm_widget_wait_seconds_bucket{le=\"1\"} 3\n"
              "gpushm_widget_wait_seconds_bucket{le=\"+Inf\"} 4\n"
              "gpushm_widget_wait_seconds_sum 2.25\n"
              "gpushm_widget_wait_seconds_count 4\n"
              "gpushm_widget_wait_seconds_bucket{kind=\"blue \\\"sky\\\"\",le=\"0.5\"} 2\n", true);
  expect(out, "gpushm_widget_broken_seconds", false);
  out = ctl_stats(addr.sun_path, listener, "--json");
  expect(out, "{\"name\":\"gpushm_widget_wait_seconds\",\"type\":\"histogram\","
              "\"unit\":\"seconds\",\"labels\":{},\"value\":2.25,\"observations\":4,"
              "\"buckets\":[{\"le\":0.5,\"observations\":2},{\"le\":1,\"observations\":3}]}",
         true);
  test_log("a histogram: one histogram family in --prometheus, its buckets in --json, its sum "
           "and count in the text; one with bounds out of order left out");

  /* a reply larger than a frame, in a sealed memfd: read whole; unsealed or larger than
   * GPUSHM_LIMIT_STATS_REPLY, refused */
  stats_via = IN_MEMFD;
  expect(ctl_stats(addr.sun_path, listener, "--prometheus"),
         "gpushm_widget_wait_seconds_count 4\n", true);
  stats_via = IN_UNSEALED_MEMFD;
  expect(ctl_stats_status(addr.sun_path, listener, "--prometheus", 1),
         "stats reply in an unsealed file", true);
  stats_via = IN_OVERSIZED_MEMFD;
  expect(ctl_stats_status(addr.sun_path, listener, "--prometheus", 1),
         "more than GPUSHM_LIMIT_STATS_REPLY", true);
  stats_via = IN_FRAME;
  test_log("a stats reply in a memfd: read when sealed; refused unsealed or past the limit");

  /* before 0.8 (no admin family 2) the rows lack what older gpushmctls printed from the
   * frozen fields: said once, in the text and the exposition */
  expect(out = ctl_stats(addr.sun_path, listener, "--prometheus"),
         "# gpushmd 9.9-stand-in sends no rows for the request latency histogram and device "
         "memory (older than 0.8): they are left out\n", true);
  expect(ctl_stats(addr.sun_path, listener, "--bytes"),
         "note:           gpushmd is older than 0.8: buffers by backend and devices are not "
         "shown (stats --json shows them)\n", true);
  plays_08 = true;
  expect(ctl_stats(addr.sun_path, listener, "--prometheus"), "older than", false);
  expect(ctl_stats(addr.sun_path, listener, "--bytes"), "note:", false);
  test_log("a daemon before 0.8: one line says what its rows lack; a 0.8 one: none");

  close(listener);
  unlink(addr.sun_path);
  rmdir(dir);
  status_page_destroy(&page_owner);
  return 0;
}

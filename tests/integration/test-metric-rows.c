/* SPDX-License-Identifier: MIT */
/* Metric rows describe themselves: gpushmctl stats shows rows it has never heard of, in
 * all three forms, so that a new counter in gpushmd needs nothing from the tools.  A
 * stand-in daemon answers gpushmctl's hello and stats with rows no gpushmd sends (a
 * counter with a label, a gauge in seconds with an exponent, and a row whose name would
 * inject lines into Prometheus text), and the output is checked for each. */
#include "config.h"
#include "harness.h"
#include "gpushm.h"
#include "gpushm.pb-c.h"
#include "protocol.h"
#include "server/status.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static uint8_t rx[WIRE_RECV_BUF], tx[WIRE_FRAME_MAX];
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
  r.request_id = id;
  r.body_case = GPUSHM__REPLY__BODY_HELLO;
  r.hello = &h;
  reply(fd, &r, &page, 1);
  close(page);
}

static void answer_stats(int fd, uint64_t id)
{
  Gpushm__Reply r = GPUSHM__REPLY__INIT;
  Gpushm__StatsReply s = GPUSHM__STATS_REPLY__INIT;
  Gpushm__Metric rows[3], *ptrs[3];
  Gpushm__MetricLabel kind = GPUSHM__METRIC_LABEL__INIT, *kinds[1] = { &kind };

  for (int i = 0; i < 3; i++) {
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
  s.daemon_version = "9.9-stand-in";
  s.n_metrics = 3;
  s.metrics = ptrs;
  r.request_id = id;
  r.body_case = GPUSHM__REPLY__BODY_STATS;
  r.stats = &s;
  reply(fd, &r, NULL, 0);
}

/* Runs gpushmctl stats with flag against the stand-in; returns what it printed. */
static char *ctl_stats(const char *socket_path, int listener, const char *flag)
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
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "gpushmctl stats %s: status %#x, printed:\n%s\n", flag, status, out);
    exit(1);
  }
  return out;
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
  test_log("rows gpushmctl does not know: shown in its text, --json and --prometheus; a row "
           "named to inject lines left out of the exposition");

  close(listener);
  unlink(addr.sun_path);
  rmdir(dir);
  status_page_destroy(&page_owner);
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* The protocol can evolve without stranding anyone: a 0.1 client's exact bytes (frozen
 * here, not generated from today's schema) still work against this daemon; a client
 * offering only future versions is told both ranges; the library keeps what the
 * negotiation said (version, features, backends). */
#include "config.h"
#include "harness.h"
#include "raw.h"
#include "gpushm-admin.h"
#include "server/status.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static struct test_daemon d;

/* Header (magic "GSHM", framing version 1, type 1 = request, body length, 0 fds) and a
 * protobuf body, byte for byte as libgpushm 0.1 sent them. */
static const uint8_t v1_hello[] = {
  0x47, 0x53, 0x48, 0x4d, 0x01, 0x00, 0x01, 0x00, 0x12, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
  0x08, 0x01,                   /* request_id 1 */
  0x52, 0x0e,                   /* hello { */
  0x08, 0x01,                   /*   protocol_version 1 */
  0x12, 0x0a, 'c', 'o', 'm', 'p', 'a', 't', '-', '0', '.', '1', /* client_name } */
};
static const uint8_t v1_create[] = {
  0x47, 0x53, 0x48, 0x4d, 0x01, 0x00, 0x01, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
  0x08, 0x02,                   /* request_id 2 */
  0x5a, 0x08,                   /* create { */
  0x0a, 0x03, 'o', 'l', 'd',    /*   name "old" */
  0x10, 0x80, 0x20,             /*   size 4096 } */
};
static const uint8_t v1_ping[] = {
  0x47, 0x53, 0x48, 0x4d, 0x01, 0x00, 0x01, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
  0x08, 0x03, 0x8a, 0x01, 0x00, /* request_id 3, ping {} */
};

static Gpushm__Reply *exchange(int sock, const uint8_t *frame, size_t len, unsigned *n_fds)
{
  static uint8_t rx[WIRE_RECV_BUF];
  struct wire_frame reply;
  const char *why = NULL;
  Gpushm__Reply *r;

  CHECK(send(sock, frame, len, MSG_NOSIGNAL) == (ssize_t)len);
  CHECK(wire_recv_frame(sock, rx, WIRE_TYPE_REPLY, 0, &reply, &why) == 0);
  *n_fds = reply.n_fds;
  wire_close_fds(&reply);
  CHECK((r = gpushm__reply__unpack(NULL, reply.header.body_len, reply.body)) != NULL);
  return r;
}

static void test_frozen_v1_client(void)
{
  int sock = raw_connect(d.socket);
  Gpushm__Reply *r;
  unsigned n_fds;

  r = exchange(sock, v1_hello, sizeof v1_hello, &n_fds);
  CHECK(r->request_id == 1 && r->status == 0 && r->body_case == GPUSHM__REPLY__BODY_HELLO);
  CHECK(r->hello->protocol_version == 1 && n_fds == 1);
  gpushm__reply__free_unpacked(r, NULL);
  r = exchange(sock, v1_create, sizeof v1_create, &n_fds);
  CHECK(r->request_id == 2 && r->status == 0 && r->body_case == GPUSHM__REPLY__BODY_OPEN);
  CHECK(r->open->created && strcmp(r->open->info->name, "old") == 0 && n_fds == 1);
  /* host memory, whatever the daemon's default-backend: it is all 0.1 knows */
  CHECK(r->open->info->backend == GPUSHM__BACKEND__BACKEND_HOST);
  gpushm__reply__free_unpacked(r, NULL);
  r = exchange(sock, v1_ping, sizeof v1_ping, &n_fds);
  CHECK(r->request_id == 3 && r->status == 0 && r->body_case == GPUSHM__REPLY__BODY_PING);
  gpushm__reply__free_unpacked(r, NULL);
  close(sock);
}

static int hello_range(unsigned lo, unsigned hi, Gpushm__Reply **out)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__Hello hello = GPUSHM__HELLO__INIT;
  int fds[GPUSHM_LIMIT_FDS_PER_FRAME], sock = raw_connect(d.socket);
  unsigned n = 0;

  hello.protocol_version = hi;
  hello.min_version = lo;
  hello.max_version = hi;
  hello.client_name = "ranged";
  req.body_case = GPUSHM__REQUEST__BODY_HELLO;
  req.hello = &hello;
  CHECK((*out = raw_call(sock, &req, fds, &n)) != NULL);
  while (n)
    close(fds[--n]);
  return sock;
}

static void test_negotiation(void)
{
  char expected[128];
  Gpushm__Reply *r;
  int sock;

  /* only future versions: refused, naming both ranges */
  sock = hello_range(GPUSHM_PROTOCOL_VERSION + 1, GPUSHM_PROTOCOL_VERSION + 4, &r);
  CHECK(r->status == -GPUSHM_E_VERSION);
  snprintf(expected, sizeof expected, "client speaks protocol %u-%u, daemon %u-%u",
           GPUSHM_PROTOCOL_VERSION + 1, GPUSHM_PROTOCOL_VERSION + 4, GPUSHM_PROTOCOL_MIN_VERSION,
           GPUSHM_PROTOCOL_VERSION);
  CHECK(strcmp(r->message, expected) == 0);
  gpushm__reply__free_unpacked(r, NULL);
  close(sock);
  /* a range reaching past ours: the highest both speak */
  sock = hello_range(1, GPUSHM_PROTOCOL_VERSION + 7, &r);
  CHECK(r->status == 0 && r->hello->protocol_version == GPUSHM_PROTOCOL_VERSION);
  CHECK(r->hello->min_version == GPUSHM_PROTOCOL_MIN_VERSION &&
        r->hello->max_version == GPUSHM_PROTOCOL_VERSION);
  CHECK(r->hello->features & GPUSHM_FEATURE_DISCONNECT);
  gpushm__reply__free_unpacked(r, NULL);
  close(sock);
  sock = hello_range(3, 2, &r);
  CHECK(r->status == -GPUSHM_E_INVAL);
  gpushm__reply__free_unpacked(r, NULL);
  close(sock);
}

static void test_library_keeps_it(void)
{
  gpushm_t *conn = daemon_connect(&d);
  gpushm_buffer_t *b;
  gpushm_create_opts_t opts;

  CHECK(gpushm_protocol_version(conn) == GPUSHM_PROTOCOL_VERSION);
  CHECK(strcmp(gpushm_daemon_version(conn), PACKAGE_VERSION) == 0);
  CHECK(gpushm_daemon_has(conn, GPUSHM_FEATURE_DISCONNECT));
  CHECK(!gpushm_daemon_has(conn, GPUSHM_FEATURE_FDSTORE)); /* no service manager here */
  CHECK(gpushm_daemon_backends(conn) & (1u << GPUSHM_BACKEND_HOST));
  /* the request families, each with its version (0: a family this daemon lacks) */
  CHECK(gpushm_daemon_family_version(conn, "core") == 1);
  CHECK(gpushm_daemon_family_version(conn, "admin") == 2); /* 0.8: StatsRequest.all_rows */
  CHECK(gpushm_daemon_family_version(conn, "graphics") == 2); /* 0.8: semaphore planes */
  CHECK(gpushm_daemon_family_version(conn, "timelines") == 0);
  CHECK(gpushm_daemon_family_version(conn, "Core") == 0);
  CHECK(gpushm_daemon_family_version(conn, NULL) == 0);
  CHECK(gpushm_daemon_family_version(NULL, "core") == 0);
  /* a backend value from the future is "unsupported", not "invalid" */
  gpushm_create_opts_init(&opts);
  opts.backend = 9;
  CHECK_ERR(gpushm_buffer_create(conn, "future", 4096, &opts, &b), GPUSHM_E_UNSUPPORTED);
  gpushm_disconnect(conn);
}

static Gpushm__Reply *raw_stats(int sock, bool all_rows)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__StatsRequest sr = GPUSHM__STATS_REQUEST__INIT;
  Gpushm__Reply *r;
  unsigned n = 0;

  sr.all_rows = all_rows;
  req.body_case = GPUSHM__REQUEST__BODY_STATS;
  req.stats = &sr;
  CHECK((r = raw_call(sock, &req, NULL, &n)) != NULL && r->status == 0 && r->stats && n == 0);
  return r;
}

/* The row named so whose labels include these (NULL ends them), or NULL. */
static const Gpushm__Metric *row(const Gpushm__StatsReply *s, const char *name, const char *l1,
                                 const char *v1, const char *l2, const char *v2)
{
  for (size_t i = 0; i < s->n_metrics; i++) {
    const Gpushm__Metric *m = s->metrics[i];
    unsigned want = (l1 != NULL) + (l2 != NULL), got = 0;
    if (strcmp(m->name, name) != 0)
      continue;
    for (size_t k = 0; k < m->n_labels; k++)
      got += (l1 && strcmp(m->labels[k]->name, l1) == 0 && strcmp(m->labels[k]->value, v1) == 0) +
             (l2 && strcmp(m->labels[k]->name, l2) == 0 && strcmp(m->labels[k]->value, v2) == 0);
    if (got == want)
      return m;
  }
  return NULL;
}

static size_t rows_named(const Gpushm__StatsReply *s, const char *prefix)
{
  size_t n = 0;
  for (size_t i = 0; i < s->n_metrics; i++)
    n += strncmp(s->metrics[i]->name, prefix, strlen(prefix)) == 0;
  return n;
}

/* 0.8's rows carry what readers before it print from StatsReply's frozen fields: only
 * to a reader that asks (all_rows), else such a reader prints those families twice.
 * In one reply the rows and the frozen fields are one snapshot, so they must agree. */
static void test_stats_rows(void)
{
  int sock = raw_connect(d.socket), status_fd;
  gpushm_t *conn = daemon_connect(&d);
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;
  Gpushm__Reply *r;
  const Gpushm__StatsReply *s;
  char dev[16], uuid[WIRE_UUID_TEXT_LEN];

  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FD;
  CHECK_OK(gpushm_buffer_create(conn, "rows", 4096, &opts, &b));
  CHECK(raw_hello(sock, "gpushm-0.7.0", &status_fd) == 0);
  close(status_fd);

  r = raw_stats(sock, false);
  s = r->stats;
  CHECK(s->n_metrics > 0 && s->n_devices > 0 && s->n_usage > 0 && s->n_requests_by_type > 0);
  CHECK(rows_named(s, "gpushm_backend_buffers") == 0);
  CHECK(rows_named(s, "gpushm_device_memory_") == 0);
  CHECK(rows_named(s, "gpushm_request_duration_seconds") == 0);
  gpushm__reply__free_unpacked(r, NULL);

  r = raw_stats(sock, true);
  s = r->stats;
  for (size_t i = 0; i < s->n_usage; i++) {
    const Gpushm__Metric *m;
    snprintf(dev, sizeof dev, "%d", s->usage[i]->device);
    m = row(s, "gpushm_backend_buffers", "backend", wire_backend_name(s->usage[i]->backend),
            "device", dev);
    CHECK(m && m->value == s->usage[i]->buffers && m->type == GPUSHM__METRIC_TYPE__METRIC_GAUGE);
  }
  CHECK(rows_named(s, "gpushm_backend_buffers") == s->n_usage);
  CHECK(rows_named(s, "gpushm_device_memory_total_bytes") == s->n_devices);
  for (size_t i = 0; i < s->n_devices; i++) {
    const Gpushm__Device *g = s->devices[i];
    const Gpushm__Metric *t, *f;
    snprintf(dev, sizeof dev, "%d", g->ordinal);
    CHECK(g->uuid.len == 16);
    wire_uuid_text(g->uuid.data, false, uuid);
    t = row(s, "gpushm_device_memory_total_bytes", "device", dev, "uuid", uuid);
    f = row(s, "gpushm_device_memory_free_bytes", "device", dev, "uuid", uuid);
    CHECK(t && t->value == g->total_memory && strcmp(t->unit, "bytes") == 0);
    CHECK(row(s, "gpushm_device_memory_total_bytes", "device", dev, "name", g->name) == t);
    /* free only where it is known (a context): absent, not 0 */
    CHECK(g->free_memory ? f && f->value == g->free_memory : !f);
  }
  CHECK(row(s, "gpushm_device_memory_free_bytes", NULL, NULL, NULL, NULL)); /* the buffer's */
  /* the latency histogram: a row a request type, its buckets the fields' */
  for (size_t i = 0; i < s->n_requests_by_type; i++) {
    const Gpushm__RequestCount *rc = s->requests_by_type[i];
    const Gpushm__Metric *m = row(s, "gpushm_request_duration_seconds", "type", rc->type, NULL,
                                  NULL);
    uint64_t cumulative = 0;
    CHECK(rc->n_latency_le == s->n_latency_bounds_ns + 1);
    CHECK(m && m->type == GPUSHM__METRIC_TYPE__METRIC_HISTOGRAM && m->exponent == -9 &&
          strcmp(m->unit, "seconds") == 0 && m->value == rc->latency_sum_ns &&
          m->count == rc->latency_le[rc->n_latency_le - 1]);
    CHECK(m->n_bounds == s->n_latency_bounds_ns && m->n_buckets == m->n_bounds + 1 &&
          memcmp(m->bounds, s->latency_bounds_ns, m->n_bounds * sizeof *m->bounds) == 0);
    for (size_t k = 0; k < m->n_buckets; k++)
      CHECK((cumulative += m->buckets[k]) == rc->latency_le[k]);
  }
  CHECK(rows_named(s, "gpushm_request_duration_seconds") == s->n_requests_by_type);
  /* a metric's help on its first row only: what keeps the reply within a frame */
  for (size_t i = 0; i < s->n_metrics; i++)
    CHECK(i == 0 || strcmp(s->metrics[i]->name, s->metrics[i - 1]->name) != 0
              ? *s->metrics[i]->help != '\0' : *s->metrics[i]->help == '\0');
  gpushm__reply__free_unpacked(r, NULL);
  close(sock);
  CHECK_OK(gpushm_unlink(conn, "rows"));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  test_log("stats rows for the frozen fields: not to a 0.7 reader; to one that asks, equal to "
           "the fields of the same reply (buffers by backend, device memory, latency histogram)");
}

/* cuda-ipc sync buffers are ordered by a fence since 0.7.1 (GPUSHM_FEATURE_IPC_FENCES):
 * a library from before keeps getting events for what it creates, which today's
 * library then uses too, and is refused by name a fenced one it could not use (it
 * took the missing event for a protocol error). */
static void test_ipc_fences(void)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__CreateRequest cr = GPUSHM__CREATE_REQUEST__INIT;
  int sock = raw_connect(d.socket), status_fd, fds[GPUSHM_LIMIT_FDS_PER_FRAME];
  gpushm_t *conn = daemon_connect(&d);
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b, *fenced;
  Gpushm__Reply *r;
  unsigned n = 0;

  CHECK(gpushm_daemon_has(conn, GPUSHM_FEATURE_IPC_FENCES));
  CHECK(raw_hello(sock, "gpushm-0.7.0", &status_fd) == 0); /* no GPUSHM_FEATURE_IPC_FENCES */
  close(status_fd);
  cr.name = "old-sync";
  cr.size = 1 << 20;
  cr.backend = GPUSHM__BACKEND__BACKEND_CUDA_IPC;
  cr.sync = true;
  req.body_case = GPUSHM__REQUEST__BODY_CREATE;
  req.create = &cr;
  CHECK((r = raw_call(sock, &req, fds, &n)) != NULL && r->status == 0);
  CHECK(r->open && r->open->sync_event_handle.len > 0 && r->open->fence_offset == 0);
  for (unsigned i = 0; i < n; i++)
    close(fds[i]);
  gpushm__reply__free_unpacked(r, NULL);
  CHECK_OK(gpushm_buffer_open(conn, "old-sync", 0, &b));
  CHECK(gpushm_buffer_sync_method(b, NULL) == GPUSHM_SYNC_IPC_EVENT);
  CHECK_OK(gpushm_buffer_close(b));

  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_IPC;
  opts.flags = GPUSHM_CREATE_SYNC;
  CHECK_OK(gpushm_buffer_create(conn, "new-sync", 1 << 20, &opts, &fenced));
  CHECK(gpushm_buffer_sync_method(fenced, NULL) == GPUSHM_SYNC_GPU_FENCE);
  n = 0;
  CHECK(raw_open(sock, "new-sync", 0, fds, &n) == -GPUSHM_E_UNSUPPORTED && n == 0);
  close(sock);
  CHECK_OK(gpushm_unlink(conn, "new-sync"));
  CHECK_OK(gpushm_buffer_close(fenced));
  CHECK_OK(gpushm_unlink(conn, "old-sync"));
  gpushm_disconnect(conn);
  test_log("cuda-ipc sync buffers: an old library's keep their event and work with today's; "
           "a fenced one is refused to it by name");
}

/* A create's kind (0.8) and what replies say of it: a kind that contradicts the rest of
 * the request is refused, one from the future is "unsupported"; an event a 0.7 library
 * makes the old way (backend 4) is an event, and every reply still spells an event's
 * backend as 4 for readers before Kind. */
static int raw_create_kind(int sock, const char *name, Gpushm__Kind kind, Gpushm__Backend backend,
                           Gpushm__Kind *kind_out, Gpushm__Backend *backend_out)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__CreateRequest cr = GPUSHM__CREATE_REQUEST__INIT;
  int fds[GPUSHM_LIMIT_FDS_PER_FRAME], status;
  unsigned n = 0;
  Gpushm__Reply *r;

  cr.name = (char *)name;
  cr.size = kind == GPUSHM__KIND__KIND_EVENT || backend == GPUSHM__BACKEND__BACKEND_CUDA_EVENT
              ? 0 : 4096;
  cr.kind = kind;
  cr.backend = backend;
  cr.device = 0;
  req.body_case = GPUSHM__REQUEST__BODY_CREATE;
  req.create = &cr;
  CHECK((r = raw_call(sock, &req, fds, &n)) != NULL);
  for (unsigned i = 0; i < n; i++)
    close(fds[i]);
  status = (int)r->status;
  if (!status) {
    CHECK(r->open && r->open->info);
    *kind_out = r->open->info->kind;
    *backend_out = r->open->info->backend;
  }
  gpushm__reply__free_unpacked(r, NULL);
  return status;
}

static void test_kinds(void)
{
  int sock = raw_connect(d.socket), status_fd;
  gpushm_t *conn = daemon_connect(&d);
  gpushm_event_t *ev;
  gpushm_buffer_list_t *list;
  Gpushm__Backend backend;
  Gpushm__Kind kind;
  unsigned seen = 0;

  CHECK(raw_hello(sock, "gpushm-0.7.0", &status_fd) == 0);
  close(status_fd);
  CHECK(raw_create_kind(sock, "old-event", GPUSHM__KIND__KIND_UNSPECIFIED,
                        GPUSHM__BACKEND__BACKEND_CUDA_EVENT, &kind, &backend) == 0);
  CHECK(kind == GPUSHM__KIND__KIND_EVENT && backend == GPUSHM__BACKEND__BACKEND_CUDA_EVENT);
  CHECK(raw_create_kind(sock, "new-event", GPUSHM__KIND__KIND_EVENT,
                        GPUSHM__BACKEND__BACKEND_UNSPECIFIED, &kind, &backend) == 0);
  CHECK(kind == GPUSHM__KIND__KIND_EVENT && backend == GPUSHM__BACKEND__BACKEND_CUDA_EVENT);
  CHECK(raw_create_kind(sock, "plain", GPUSHM__KIND__KIND_BUFFER, GPUSHM__BACKEND__BACKEND_HOST,
                        &kind, &backend) == 0);
  CHECK(kind == GPUSHM__KIND__KIND_BUFFER && backend == GPUSHM__BACKEND__BACKEND_HOST);
  /* contradictions and the future */
  CHECK(raw_create_kind(sock, "bad", GPUSHM__KIND__KIND_EVENT, GPUSHM__BACKEND__BACKEND_HOST,
                        &kind, &backend) == -GPUSHM_E_INVAL);
  CHECK(raw_create_kind(sock, "bad", GPUSHM__KIND__KIND_BUFFER,
                        GPUSHM__BACKEND__BACKEND_CUDA_EVENT, &kind, &backend) == -GPUSHM_E_INVAL);
  CHECK(raw_create_kind(sock, "bad", GPUSHM__KIND__KIND_IMAGE, GPUSHM__BACKEND__BACKEND_HOST,
                        &kind, &backend) == -GPUSHM_E_INVAL);
  CHECK(raw_create_kind(sock, "bad", (Gpushm__Kind)7, GPUSHM__BACKEND__BACKEND_HOST, &kind,
                        &backend) == -GPUSHM_E_UNSUPPORTED);
  /* today's library opens both events and lists each as the kind it is */
  CHECK_OK(gpushm_event_open(conn, "old-event", &ev));
  CHECK_OK(gpushm_event_close(ev));
  CHECK_OK(gpushm_event_open(conn, "new-event", &ev));
  CHECK_OK(gpushm_event_close(ev));
  CHECK_OK(gpushm_list(conn, 0, &list));
  for (size_t i = 0; i < gpushm_buffer_list_count(list); i++) {
    const gpushm_buffer_info_t *info = gpushm_buffer_list_get(list, i);
    const char *name = gpushm_buffer_info_name(info);
    if (strcmp(name, "plain") == 0)
      seen += gpushm_buffer_info_kind(info) == GPUSHM_KIND_BUFFER;
    else if (strcmp(name, "old-event") == 0 || strcmp(name, "new-event") == 0)
      seen += gpushm_buffer_info_kind(info) == GPUSHM_KIND_EVENT &&
              gpushm_buffer_info_backend(info) == GPUSHM_BACKEND_DEFAULT;
  }
  CHECK(seen == 3);
  gpushm_buffer_list_free(list);
  close(sock);
  gpushm_disconnect(conn);
  test_log("kinds: a create's kind is checked against its backend and image; events made "
           "the 0.7 way and the 0.8 way are alike, listed as events with no backend");
}

/* Against a daemon before 0.8, which sends no kind: today's library tells an event by
 * its backend and an image by its description, as before.  A stand-in daemon answers a
 * list with one of each. */
static void serve_pre_kind_daemon(int listener, struct status_page_owner *page_owner)
{
  static uint8_t rx[WIRE_RECV_BUF], tx[WIRE_FRAME_MAX];
  int conn = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
  struct wire_frame frame;
  const char *why = NULL;

  CHECK(conn >= 0);
  while (wire_recv_frame(conn, rx, WIRE_TYPE_REQUEST, 0, &frame, &why) == 0) {
    Gpushm__Request *req = gpushm__request__unpack(NULL, frame.header.body_len, frame.body);
    Gpushm__Reply r = GPUSHM__REPLY__INIT;
    Gpushm__HelloReply h = GPUSHM__HELLO_REPLY__INIT;
    Gpushm__ListReply l = GPUSHM__LIST_REPLY__INIT;
    Gpushm__BufferInfo infos[3] = { GPUSHM__BUFFER_INFO__INIT, GPUSHM__BUFFER_INFO__INIT,
                                    GPUSHM__BUFFER_INFO__INIT };
    Gpushm__BufferInfo *ptrs[3] = { &infos[0], &infos[1], &infos[2] };
    Gpushm__ImageDesc image = GPUSHM__IMAGE_DESC__INIT;
    int page = -1;
    long len;
    char err[128];

    CHECK(req);
    r.request_id = req->request_id;
    if (req->body_case == GPUSHM__REQUEST__BODY_HELLO) {
      CHECK(status_page_export(page_owner, &page, err, sizeof err) == 0);
      h.protocol_version = h.min_version = h.max_version = GPUSHM_PROTOCOL_VERSION;
      h.daemon_version = "0.7.1";
      h.instance_id = 7;
      r.body_case = GPUSHM__REPLY__BODY_HELLO;
      r.hello = &h;
    } else if (req->body_case == GPUSHM__REQUEST__BODY_LIST) {
      infos[0].name = "an-event";
      infos[0].backend = GPUSHM__BACKEND__BACKEND_CUDA_EVENT;
      infos[1].name = "an-image";
      infos[1].backend = GPUSHM__BACKEND__BACKEND_HOST;
      infos[1].image = &image;
      infos[2].name = "a-buffer";
      infos[2].backend = GPUSHM__BACKEND__BACKEND_HOST;
      l.buffers = ptrs;
      l.n_buffers = 3;
      r.body_case = GPUSHM__REPLY__BODY_LIST;
      r.list = &l;
    } else {
      r.status = -GPUSHM_E_UNSUPPORTED;
    }
    len = wire_encode(tx, WIRE_TYPE_REPLY, &r.base, page >= 0);
    CHECK(len > 0 && wire_send_frame(conn, tx, (size_t)len, &page, page >= 0, 0) == 0);
    if (page >= 0)
      close(page);
    gpushm__request__free_unpacked(req, NULL);
  }
  close(conn);
}

static void test_pre_kind_daemon(void)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  char dir[] = "/tmp/gpushm-compat.XXXXXX", err[128];
  struct status_page_owner page_owner;
  int listener, status;
  pid_t pid;

  CHECK(mkdtemp(dir));
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s/0.7.sock", dir);
  CHECK(status_page_create(&page_owner, err, sizeof err) == 0);
  CHECK((listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)) >= 0);
  CHECK(bind(listener, (struct sockaddr *)&addr, sizeof addr) == 0 && listen(listener, 1) == 0);
  CHECK((pid = fork()) >= 0);
  if (pid == 0) {
    gpushm_buffer_list_t *list;
    gpushm_t *conn;

    CHECK_OK(gpushm_connect(addr.sun_path, "compat", &conn));
    CHECK(gpushm_daemon_family_version(conn, "core") == 0);
    CHECK_OK(gpushm_list(conn, 0, &list));
    CHECK(gpushm_buffer_list_count(list) == 3);
    CHECK(gpushm_buffer_info_kind(gpushm_buffer_list_get(list, 0)) == GPUSHM_KIND_EVENT);
    CHECK(gpushm_buffer_info_backend(gpushm_buffer_list_get(list, 0)) == GPUSHM_BACKEND_DEFAULT);
    CHECK(gpushm_buffer_info_kind(gpushm_buffer_list_get(list, 1)) == GPUSHM_KIND_IMAGE);
    CHECK(gpushm_buffer_info_kind(gpushm_buffer_list_get(list, 2)) == GPUSHM_KIND_BUFFER);
    gpushm_buffer_list_free(list);
    gpushm_disconnect(conn);
    _exit(0);
  }
  serve_pre_kind_daemon(listener, &page_owner);
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(listener);
  unlink(addr.sun_path);
  rmdir(dir);
  status_page_destroy(&page_owner);
  test_log("a daemon before Kind: events, images and buffers told apart as before");
}

int main(void)
{
  const char *fake = getenv("GPUSHM_FAKE_CUDA_LIB");

  unsetenv("NOTIFY_SOCKET");
  daemon_start(&d, NULL);
  test_frozen_v1_client();
  test_negotiation();
  test_library_keeps_it();
  daemon_stop(&d);
  test_pre_kind_daemon();
  /* A daemon whose default is device memory (the installed settings on a GPU host)
   * still gives a 0.1 client host memory when it names no backend. */
  if (fake && access(fake, R_OK) == 0) {
    memset(&d, 0, sizeof d);
    setenv("GPUSHM_CUDA_LIBRARY", fake, 1);
    daemon_start(&d, "--default-backend", "cuda-fd", NULL);
    test_frozen_v1_client();
    test_ipc_fences();
    test_kinds();
    test_stats_rows();
    daemon_stop(&d);
  }
  return 0;
}

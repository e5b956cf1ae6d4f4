/* SPDX-License-Identifier: MIT */
/* The admin objects of gpushm-admin.h against a real gpushmd: every accessor reads what
 * the daemon reported, NULL objects read as 0 and "", indexes past the end give NULL,
 * and the calls check their arguments. */
#include "config.h"
#include "harness.h"

#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static struct test_daemon d;

static uint64_t now_unix_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void test_buffer_list(gpushm_t *conn, uint64_t id, uint64_t before_ms)
{
  gpushm_buffer_list_t *list;
  const gpushm_buffer_info_t *b;
  const gpushm_holder_t *h;
  uint8_t uuid[16];

  CHECK_OK(gpushm_list(conn, 0, &list));
  CHECK(gpushm_buffer_list_count(list) == 1 && (b = gpushm_buffer_list_get(list, 0)));
  CHECK(gpushm_buffer_list_get(list, 1) == NULL);
  CHECK(gpushm_buffer_info_id(b) == id && strcmp(gpushm_buffer_info_name(b), "admin") == 0);
  CHECK(gpushm_buffer_info_size(b) == 100 && gpushm_buffer_info_allocated(b) == 4096);
  CHECK(gpushm_buffer_info_kind(b) == GPUSHM_KIND_BUFFER);
  CHECK(gpushm_buffer_info_backend(b) == GPUSHM_BACKEND_HOST && gpushm_buffer_info_device(b) == -1);
  CHECK_ERR(gpushm_buffer_info_device_uuid(b, uuid), GPUSHM_E_NOENT); /* host memory */
  CHECK(gpushm_buffer_info_owner_uid(b) == getuid() && gpushm_buffer_info_owner_gid(b) == getgid());
  CHECK(gpushm_buffer_info_mode(b) == 0640);
  CHECK(gpushm_buffer_info_lifetime(b) == GPUSHM_LIFETIME_SESSION);
  CHECK(gpushm_buffer_info_linked(b) == 1 && gpushm_buffer_info_sync(b) == 1);
  CHECK(gpushm_buffer_info_refs(b) == 1 && gpushm_buffer_info_my_refs(b) == 1);
  CHECK(gpushm_buffer_info_creator_pid(b) == (uint32_t)getpid());
  CHECK(gpushm_buffer_info_created_unix_ms(b) >= before_ms &&
        gpushm_buffer_info_created_unix_ms(b) <= now_unix_ms());
  CHECK(gpushm_buffer_info_holders_total(b) == 1 && gpushm_buffer_info_holder_count(b) == 1);
  CHECK((h = gpushm_buffer_info_holder(b, 0)) && gpushm_buffer_info_holder(b, 1) == NULL);
  CHECK(gpushm_holder_pid(h) == (uint32_t)getpid() && gpushm_holder_uid(h) == getuid());
  CHECK(gpushm_holder_refs(h) == 1 && gpushm_holder_client_id(h) != 0);
  gpushm_buffer_list_free(list);

  CHECK_ERR(gpushm_list(conn, 0x80, &list), GPUSHM_E_INVAL);
  CHECK(list == NULL);
  CHECK(strstr(gpushm_last_error_message(), "0x80") != NULL);
  CHECK_ERR(gpushm_list(NULL, 0, &list), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_list(conn, 0, NULL), GPUSHM_E_INVAL);
}

static void test_client_list(gpushm_t *conn)
{
  gpushm_client_list_t *list;
  const gpushm_client_info_t *me = NULL;
  size_t n;

  CHECK_OK(gpushm_clients(conn, &list));
  n = gpushm_client_list_count(list);
  CHECK(n >= 1 && gpushm_client_list_get(list, n) == NULL);
  for (size_t i = 0; i < n; i++) {
    const gpushm_client_info_t *c = gpushm_client_list_get(list, i);
    if (gpushm_client_info_pid(c) == (uint32_t)getpid())
      me = c;
  }
  CHECK(me != NULL && gpushm_client_info_client_id(me) != 0);
  CHECK(gpushm_client_info_uid(me) == getuid() && gpushm_client_info_gid(me) == getgid());
  CHECK(strcmp(gpushm_client_info_name(me), "test") == 0); /* daemon_connect()'s */
  CHECK(gpushm_client_info_connected_unix_ms(me) > 0);
  CHECK(gpushm_client_info_buffers_held(me) == 1 && gpushm_client_info_bytes_held(me) == 4096);
  CHECK(gpushm_client_info_admin(me) == (getuid() == 0));
  gpushm_client_list_free(list);
  CHECK_ERR(gpushm_clients(NULL, &list), GPUSHM_E_INVAL);
  CHECK(list == NULL);
}

/* The ping histogram's requests, and its sum in ns. */
static uint64_t ping_latency(const gpushm_stats_t *s, uint64_t *sum_ns)
{
  size_t nb = gpushm_stats_latency_bound_count(s);

  CHECK(nb > 0 && gpushm_stats_latency_bound_ns(s, nb) == 0);
  for (size_t b = 1; b < nb; b++)
    CHECK(gpushm_stats_latency_bound_ns(s, b) > gpushm_stats_latency_bound_ns(s, b - 1));
  for (size_t i = 0; i < gpushm_stats_request_type_count(s); i++) {
    const gpushm_request_stats_t *rq = gpushm_stats_request_type(s, i);
    if (strcmp(gpushm_request_stats_type(rq), "ping") != 0)
      continue;
    CHECK(gpushm_request_stats_latency_bucket_count(rq) == nb + 1);
    for (size_t b = 1; b <= nb; b++)
      CHECK(gpushm_request_stats_latency_le(rq, b) >= gpushm_request_stats_latency_le(rq, b - 1));
    CHECK(gpushm_request_stats_latency_le(rq, nb + 1) == 0);
    CHECK(gpushm_request_stats_latency_le(rq, nb) <= gpushm_request_stats_count(rq));
    *sum_ns = gpushm_request_stats_latency_sum_ns(rq);
    return gpushm_request_stats_latency_le(rq, nb);
  }
  *sum_ns = 0;
  return 0;
}

/* N pings: the histogram counts at least N more, and their time. */
static void test_latency(gpushm_t *conn)
{
  const unsigned n = 50;
  gpushm_stats_t *s;
  uint64_t before, after, sum_before, sum_after;

  CHECK_OK(gpushm_stats(conn, &s));
  before = ping_latency(s, &sum_before);
  gpushm_stats_free(s);
  for (unsigned i = 0; i < n; i++)
    CHECK_OK(gpushm_ping(conn));
  CHECK_OK(gpushm_stats(conn, &s));
  after = ping_latency(s, &sum_after);
  gpushm_stats_free(s);
  CHECK(after >= before + n && sum_after > sum_before);
}

static void test_stats(gpushm_t *conn)
{
  gpushm_stats_t *s;
  bool saw_create = false;

  CHECK_OK(gpushm_stats(conn, &s));
  CHECK(strcmp(gpushm_stats_daemon_version(s), PACKAGE_VERSION) == 0);
  CHECK(gpushm_stats_instance_id(s) == gpushm_instance_id(conn));
  CHECK(gpushm_stats_clients(s) >= 1 && gpushm_stats_open_fds(s) > 0);
  CHECK(gpushm_stats_buffers(s) == 1 && gpushm_stats_buffers_linked(s) == 1);
  CHECK(gpushm_stats_bytes_allocated(s) == 4096);
  CHECK(gpushm_stats_requests(s) > 0 && gpushm_stats_request_errors(s) == 0);
  CHECK(gpushm_stats_protocol_errors(s) == 0 && gpushm_stats_clients_dropped(s) == 0);
  for (size_t i = 0; i < gpushm_stats_request_type_count(s); i++) {
    const gpushm_request_stats_t *rq = gpushm_stats_request_type(s, i);
    if (strcmp(gpushm_request_stats_type(rq), "create") == 0)
      saw_create = gpushm_request_stats_count(rq) == 1 && gpushm_request_stats_errors(rq) == 0;
  }
  CHECK(saw_create);
  CHECK(gpushm_stats_request_type(s, gpushm_stats_request_type_count(s)) == NULL);
  /* the one host buffer: a buffer kind, host backend, no device */
  CHECK(gpushm_stats_usage_count(s) == 1 && gpushm_stats_usage(s, 1) == NULL);
  CHECK(gpushm_usage_kind(gpushm_stats_usage(s, 0)) == GPUSHM_KIND_BUFFER);
  CHECK(gpushm_usage_backend(gpushm_stats_usage(s, 0)) == GPUSHM_BACKEND_HOST);
  CHECK(gpushm_usage_device(gpushm_stats_usage(s, 0)) == -1);
  CHECK(gpushm_usage_buffers(gpushm_stats_usage(s, 0)) == 1);
  CHECK(gpushm_usage_bytes(gpushm_stats_usage(s, 0)) == 4096);
  /* devices only where a driver is (a GPU host): each has a name and its memory */
  for (size_t i = 0; i < gpushm_stats_device_count(s); i++) {
    const gpushm_device_stats_t *dev = gpushm_stats_device(s, i);
    CHECK(gpushm_device_stats_ordinal(dev) == (int32_t)i && *gpushm_device_stats_name(dev));
    CHECK(gpushm_device_stats_total_memory(dev) >= gpushm_device_stats_free_memory(dev));
  }
  CHECK(gpushm_stats_device(s, gpushm_stats_device_count(s)) == NULL);
  /* the one create made one buffer: a create row, no open */
  CHECK(gpushm_stats_opens_count(s) == 1 && gpushm_stats_opens(s, 1) == NULL);
  CHECK(gpushm_open_stats_kind(gpushm_stats_opens(s, 0)) == GPUSHM_KIND_BUFFER);
  CHECK(gpushm_open_stats_backend(gpushm_stats_opens(s, 0)) == GPUSHM_BACKEND_HOST);
  CHECK(gpushm_open_stats_device(gpushm_stats_opens(s, 0)) == -1);
  CHECK(gpushm_open_stats_creates(gpushm_stats_opens(s, 0)) == 1);
  CHECK(gpushm_open_stats_opens(gpushm_stats_opens(s, 0)) == 0);
  gpushm_stats_free(s);
  test_latency(conn);
  CHECK_ERR(gpushm_stats(conn, NULL), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_stats(NULL, &s), GPUSHM_E_INVAL);
  CHECK(s == NULL);
}

/* What the connection learnt at Hello and from SO_PEERCRED: who the daemon is, where
 * (its PID namespace: this one), its default backend and its GPUs (the same list as
 * its statistics). */
static void test_daemon_identity(gpushm_t *conn)
{
  gpushm_stats_t *s = daemon_stats(&d);
  struct stat ns;
  size_t n = gpushm_daemon_device_count(conn);
  struct test_daemon other = { 0 };
  gpushm_t *c2;

  CHECK(gpushm_daemon_pid(conn) == (uint32_t)d.pid);
  CHECK(gpushm_daemon_uid(conn) == (uint32_t)geteuid());
  CHECK(stat("/proc/self/ns/pid", &ns) == 0);
  CHECK(gpushm_daemon_pid_namespace(conn) == (uint64_t)ns.st_ino);
  CHECK(gpushm_daemon_default_backend(conn) == GPUSHM_BACKEND_HOST);
  CHECK(n == gpushm_stats_device_count(s));
  for (size_t i = 0; i < n; i++) {
    uint8_t a[16], b[16];
    const gpushm_device_stats_t *h = gpushm_daemon_device(conn, i);
    const gpushm_device_stats_t *st = gpushm_stats_device(s, i);
    CHECK(gpushm_device_stats_ordinal(h) == gpushm_device_stats_ordinal(st));
    CHECK(strcmp(gpushm_device_stats_name(h), gpushm_device_stats_name(st)) == 0);
    CHECK_OK(gpushm_device_stats_uuid(h, a));
    CHECK_OK(gpushm_device_stats_uuid(st, b));
    CHECK(memcmp(a, b, 16) == 0);
  }
  CHECK(gpushm_daemon_device(conn, n) == NULL);
  gpushm_stats_free(s);

  /* The setting, whether or not this machine can serve it. */
  daemon_start(&other, "--default-backend", "cuda-fd", NULL);
  c2 = daemon_connect(&other);
  CHECK(gpushm_daemon_default_backend(c2) == GPUSHM_BACKEND_CUDA_FD);
  gpushm_disconnect(c2);
  daemon_stop(&other);
}

/* What bindings may pass: NULL objects read as 0 and "", and are freed as no-ops. */
static void test_null_objects(void)
{
  uint8_t uuid[16];

  CHECK(gpushm_buffer_list_count(NULL) == 0 && gpushm_buffer_list_get(NULL, 0) == NULL);
  CHECK(gpushm_buffer_info_id(NULL) == 0 && strcmp(gpushm_buffer_info_name(NULL), "") == 0);
  CHECK(gpushm_buffer_info_kind(NULL) == 0 && gpushm_buffer_info_backend(NULL) == 0);
  CHECK(gpushm_buffer_info_device(NULL) == 0 && gpushm_buffer_info_holders_total(NULL) == 0);
  CHECK(gpushm_buffer_info_holder_count(NULL) == 0 && gpushm_buffer_info_holder(NULL, 0) == NULL);
  CHECK_ERR(gpushm_buffer_info_device_uuid(NULL, uuid), GPUSHM_E_INVAL);
  CHECK(gpushm_holder_pid(NULL) == 0 && gpushm_holder_refs(NULL) == 0);
  CHECK(gpushm_client_list_count(NULL) == 0 && gpushm_client_list_get(NULL, 0) == NULL);
  CHECK(gpushm_client_info_pid(NULL) == 0 && strcmp(gpushm_client_info_name(NULL), "") == 0);
  CHECK(gpushm_stats_buffers(NULL) == 0 && strcmp(gpushm_stats_daemon_version(NULL), "") == 0);
  CHECK(gpushm_stats_device_count(NULL) == 0 && gpushm_stats_device(NULL, 0) == NULL);
  CHECK(gpushm_stats_usage_count(NULL) == 0 && gpushm_stats_usage(NULL, 0) == NULL);
  CHECK(gpushm_device_stats_ordinal(NULL) == 0 && strcmp(gpushm_device_stats_name(NULL), "") == 0);
  CHECK_ERR(gpushm_device_stats_uuid(NULL, uuid), GPUSHM_E_INVAL);
  CHECK(strcmp(gpushm_request_stats_type(NULL), "") == 0 && gpushm_request_stats_count(NULL) == 0);
  CHECK(gpushm_usage_kind(NULL) == 0 && gpushm_usage_bytes(NULL) == 0);
  CHECK(gpushm_stats_latency_bound_count(NULL) == 0 && gpushm_stats_latency_bound_ns(NULL, 0) == 0);
  CHECK(gpushm_request_stats_latency_bucket_count(NULL) == 0);
  CHECK(gpushm_request_stats_latency_le(NULL, 0) == 0);
  CHECK(gpushm_request_stats_latency_sum_ns(NULL) == 0);
  CHECK(gpushm_stats_opens_count(NULL) == 0 && gpushm_stats_opens(NULL, 0) == NULL);
  CHECK(gpushm_open_stats_kind(NULL) == 0 && gpushm_open_stats_backend(NULL) == 0);
  CHECK(gpushm_open_stats_device(NULL) == 0 && gpushm_open_stats_opens(NULL) == 0);
  CHECK(gpushm_open_stats_creates(NULL) == 0);
  gpushm_buffer_list_free(NULL);
  gpushm_client_list_free(NULL);
  gpushm_stats_free(NULL);
  CHECK(gpushm_daemon_pid(NULL) == 0 && gpushm_daemon_uid(NULL) == 0);
  CHECK(gpushm_daemon_pid_namespace(NULL) == 0 && gpushm_daemon_default_backend(NULL) == 0);
  CHECK(gpushm_daemon_device_count(NULL) == 0 && gpushm_daemon_device(NULL, 0) == NULL);
  CHECK_ERR(gpushm_local_devices(NULL), GPUSHM_E_INVAL);
  CHECK(gpushm_local_device_list_count(NULL) == 0 && gpushm_local_device_list_get(NULL, 0) == NULL);
  CHECK(gpushm_local_device_list_driver_version(NULL) == 0);
  CHECK(gpushm_local_device_ordinal(NULL) == 0 && strcmp(gpushm_local_device_name(NULL), "") == 0);
  CHECK(gpushm_local_device_flags(NULL) == 0);
  CHECK_ERR(gpushm_local_device_uuid(NULL, uuid), GPUSHM_E_INVAL);
  gpushm_local_device_list_free(NULL);
}

int main(void)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *buf;
  gpushm_t *conn;
  uint64_t before_ms = now_unix_ms();

  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  gpushm_create_opts_init(&opts);
  opts.mode = 0640;
  opts.lifetime = GPUSHM_LIFETIME_SESSION;
  opts.flags = GPUSHM_CREATE_SYNC;
  CHECK_OK(gpushm_buffer_create(conn, "admin", 100, &opts, &buf));

  test_buffer_list(conn, gpushm_buffer_id(buf), before_ms);
  test_client_list(conn);
  test_stats(conn);
  test_daemon_identity(conn);
  test_null_objects();

  CHECK_OK(gpushm_buffer_close(buf));
  gpushm_disconnect(conn);
  daemon_stop(&d);
  return 0;
}

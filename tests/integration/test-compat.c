/* SPDX-License-Identifier: MIT */
/* The protocol can evolve without stranding anyone: a 0.1 client's exact bytes (frozen
 * here, not generated from today's schema) still work against this daemon; a client
 * offering only future versions is told both ranges; the library keeps what the
 * negotiation said (version, features, backends). */
#include "config.h"
#include "harness.h"
#include "raw.h"

#include <string.h>
#include <sys/socket.h>
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
  CHECK(gpushm_daemon_family_version(conn, "admin") == 1);
  CHECK(gpushm_daemon_family_version(conn, "graphics") == 1);
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

int main(void)
{
  const char *fake = getenv("GPUSHM_FAKE_CUDA_LIB");

  unsetenv("NOTIFY_SOCKET");
  daemon_start(&d, NULL);
  test_frozen_v1_client();
  test_negotiation();
  test_library_keeps_it();
  daemon_stop(&d);
  /* A daemon whose default is device memory (the installed settings on a GPU host)
   * still gives a 0.1 client host memory when it names no backend. */
  if (fake && access(fake, R_OK) == 0) {
    memset(&d, 0, sizeof d);
    setenv("GPUSHM_CUDA_LIBRARY", fake, 1);
    daemon_start(&d, "--default-backend", "cuda-fd", NULL);
    test_frozen_v1_client();
    test_ipc_fences();
    daemon_stop(&d);
  }
  return 0;
}

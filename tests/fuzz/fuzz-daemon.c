/* SPDX-License-Identifier: MIT */
/* libFuzzer target: the daemon's request path, in process.
 *
 * Two client connections of different uids talk to a real struct server on a libuv
 * loop.  Each record of the input is sent as one datagram from a client's end of a
 * socketpair whose other end the daemon serves (server_connect, as after accept), so the
 * daemon's own receive, frame checks, protobuf decoding, dispatch, registry and host
 * backend (and, with GPUSHM_FUZZ_CUDA_LIBRARY naming the fake driver, the CUDA backends)
 * handle it as they would a real client's.  Input format: fuzz-format.h.
 *
 * Oracles besides ASan/UBSan/LSan: every reply is a well-formed frame carrying the
 * fds its body promises (memory of fd backends, control blocks; IPC handles of their
 * size, never as fds); the daemon logs no error (it logs one only for its own bugs);
 * once both clients have gone, no buffer is referenced, no session or unlinked buffer
 * survives, the byte accounting adds up, and no fd is left open.  Each input starts
 * from an empty registry, so a crash reproduces from its input file alone. */
#include "config.h"
#include "fuzz-format.h"
#include "gpushm.h"
#include "gpushm.pb-c.h"
#include "util/log.h"
#include "offer.h"
#include "registry/registry.h"
#include "registry/state.h"
#include "server/server.h"
#include "server/session.h"
#include "wire.h"
#include "backends/backend_cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The host backend really reserves what a create asks for: small quotas keep a
 * fuzzed size from costing gigabytes, and the buffer count bounds the fds. */
#define FUZZ_MAX_BYTES_PER_UID (16ull << 20)
#define FUZZ_MAX_BUFFERS_PER_UID 128u
#define FUZZ_ADMIN_GID 4242u
/* CU_IPC_HANDLE_SIZE: what a cuda-ipc or event open reply's handle holds. */
#define FUZZ_CU_IPC_HANDLE_SIZE 64u
/* Loop passes after each record: enough for a repeated frame (more than one wakeup's
 * worth) and for queued replies to be flushed once drained. */
#define FUZZ_PUMP_PASSES 4
/* A hangup must be noticed within this many loop passes: the first FUZZ_SPIN_PASSES
 * back to back, the rest 100 us apart (2 s in all). */
#define FUZZ_SPIN_PASSES 1000
#define FUZZ_MAX_PASSES (FUZZ_SPIN_PASSES + 20000)

struct identity {
  uid_t uid;
  gid_t gid;
  gid_t group; /* the one supplementary group */
  bool admin;
};

/* Connection 0 is always identities[0]; the input's flags pick connection 1 from the
 * rest, so the two never share a uid and connection 0 is never an admin. */
static const struct identity identities[] = {
  { 1000, 1000, 100, false },
  { 65534, 65534, 65534, false },       /* a stranger: only the "other" bits apply */
  { 1001, 1000, 100, false },           /* shares uid 1000's group */
  { 0, 0, 0, true },                    /* root */
  { 1002, 1002, FUZZ_ADMIN_GID, true }, /* an admin by group, not root */
};

static const struct reg_limits limits = {
  .max_buffers_per_uid = FUZZ_MAX_BUFFERS_PER_UID,
  .max_bytes_per_uid = FUZZ_MAX_BYTES_PER_UID,
  .default_mode = 0600,
};

struct peer {
  int fd; /* the client's end; -1 when not connected */
  const struct identity *who;
};

static struct registry reg;
static struct server *srv; /* made anew for every input (start_daemon) */
static struct server_config cfg;
static uv_loop_t loop;
static struct peer peers[2];
static bool auto_hello;
static bool verbose;
static int devnull = -1;
static uint64_t next_request_id;
static uint8_t tx[WIRE_FRAME_MAX + 1];
static uint8_t rx[WIRE_RECV_BUF];

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void fail(const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  fprintf(stderr, "fuzz-daemon: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}

/* Replaces daemon/log.c.  The daemon logs errors only for its own bugs (a reply it
 * built too large, a sticky device error), so one is a finding; the warnings every
 * rejected frame causes are noise unless GPUSHM_FUZZ_VERBOSE is set. */
void log_event_at(const char *file, int line, const char *func, enum log_level level,
                  const struct log_fields *fields, const char *fmt, ...)
{
  va_list ap;

  (void)file;
  (void)line;
  (void)func;
  (void)fields;

  if (level == LOG_LEVEL_ERROR || verbose) {
    va_start(ap, fmt);
    fprintf(stderr, "gpushmd: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
  }
  if (level == LOG_LEVEL_ERROR)
    fail("the daemon logged an error");
}

void log_ratelimit_flush(struct log_ratelimit *rl, const struct log_client *client)
{
  (void)client;
  *rl = (struct log_ratelimit){ 0 };
}

void log_client_warnings_flush(void)
{
}

/* What a client may rely on in any reply: a frame that passes the checks the library
 * makes, a body that decodes, and exactly the fds the body implies. */
static void check_reply(size_t len, int msg_flags, unsigned n_fds)
{
  struct wire_header h;
  const char *why = NULL;
  Gpushm__Reply *reply;
  unsigned expected = 0;

  if (wire_check_frame(rx, len, msg_flags, n_fds, WIRE_TYPE_REPLY, &h, &why) < 0)
    fail("daemon sent a bad frame: %s", why);
  reply = gpushm__reply__unpack(NULL, h.body_len, rx + WIRE_HEADER_SIZE);
  if (!reply)
    fail("daemon sent an undecodable reply");
  if (reply->status != 0) {
    if (reply->body_case != GPUSHM__REPLY__BODY__NOT_SET || n_fds)
      fail("error reply (status %d) with a body or fds", reply->status);
  } else if (reply->request_id == 0) {
    fail("connection-level reply with status 0");
  } else if (reply->body_case == GPUSHM__REPLY__BODY_HELLO) {
    expected = 1; /* the status page */
  } else if (reply->body_case == GPUSHM__REPLY__BODY_SEMAPHORE) {
    expected = 1; /* the plane */
  } else if (reply->body_case == GPUSHM__REPLY__BODY_OPEN) {
    const Gpushm__OpenReply *open = reply->open;
    Gpushm__Backend be;
    bool mapped_here, fd_memory;
    if (!open->info)
      fail("open reply without buffer info");
    be = open->info->backend;
    /* a carved buffer's memory comes only with the first open that maps its segment */
    mapped_here = !open->info->segment_id || open->segment_attached;
    /* a timeline (listed as host: its control block's memory) brings that block alone */
    fd_memory = open->info->kind != GPUSHM__KIND__KIND_TIMELINE &&
                (be == GPUSHM__BACKEND__BACKEND_HOST || be == GPUSHM__BACKEND__BACKEND_CUDA_FD ||
                 be == GPUSHM__BACKEND__BACKEND_CUDA_FABRIC ||
                 be == GPUSHM__BACKEND__BACKEND_EXTERNAL);
    if (open->info->kind == GPUSHM__KIND__KIND_TIMELINE &&
        (!open->has_control || open->info->size))
      fail("a timeline's open reply without its control block, or with a size");
    expected = (fd_memory && mapped_here) + open->has_control;
    /* legacy IPC memory and events travel as handles, never as fds */
    if ((be == GPUSHM__BACKEND__BACKEND_CUDA_IPC && mapped_here) ||
        be == GPUSHM__BACKEND__BACKEND_CUDA_EVENT) {
      if (open->ipc_handle.len != FUZZ_CU_IPC_HANDLE_SIZE)
        fail("a %s open reply with an IPC handle of %zu bytes",
             be == GPUSHM__BACKEND__BACKEND_CUDA_IPC ? "cuda-ipc" : "cuda-event",
             open->ipc_handle.len);
    }
  }
  if (reply->status == 0 && n_fds != expected)
    fail("reply (body %d) carries %u fds, its body implies %u", (int)reply->body_case, n_fds,
         expected);
  gpushm__reply__free_unpacked(reply, NULL);
}

static void close_peer(int i)
{
  close(peers[i].fd);
  peers[i].fd = -1;
}

/* Reads and checks every reply waiting on client i's end; closes it at end of stream
 * (the daemon hung up). */
static void drain(int i)
{
  while (peers[i].fd >= 0) {
    union {
      struct cmsghdr align;
      char buf[CMSG_SPACE(sizeof(int) * GPUSHM_LIMIT_FDS_PER_FRAME * 2)];
    } control;
    struct iovec iov = { .iov_base = rx, .iov_len = sizeof rx };
    struct msghdr msg = {
      .msg_iov = &iov, .msg_iovlen = 1,
      .msg_control = control.buf, .msg_controllen = sizeof control.buf,
    };
    unsigned n_fds = 0;
    ssize_t n = recvmsg(peers[i].fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return;
      close_peer(i); /* ECONNRESET: as good as end of stream */
      return;
    }
    /* Every fd is closed here, whatever the checks say: the daemon exports a new one
     * per open, and keeping them would run the process out. */
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
        continue;
      for (size_t k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++, n_fds++) {
        int fd;
        memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof fd);
        close(fd);
      }
    }
    if (n == 0 && n_fds == 0) {
      close_peer(i);
      return;
    }
    check_reply((size_t)n, msg.msg_flags, n_fds);
  }
}

static void pump(bool drain_replies)
{
  for (int pass = 0; pass < FUZZ_PUMP_PASSES; pass++) {
    uv_run(&loop, UV_RUN_NOWAIT);
    if (drain_replies) {
      drain(0);
      drain(1);
    }
  }
}

static unsigned live_peers(void)
{
  return (peers[0].fd >= 0) + (peers[1].fd >= 0);
}

/* Runs the loop until the daemon has closed every connection whose client end is
 * gone, as it must on end of stream. */
static void settle(void)
{
  for (int pass = 0; server_client_count(srv) > live_peers(); pass++) {
    if (pass == FUZZ_MAX_PASSES)
      fail("%u connections still open %d loop passes (%d ms) after their clients hung up",
           server_client_count(srv) - live_peers(), FUZZ_MAX_PASSES,
           (FUZZ_MAX_PASSES - FUZZ_SPIN_PASSES) / 10);
    uv_run(&loop, UV_RUN_NOWAIT);
    /* a session may wait for work on libuv's threads (a device's context being
     * retained, with the CUDA backends): give them time, not just passes */
    if (pass >= FUZZ_SPIN_PASSES)
      usleep(100);
  }
  /* once more, for the close callbacks of handles closed in the last pass */
  uv_run(&loop, UV_RUN_NOWAIT);
}

static void hangup(int i)
{
  if (peers[i].fd < 0)
    return;
  close_peer(i);
  settle();
}

/* What a registrant sends (issue 36, item 7): a memfd of kind % 3, sealed against
 * shrinking and growing, unsealed, or small and unsealed (the caller grows it once the
 * daemon has it). */
static int make_memfd(unsigned kind)
{
  int fd = memfd_create("fuzz-registered", MFD_CLOEXEC | MFD_ALLOW_SEALING);

  if (fd < 0 || ftruncate(fd, kind % 3 == 2 ? 4096 : FUZZ_D_MEMFD_BYTES) < 0)
    fail("memfd: %s", strerror(errno));
  if (kind % 3 == 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
    fail("sealing a memfd: %s", strerror(errno));
  return fd;
}

/* Sends one datagram with n_fds fds (fd, repeated); the loop runs while the socket is
 * full.  Returns false if the daemon has hung up. */
static bool send_frame_fd(int i, const uint8_t *data, size_t len, unsigned n_fds, int fd,
                          bool drain_replies)
{
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * 8)];
  } control;
  struct iovec iov = { .iov_base = (void *)data, .iov_len = len };
  struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
  int err = 0;

  if (n_fds) {
    struct cmsghdr *c;
    memset(&control, 0, sizeof control);
    msg.msg_control = control.buf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
    c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
    for (unsigned k = 0; k < n_fds; k++)
      memcpy(CMSG_DATA(c) + k * sizeof(int), &fd, sizeof(int));
  }
  for (int attempt = 0; peers[i].fd >= 0; attempt++) {
    if (sendmsg(peers[i].fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0)
      return true;
    err = errno;
    if ((err != EAGAIN && err != EWOULDBLOCK && err != EINTR) || attempt == 100)
      break;
    /* Full: the daemon has not read what we sent, or we have not read its replies
     * (then it queues them, and drops us past its limit). */
    pump(drain_replies);
  }
  if (peers[i].fd < 0 || err == EAGAIN || err == EWOULDBLOCK)
    return false;
  /* EPIPE: the daemon dropped us; its last word (if any) is still to be read. */
  drain(i);
  hangup(i);
  return false;
}

static bool send_frame(int i, const uint8_t *data, size_t len, unsigned n_fds, bool drain_replies)
{
  return send_frame_fd(i, data, len, n_fds, devnull, drain_replies);
}

static void send_hello(int i)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__Hello hello = GPUSHM__HELLO__INIT;
  long len;

  hello.protocol_version = GPUSHM_PROTOCOL_VERSION;
  hello.client_name = (char *)(i ? "fuzz-1" : "fuzz-0");
  req.request_id = ++next_request_id;
  req.body_case = GPUSHM__REQUEST__BODY_HELLO;
  req.hello = &hello;
  len = wire_encode(tx, WIRE_TYPE_REQUEST, &req.base, 0);
  if (len < 0)
    fail("cannot encode hello");
  send_frame(i, tx, (size_t)len, 0, true);
  pump(true);
}

/* A connection as accept() would give it, but with the identity the input chose
 * instead of this process's credentials (SO_PEERCRED of a socketpair is our own). */
static void connect_peer(int i)
{
  const struct identity *who = peers[i].who;
  struct session *c;
  int sv[2];

  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
    fail("socketpair: %s", strerror(errno));
  if (!(c = server_connect(srv, sv[0])))
    fail("server_connect refused a socketpair");
  free(c->client.groups);
  if (!(c->client.groups = malloc(sizeof *c->client.groups)))
    fail("out of memory");
  c->client.groups[0] = who->group;
  c->client.n_groups = 1;
  c->client.uid = who->uid;
  c->client.gid = who->gid;
  c->client.admin = who->admin;
  peers[i].fd = sv[1];
  if (auto_hello)
    send_hello(i);
}

static void run_record(unsigned sel, const uint8_t *bytes, size_t len)
{
  static const unsigned fd_counts[] = { 0, 1, 1, GPUSHM_LIMIT_FDS_PER_FRAME + 1 };
  int i = sel & FUZZ_D_CONN;
  unsigned fds = (sel & FUZZ_D_FDS_MASK) >> FUZZ_D_FDS_SHIFT, n_fds = fd_counts[fds];
  int memfd = fds == 1 ? make_memfd((unsigned)len) : -1;
  unsigned count = sel & FUZZ_D_REPEAT ? FUZZ_D_REPEAT_COUNT : 1;
  bool drain_replies = !(sel & FUZZ_D_NO_DRAIN);
  size_t frame_len;

  if (sel & FUZZ_D_RECONNECT)
    hangup(i);
  if (peers[i].fd < 0)
    connect_peer(i);
  if (sel & FUZZ_D_HEADER) {
    struct wire_header h = {
      .magic = WIRE_MAGIC,
      .version = GPUSHM_WIRE_VERSION,
      .type = WIRE_TYPE_REQUEST,
      .body_len = (uint32_t)len,
      .n_fds = n_fds,
    };
    memcpy(tx, &h, sizeof h);
    memcpy(tx + WIRE_HEADER_SIZE, bytes, len);
    frame_len = WIRE_HEADER_SIZE + len;
  } else {
    memcpy(tx, bytes, len);
    frame_len = len;
  }
  for (unsigned k = 0; k < count; k++)
    if (!send_frame_fd(i, tx, frame_len, n_fds, memfd >= 0 ? memfd : devnull, drain_replies))
      break;
  if (!(sel & FUZZ_D_PIPELINE))
    pump(drain_replies);
  if (memfd >= 0) {
    /* A registrant that grows its memory once gpushmd has it; refused where sealed. */
    if (len % 3 == 2)
      (void)!ftruncate(memfd, FUZZ_D_MEMFD_GROWN);
    close(memfd);
  }
}

/* With no client left, every reference is gone: what remains are persistent buffers
 * nobody holds, and the totals must agree with them. */
static void check_registry(void)
{
  struct reg_totals totals;
  uint64_t bytes = 0;

  if (server_client_count(srv) != 0)
    fail("%u clients still registered after all hung up", server_client_count(srv));
  registry_totals(&reg, &totals);
  for (size_t i = 0; i < registry_count(&reg); i++) {
    const struct reg_object *b = registry_at(&reg, i);
    if (b->refs || b->n_holders || !list_empty(&b->holdings))
      fail("'%s' (id %llu) still has %u references, %u holders with no client connected",
           b->name, (unsigned long long)b->id, b->refs, b->n_holders);
    if (!b->linked)
      fail("unlinked buffer '%s' (id %llu) outlived its last reference", b->name,
           (unsigned long long)b->id);
    if (b->lifetime != GPUSHM_LIFETIME_PERSISTENT || b->creator)
      fail("session buffer '%s' (id %llu) outlived its creator", b->name,
           (unsigned long long)b->id);
    if (i > 0 && registry_at(&reg, i - 1)->id >= b->id)
      fail("buffer ids out of order at index %zu", i);
    bytes += b->allocated;
  }
  if (bytes != totals.bytes_allocated)
    fail("registry counts %llu bytes, its buffers %llu",
         (unsigned long long)totals.bytes_allocated, (unsigned long long)bytes);
  if (totals.linked != totals.objects)
    fail("registry counts %u linked names for %zu buffers", totals.linked, totals.objects);
}

/* A daemon of its own for every input, so that inputs stay independent (persistent
 * buffers outlive their clients by design) and a crash reproduces from its file alone:
 * a registry, and a server on a listener nobody connects to (it never wakes the loop;
 * an abstract name leaves nothing behind). */
static void start_daemon(void)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  socklen_t addr_len;
  char err[256];
  int fd;

  if (registry_init(&reg, &limits) < 0)
    fail("registry_init: out of memory");
  offer_backends(&reg);
  if (!(srv = server_new(&loop, &cfg, &reg, NULL, err, sizeof err)))
    fail("server_new: %s", err);
  fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  snprintf(addr.sun_path + 1, sizeof addr.sun_path - 1, "gpushm-fuzz-daemon-%d", (int)getpid());
  addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(addr.sun_path + 1));
  if (fd < 0 || bind(fd, (struct sockaddr *)&addr, addr_len) < 0 || listen(fd, 1) < 0)
    fail("listening socket: %s", strerror(errno));
  server_adopt_socket(srv, fd);
  server_start(srv);
}

/* Its clients are this process, alive: each that hung up holding buffers is tracked
 * with a pidfd, which the next input must not inherit; the server lets go of them (and
 * of their holds on segments) before the registry goes. */
static void stop_daemon(void)
{
  server_shutdown(srv);
  uv_run(&loop, UV_RUN_DEFAULT);
  server_free(srv);
  srv = NULL;
  registry_destroy(&reg);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  const char *cuda;

  (void)argc;
  (void)argv;
  signal(SIGPIPE, SIG_IGN);
  verbose = getenv("GPUSHM_FUZZ_VERBOSE") != NULL;
  /* The target must not behave differently on a host with a GPU: without
   * GPUSHM_FUZZ_CUDA_LIBRARY (scripts/fuzz's daemon-cuda names the fake driver there)
   * the CUDA backends stay "unavailable". */
  cuda = getenv("GPUSHM_FUZZ_CUDA_LIBRARY");
  setenv("GPUSHM_CUDA_LIBRARY", cuda && *cuda ? cuda : "/nonexistent/libcuda-fuzz.so.1", 1);
  backend_cuda_init();
  if ((devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
    fail("/dev/null: %s", strerror(errno));
  cfg = (struct server_config){
    .socket_path = "(fuzz)",
    .socket_mode = 0666,
    .max_clients = GPUSHM_DEFAULT_MAX_CLIENTS,
    .max_clients_per_uid = GPUSHM_DEFAULT_MAX_CLIENTS_PER_UID,
    .hello_timeout_ms = GPUSHM_DEFAULT_HELLO_TIMEOUT_MS,
    .max_queued_frames = GPUSHM_DEFAULT_MAX_QUEUED_FRAMES,
    .max_queued_bytes = GPUSHM_DEFAULT_MAX_QUEUED_BYTES,
    .has_admin_group = true,
    .admin_gid = FUZZ_ADMIN_GID,
  };
  uv_loop_init(&loop);
  peers[0].fd = peers[1].fd = -1;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  uint32_t fds_before;
  size_t pos = 1;

  if (size < 1)
    return 0;
  fds_before = server_count_open_fds();
  start_daemon();
  peers[0].who = &identities[0];
  peers[1].who = &identities[1 + (data[0] & FUZZ_D_IDENTITY_MASK)];
  auto_hello = data[0] & FUZZ_D_AUTO_HELLO;
  next_request_id = 0;
  connect_peer(0);
  connect_peer(1);
  while (pos + 3 <= size) {
    unsigned sel = data[pos];
    size_t len = (size_t)data[pos + 1] | (size_t)data[pos + 2] << 8;
    pos += 3;
    if (len > size - pos)
      len = size - pos;
    run_record(sel, data + pos, len);
    pos += len;
  }

  hangup(0);
  hangup(1);
  /* A peer the daemon hung up on mid-input (a slow reader dropped) was closed on this
   * side then, without waiting: its session may still be going. */
  settle();
  check_registry();
  stop_daemon();
  if (server_count_open_fds() != fds_before)
    fail("%u fds open after the input, %u before", server_count_open_fds(), fds_before);
  return 0;
}

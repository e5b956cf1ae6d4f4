/* SPDX-License-Identifier: MIT */
/* Connection to gpushmd: connect + hello, synchronous request/reply. */
#include "config.h"
#include "error.h"
#include "connect_error.h"
#include "conn.h"
#include "list_codec.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

bool client_fd_sealed(int fd)
{
  int seals = fcntl(fd, F_GET_SEALS);
  return seals >= 0 && (seals & F_SEAL_SHRINK);
}

static int map_status_page(gpushm_t *conn, int fd)
{
  struct stat st;
  const char *why;
  void *p;

  if (!client_fd_sealed(fd) || fstat(fd, &st) < 0 || st.st_size < (off_t)STATUS_PAGE_SIZE)
    return client_error(GPUSHM_E_PROTO, "daemon sent an invalid status page");
  p = mmap(NULL, STATUS_PAGE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return client_error(GPUSHM_E_IO, "mapping the status page: %s", strerror(errno));
  if ((why = shm_layout_check(p, STATUS_PAGE_SIZE, STATUS_PAGE_MAGIC,
                              offsetof(struct status_page, unlink_generation) + 8))) {
    munmap(p, STATUS_PAGE_SIZE);
    return client_error(GPUSHM_E_PROTO, "daemon sent an invalid status page: %s", why);
  }
  conn->status = p;
  return 0;
}

uint64_t client_unlink_generation(const gpushm_t *conn)
{
  return __atomic_load_n(&conn->status->unlink_generation, __ATOMIC_ACQUIRE);
}

static int take_hello_reply(gpushm_t *conn, const Gpushm__HelloReply *h)
{
  unsigned v = h->protocol_version;

  /* A 0.1 daemon answers with its only version; anything outside our range is no
   * conversation we can have. */
  if (v < GPUSHM_PROTOCOL_MIN_VERSION || v > GPUSHM_PROTOCOL_VERSION)
    return client_error(GPUSHM_E_VERSION, "gpushmd chose protocol %u; this library speaks %u-%u",
                        v, GPUSHM_PROTOCOL_MIN_VERSION, GPUSHM_PROTOCOL_VERSION);
  conn->protocol_version = v;
  conn->instance_id = h->instance_id;
  conn->client_id = h->client_id;
  conn->features = h->features;
  for (size_t i = 0; i < h->n_backends; i++)
    if ((unsigned)h->backends[i] < 32)
      conn->backends |= 1u << (unsigned)h->backends[i];
  snprintf(conn->daemon_version, sizeof conn->daemon_version, "%s",
           h->daemon_version ? h->daemon_version : "");
  if (h->default_backend > 0 && (unsigned)h->default_backend < 32 &&
      h->default_backend != GPUSHM__BACKEND__BACKEND_CUDA_EVENT)
    conn->default_backend = (gpushm_backend_t)h->default_backend;
  conn->daemon_pid_namespace = h->pid_namespace;
  snprintf(conn->driver_version, sizeof conn->driver_version, "%s",
           h->driver_version ? h->driver_version : "");
  return 0;
}

static int hello(gpushm_t *conn, const char *client_name)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__Hello body = GPUSHM__HELLO__INIT;
  Gpushm__Reply *reply;
  struct client_fds fds;
  int r;

  /* protocol_version alone is what a 0.1 daemon reads; the range is for newer ones. */
  body.protocol_version = GPUSHM_PROTOCOL_VERSION;
  body.min_version = GPUSHM_PROTOCOL_MIN_VERSION;
  body.max_version = GPUSHM_PROTOCOL_VERSION;
  /* What this library understands: carved replies, and images and registered memory in
   * open replies (a daemon makes neither for a library that did not say so). */
  body.features = GPUSHM_FEATURE_SEGMENTS | GPUSHM_FEATURE_GRAPHICS | GPUSHM_FEATURE_IPC_FENCES |
                  GPUSHM_FEATURE_PROMISES | GPUSHM_FEATURE_TIMELINES |
                  GPUSHM_FEATURE_RINGS | GPUSHM_FEATURE_SEMAPHORES | GPUSHM_FEATURE_WEIGHTS;
  body.client_name = (char *)(client_name ? client_name : "");
  req.body_case = GPUSHM__REQUEST__BODY_HELLO;
  req.hello = &body;
  r = client_call(conn, &req, &reply, &fds);
  if (r < 0)
    return r;
  if (reply->body_case != GPUSHM__REPLY__BODY_HELLO || fds.n != 1)
    r = client_error(GPUSHM_E_PROTO, "malformed hello reply");
  else if ((r = take_hello_reply(conn, reply->hello)) == 0)
    r = map_status_page(conn, fds.fd[0]);
  client_close_fds(&fds);
  if (r == 0)
    conn->hello = reply; /* its device list is read through gpushm_daemon_device() */
  else
    gpushm__reply__free_unpacked(reply, NULL);
  return r;
}

int client_need_feature(const gpushm_t *conn, uint64_t feature, const char *what)
{
  if (conn->features & feature)
    return 0;
  return client_error(GPUSHM_E_UNSUPPORTED, "gpushmd %s does not offer %s",
                      conn->daemon_version, what);
}

int gpushm_daemon_has(const gpushm_t *conn, uint64_t feature)
{
  return conn && feature && (conn->features & feature) == feature;
}

uint32_t gpushm_daemon_backends(const gpushm_t *conn)
{
  return conn ? conn->backends : 0;
}

unsigned gpushm_protocol_version(const gpushm_t *conn)
{
  return conn ? conn->protocol_version : 0;
}

unsigned gpushm_daemon_family_version(const gpushm_t *conn, const char *family)
{
  const Gpushm__HelloReply *h = conn && conn->hello ? conn->hello->hello : NULL;

  if (!h || !family)
    return 0;
  for (size_t i = 0; i < h->n_families; i++)
    if (h->families[i] && h->families[i]->name && strcmp(h->families[i]->name, family) == 0)
      return h->families[i]->version;
  return 0;
}

const char *gpushm_daemon_version(const gpushm_t *conn)
{
  return conn ? conn->daemon_version : NULL;
}

gpushm_backend_t gpushm_daemon_default_backend(const gpushm_t *conn)
{
  return conn ? conn->default_backend : GPUSHM_BACKEND_DEFAULT;
}

uint32_t gpushm_daemon_pid(const gpushm_t *conn)
{
  return conn ? conn->daemon_pid : 0;
}

uint32_t gpushm_daemon_uid(const gpushm_t *conn)
{
  return conn ? conn->daemon_uid : 0;
}

uint64_t gpushm_daemon_pid_namespace(const gpushm_t *conn)
{
  return conn ? conn->daemon_pid_namespace : 0;
}

size_t gpushm_daemon_device_count(const gpushm_t *conn)
{
  if (!conn || !conn->hello || !conn->hello->hello)
    return 0;
  return conn->hello->hello->n_devices < GPUSHM_LIMIT_DEVICES ? conn->hello->hello->n_devices
                                                              : GPUSHM_LIMIT_DEVICES;
}

/* A Hello device is the same message as a stats one (Gpushm__Device): the stats
 * accessors read it. */
const gpushm_device_stats_t *gpushm_daemon_device(const gpushm_t *conn, size_t i)
{
  if (i >= gpushm_daemon_device_count(conn))
    return NULL;
  return (const gpushm_device_stats_t *)conn->hello->hello->devices[i];
}

/* The kernel's fixed inode of the initial PID namespace (PROC_PID_INIT_INO). */
#define INIT_PID_NAMESPACE 0xEFFFFFFCu

uint64_t client_pid_namespace(void)
{
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

bool client_ipc_namespace_problem(const gpushm_t *conn, char *why, size_t len)
{
  uint64_t mine = client_pid_namespace(), daemon = conn->daemon_pid_namespace;

  /* Measured: legacy handles open when both sides share a PID namespace or either is
   * in the host's; they fail (CUDA_ERROR_INVALID_CONTEXT) between siblings. */
  if (mine == INIT_PID_NAMESPACE || daemon == INIT_PID_NAMESPACE)
    return false;
  if (mine && daemon) {
    if (mine == daemon)
      return false;
    snprintf(why, len, "this process is in PID namespace %llu, gpushmd in %llu, and neither is "
             "the host's", (unsigned long long)mine, (unsigned long long)daemon);
    return true;
  }
  /* A daemon that does not say (before 0.2): a pid of 0 from SO_PEERCRED means it is in
   * a namespace this process cannot see, and that this process is not the host's. */
  if (conn->daemon_pid == 0) {
    snprintf(why, len, "gpushmd runs in a PID namespace this process cannot see (its pid "
             "reads 0 here)");
    return true;
  }
  return false;
}

/* An impostor could sit on the socket path (a directory another user controls, a
 * daemon started by someone else): a client only talks to a daemon run by root, by its
 * own uid, or by the uid $GPUSHM_DAEMON_UID names. */
static int check_daemon_identity(gpushm_t *conn, const char *path)
{
  const char *configured = secure_getenv("GPUSHM_DAEMON_UID");
  struct ucred cred;
  socklen_t len = sizeof cred;
  char *end;

  if (getsockopt(conn->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
    return client_error(GPUSHM_E_IO, "SO_PEERCRED on %s: %s", path, strerror(errno));
  conn->daemon_pid = (uint32_t)cred.pid;
  conn->daemon_uid = (uint32_t)cred.uid;
  if (cred.uid == 0 || cred.uid == geteuid())
    return 0;
  if (configured && *configured) {
    unsigned long uid = strtoul(configured, &end, 10);
    if (*end) {
      /* The _r form: the caller's, or another thread's, getpwnam() result stays theirs. */
      struct passwd pwd, *pw = NULL;
      char scratch[4096];
      uid = getpwnam_r(configured, &pwd, scratch, sizeof scratch, &pw) == 0 && pw
              ? (unsigned long)pw->pw_uid : ULONG_MAX;
    }
    if (uid == cred.uid)
      return 0;
  }
  return client_error(GPUSHM_E_PERM, "refusing the server at %s: it runs as uid %u (pid %d), "
                      "which is neither root, you (uid %u), nor $GPUSHM_DAEMON_UID",
                      path, (unsigned)cred.uid, (int)cred.pid, (unsigned)geteuid());
}

static int env_timeout_ms(void)
{
  const char *v = secure_getenv("GPUSHM_TIMEOUT_MS");
  char *end;
  long ms;

  if (!v || !*v)
    return GPUSHM_DEFAULT_TIMEOUT_MS;
  ms = strtol(v, &end, 10);
  if (*end || ms > INT_MAX)
    return GPUSHM_DEFAULT_TIMEOUT_MS;
  return ms < 0 ? 0 : (int)ms; /* negative: for ever, which the socket spells 0 */
}

/* $GPUSHM_POLL_US: 0 (the default) sleeps at once.  A bad value fails the connect, which
 * says so: whoever set it is tuning for latency and would not see it ignored. */
static int env_poll_us(unsigned *us)
{
  const char *v = secure_getenv("GPUSHM_POLL_US");
  char *end;
  unsigned long n;

  *us = 0;
  if (!v || !*v)
    return 0;
  errno = 0;
  n = strtoul(v, &end, 10);
  if (*end || errno || *v == '-' || n > GPUSHM_LIMIT_POLL_US)
    return client_error(GPUSHM_E_INVAL, "GPUSHM_POLL_US=%s: expected microseconds, 0 to %u",
                        v, GPUSHM_LIMIT_POLL_US);
  *us = (unsigned)n;
  return 0;
}

static int apply_timeout(int fd, int ms)
{
  struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
  return setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
         setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0 ? -1 : 0;
}

int gpushm_set_timeout(gpushm_t *conn, int timeout_ms)
{
  int r = 0;

  client_clear_error();
  if (!conn)
    return client_error(GPUSHM_E_INVAL, "conn must not be NULL");
  if (timeout_ms < 0)
    timeout_ms = 0; /* for ever, as SO_RCVTIMEO spells it */
  pthread_mutex_lock(&conn->lock);
  if (apply_timeout(conn->fd, timeout_ms) < 0)
    r = client_error(GPUSHM_E_IO, "setting the timeout: %s", strerror(errno));
  else
    conn->timeout_ms = timeout_ms;
  pthread_mutex_unlock(&conn->lock);
  return r;
}

int gpushm_connect(const char *socket_path, const char *client_name, gpushm_t **out)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  enum socket_source source = SOCKET_GIVEN;
  gpushm_t *conn;
  int r;

  client_clear_error();
  if (!out)
    return client_error(GPUSHM_E_INVAL, "out is NULL");
  *out = NULL;
  if (!socket_path || !*socket_path) {
    source = SOCKET_FROM_ENV;
    socket_path = secure_getenv("GPUSHM_SOCKET");
  }
  if (!socket_path || !*socket_path) {
    source = SOCKET_DEFAULT;
    socket_path = GPUSHM_DEFAULT_SOCKET;
  }
  if (strlen(socket_path) >= sizeof addr.sun_path)
    return client_error(GPUSHM_E_INVAL, "socket path too long: %s", socket_path);
  if (client_name && strlen(client_name) > GPUSHM_LIMIT_CLIENT_NAME_LEN)
    return client_error(GPUSHM_E_INVAL, "client name longer than %u bytes",
                        GPUSHM_LIMIT_CLIENT_NAME_LEN);
  if (client_name && !wire_text_valid(client_name, GPUSHM_LIMIT_CLIENT_NAME_LEN))
    return client_error(GPUSHM_E_INVAL, "client name must be printable UTF-8 (no control "
                        "characters)");
  memcpy(addr.sun_path, socket_path, strlen(socket_path) + 1);

  if (!(conn = calloc(1, sizeof *conn)))
    return client_error(GPUSHM_E_NOMEM, "out of memory");
  pthread_mutex_init(&conn->lock, NULL);
  conn->refs = 1;
  conn->pending_tail = &conn->pending_head;
  conn->fd = -1;
  if ((r = env_poll_us(&conn->poll_us)) < 0)
    goto fail;
  conn->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (conn->fd < 0) {
    r = client_error(GPUSHM_E_IO, "socket: %s", strerror(errno));
    goto fail;
  }
  /* SO_SNDTIMEO also bounds connect(): a stopped daemon's full listen queue would
   * otherwise block it for ever. */
  conn->timeout_ms = env_timeout_ms();
  if (apply_timeout(conn->fd, conn->timeout_ms) < 0) {
    r = client_error(GPUSHM_E_IO, "setting the timeout: %s", strerror(errno));
    goto fail;
  }
  if (connect(conn->fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
    if (errno == EAGAIN)
      r = client_error(GPUSHM_E_TIMEOUT, "gpushmd at %s did not accept the connection within "
                       "%d ms (its listen queue is full: stopped or overloaded)", socket_path,
                       conn->timeout_ms);
    else
      r = client_connect_error(socket_path, source, errno);
    goto fail;
  }
  if ((r = check_daemon_identity(conn, socket_path)) < 0 || (r = hello(conn, client_name)) < 0)
    goto fail;
  *out = conn;
  return 0;

fail:
  client_conn_unref(conn);
  return r;
}

void client_conn_ref(gpushm_t *conn)
{
  __atomic_add_fetch(&conn->refs, 1, __ATOMIC_RELAXED);
}

void client_conn_unref(gpushm_t *conn)
{
  if (__atomic_sub_fetch(&conn->refs, 1, __ATOMIC_ACQ_REL) != 0)
    return;
  if (conn->fd >= 0)
    close(conn->fd);
  if (conn->status)
    munmap((void *)conn->status, STATUS_PAGE_SIZE);
  if (conn->hello)
    gpushm__reply__free_unpacked(conn->hello, NULL);
  pthread_mutex_destroy(&conn->lock);
  free(conn);
}

uint64_t gpushm_instance_id(const gpushm_t *conn)
{
  return conn ? conn->instance_id : 0;
}

static int wire_error(gpushm_t *conn, int r, const char *why)
{
  conn->broken = true;
  if (r == -ECONNRESET || r == -EPIPE)
    return client_error(GPUSHM_E_DISCONNECTED, "gpushmd closed the connection");
  if (r == -EPROTO)
    return client_error(GPUSHM_E_PROTO, "bad frame from gpushmd: %s", why);
  return client_error(GPUSHM_E_IO, "socket: %s", strerror(-r));
}

void client_close_fds(struct client_fds *fds)
{
  while (fds->n)
    close(fds->fd[--fds->n]);
}

int client_send_oneway_locked(gpushm_t *conn, Gpushm__Request *req)
{
  long len;
  int r;

  if (conn->broken)
    return client_error(GPUSHM_E_DISCONNECTED, "connection to gpushmd was lost");
  req->request_id = ++conn->next_request_id;
  req->oneway = true;
  len = wire_encode(conn->tx, WIRE_TYPE_REQUEST, &req->base, 0);
  if (len < 0)
    return client_error(GPUSHM_E_LIMIT, "request exceeds the frame size limit");
  if ((r = wire_send_frame(conn->fd, conn->tx, (size_t)len, NULL, 0, 0)) == -EAGAIN) {
    conn->broken = true; /* half a conversation is no conversation */
    return client_error(GPUSHM_E_TIMEOUT, "no room to send a request to gpushmd within %d ms",
                        conn->timeout_ms);
  }
  return r < 0 ? wire_error(conn, r, "") : 0;
}

int client_send_oneway(gpushm_t *conn, Gpushm__Request *req)
{
  int r;

  pthread_mutex_lock(&conn->lock);
  r = client_send_oneway_locked(conn, req);
  pthread_mutex_unlock(&conn->lock);
  return r;
}

typedef Gpushm__Reply *reply_unpack_fn(ProtobufCAllocator *alloc, size_t len,
                                       const uint8_t *data);

/* Numbers and sends req; *sent is wire_send_frame()'s result.  Fails only when req
 * does not fit a frame. */
static int send_locked(gpushm_t *conn, Gpushm__Request *req, int send_fd, int *sent)
{
  long len;

  req->request_id = ++conn->next_request_id;
  len = wire_encode(conn->tx, WIRE_TYPE_REQUEST, &req->base, send_fd >= 0 ? 1 : 0);
  if (len < 0)
    return client_error(GPUSHM_E_LIMIT, "request exceeds the frame size limit");
  *sent = wire_send_frame(conn->fd, conn->tx, (size_t)len, send_fd >= 0 ? &send_fd : NULL,
                          send_fd >= 0 ? 1 : 0, 0);
  return 0;
}

/* Called with a reply's frame as it arrives, before it is decoded. */
struct reply_hook {
  void (*received)(struct reply_hook *hook, const struct wire_frame *frame);
};

static uint64_t monotonic_us(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* With poll_us, looks for the reply without sleeping for that long first: one that
 * comes within it costs no wake-up, which is a few microseconds of a round trip of ten
 * or twenty where the CPU went idle.  Then sleeps as always (flags 0: until the
 * timeout). */
static int recv_reply(gpushm_t *conn, int flags, struct wire_frame *frame, const char **why)
{
  if (conn->poll_us && !(flags & MSG_DONTWAIT)) {
    uint64_t deadline = monotonic_us() + conn->poll_us;
    do {
      int r = wire_recv_frame(conn->fd, conn->rx, WIRE_TYPE_REPLY, MSG_DONTWAIT, frame, why);
      if (r != -EAGAIN)
        return r;
      sched_yield(); /* to whoever shares this CPU: perhaps the one to answer */
    } while (monotonic_us() < deadline);
  }
  return wire_recv_frame(conn->fd, conn->rx, WIRE_TYPE_REPLY, flags, frame, why);
}

/* The reply to request request_id, whose send gave sent. */
static int receive_locked(gpushm_t *conn, uint64_t request_id, int sent, Gpushm__Reply **out,
                          struct client_fds *fds, ProtobufCAllocator *alloc,
                          reply_unpack_fn *unpack, struct reply_hook *hook)
{
  struct wire_frame frame;
  Gpushm__Reply *reply;
  const char *why = NULL;
  int r;

  /* A daemon that hung up (too many clients, say) may have left its reason queued:
   * read it rather than report a bare disconnect. */
  r = recv_reply(conn, sent < 0 ? MSG_DONTWAIT : 0, &frame, &why);
  /* A peer that closed with our request unread makes the kernel report a reset,
   * possibly before the reply it queued first: look once more. */
  if (r == -ECONNRESET)
    r = wire_recv_frame(conn->fd, conn->rx, WIRE_TYPE_REPLY, MSG_DONTWAIT, &frame, &why);
  if (r == -EAGAIN && (sent == 0 || sent == -EAGAIN)) {
    /* Nothing came in time.  A late reply would answer the wrong request, so this
     * connection is done; the daemon releases what it holds when it is closed. */
    conn->broken = true;
    return client_error(GPUSHM_E_TIMEOUT, "no %s from gpushmd within %d ms (stopped, or "
                        "overloaded?)", sent == 0 ? "reply" : "room to send the request",
                        conn->timeout_ms);
  }
  if (r < 0)
    return wire_error(conn, r == -EAGAIN ? -ECONNRESET : r, why);
  if (hook)
    hook->received(hook, &frame);
  reply = unpack(alloc, frame.header.body_len, frame.body);
  if (!reply) {
    wire_close_fds(&frame);
    return wire_error(conn, -EPROTO, "malformed reply body");
  }
  if (reply->request_id != request_id) {
    /* Request id 0: the daemon is ending this connection and says why. */
    int status = reply->request_id == 0 && reply->status > 0 ? -reply->status : GPUSHM_E_PROTO;
    r = client_error(status, "gpushmd: %s",
                     reply->request_id == 0 ? reply->message : "reply to another request");
    conn->broken = true;
    wire_close_fds(&frame);
    gpushm__reply__free_unpacked(reply, alloc);
    return r;
  }
  if (reply->status != 0) {
    /* Statuses are positive on the wire; anything else must not pass for success. */
    r = client_error(reply->status > 0 ? -reply->status : GPUSHM_E_PROTO, "%s", reply->message);
    wire_close_fds(&frame);
    gpushm__reply__free_unpacked(reply, alloc);
    return r;
  }
  if (fds) {
    memcpy(fds->fd, frame.fds, sizeof(int) * frame.n_fds);
    fds->n = frame.n_fds;
  } else {
    wire_close_fds(&frame);
  }
  *out = reply;
  return 0;
}

unsigned client_pending_in_process;

int client_send_pending_locked(gpushm_t *conn, Gpushm__Request *req,
                               struct client_pending_reply *p)
{
  int r, sent;

  if (conn->broken)
    return client_error(GPUSHM_E_DISCONNECTED, "connection to gpushmd was lost");
  if (conn->pending_n >= GPUSHM_LIMIT_PENDING_PER_CONN)
    return client_error(GPUSHM_E_LIMIT, "%u requests are out on this connection already "
                        "(GPUSHM_PENDING_MAX): finish one first", conn->pending_n);
  if ((r = send_locked(conn, req, -1, &sent)) < 0)
    return r;
  if (sent == -EAGAIN) {
    conn->broken = true; /* (as a call's: a request half sent is no conversation) */
    return client_error(GPUSHM_E_TIMEOUT, "no room to send a request to gpushmd within %d ms",
                        conn->timeout_ms);
  }
  if (sent < 0)
    return wire_error(conn, sent, "");
  p->next = NULL;
  p->request_id = req->request_id;
  p->answered = false;
  *conn->pending_tail = p;
  conn->pending_tail = &p->next;
  conn->pending_n++;
  __atomic_add_fetch(&client_pending_in_process, 1, __ATOMIC_RELAXED);
  return 0;
}

void client_pending_settle_locked(gpushm_t *conn, struct client_pending_reply *p)
{
  struct client_saved_error saved;

  if (!conn->pending_head || (p && p->answered))
    return;
  /* a refusal read here is its start's (arrived() keeps it), not this thread's */
  client_save_error(&saved);
  while (conn->pending_head && !(p && p->answered)) {
    struct client_pending_reply *head = conn->pending_head;
    Gpushm__Reply *reply = NULL;
    struct client_fds fds = { .n = 0 };
    int r;

    if (!(conn->pending_head = head->next))
      conn->pending_tail = &conn->pending_head;
    conn->pending_n--;
    /* a connection lost before (or while) this reply came: none will */
    r = conn->broken ? client_error(GPUSHM_E_DISCONNECTED, "connection to gpushmd was lost")
                     : receive_locked(conn, head->request_id, 0, &reply, &fds, NULL,
                                      gpushm__reply__unpack, NULL);
    head->arrived(head, conn, r, r < 0 ? NULL : reply, &fds);
    head->answered = true;
    /* after arrived(): its segment is in the table (or never will be) by now */
    __atomic_sub_fetch(&client_pending_in_process, 1, __ATOMIC_RELEASE);
  }
  client_restore_error(&saved);
}

static int call_locked(gpushm_t *conn, Gpushm__Request *req, int send_fd, Gpushm__Reply **out,
                       struct client_fds *fds, ProtobufCAllocator *alloc, reply_unpack_fn *unpack)
{
  int r, sent;

  if (fds)
    fds->n = 0;
  /* what arrives first answers the requests still out */
  client_pending_settle_locked(conn, NULL);
  if (conn->broken)
    return client_error(GPUSHM_E_DISCONNECTED, "connection to gpushmd was lost");
  if ((r = send_locked(conn, req, send_fd, &sent)) < 0)
    return r;
  /* An open that waits for its name is answered after the wait: the timeout runs from
   * there. */
  if (req->body_case == GPUSHM__REQUEST__BODY_OPEN && req->open->wait_ms && conn->timeout_ms > 0) {
    int64_t ms = (int64_t)conn->timeout_ms + req->open->wait_ms; /* (no int overflow) */
    apply_timeout(conn->fd, ms > INT_MAX ? INT_MAX : (int)ms);
    r = receive_locked(conn, req->request_id, sent, out, fds, alloc, unpack, NULL);
    apply_timeout(conn->fd, conn->timeout_ms);
    return r;
  }
  return receive_locked(conn, req->request_id, sent, out, fds, alloc, unpack, NULL);
}

static int call(gpushm_t *conn, Gpushm__Request *req, Gpushm__Reply **out,
                struct client_fds *fds, ProtobufCAllocator *alloc, reply_unpack_fn *unpack)
{
  int r;

  pthread_mutex_lock(&conn->lock);
  r = call_locked(conn, req, -1, out, fds, alloc, unpack);
  pthread_mutex_unlock(&conn->lock);
  return r;
}

int client_call_alloc(gpushm_t *conn, Gpushm__Request *req, Gpushm__Reply **out,
                      struct client_fds *fds, ProtobufCAllocator *alloc)
{
  return call(conn, req, out, fds, alloc, gpushm__reply__unpack);
}

/* A list walk's next request goes out as soon as the page before it has arrived and
 * its last id is read (list_codec_peek_page), before that page is decoded: the daemon
 * packs the next page while this process decodes the last. */
struct list_hook {
  struct reply_hook hook; /* first: the hook is the walk */
  gpushm_t *conn;
  Gpushm__Request *req;
  uint64_t expect_id;
  bool sent_next;
  int sent;
};

static void send_next_page(struct reply_hook *hook, const struct wire_frame *frame)
{
  struct list_hook *walk = (struct list_hook *)hook;
  uint64_t request_id, last_id;
  bool more;

  if (list_codec_peek_page(frame->body, frame->header.body_len, &request_id, &last_id, &more) &&
      request_id == walk->expect_id && more && last_id > walk->req->list->after_id &&
      frame->n_fds == 0) {
    walk->req->list->after_id = last_id;
    walk->sent_next = send_locked(walk->conn, walk->req, -1, &walk->sent) == 0;
  }
}

int client_call_list_walk(gpushm_t *conn, Gpushm__Request *req, ProtobufCAllocator *arena,
                          int (*take)(void *ctx, Gpushm__Reply *page, uint64_t *after_id),
                          void *ctx)
{
  struct list_hook walk = { .hook = { send_next_page }, .conn = conn, .req = req };
  Gpushm__Reply *page;
  int r, sent;

  pthread_mutex_lock(&conn->lock);
  client_pending_settle_locked(conn, NULL);
  if (conn->broken)
    r = client_error(GPUSHM_E_DISCONNECTED, "connection to gpushmd was lost");
  else
    r = send_locked(conn, req, -1, &sent);
  while (r == 0) {
    uint64_t after_id = req->list->after_id;
    walk.expect_id = req->request_id;
    walk.sent_next = false;
    r = receive_locked(conn, walk.expect_id, sent, &page, NULL, arena, list_codec_unpack_reply,
                       &walk.hook);
    if (r == 0)
      r = take(ctx, page, &after_id);
    if (r == 0 && !walk.sent_next)
      break; /* the last page */
    if (r > 0 && !walk.sent_next) {
      req->list->after_id = after_id;
      r = send_locked(conn, req, -1, &sent);
      continue;
    }
    /* the decode must agree with the peek that asked for the next page */
    if (r > 0 && after_id == req->list->after_id) {
      sent = walk.sent;
      r = 0;
      continue;
    }
    if (r >= 0)
      r = client_error(GPUSHM_E_PROTO, "a list page read two ways differently");
    /* A walk that ends with a request out would take its reply for the next call's. */
    if (walk.sent_next)
      conn->broken = true;
  }
  pthread_mutex_unlock(&conn->lock);
  return r < 0 ? r : 0;
}

int client_call_locked_fd(gpushm_t *conn, Gpushm__Request *req, int send_fd,
                          Gpushm__Reply **out, struct client_fds *fds)
{
  return call_locked(conn, req, send_fd, out, fds, NULL, gpushm__reply__unpack);
}

int client_call(gpushm_t *conn, Gpushm__Request *req, Gpushm__Reply **out,
                struct client_fds *fds)
{
  return client_call_alloc(conn, req, out, fds, NULL);
}

int gpushm_ping(gpushm_t *conn)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__PingRequest body = GPUSHM__PING_REQUEST__INIT;
  Gpushm__Reply *reply;
  int r;

  client_clear_error();
  if (!conn)
    return client_error(GPUSHM_E_INVAL, "conn is NULL");
  req.body_case = GPUSHM__REQUEST__BODY_PING;
  req.ping = &body;
  if ((r = client_call(conn, &req, &reply, NULL)) < 0)
    return r;
  gpushm__reply__free_unpacked(reply, NULL);
  return 0;
}

int client_explain_ipc_failure(gpushm_t *conn)
{
  char driver[200], why[160];

  /* Only the error sibling namespaces give (measured): out of memory stays itself. */
  if (!strstr(gpushm_last_error_message(), "CUDA_ERROR_INVALID_CONTEXT") ||
      !client_ipc_namespace_problem(conn, why, sizeof why))
    return GPUSHM_E_CUDA;
  snprintf(driver, sizeof driver, "%s", gpushm_last_error_message());
  return client_error(GPUSHM_E_UNSUPPORTED, "%s; %s: legacy CUDA IPC does not work between "
                      "sibling PID namespaces (containers): use the cuda-fd backend (gpushmd "
                      "default-backend = cuda-fd)", driver, why);
}

/* SPDX-License-Identifier: MIT */
/* libFuzzer target: everything libgpushm does with what a daemon sends it.
 *
 * A fake daemon on a thread answers each request the library sends with the next
 * chunk of the input: a reply body (a header and the request's id are added unless the
 * chunk says otherwise) with up to two fds (memfds shaped like a status page, a sync
 * control block or plain data, or /dev/null).  It hangs up once the chunks are used
 * up, so no call waits for ever.  The main thread makes the public calls the input's
 * op list names.  Input format: fuzz-format.h.
 *
 * Oracles besides ASan/UBSan/LSan: every request the library sends is a well-formed
 * frame; touching a buffer the library handed out never faults, nor does writing one
 * it calls writable; once every handle is closed and the connection dropped, the
 * library holds no fd and no mapping. */
#include "config.h"
#include "fuzz-format.h"
#include "gpushm-admin.h"
#include "gpushm.pb-c.h"
#include "shm_layout.h"
#include "wire.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
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

/* More than the handle slots plus one: every connection the library can keep open
 * at once gets served. */
#define FAKE_MAX_CONNS 16
#define SLOTS 8
#define MEMFD_NAME "gpushm-fuzz"

struct fake_daemon {
  const uint8_t *data;
  size_t size, pos;
  int conns[FAKE_MAX_CONNS];
  unsigned n_conns;
  int memfds[3]; /* by fuzz_client_fd_kind, made on first use */
};

struct chunk {
  unsigned flags, fds;
  const uint8_t *bytes;
  size_t len;
};

struct slot {
  gpushm_buffer_t *buf;
  bool event;
};

static int listen_fd = -1;
/* main thread -> fake daemon: 's' starts serving an input, 'x' ends it */
static int to_daemon[2] = { -1, -1 };
/* fake daemon -> main thread: the input's connections and memfds are closed */
static int from_daemon[2] = { -1, -1 };
static struct fake_daemon fake;
static int devnull = -1;
/* the fake daemon's; only its thread uses them */
static uint8_t rx[WIRE_RECV_BUF];
static uint8_t tx[WIRE_FRAME_MAX + 16];
/* the main thread's */
static struct slot slots[SLOTS];
static unsigned next_slot;
static bool verbose;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void fail(const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  fprintf(stderr, "fuzz-client: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}

static int memfd_of_kind(struct fake_daemon *d, unsigned kind)
{
  int fd;

  if (kind == FUZZ_C_FD_DEVNULL)
    return devnull;
  if (d->memfds[kind] >= 0)
    return d->memfds[kind];
  /* Sealed like the daemon's: the library refuses objects that could still shrink. */
  if ((fd = memfd_create(MEMFD_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING)) < 0 ||
      ftruncate(fd, kind == FUZZ_C_FD_DATA ? FUZZ_C_DATA_FD_SIZE : 4096) < 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
    fail("memfd: %s", strerror(errno));
  if (kind == FUZZ_C_FD_STATUS_PAGE) {
    struct status_page page = { .magic = STATUS_PAGE_MAGIC };
    if (pwrite(fd, &page, sizeof page, 0) != (ssize_t)sizeof page)
      fail("writing the status page: %s", strerror(errno));
  } else if (kind == FUZZ_C_FD_CONTROL) {
    struct sync_control control = { .magic = SYNC_CONTROL_MAGIC };
    if (pwrite(fd, &control, sizeof control, 0) != (ssize_t)sizeof control)
      fail("writing the control block: %s", strerror(errno));
  }
  d->memfds[kind] = fd;
  return fd;
}

static bool next_chunk(struct fake_daemon *d, struct chunk *c)
{
  size_t len;

  if (d->size - d->pos < 4)
    return false;
  c->flags = d->data[d->pos];
  c->fds = d->data[d->pos + 1];
  len = (size_t)d->data[d->pos + 2] | (size_t)d->data[d->pos + 3] << 8;
  d->pos += 4;
  if (len > d->size - d->pos)
    len = d->size - d->pos;
  c->bytes = d->data + d->pos;
  c->len = len;
  d->pos += len;
  return true;
}

static size_t put_varint(uint8_t *p, uint64_t v)
{
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (uint8_t)v;
  return n;
}

static void bump_unlink_generation(struct fake_daemon *d)
{
  int fd = memfd_of_kind(d, FUZZ_C_FD_STATUS_PAGE);
  off_t at = (off_t)offsetof(struct status_page, unlink_generation);
  uint64_t generation;

  if (pread(fd, &generation, sizeof generation, at) != (ssize_t)sizeof generation)
    fail("reading the status page: %s", strerror(errno));
  generation++;
  if (pwrite(fd, &generation, sizeof generation, at) != (ssize_t)sizeof generation)
    fail("writing the status page: %s", strerror(errno));
}

static void answer(struct fake_daemon *d, int sock, uint64_t request_id, const struct chunk *c)
{
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * 2)];
  } control;
  struct iovec iov = { .iov_base = tx };
  struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
  int fds[2];
  bool reopened[2] = { false, false };
  unsigned n_fds = 0;

  if (c->flags & FUZZ_C_UNLINKED)
    bump_unlink_generation(d);
  if (c->fds & FUZZ_C_FD1)
    fds[n_fds++] = memfd_of_kind(d, FUZZ_C_FD1_KIND(c->fds));
  if (c->fds & FUZZ_C_FD2)
    fds[n_fds++] = memfd_of_kind(d, FUZZ_C_FD2_KIND(c->fds));
  /* A fresh O_RDONLY description, as the daemon sends for read-only opens. */
  for (unsigned k = 0; k < n_fds && (c->fds & FUZZ_C_FDS_READONLY); k++) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fds[k]);
    if ((fds[k] = open(path, O_RDONLY | O_CLOEXEC)) < 0)
      fail("reopening %s: %s", path, strerror(errno));
    reopened[k] = true;
  }

  if (c->flags & FUZZ_C_RAW) {
    memcpy(tx, c->bytes, c->len);
    iov.iov_len = c->len;
  } else {
    uint8_t *body = tx + WIRE_HEADER_SIZE;
    size_t body_len = c->len;
    struct wire_header h = {
      .magic = WIRE_MAGIC,
      .version = GPUSHM_WIRE_VERSION,
      .type = WIRE_TYPE_REPLY,
      .n_fds = n_fds + ((c->flags & FUZZ_C_FD_LIE) ? 1 : 0),
    };
    memcpy(body, c->bytes, c->len);
    /* Field 1 (request_id) once more at the end: protobuf keeps the last value, so
     * the reply answers this request whatever the chunk's own bytes say. */
    if (!(c->flags & FUZZ_C_KEEP_ID)) {
      body[body_len++] = 0x08;
      body_len += put_varint(body + body_len, request_id);
    }
    h.body_len = (uint32_t)body_len;
    memcpy(tx, &h, sizeof h);
    iov.iov_len = WIRE_HEADER_SIZE + body_len;
  }
  if (n_fds) {
    struct cmsghdr *cm;
    memset(&control, 0, sizeof control);
    msg.msg_control = control.buf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
    cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * n_fds);
  }
  /* A failure (the library hung up meanwhile) is the library's to notice. */
  (void)sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  for (unsigned k = 0; k < n_fds; k++)
    if (reopened[k])
      close(fds[k]);
}

static void drop_conn(struct fake_daemon *d, unsigned k)
{
  close(d->conns[k]);
  d->conns[k] = d->conns[--d->n_conns];
}

static void serve(struct fake_daemon *d, unsigned k)
{
  struct wire_frame frame;
  const char *why = NULL;
  Gpushm__Request *req;
  struct chunk c;
  uint64_t request_id;
  int r = wire_recv_frame(d->conns[k], rx, WIRE_TYPE_REQUEST, MSG_DONTWAIT, &frame, &why);

  if (r == -EAGAIN)
    return;
  if (r == -EPROTO)
    fail("the library sent a bad frame: %s", why);
  if (r < 0) {
    drop_conn(d, k); /* the library hung up */
    return;
  }
  if (frame.n_fds)
    fail("the library sent %u fds with a request", frame.n_fds);
  if (!(req = gpushm__request__unpack(NULL, frame.header.body_len, frame.body)))
    fail("the library sent an undecodable request");
  if (req->request_id == 0 || req->body_case == GPUSHM__REQUEST__BODY__NOT_SET)
    fail("the library sent request id %llu, body %d", (unsigned long long)req->request_id,
         (int)req->body_case);
  request_id = req->request_id;
  gpushm__request__free_unpacked(req, NULL);

  if (!next_chunk(d, &c)) {
    drop_conn(d, k);
    return;
  }
  answer(d, d->conns[k], request_id, &c);
  if (c.flags & FUZZ_C_HANGUP)
    drop_conn(d, k);
}

/* One byte over a pipe between the threads.  libFuzzer's -timeout timer interrupts
 * blocking calls (SIGALRM), so they are retried. */
static void pipe_put(int fd, char byte)
{
  ssize_t n;

  while ((n = write(fd, &byte, 1)) < 0 && errno == EINTR)
    ;
  if (n != 1)
    fail("thread handshake: %s", n < 0 ? strerror(errno) : "short write");
}

static char pipe_get(int fd)
{
  char byte;
  ssize_t n;

  while ((n = read(fd, &byte, 1)) < 0 && errno == EINTR)
    ;
  if (n != 1)
    fail("thread handshake: %s", n < 0 ? strerror(errno) : "end of file");
  return byte;
}

/* Serves one input's connections until told to stop, then closes them all. */
static void serve_input(struct fake_daemon *d)
{
  for (;;) {
    struct pollfd pfd[2 + FAKE_MAX_CONNS];
    unsigned n_conns = d->n_conns;

    pfd[0] = (struct pollfd){ .fd = to_daemon[0], .events = POLLIN };
    pfd[1] = (struct pollfd){ .fd = listen_fd, .events = POLLIN };
    for (unsigned k = 0; k < n_conns; k++)
      pfd[2 + k] = (struct pollfd){ .fd = d->conns[k], .events = POLLIN };
    if (poll(pfd, 2 + n_conns, -1) < 0) {
      if (errno == EINTR)
        continue;
      fail("poll: %s", strerror(errno));
    }
    if (pfd[0].revents) {
      if (pipe_get(to_daemon[0]) != 'x')
        fail("fake daemon: bad command");
      break;
    }
    /* Downwards: drop_conn() moves the last connection into the dropped one's place,
     * and the last has been served already. */
    for (unsigned k = n_conns; k-- > 0;)
      if (pfd[2 + k].revents)
        serve(d, k);
    if (pfd[1].revents & POLLIN) {
      int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0 && d->n_conns < FAKE_MAX_CONNS)
        d->conns[d->n_conns++] = fd;
      else if (fd >= 0)
        close(fd);
    }
  }
  while (d->n_conns)
    drop_conn(d, d->n_conns - 1);
  for (unsigned k = 0; k < 3; k++)
    if (d->memfds[k] >= 0)
      close(d->memfds[k]);
}

/* One thread for the whole run: a thread per input leaves glibc's per-thread
 * allocations behind each time, which libFuzzer takes for a leak and re-runs. */
static void *fake_daemon_thread(void *arg)
{
  (void)arg;
  for (;;) {
    if (pipe_get(to_daemon[0]) != 's')
      fail("fake daemon: bad command");
    serve_input(&fake);
    pipe_put(from_daemon[1], 'd');
  }
  return NULL;
}

static void close_slot(unsigned k)
{
  struct slot *s = &slots[k % SLOTS];
  int r;

  if (!s->buf)
    return;
  if (s->event)
    r = gpushm_event_close((gpushm_event_t *)s->buf);
  else
    r = gpushm_buffer_close(s->buf);
  s->buf = NULL;
  if (verbose)
    fprintf(stderr, "fuzz-client: close slot %u = %d %s\n", k % SLOTS, r,
            r ? gpushm_last_error_message() : "");
}

static void keep(gpushm_buffer_t *buf, bool event)
{
  close_slot(next_slot);
  slots[next_slot] = (struct slot){ .buf = buf, .event = event };
  next_slot = (next_slot + 1) % SLOTS;
}

static void touch(const struct slot *s)
{
  volatile uint8_t *p;
  uint64_t size;

  if (!s->buf || s->event || gpushm_buffer_backend(s->buf) != GPUSHM_BACKEND_HOST)
    return;
  p = gpushm_buffer_ptr(s->buf);
  size = gpushm_buffer_size(s->buf);
  if (!p || !size)
    return;
  (void)p[0];
  (void)p[size - 1];
  if (!gpushm_buffer_is_readonly(s->buf)) {
    p[0] = p[0];
    p[size - 1] = p[size - 1];
  }
}

static void accessors(gpushm_t *conn, const struct slot *s)
{
  volatile uint64_t sink = gpushm_instance_id(conn);

  if (s->event) {
    const gpushm_event_t *ev = (const gpushm_event_t *)s->buf;
    const char *name = gpushm_event_name(ev);
    sink += gpushm_event_id(ev) + (name ? strlen(name) : 0);
  } else {
    const char *name = gpushm_buffer_name(s->buf);
    sink += gpushm_buffer_id(s->buf) + gpushm_buffer_size(s->buf) +
            (uint64_t)gpushm_buffer_device(s->buf) + gpushm_buffer_backend(s->buf) +
            (uint64_t)gpushm_buffer_is_readonly(s->buf) + gpushm_buffer_release_seq(s->buf) +
            (name ? strlen(name) : 0);
  }
  (void)sink;
}

/* Every admin accessor, on what the fake daemon sent: strings are read to their end. */
static void read_buffer_info(const gpushm_buffer_info_t *b)
{
  volatile uint64_t sink = gpushm_buffer_info_id(b) + strlen(gpushm_buffer_info_name(b)) +
    gpushm_buffer_info_size(b) + gpushm_buffer_info_allocated(b) + gpushm_buffer_info_kind(b) +
    gpushm_buffer_info_backend(b) + (uint64_t)gpushm_buffer_info_device(b) +
    gpushm_buffer_info_owner_uid(b) + gpushm_buffer_info_owner_gid(b) + gpushm_buffer_info_mode(b) +
    gpushm_buffer_info_lifetime(b) + (uint64_t)gpushm_buffer_info_linked(b) +
    (uint64_t)gpushm_buffer_info_sync(b) + gpushm_buffer_info_refs(b) +
    gpushm_buffer_info_my_refs(b) +
    gpushm_buffer_info_creator_pid(b) + gpushm_buffer_info_created_unix_ms(b) +
    gpushm_buffer_info_holders_total(b);
  uint8_t uuid[16];

  if (gpushm_buffer_info_device_uuid(b, uuid) == 0)
    sink += uuid[15];
  for (size_t h = 0; h <= gpushm_buffer_info_holder_count(b); h++) {
    const gpushm_holder_t *holder = gpushm_buffer_info_holder(b, h);
    sink += gpushm_holder_client_id(holder) + gpushm_holder_pid(holder) +
            gpushm_holder_uid(holder) + gpushm_holder_refs(holder);
  }
  (void)sink;
}

static void read_client_info(const gpushm_client_info_t *c)
{
  volatile uint64_t sink = gpushm_client_info_client_id(c) + gpushm_client_info_pid(c) +
    gpushm_client_info_uid(c) + gpushm_client_info_gid(c) + strlen(gpushm_client_info_name(c)) +
    gpushm_client_info_connected_unix_ms(c) + gpushm_client_info_buffers_held(c) +
    gpushm_client_info_bytes_held(c) + (uint64_t)gpushm_client_info_admin(c);
  (void)sink;
}

static void read_stats(const gpushm_stats_t *s)
{
  volatile uint64_t sink = strlen(gpushm_stats_daemon_version(s)) + gpushm_stats_instance_id(s) +
    gpushm_stats_uptime_ms(s) + gpushm_stats_clients(s) + gpushm_stats_buffers(s) +
    gpushm_stats_buffers_linked(s) + gpushm_stats_bytes_allocated(s) + gpushm_stats_requests(s) +
    gpushm_stats_request_errors(s) + gpushm_stats_protocol_errors(s) +
    gpushm_stats_clients_dropped(s) + gpushm_stats_open_fds(s);
  uint8_t uuid[16];

  for (size_t i = 0; i <= gpushm_stats_device_count(s); i++) {
    const gpushm_device_stats_t *d = gpushm_stats_device(s, i);
    sink += (uint64_t)gpushm_device_stats_ordinal(d) + strlen(gpushm_device_stats_name(d)) +
            gpushm_device_stats_total_memory(d) + gpushm_device_stats_free_memory(d);
    if (gpushm_device_stats_uuid(d, uuid) == 0)
      sink += uuid[0];
  }
  for (size_t i = 0; i <= gpushm_stats_request_type_count(s); i++) {
    const gpushm_request_stats_t *rq = gpushm_stats_request_type(s, i);
    sink += strlen(gpushm_request_stats_type(rq)) + gpushm_request_stats_count(rq) +
            gpushm_request_stats_errors(rq) + gpushm_request_stats_latency_sum_ns(rq);
    for (size_t b = 0; b <= gpushm_request_stats_latency_bucket_count(rq); b++)
      sink += gpushm_request_stats_latency_le(rq, b);
  }
  for (size_t b = 0; b <= gpushm_stats_latency_bound_count(s); b++)
    sink += gpushm_stats_latency_bound_ns(s, b);
  for (size_t i = 0; i <= gpushm_stats_opens_count(s); i++) {
    const gpushm_open_stats_t *o = gpushm_stats_opens(s, i);
    sink += gpushm_open_stats_kind(o) + gpushm_open_stats_backend(o) +
            (uint64_t)gpushm_open_stats_device(o) + gpushm_open_stats_opens(o) +
            gpushm_open_stats_creates(o);
  }
  for (size_t i = 0; i <= gpushm_stats_usage_count(s); i++) {
    const gpushm_usage_t *u = gpushm_stats_usage(s, i);
    sink += gpushm_usage_kind(u) + gpushm_usage_backend(u) + (uint64_t)gpushm_usage_device(u) +
            gpushm_usage_buffers(u) + gpushm_usage_bytes(u);
  }
  (void)sink;
}

static const char *const op_names[] = {
  "ping", "open", "open_id", "create", "close", "unlink", "list", "stats", "clients",
  "event", "sync", "touch", "reconnect", "accessors", "close_all", "nop",
};

static void run_op(gpushm_t **conn, unsigned op, unsigned arg)
{
  const char *name = (arg & 1) ? "b" : "a";
  gpushm_buffer_t *buf = NULL;
  int r = 0;

  switch (op) {
  case FUZZ_C_OP_PING:
    r = gpushm_ping(*conn);
    break;
  case FUZZ_C_OP_OPEN:
    if ((r = gpushm_buffer_open(*conn, name, (arg & 2) ? GPUSHM_OPEN_READONLY : 0, &buf)) == 0)
      keep(buf, false);
    break;
  case FUZZ_C_OP_OPEN_ID:
    if ((r = gpushm_buffer_open_id(*conn, 1 + (arg & 3), (arg & 4) ? GPUSHM_OPEN_READONLY : 0,
                                   &buf)) == 0)
      keep(buf, false);
    break;
  case FUZZ_C_OP_CREATE: {
    gpushm_create_opts_t opts;
    gpushm_create_opts_init(&opts);
    opts.mode = 0640;
    opts.flags = ((arg & 4) ? GPUSHM_CREATE_SYNC : 0) | ((arg & 8) ? GPUSHM_CREATE_OPEN_EXISTING : 0);
    if ((r = gpushm_buffer_create(*conn, name, (arg & 2) ? 4096 : 100, &opts, &buf)) == 0)
      keep(buf, false);
    break;
  }
  case FUZZ_C_OP_CLOSE:
    close_slot(arg);
    break;
  case FUZZ_C_OP_UNLINK:
    r = gpushm_unlink(*conn, name);
    break;
  case FUZZ_C_OP_LIST: {
    gpushm_buffer_list_t *list;
    if ((r = gpushm_list(*conn, ((arg & 1) ? GPUSHM_LIST_ALL : 0) | ((arg & 2) ? 0x80 : 0),
                         &list)) == 0) {
      for (size_t i = 0; i <= gpushm_buffer_list_count(list); i++) /* one past: NULL */
        read_buffer_info(gpushm_buffer_list_get(list, i));
      gpushm_buffer_list_free(list);
    }
    break;
  }
  case FUZZ_C_OP_STATS: {
    gpushm_stats_t *stats;
    if ((r = gpushm_stats(*conn, &stats)) == 0) {
      read_stats(stats);
      gpushm_stats_free(stats);
    }
    break;
  }
  case FUZZ_C_OP_CLIENTS: {
    gpushm_client_list_t *clients;
    if ((r = gpushm_clients(*conn, &clients)) == 0) {
      for (size_t i = 0; i <= gpushm_client_list_count(clients); i++)
        read_client_info(gpushm_client_list_get(clients, i));
      gpushm_client_list_free(clients);
    }
    break;
  }
  case FUZZ_C_OP_EVENT: {
    gpushm_event_t *ev = NULL;
    if (arg & 1)
      r = gpushm_event_create(*conn, name, NULL, &ev);
    else
      r = gpushm_event_open(*conn, name, &ev);
    if (r == 0)
      keep((gpushm_buffer_t *)ev, true);
    break;
  }
  case FUZZ_C_OP_SYNC: {
    const struct slot *s = &slots[arg & 7];
    uint64_t seq;
    if (!s->buf)
      break;
    if (s->event && (arg & 8))
      r = gpushm_event_record((gpushm_event_t *)s->buf, NULL);
    else if (s->event)
      r = gpushm_event_wait((gpushm_event_t *)s->buf, NULL);
    else if (arg & 8)
      r = gpushm_buffer_release(s->buf, NULL, &seq);
    else
      r = gpushm_buffer_acquire(s->buf, NULL, arg & 7, 0); /* never waits */
    break;
  }
  case FUZZ_C_OP_TOUCH:
    touch(&slots[arg % SLOTS]);
    break;
  case FUZZ_C_OP_RECONNECT:
    gpushm_disconnect(*conn);
    *conn = NULL;
    r = gpushm_connect(NULL, "fuzz", conn);
    break;
  case FUZZ_C_OP_ACCESSORS:
    if (slots[arg % SLOTS].buf)
      accessors(*conn, &slots[arg % SLOTS]);
    break;
  case FUZZ_C_OP_CLOSE_ALL:
    for (unsigned k = 0; k < SLOTS; k++)
      close_slot(k);
    break;
  default:
    (void)gpushm_strerror(-(int)arg);
    (void)gpushm_last_error_message();
    break;
  }
  if (verbose)
    fprintf(stderr, "fuzz-client: %s(%u) = %d %s\n", op_names[op], arg, r,
            r ? gpushm_last_error_message() : "");
}

/* Mappings of the fake daemon's memfds the library still has. */
static unsigned count_memfd_maps(void)
{
  FILE *maps = fopen("/proc/self/maps", "re");
  char line[512];
  unsigned n = 0;

  if (!maps)
    fail("/proc/self/maps: %s", strerror(errno));
  while (fgets(line, sizeof line, maps))
    if (strstr(line, "/memfd:" MEMFD_NAME))
      n++;
  fclose(maps);
  return n;
}

/* The fds open now; with show, each one and what it is, on stderr (a leak's report). */
static unsigned list_fds(bool show)
{
  DIR *dir = opendir("/proc/self/fd");
  struct dirent *e;
  unsigned n = 0;

  if (!dir)
    fail("/proc/self/fd: %s", strerror(errno));
  while ((e = readdir(dir))) {
    char path[300], target[256];
    ssize_t len;
    if (e->d_name[0] == '.')
      continue;
    n++;
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    if (show && (len = readlink(path, target, sizeof target - 1)) > 0) {
      target[len] = '\0';
      fprintf(stderr, "fuzz-client: fd %s: %s\n", e->d_name, target);
    }
  }
  closedir(dir);
  return n;
}

static unsigned count_fds(void)
{
  return list_fds(false);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  const char *tmp = getenv("TMPDIR");
  char sock_dir[96], sock_path[64];
  pthread_t thread;
  int path_fd;

  (void)argc;
  (void)argv;
  signal(SIGPIPE, SIG_IGN);
  verbose = getenv("GPUSHM_FUZZ_VERBOSE") != NULL;
  /* Device memory is out of scope, and the target must not behave differently on a
   * host with a GPU: CUDA imports fail as "unsupported". */
  setenv("GPUSHM_CUDA_LIBRARY", "/nonexistent/libcuda-fuzz.so.1", 1);
  /* The library connects by path.  Through an O_PATH descriptor's /proc link the
   * socket stays reachable after its file and directory are removed, so nothing is
   * left on disk, even when a finding aborts the process. */
  snprintf(sock_dir, sizeof sock_dir, "%s/gpushm-fuzz-XXXXXX",
           tmp && *tmp && strlen(tmp) < 64 ? tmp : "/tmp");
  if (!mkdtemp(sock_dir))
    fail("mkdtemp %s: %s", sock_dir, strerror(errno));
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s/sock", sock_dir);
  listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&addr, sizeof addr) < 0 ||
      listen(listen_fd, 64) < 0 || (path_fd = open(addr.sun_path, O_PATH | O_CLOEXEC)) < 0)
    fail("listening on %s: %s", addr.sun_path, strerror(errno));
  unlink(addr.sun_path);
  rmdir(sock_dir);
  snprintf(sock_path, sizeof sock_path, "/proc/self/fd/%d", path_fd);
  /* gpushm_connect(NULL, ...) takes the path from here, as applications do */
  setenv("GPUSHM_SOCKET", sock_path, 1);
  if (pipe2(to_daemon, O_CLOEXEC) < 0 || pipe2(from_daemon, O_CLOEXEC) < 0 ||
      (devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
    fail("setup: %s", strerror(errno));
  if (pthread_create(&thread, NULL, fake_daemon_thread, NULL) != 0)
    fail("pthread_create");
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  unsigned fds_before = count_fds(), n_ops;
  gpushm_t *conn = NULL;
  const uint8_t *ops;
  int r;

  if (size < 1)
    return 0;
  n_ops = data[0] % (FUZZ_C_MAX_OPS + 1);
  if (n_ops > size - 1)
    n_ops = (unsigned)(size - 1);
  ops = data + 1;
  fake = (struct fake_daemon){ .data = ops + n_ops, .size = size - 1 - n_ops,
                               .memfds = { -1, -1, -1 } };
  pipe_put(to_daemon[1], 's');

  r = gpushm_connect(NULL, "fuzz", &conn);
  if (verbose)
    fprintf(stderr, "fuzz-client: connect = %d %s\n", r, r ? gpushm_last_error_message() : "");
  for (unsigned i = 0; i < n_ops; i++)
    run_op(&conn, ops[i] & 0x0f, ops[i] >> 4);
  for (unsigned k = 0; k < SLOTS; k++)
    close_slot(k);
  next_slot = 0;
  gpushm_disconnect(conn);

  pipe_put(to_daemon[1], 'x');
  pipe_get(from_daemon[0]);
  if (count_fds() != fds_before)
    fail("%u fds open after the input, %u before", list_fds(true), fds_before);
  if (count_memfd_maps() != 0)
    fail("%u mappings of daemon memory left after every handle was closed", count_memfd_maps());
  return 0;
}

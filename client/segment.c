/* SPDX-License-Identifier: MIT */
/* Segments on the client side: the process-wide table of mapped segments.
 *
 * A carved buffer lies in a segment, an allocation that holds buffers of one permission
 * class (docs/segments.md).  The process maps a segment once per access mode (and, for
 * device memory, once per map device), whichever connection and buffer brought it;
 * later buffers in it cost one round trip and no driver call.  The daemon counts the
 * mapping against the one connection it was sent over (seg->conn) and frees a segment
 * only once no buffer lies in it and nobody maps it, so an unmap is always followed by
 * an Unmap request on that connection.
 *
 * Races with the daemon's count: a reply saying "this connection maps segment N
 * already" must find N here.  Every change of what a connection maps happens with that
 * connection's lock held — the open that maps it (its reply is acted on before the lock
 * is let go), and the eviction that unmaps it and says so — so on each connection the
 * daemon's count and this table agree at every request.  Lock order: conn->lock, then
 * seg_lock; never seg_lock with the buffer cache's lock. */
#include "config.h"
#include "error.h"
#include "conn.h"
#include "device.h"
#include "segment.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SEG_BUCKETS 256u

struct client_segment {
  struct client_segment *next; /* hash chain */
  struct client_segment *lru_prev, *lru_next; /* the idle list, while idle */
  uint64_t instance_id, id;
  bool read_only;
  bool evicting; /* chosen for eviction; a lookup that finds it takes it back */
  gpushm_backend_t backend;
  uint64_t size;
  gpushm_t *conn; /* the daemon counts the mapping against it; a reference is held */
  unsigned users; /* open buffers in it */
  void *host;
  int home;            /* device memory: this process's ordinal of its device */
  uint64_t import;     /* cuda-fd: the imported allocation handle */
  /* cuda-fd: the segment's fd, kept for graphics importers; read-only host memory: kept
   * for private views of it (gpushm_buffer_dlpack()); else -1 */
  int fd;
  uint8_t handle[64];  /* cuda-ipc: the handle bytes */
  size_t handle_len;
  void *dev[GPUSHM_LIMIT_DEVICES]; /* by map device */
};

static pthread_mutex_t seg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct client_segment *table[SEG_BUCKETS];
static struct client_segment *idle_head, *idle_tail; /* most recently used first */
static unsigned n_idle;
/* A forked child's view of its parent's segments: kept reachable, never used. */
static struct client_segment *inherited;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void seg_prefork(void)
{
  pthread_mutex_lock(&seg_lock);
}

static void seg_postfork_parent(void)
{
  pthread_mutex_unlock(&seg_lock);
}

/* As the buffer cache: the child talks on none of its parent's connections. */
static void seg_postfork_child(void)
{
  for (unsigned i = 0; i < SEG_BUCKETS; i++) {
    for (struct client_segment *s = table[i], *next; s; s = next) {
      next = s->next;
      s->next = inherited;
      inherited = s;
    }
    table[i] = NULL;
  }
  idle_head = idle_tail = NULL;
  n_idle = 0;
  client_pending_in_process = 0; /* the parent's: never answered here */
  pthread_mutex_unlock(&seg_lock);
}

static void register_atfork(void)
{
  pthread_atfork(seg_prefork, seg_postfork_parent, seg_postfork_child);
}

static unsigned bucket(uint64_t instance_id, uint64_t id)
{
  return (unsigned)((id ^ instance_id) * 0x9e3779b97f4a7c15ull >> 56) % SEG_BUCKETS;
}

static void idle_remove(struct client_segment *s)
{
  *(s->lru_prev ? &s->lru_prev->lru_next : &idle_head) = s->lru_next;
  *(s->lru_next ? &s->lru_next->lru_prev : &idle_tail) = s->lru_prev;
  s->lru_prev = s->lru_next = NULL;
  n_idle--;
}

static void idle_push(struct client_segment *s)
{
  s->lru_prev = NULL;
  s->lru_next = idle_head;
  *(idle_head ? &idle_head->lru_prev : &idle_tail) = s;
  idle_head = s;
  n_idle++;
}

static struct client_segment *lookup(uint64_t instance_id, uint64_t id, bool read_only)
{
  for (struct client_segment *s = table[bucket(instance_id, id)]; s; s = s->next)
    if (s->id == id && s->instance_id == instance_id && s->read_only == read_only)
      return s;
  return NULL;
}

static void segment_table_remove(struct client_segment *seg)
{
  struct client_segment **p = &table[bucket(seg->instance_id, seg->id)];
  while (*p != seg)
    p = &(*p)->next;
  *p = seg->next;
}

/* Every mapping of it goes; returns the first failure. */
static int unmap_all(struct client_segment *seg)
{
  int r = 0, r2;

  if (seg->backend == GPUSHM_BACKEND_HOST) {
    if (seg->host)
      munmap(seg->host, seg->size);
    seg->host = NULL;
    if (seg->fd >= 0) /* (a read-only one's, kept for private views) */
      close(seg->fd);
    seg->fd = -1;
    return 0;
  }
  for (int d = 0; d < (int)GPUSHM_LIMIT_DEVICES; d++) {
    if (!seg->dev[d])
      continue;
    r2 = seg->backend == GPUSHM_BACKEND_CUDA_FD ? client_cuda_fd_unmap(seg->dev[d], seg->size, d)
                                                : client_cuda_close_ipc(seg->dev[d], d);
    r = r < 0 ? r : r2;
    seg->dev[d] = NULL;
  }
  if (seg->import && (r2 = client_cuda_fd_release(seg->import)) < 0 && r == 0)
    r = r2;
  seg->import = 0;
  if (seg->fd >= 0)
    close(seg->fd);
  seg->fd = -1;
  return r;
}

/* Tells the daemon, on the connection the mapping was counted against (its lock held). */
static void send_unmap_locked(gpushm_t *conn, uint64_t id, bool read_only)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__UnmapRequest body = GPUSHM__UNMAP_REQUEST__INIT;

  body.segment_id = id;
  body.read_only = read_only;
  req.body_case = GPUSHM__REQUEST__BODY_UNMAP;
  req.unmap = &body;
  (void)client_send_oneway_locked(conn, &req); /* a lost connection drops the count anyway */
}

void client_segment_attach_refused(gpushm_t *conn, uint64_t segment_id, bool read_only)
{
  send_unmap_locked(conn, segment_id, read_only);
}

void client_segment_unuse(struct client_segment *seg)
{
  pthread_mutex_lock(&seg_lock);
  if (--seg->users == 0)
    idle_push(seg);
  pthread_mutex_unlock(&seg_lock);
}

/* Unmaps a segment chosen for eviction, unless a lookup took it back meanwhile. */
static void evict(struct client_segment *seg)
{
  gpushm_t *conn = seg->conn;

  pthread_mutex_lock(&conn->lock);
  pthread_mutex_lock(&seg_lock);
  if (seg->evicting && !seg->users &&
      __atomic_load_n(&client_pending_in_process, __ATOMIC_ACQUIRE)) {
    /* A reply on its way may say "you map it already" (the daemon counted it before the
     * unmap would reach it): kept idle until the next put, past the limit meanwhile. */
    seg->evicting = false;
    idle_push(seg);
  }
  if (!seg->evicting || seg->users) {
    pthread_mutex_unlock(&seg_lock);
    pthread_mutex_unlock(&conn->lock);
    return;
  }
  segment_table_remove(seg);
  pthread_mutex_unlock(&seg_lock);
  unmap_all(seg);
  send_unmap_locked(conn, seg->id, seg->read_only);
  pthread_mutex_unlock(&conn->lock);
  client_conn_unref(conn);
  free(seg);
}

/* Marks idle segments past the limit (and all of conn's, when given) for eviction;
 * returns them chained through lru_next.  Under seg_lock. */
static struct client_segment *choose_victims(const gpushm_t *conn)
{
  struct client_segment *victims = NULL;

  for (struct client_segment *s = idle_tail, *prev; s; s = prev) {
    prev = s->lru_prev;
    if (!(conn ? s->conn == conn
               : n_idle > GPUSHM_LIMIT_IDLE_SEGMENTS ||
                   __atomic_load_n(&s->conn->user_gone, __ATOMIC_ACQUIRE)))
      continue;
    idle_remove(s);
    s->evicting = true;
    s->lru_next = victims;
    victims = s;
  }
  return victims;
}

static void evict_all(struct client_segment *victims)
{
  while (victims) {
    struct client_segment *next = victims->lru_next;
    victims->lru_next = NULL;
    evict(victims);
    victims = next;
  }
}

void client_segment_put(struct client_segment *seg)
{
  struct client_segment *victims = NULL;

  pthread_mutex_lock(&seg_lock);
  if (--seg->users == 0) {
    if (__atomic_load_n(&seg->conn->user_gone, __ATOMIC_ACQUIRE)) {
      /* Its connection was dropped by the user: nothing will reopen through it. */
      seg->evicting = true;
      victims = seg;
    } else {
      idle_push(seg);
      victims = choose_victims(NULL);
    }
  }
  pthread_mutex_unlock(&seg_lock);
  evict_all(victims);
}

void client_segment_trim(void)
{
  struct client_segment *victims;

  pthread_mutex_lock(&seg_lock);
  victims = choose_victims(NULL);
  pthread_mutex_unlock(&seg_lock);
  evict_all(victims);
}

void client_segment_disconnect(gpushm_t *conn)
{
  struct client_segment *victims;

  pthread_mutex_lock(&seg_lock);
  victims = choose_victims(conn);
  pthread_mutex_unlock(&seg_lock);
  evict_all(victims);
}

static int map_host_segment(struct client_segment *seg, int fd)
{
  struct stat st;
  void *p;

  /* A short object, or one that could still be shrunk, would SIGBUS on access. */
  if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < seg->size || !client_fd_sealed(fd))
    return client_error(GPUSHM_E_PROTO, "shared memory segment is smaller than the daemon says "
                        "or not sealed against shrinking");
  p = mmap(NULL, seg->size, PROT_READ | (seg->read_only ? 0 : PROT_WRITE), MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return client_error(errno == ENOMEM ? GPUSHM_E_NOMEM : GPUSHM_E_IO,
                        "mapping a shared memory segment: %s", strerror(errno));
  seg->host = p;
  return 0;
}

/* Maps seg for devices->map (already resolved) from fds (its first mapping) or from
 * what the process has of it. */
static int map_device_segment(struct client_segment *seg, const struct client_fds *fds,
                              const Gpushm__OpenReply *open, const struct client_devices *devices)
{
  const Gpushm__BufferInfo *info = open->info;
  struct client_devices got;
  int r;

  if (seg->dev[devices->map])
    return 0;
  if (seg->backend == GPUSHM_BACKEND_CUDA_FD) {
    if (!seg->import) {
      /* The fd that came, or the one kept when a graphics open mapped it first. */
      int fd = fds->n == 1 ? fds->fd[0] : seg->fd;
      if (fd < 0 || fds->n > 1)
        return client_error(GPUSHM_E_PROTO, "daemon sent %u fds for a cuda-fd segment", fds->n);
      if ((r = client_cuda_fd_import(fd, devices->map, &seg->import)) < 0)
        return r;
    }
    return client_cuda_fd_map(seg->import, seg->size, seg->read_only, devices->map,
                              &seg->dev[devices->map]);
  }
  r = client_cuda_import_ipc(seg->handle, seg->handle_len, info->device_uuid.data,
                             info->device_uuid.len, info->device, devices->map,
                             &seg->dev[devices->map], &got);
  return r == GPUSHM_E_CUDA ? client_explain_ipc_failure(seg->conn) : r;
}

static int check_reply(const Gpushm__OpenReply *open, gpushm_backend_t backend)
{
  const Gpushm__BufferInfo *info = open->info;

  if (open->has_control || open->segment_size == 0 || open->segment_size > SIZE_MAX ||
      open->segment_offset > open->segment_size ||
      info->size > open->segment_size - open->segment_offset)
    return client_error(GPUSHM_E_PROTO, "daemon sent a malformed carved buffer (%llu bytes at "
                        "%llu of a %llu-byte segment)", (unsigned long long)info->size,
                        (unsigned long long)open->segment_offset,
                        (unsigned long long)open->segment_size);
  if (backend != GPUSHM_BACKEND_HOST && backend != GPUSHM_BACKEND_CUDA_FD &&
      backend != GPUSHM_BACKEND_CUDA_IPC)
    return client_error(GPUSHM_E_UNSUPPORTED, "backend %d is not supported by this library",
                        (int)backend);
  if (backend == GPUSHM_BACKEND_CUDA_IPC && open->segment_attached &&
      open->ipc_handle.len > sizeof ((struct client_segment *)NULL)->handle)
    return client_error(GPUSHM_E_PROTO, "daemon sent an IPC handle of %zu bytes",
                        open->ipc_handle.len);
  return 0;
}

static struct client_segment *new_segment(gpushm_t *conn, const Gpushm__OpenReply *open,
                                          gpushm_backend_t backend, bool read_only)
{
  struct client_segment *seg = calloc(1, sizeof *seg);

  if (!seg)
    return NULL;
  seg->instance_id = conn->instance_id;
  seg->id = open->info->segment_id;
  seg->read_only = read_only;
  seg->backend = backend;
  seg->size = open->segment_size;
  seg->conn = conn;
  seg->home = -1;
  seg->fd = -1;
  if (backend == GPUSHM_BACKEND_CUDA_IPC) {
    memcpy(seg->handle, open->ipc_handle.data, open->ipc_handle.len);
    seg->handle_len = open->ipc_handle.len;
  }
  return seg;
}

int client_segment_attach(gpushm_t *conn, const Gpushm__OpenReply *open, bool read_only,
                          struct client_fds *fds, int map_request, struct client_segment **out,
                          void **ptr, struct client_devices *devices)
{
  const Gpushm__BufferInfo *info = open->info;
  gpushm_backend_t backend = client_backend_of_wire(info->backend);
  struct client_segment *seg;
  bool fresh = false;
  int r;

  pthread_once(&atfork_once, register_atfork);
  if ((r = check_reply(open, backend)) < 0) {
    client_close_fds(fds);
    return r;
  }
  devices->home = devices->map = -1;
  if (backend == GPUSHM_BACKEND_CUDA_IPC && map_request == GPUSHM_DEVICE_NONE) {
    client_close_fds(fds);
    if (open->segment_attached)
      send_unmap_locked(conn, info->segment_id, read_only);
    return client_error(GPUSHM_E_UNSUPPORTED, "cuda-ipc memory imports into no graphics API: "
                        "open it with a CUDA map device");
  }
  if (map_request == GPUSHM_DEVICE_NONE)
    devices->home = devices->map = GPUSHM_DEVICE_NONE;
  else if (backend != GPUSHM_BACKEND_HOST &&
      (r = client_cuda_resolve(info->device_uuid.data, info->device_uuid.len, info->device,
                               map_request, devices)) < 0) {
    client_close_fds(fds);
    if (open->segment_attached)
      send_unmap_locked(conn, info->segment_id, read_only);
    return r;
  }

  pthread_mutex_lock(&seg_lock);
  seg = lookup(conn->instance_id, info->segment_id, read_only);
  if (seg) {
    if (seg->users++ == 0 && !seg->evicting)
      idle_remove(seg);
    seg->evicting = false;
  }
  pthread_mutex_unlock(&seg_lock);

  if (seg && open->segment_attached) {
    /* Sent again over another connection: this process maps it already. */
    client_close_fds(fds);
    if (seg->conn != conn)
      send_unmap_locked(conn, info->segment_id, read_only);
  } else if (!seg && !open->segment_attached) {
    client_close_fds(fds);
    return client_error(GPUSHM_E_PROTO, "daemon says this connection maps segment %llu, which "
                        "this process does not", (unsigned long long)info->segment_id);
  } else if (!seg) {
    if (!(seg = new_segment(conn, open, backend, read_only))) {
      client_close_fds(fds);
      send_unmap_locked(conn, info->segment_id, read_only);
      return client_error(GPUSHM_E_NOMEM, "out of memory");
    }
    seg->users = 1;
    seg->home = devices->home;
    fresh = true;
    if (backend == GPUSHM_BACKEND_HOST) {
      r = fds->n == 1 ? map_host_segment(seg, fds->fd[0])
                      : client_error(GPUSHM_E_PROTO, "daemon sent %u fds for a host segment",
                                     fds->n);
      if (r == 0 && read_only && (seg->fd = fcntl(fds->fd[0], F_DUPFD_CLOEXEC, 3)) < 0)
        r = client_error(errno == EMFILE ? GPUSHM_E_LIMIT : GPUSHM_E_IO, "keeping a segment's "
                         "fd: %s", strerror(errno));
    } else if (backend == GPUSHM_BACKEND_CUDA_FD) {
      /* Kept whoever opens first: a later graphics open of another slot in it gets no fd
       * of its own (this process maps the segment already, as the daemon counts it). */
      if (fds->n != 1)
        r = client_error(GPUSHM_E_PROTO, "daemon sent %u fds for a cuda-fd segment", fds->n);
      else if ((seg->fd = fcntl(fds->fd[0], F_DUPFD_CLOEXEC, 3)) < 0)
        r = client_error(errno == EMFILE ? GPUSHM_E_LIMIT : GPUSHM_E_IO, "keeping a segment's "
                         "fd: %s", strerror(errno));
    }
  }
  if (r == 0 && backend != GPUSHM_BACKEND_HOST && map_request != GPUSHM_DEVICE_NONE) {
    /* A segment in the table may be mapped for this device by another thread (of
     * another connection) right now: one of them maps it. */
    if (!fresh)
      pthread_mutex_lock(&seg_lock);
    r = map_device_segment(seg, fds, open, devices);
    if (!fresh)
      pthread_mutex_unlock(&seg_lock);
  }
  client_close_fds(fds);
  if (r < 0) {
    if (fresh) {
      /* Never entered in the table: nobody else can have it. */
      unmap_all(seg);
      send_unmap_locked(conn, seg->id, read_only);
      free(seg);
    } else {
      client_segment_unuse(seg);
    }
    return r;
  }
  if (fresh) {
    client_conn_ref(conn);
    pthread_mutex_lock(&seg_lock);
    seg->next = table[bucket(seg->instance_id, seg->id)];
    table[bucket(seg->instance_id, seg->id)] = seg;
    pthread_mutex_unlock(&seg_lock);
  }
  *ptr = backend == GPUSHM_BACKEND_HOST ? (char *)seg->host + open->segment_offset
         : map_request == GPUSHM_DEVICE_NONE ? NULL
                                             : (char *)seg->dev[devices->map] + open->segment_offset;
  *out = seg;
  return 0;
}

int client_segment_fd(const struct client_segment *seg)
{
  return seg->fd;
}

uint64_t client_segment_size(const struct client_segment *seg)
{
  return seg->size;
}

void *client_segment_host(const struct client_segment *seg)
{
  return seg->host;
}

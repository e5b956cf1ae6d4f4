/* SPDX-License-Identifier: MIT */
/* Buffers: the handles callers hold and the mappings behind them.
 *
 * A mapping (struct client_mapping) is what this process maps of one object: per daemon
 * instance, object, access and map device, shared by every connection's handle of it
 * (CUDA maps a handle once per context and process).  A handle (gpushm_buffer_t) is one
 * connection's opens of one mapping and holds that connection's daemon reference: an
 * open through a connection that has a handle costs no round trip; through another
 * connection, one round trip (a reference of its own) and no driver call.  So what
 * happens to one connection (an admin's disconnect, a timeout) leaves the handles of the
 * others alone, and two parts of one process share memory, never references.  The last
 * handle of a mapping unmaps it and then releases its reference: unmap before release,
 * always, so that the daemon never frees memory this process still maps. */
#include "config.h"
#include "error.h"
#include "conn.h"
#include "device.h"
#include "segment.h"
#include "buffer.h"
#include "timeline_page.h"
#include "formats.h"
#include "shm_layout.h"
#include "hash_table.h"
#include "importers.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

/* One lock for the handle tables (every connection's), the mapping table and the
 * counts in both: an open is a lookup in them, and a fork must find them consistent.
 * Handles live in their connection's tables (conn->handles_by_id, _by_name); only the
 * mappings are the process's, since CUDA maps an import once per process. */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hash_table mappings;
/* Connections with handles, for a fork to find them all (under the cache lock). */
static gpushm_t *conns_with_handles;
/* A forked child's view of its parent's handles and mappings: kept reachable, never
 * used. */
static struct gpushm_buffer *inherited_handles;
static struct client_mapping *inherited_mappings;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
/* Forks this process came through as the child: a pipelined start made before one is
 * the parent's (its reply would come on the parent's socket). */
static unsigned forks_here;

#define HANDLE_OF_ID(l) ((struct gpushm_buffer *)((char *)(l) - offsetof(struct gpushm_buffer, by_id)))
#define HANDLE_OF_NAME(l) \
  ((struct gpushm_buffer *)((char *)(l) - offsetof(struct gpushm_buffer, by_name)))
#define MAPPING_OF(l) ((struct client_mapping *)((char *)(l) - offsetof(struct client_mapping, link)))

static void cache_prefork(void)
{
  pthread_mutex_lock(&cache_lock);
}

static void cache_postfork_parent(void)
{
  pthread_mutex_unlock(&cache_lock);
}

/* Empties a table into a list of what it held (its entries' links reused). */
static struct hash_link *drain_table(struct hash_table *t)
{
  struct hash_link *all = NULL;
  size_t n = t->buckets ? t->n_buckets : 1;
  struct hash_link **b = t->buckets ? t->buckets : &t->first;

  for (size_t i = 0; i < n; i++)
    for (struct hash_link *l = b[i], *next; l; l = next) {
      next = l->next;
      l->next = all;
      all = l;
    }
  hash_table_free(t);
  return all;
}

/* The child shares its parent's sockets, which it must not talk on: it starts with
 * empty tables.  Its inherited mappings stay until it exits; the entries are parked
 * where they stay reachable rather than leaked. */
static void cache_postfork_child(void)
{
  for (gpushm_t *c = conns_with_handles, *next; c; c = next) {
    next = c->handles_next;
    hash_table_free(&c->handles_by_name);
    for (struct hash_link *l = drain_table(&c->handles_by_id), *n; l; l = n) {
      struct gpushm_buffer *h = HANDLE_OF_ID(l);
      n = l->next;
      h->inherited = true;
      h->inherited_next = inherited_handles;
      inherited_handles = h;
    }
    c->handles_next = c->handles_prev = NULL;
    c->handles_listed = false;
  }
  conns_with_handles = NULL;
  forks_here++;
  for (struct hash_link *l = drain_table(&mappings), *n; l; l = n) {
    struct client_mapping *m = MAPPING_OF(l);
    n = l->next;
    m->inherited = true;
    m->inherited_next = inherited_mappings;
    inherited_mappings = m;
  }
  pthread_mutex_unlock(&cache_lock);
}

static void register_atfork(void)
{
  pthread_atfork(cache_prefork, cache_postfork_parent, cache_postfork_child);
}

static enum client_kind kind_of(const struct client_mapping *m)
{
  return m->kind == GPUSHM_KIND_EVENT      ? CLIENT_EVENT
         : m->kind == GPUSHM_KIND_TIMELINE ? CLIENT_TIMELINE
         : m->kind == GPUSHM_KIND_RING     ? CLIENT_RING
                                           : CLIENT_BUFFER;
}

static bool is_event(const struct client_mapping *m)
{
  return m->kind == GPUSHM_KIND_EVENT;
}

/* GPUSHM_MAP_DEVICE(n) in flags: n; else -1 (the default rule). */
static int map_request_of(unsigned flags)
{
  return (int)((flags & GPUSHM_MAP_DEVICE_MASK) >> GPUSHM_MAP_DEVICE_SHIFT) - 1;
}

struct map_want;
static int release_on_daemon(gpushm_t *conn, uint64_t id);
static int read_open_opts(const gpushm_open_opts_t *user, gpushm_open_opts_t *opts);
static int open_with_wait(gpushm_t *conn, const char *name, uint64_t id, uint64_t via,
                          bool read_only, struct map_want *want, enum client_kind ck,
                          unsigned wait_ms, gpushm_buffer_t **out, gpushm_pending_t **pending);
static int open_waiting(gpushm_t *conn, const char *name, uint64_t id, bool read_only,
                        struct map_want *want, unsigned wait_ms, gpushm_buffer_t **out);
static int open_for(gpushm_t *conn, const char *name, uint64_t id, uint64_t via, bool read_only,
                    struct map_want *want, enum client_kind ck, gpushm_buffer_t **out,
                    gpushm_pending_t **pending);
static int create_with(gpushm_t *conn, const char *name, uint64_t size,
                       const gpushm_create_opts_t *user_opts, enum client_kind ck,
                       const Gpushm__ImageDesc *image, uint32_t ring_slots,
                       gpushm_buffer_t **out, gpushm_pending_t **pending);

/* Where an open wants its mapping: map_request, a device (GPUSHM_MAP_DEVICE), or -1
 * for the device of the caller's current context (current_device: -1 none, or
 * CURRENT_UNKNOWN until a device buffer's entry needs it, so that cached opens of host
 * buffers ask the driver nothing), else the buffer's own. */
#define CURRENT_UNKNOWN (-2)
struct map_want {
  int map_request;
  int current_device;
  bool write_discard; /* the open promises GPUSHM_OPEN_WRITE_DISCARD */
  bool uninitialized; /* a create with GPUSHM_CREATE_UNINITIALIZED: no clear */
};

/* Host buffers, events and timelines are the same for every device; a device buffer's
 * mapping serves only the device it is mapped for. */
static bool serves_device(const struct client_mapping *m, struct map_want *want)
{
  int device;

  if (kind_of(m) != CLIENT_BUFFER || m->backend == GPUSHM_BACKEND_HOST)
    return true;
  /* A graphics importer's open keeps the fd and maps nothing: a mapping of its own. */
  if (want->map_request == GPUSHM_DEVICE_NONE || m->device == GPUSHM_DEVICE_NONE)
    return want->map_request == m->device;
  if (want->map_request < 0 && want->current_device == CURRENT_UNKNOWN)
    want->current_device = client_cuda_current_device();
  device = want->map_request >= 0 ? want->map_request
           : want->current_device >= 0 ? want->current_device : m->home_device;
  return m->device == device;
}

/* A mapping serves an open only for the same access, kind and device: a buffer's id
 * or name never yields an event, nor the other way round. */
static bool serves(const struct client_mapping *m, bool read_only, enum client_kind ck,
                   struct map_want *want)
{
  return m->read_only == read_only && kind_of(m) == ck && serves_device(m, want);
}

static struct client_mapping *mapping_find(uint64_t instance_id, uint64_t id, bool read_only,
                                           enum client_kind ck, struct map_want *want)
{
  const uint64_t hash = hash_table_hash_ids(instance_id, id);

  for (struct hash_link *l = hash_table_chain(&mappings, hash); l; l = l->next) {
    struct client_mapping *m = MAPPING_OF(l);
    if (l->hash == hash && m->id == id && m->instance_id == instance_id &&
        serves(m, read_only, ck, want))
      return m;
  }
  return NULL;
}

static void mapping_insert(struct client_mapping *m)
{
  hash_table_insert(&mappings, &m->link, hash_table_hash_ids(m->instance_id, m->id));
}

static void mapping_remove(struct client_mapping *m)
{
  hash_table_remove(&mappings, &m->link);
}

/* conn's handle of that object, for an open with that access, kind and device. */
static struct gpushm_buffer *handle_find_id(const gpushm_t *conn, uint64_t id, bool read_only,
                                            enum client_kind ck, struct map_want *want)
{
  const uint64_t hash = hash_table_hash_ids(0, id);

  for (struct hash_link *l = hash_table_chain(&conn->handles_by_id, hash); l; l = l->next) {
    struct gpushm_buffer *h = HANDLE_OF_ID(l);
    if (l->hash == hash && h->map->id == id && serves(h->map, read_only, ck, want))
      return h;
  }
  return NULL;
}

static struct gpushm_buffer *handle_find_name(const gpushm_t *conn, const char *name,
                                              bool read_only, enum client_kind ck,
                                              struct map_want *want)
{
  const uint64_t hash = hash_table_hash_string(name), generation = client_unlink_generation(conn);

  for (struct hash_link *l = hash_table_chain(&conn->handles_by_name, hash); l; l = l->next) {
    struct gpushm_buffer *h = HANDLE_OF_NAME(l);
    if (l->hash == hash && h->name_generation == generation &&
        strcmp(h->map->name, name) == 0 && serves(h->map, read_only, ck, want))
      return h;
  }
  return NULL;
}

/* A connection with handles is on the list a fork walks, from its first to its last. */
static void handle_insert(struct gpushm_buffer *h)
{
  gpushm_t *c = h->conn;

  hash_table_insert(&c->handles_by_id, &h->by_id, hash_table_hash_ids(0, h->map->id));
  hash_table_insert(&c->handles_by_name, &h->by_name, hash_table_hash_string(h->map->name));
  if (!c->handles_listed) {
    c->handles_prev = NULL;
    c->handles_next = conns_with_handles;
    if (conns_with_handles)
      conns_with_handles->handles_prev = c;
    conns_with_handles = c;
    c->handles_listed = true;
  }
}

static void handle_remove(struct gpushm_buffer *h)
{
  gpushm_t *c = h->conn;

  hash_table_remove(&c->handles_by_id, &h->by_id);
  hash_table_remove(&c->handles_by_name, &h->by_name);
  if (c->handles_by_id.count == 0 && c->handles_listed) {
    if (c->handles_prev)
      c->handles_prev->handles_next = c->handles_next;
    else
      conns_with_handles = c->handles_next;
    if (c->handles_next)
      c->handles_next->handles_prev = c->handles_prev;
    c->handles_listed = false;
    hash_table_free(&c->handles_by_id);
    hash_table_free(&c->handles_by_name);
  }
}

int client_release_id(gpushm_t *conn, uint64_t id)
{
  return release_on_daemon(conn, id);
}

static int release_on_daemon(gpushm_t *conn, uint64_t id)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__CloseRequest body = GPUSHM__CLOSE_REQUEST__INIT;
  Gpushm__Reply *reply;
  int r;

  body.id = id;
  req.body_case = GPUSHM__REQUEST__BODY_CLOSE;
  req.close = &body;
  if ((r = client_call(conn, &req, &reply, NULL)) < 0)
    return r;
  gpushm__reply__free_unpacked(reply, NULL);
  return 0;
}

static int map_control(struct client_mapping *buf, int fd)
{
  struct stat st;
  void *p;

  if (fstat(fd, &st) < 0 || st.st_size < (off_t)SYNC_CONTROL_SIZE || !client_fd_sealed(fd))
    return client_error(GPUSHM_E_PROTO, "invalid control block for %s", buf->name);
  /* Read-only openers get a read-only control block: they acquire, never release. */
  p = mmap(NULL, SYNC_CONTROL_SIZE, PROT_READ | (buf->read_only ? 0 : PROT_WRITE), MAP_SHARED,
           fd, 0);
  if (p == MAP_FAILED)
    return client_error(GPUSHM_E_IO, "mapping the control block of %s: %s", buf->name,
                        strerror(errno));
  /* Its header is not checked: every read-write holder can write it, so a check would
   * let any of them make the buffer unopenable for everyone else.  The fd came with the
   * daemon's reply, and release_seq stays at offset 8 in every layout (shm_layout.h). */
  buf->control = p;
  return 0;
}

static int unmap_mapping(struct client_mapping *buf);

/* What orders a device sync buffer's releases: the event the daemon sent (cuda-ipc
 * buffers created by a library before 0.7.1), else the fence in the buffer's allocation,
 * GPU-side where the device can, CPU-side where it cannot.  The fence's place comes with
 * the reply; checked all the same: it must lie in this mapping, past the buffer's data. */
static int attach_sync(struct client_mapping *buf, const Gpushm__OpenReply *open)
{
  const Gpushm__BufferInfo *info = open->info;
  uint64_t fence;
  int r;

  buf->sync_why[0] = '\0';
  if (client_fence_in_control(buf))
    return client_timeline_attach(buf);
  if (buf->backend == GPUSHM_BACKEND_HOST) {
    buf->sync_method = GPUSHM_SYNC_HOST;
    return 0;
  }
  if (open->sync_event_handle.len) {
    int event_device;
    r = client_cuda_import_event(open->sync_event_handle.data, open->sync_event_handle.len,
                                 info->device_uuid.data, info->device_uuid.len, info->device,
                                 &buf->sync_event, &event_device);
    if (r == 0 && event_device != buf->home_device) {
      client_cuda_destroy_event(buf->sync_event);
      buf->sync_event = NULL;
      return client_error(GPUSHM_E_PROTO, "the event of %s is on another device than its memory",
                          buf->name);
    }
    if (r == 0)
      buf->sync_method = GPUSHM_SYNC_IPC_EVENT;
    return r;
  }
  if (!(fence = open->fence_offset))
    return client_error(GPUSHM_E_PROTO, "device sync buffer %s came with neither an event "
                        "nor a fence", buf->name);
  if (buf->backend == GPUSHM_BACKEND_HOST || fence % 8 || fence < buf->size ||
      fence > buf->map_len - 8)
    return client_error(GPUSHM_E_PROTO, "the fence of %s is at offset %llu, outside its "
                        "allocation's spare bytes", buf->name, (unsigned long long)fence);
  buf->fence_dptr = (uint64_t)(uintptr_t)buf->ptr + fence;
  if ((r = client_cuda_fence_support(buf->device, buf->sync_why, sizeof buf->sync_why)) < 0)
    return r;
  buf->sync_method = r == 0 ? GPUSHM_SYNC_GPU_FENCE : GPUSHM_SYNC_CPU_FENCE;
  return 0;
}

/* The driver's words for a failed cuIpcOpenMemHandle (CUDA_ERROR_INVALID_CONTEXT
 * between containers) do not name the cause; where the PID namespaces explain it, the
 * error says so and what works instead.  Returns the error to report. */

/* A graphics importer's open (GPUSHM_DEVICE_NONE) of fd memory: nothing is mapped, the
 * fd is kept for gpushm_buffer_memory_fd() to hand dups of (an import consumes its fd).
 * Legacy IPC memory and sync buffers' fences (issue 27's timelines) have no such use. */
static int keep_memory_fd(struct client_mapping *buf, const struct client_fds *fds,
                          const Gpushm__OpenReply *open)
{
  if (buf->backend == GPUSHM_BACKEND_CUDA_IPC)
    return client_error(GPUSHM_E_UNSUPPORTED, "%s is cuda-ipc memory, which imports into no "
                        "graphics API: open it with a CUDA map device", buf->name);
  if (open->has_control && buf->kind != GPUSHM_KIND_RING)
    return client_error(GPUSHM_E_UNSUPPORTED, "%s is a sync buffer, whose ordering lives in "
                        "CUDA: a graphics importer cannot take part in it", buf->name);
  if ((buf->memory_fd = fcntl(fds->fd[0], F_DUPFD_CLOEXEC, 3)) < 0)
    return client_error(errno == EMFILE ? GPUSHM_E_LIMIT : GPUSHM_E_IO, "keeping the fd of "
                        "%s: %s", buf->name, strerror(errno));
  buf->device = GPUSHM_DEVICE_NONE;
  buf->map_len = buf->backend == GPUSHM_BACKEND_EXTERNAL ? buf->ext_allocation_size
                                                         : buf->allocated;
  return 0;
}

/* Maps what the reply carries: the memory (or the event), through its backend's
 * importer, and for sync buffers the control block (the last fd) and the buffer's
 * event or fence. */
static int map_mapping(struct client_mapping *buf, gpushm_t *conn, const struct client_fds *fds,
                       const Gpushm__OpenReply *open, int map_request)
{
  const struct client_importer *imp = client_importer_of(buf);
  const struct client_import in = { conn, open, fds, map_request };
  int r;

  if (!imp)
    return client_error(GPUSHM_E_UNSUPPORTED, "backend %d is not supported by this library",
                        (int)buf->backend);
  if (fds->n != imp->memory_fds + (open->has_control ? 1 : 0))
    return client_error(GPUSHM_E_PROTO, "daemon sent %u fds for %s", fds->n, buf->name);
  /* A ring's memory may go to a graphics importer too: its control block is mapped
   * either way (its counters are the CPU's to wait on). */
  if (map_request == GPUSHM_DEVICE_NONE && !is_event(buf) && buf->backend != GPUSHM_BACKEND_HOST)
    r = keep_memory_fd(buf, fds, open);
  else
    r = imp->map(buf, &in);
  if (r < 0 || !open->has_control)
    return r;
  if ((r = map_control(buf, fds->fd[fds->n - 1])) == 0)
    r = attach_sync(buf, open);
  if (r < 0) {
    int saved = r;
    char why[256];
    snprintf(why, sizeof why, "%s", gpushm_last_error_message());
    unmap_mapping(buf);
    client_error(saved, "%s", why);
  }
  return r;
}

/* Stream operations of this process may still target the fence, in the buffer's
 * mapping: a release's write, an acquire's wait.  Unmapping under either is an MMU
 * fault and a sticky error for the whole process, so the mapping stays until the fence
 * has passed both (a write that lands also ends a wait for it).  Returns false if it has
 * not within GPUSHM_FENCE_DRAIN_TIMEOUT_MS (a releaser died with its write queued, a
 * stream is stuck): the caller then keeps the mapping for the life of the process. */
static bool drain_fence(struct client_mapping *buf)
{
  struct timespec pause = { 0, 50000 }, now, deadline;
  uint64_t value = 0, target = buf->fence_written > buf->fence_waited ? buf->fence_written
                                                                     : buf->fence_waited;

  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += GPUSHM_FENCE_DRAIN_TIMEOUT_MS / 1000;
  deadline.tv_nsec += (long)(GPUSHM_FENCE_DRAIN_TIMEOUT_MS % 1000) * 1000000L;
  while ((client_fence_in_control(buf)
            ? (value = __atomic_load_n(&buf->control->fence, __ATOMIC_ACQUIRE), 0)
            : client_cuda_fence_read(buf->fence_dptr, &value, buf->device)) == 0 &&
         value < target) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec * 1000000000LL + now.tv_nsec >=
        deadline.tv_sec * 1000000000LL + deadline.tv_nsec)
      return false;
    nanosleep(&pause, NULL);
  }
  return true;
}

/* Returns 0 or the error of an unmap that failed (the daemon is released anyway). */
static int unmap_mapping(struct client_mapping *buf)
{
  bool keep_control = false;
  int r = 0, r2 = 0;

  if ((buf->fence_written || buf->fence_waited) && !drain_fence(buf)) {
    keep_control = client_fence_in_control(buf); /* its fence is there */
    /* Leaked on purpose: a fault would take every CUDA context of the process down. */
    r = client_error(GPUSHM_E_TIMEOUT, "'%s' stays mapped in this process: stream work on "
                     "its fence (a release's write or an acquire's wait for release %llu) "
                     "had not finished within %u ms", buf->name,
                     (unsigned long long)(buf->fence_waited > buf->fence_written
                                            ? buf->fence_waited : buf->fence_written),
                     GPUSHM_FENCE_DRAIN_TIMEOUT_MS);
    buf->ptr = NULL;
  }
  if (buf->ptr || buf->cuda_external) {
    const struct client_importer *imp = client_importer_of(buf);
    if (imp)
      r = imp->unmap(buf);
  }
  buf->cuda_external = NULL;
  buf->cuda_mipmap = NULL;
  buf->ptr = NULL;
  if (buf->memory_fd >= 0)
    close(buf->memory_fd);
  buf->memory_fd = -1;
  if (buf->sync_event)
    r2 = client_cuda_destroy_event(buf->sync_event);
  buf->sync_event = NULL;
  buf->sync_method = GPUSHM_SYNC_NONE;
  buf->fence_dptr = 0;
  buf->fence_written = 0;
  buf->fence_waited = 0;
  if (buf->control && !keep_control && client_fence_in_control(buf)) {
    int r3 = client_timeline_detach(buf);
    keep_control = r3 < 0; /* the GPU may still map it */
    if (r == 0 && r2 == 0)
      r2 = r3;
  }
  if (buf->control && !keep_control)
    munmap(buf->control, SYNC_CONTROL_SIZE);
  buf->control = NULL;
  return r < 0 ? r : r2;
}

/* What an open reply must be before anything is made of it; 0 or GPUSHM_E_PROTO. */
static int check_open_reply(const Gpushm__OpenReply *open, enum client_kind ck)
{
  static const char *const what[] = { "a buffer", "an event", "a timeline", "a ring" };
  const Gpushm__BufferInfo *info = open->info;
  enum client_kind got;
  gpushm_kind_t kind;

  if (!info || !info->name || strlen(info->name) > GPUSHM_LIMIT_NAME_LEN)
    return client_error(GPUSHM_E_PROTO, "malformed open reply");
  kind = client_kind_of_info(info);
  if (kind != GPUSHM_KIND_BUFFER && kind != GPUSHM_KIND_EVENT && kind != GPUSHM_KIND_IMAGE &&
      kind != GPUSHM_KIND_TIMELINE && kind != GPUSHM_KIND_RING)
    return client_error(GPUSHM_E_PROTO, "daemon answered an open with kind %d, which this "
                        "libgpushm does not know", (int)kind);
  got = kind == GPUSHM_KIND_EVENT      ? CLIENT_EVENT
        : kind == GPUSHM_KIND_TIMELINE ? CLIENT_TIMELINE
        : kind == GPUSHM_KIND_RING     ? CLIENT_RING
                                       : CLIENT_BUFFER;
  if (got != ck)
    return client_error(GPUSHM_E_PROTO, "daemon answered a request for %s with %s", what[ck],
                        what[got]);
  if (got == CLIENT_TIMELINE && (!open->has_control || info->size))
    return client_error(GPUSHM_E_PROTO, "malformed open reply: a timeline without its "
                        "control block, or with a size");
  if (got == CLIENT_RING) {
    const Gpushm__RingInfo *ring = open->ring;
    /* The geometry places every slot: it must lie in the memory, each slot after the
     * last, or a slot's address would point outside what is mapped. */
    if (!open->has_control || !ring || ring->slots < 2 || ring->slots > GPUSHM_LIMIT_RING_SLOTS ||
        !ring->slot_size || ring->slot_stride < ring->slot_size ||
        ring->slot_stride % GPUSHM_RING_SLOT_ALIGN ||
        ring->slot_stride > info->size / ring->slots || info->size > info->allocated)
      return client_error(GPUSHM_E_PROTO, "malformed open reply: a ring whose geometry does "
                          "not fit its memory");
  }
  if ((kind == GPUSHM_KIND_IMAGE) != (info->image != NULL) && kind != GPUSHM_KIND_RING)
    return client_error(GPUSHM_E_PROTO, "malformed open reply: kind and image description "
                        "disagree");
  return 0;
}

/* A new mapping of the object an open reply names (not mapped yet). */
static struct client_mapping *new_mapping(const gpushm_t *conn, const Gpushm__OpenReply *open)
{
  const Gpushm__BufferInfo *info = open->info;
  struct client_mapping *m = calloc(1, sizeof *m + info->metadata.len);

  if (!m)
    return NULL;
  if (info->metadata.len)
    memcpy(m->metadata, info->metadata.data, info->metadata.len);
  m->metadata_len = info->metadata.len;
  m->instance_id = conn->instance_id;
  m->id = info->id;
  m->read_only = open->read_only;
  memcpy(m->name, info->name, strlen(info->name) + 1);
  m->users = 1;
  m->kind = client_kind_of_info(info);
  m->backend = client_backend_of_wire(info->backend);
  m->owner_uid = info->owner_uid;
  m->owner_gid = info->owner_gid;
  m->device = m->home_device = info->device;
  m->size = info->size;
  m->allocated = info->allocated;
  m->memory_fd = -1;
  if (open->ring) {
    m->ring_slots = open->ring->slots;
    m->ring_slot_size = open->ring->slot_size;
    m->ring_slot_stride = open->ring->slot_stride;
  }
  if (info->device_uuid.len == sizeof m->device_uuid)
    memcpy(m->device_uuid, info->device_uuid.data, sizeof m->device_uuid);
  if (info->image) {
    m->is_image = true;
    m->image.size = sizeof m->image;
    m->image.format = info->image->format;
    m->image.width = info->image->width;
    m->image.height = info->image->height;
    m->image.depth = info->image->depth;
    m->image.mip_levels = info->image->mip_levels;
    m->image.array_layers = info->image->array_layers;
    m->image.tiling = info->image->tiling;
    m->image.usage = info->image->usage;
    m->image.row_pitch = info->image->row_pitch;
  }
  if (info->external) {
    const Gpushm__ExternalMemory *x = info->external;
    m->ext_allocation_size = x->allocation_size;
    m->ext_memory_type_index = x->memory_type_index;
    m->ext_dedicated = x->dedicated;
    if (x->device_uuid.len == 16)
      memcpy(m->device_uuid, x->device_uuid.data, 16);
    if (x->driver_uuid.len == 16)
      memcpy(m->ext_driver_uuid, x->driver_uuid.data, 16);
    snprintf(m->ext_driver_info, sizeof m->ext_driver_info, "%s", x->driver_info);
  }
  return m;
}

/* A handle for conn on m (one user of it the caller has counted), its name confirmed
 * at generation; NULL when out of memory. */
static struct gpushm_buffer *new_handle(gpushm_t *conn, struct client_mapping *m,
                                        uint64_t generation)
{
  struct gpushm_buffer *h = calloc(1, sizeof *h);

  if (!h)
    return NULL;
  h->map = m;
  h->conn = conn;
  h->refs = 1;
  h->name_generation = generation;
  return h;
}

/* Drops a reference the daemon counts for this connection (its lock held). */
static void release_locked(gpushm_t *conn, uint64_t id, bool unlink)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__CloseRequest body = GPUSHM__CLOSE_REQUEST__INIT;

  body.id = id;
  body.unlink = unlink;
  req.body_case = GPUSHM__REQUEST__BODY_CLOSE;
  req.close = &body;
  (void)client_send_oneway_locked(conn, &req);
}

/* Under the cache lock: conn's handle of m's object for this open, now that the daemon
 * has counted one more reference for conn.  Another thread of conn may have made that
 * handle meanwhile: it takes the open, and *extra says the reference (and the user of m
 * the caller counted) are to be given back.  Else a new handle on m, inserted.  NULL:
 * out of memory (the same to give back). */
static struct gpushm_buffer *join_handle(gpushm_t *conn, struct client_mapping *m,
                                         uint64_t generation, bool write_discard, bool *extra)
{
  struct map_want mapped = { m->device, -1, false, false };
  struct gpushm_buffer *h = handle_find_id(conn, m->id, m->read_only, kind_of(m), &mapped);

  *extra = h != NULL;
  if (h) {
    h->refs++;
    h->write_discard = h->write_discard && write_discard;
    if (h->name_generation < generation)
      h->name_generation = generation; /* the daemon just confirmed the name */
    return h;
  }
  if (!(h = new_handle(conn, m, generation)))
    return NULL;
  h->write_discard = write_discard;
  handle_insert(h);
  client_conn_ref(conn);
  return h;
}

/* One user of m less (under the cache lock); true when it was the last: m is out of
 * the table then, for the caller to end (end_mapping) once the lock is let go. */
static bool unuse_mapping(struct client_mapping *m)
{
  if (--m->users)
    return false;
  mapping_remove(m);
  return true;
}

/* A mapping nobody uses any more, ended before the daemon's reference goes: unmapped (a
 * slot's segment stays mapped, idle: client/segment.c), then freed.  0 or the unmap's
 * error. */
static int end_mapping(struct client_mapping *m)
{
  int r = 0;

  if (m->segment)
    client_segment_put(m->segment);
  else
    r = unmap_mapping(m);
  free(m);
  return r;
}

/* adopt_reply for a carved buffer, with conn->lock held from the request on (see
 * client/segment.c): no driver call when this process maps its segment already. */
static int adopt_carved(gpushm_t *conn, const Gpushm__OpenReply *open, struct map_want *want,
                        struct client_fds *fds, uint64_t generation, gpushm_buffer_t **out)
{
  struct client_devices devices;
  struct client_mapping *m, *existing;
  struct gpushm_buffer *h;
  struct client_segment *seg;
  struct map_want mapped;
  bool extra, last, clear;
  uint64_t id;
  void *ptr;
  int r;

  if (!(m = new_mapping(conn, open))) {
    client_close_fds(fds);
    if (open->segment_attached) /* the daemon counts the mapping: it is not made */
      client_segment_attach_refused(conn, open->info->segment_id, open->read_only);
    release_locked(conn, open->info->id, false);
    return client_error(GPUSHM_E_NOMEM, "out of memory");
  }
  r = client_segment_attach(conn, open, open->read_only, fds, want->map_request, &seg, &ptr,
                            &devices);
  if (r < 0) {
    release_locked(conn, m->id, false);
    free(m);
    return r;
  }
  m->segment = seg;
  m->slot_offset = open->segment_offset;
  m->ptr = ptr;
  m->home_device = devices.home;
  m->device = devices.map;
  /* A new buffer reads as zeros: a reused slot of device memory is cleared here, in this
   * process's context, before the create returns, unless its creator overwrites it
   * (GPUSHM_CREATE_UNINITIALIZED).  (An opener quicker than that could read what the
   * slot held: a buffer of the same owner and mode, which it may read.) */
  clear = open->created && open->clear && m->backend != GPUSHM_BACKEND_HOST &&
          !want->uninitialized;
  if (clear && m->device == GPUSHM_DEVICE_NONE)
    r = client_error(GPUSHM_E_UNSUPPORTED, "'%s' takes a reused slot of device memory, which "
                     "its creator clears through CUDA: create it with a CUDA map device (or "
                     "larger than the carve limit, docs/segments.md)", m->name);
  else if (clear)
    r = client_cuda_clear(ptr, open->info->allocated, m->device);
  if (r < 0) {
    client_segment_unuse(seg);
    release_locked(conn, m->id, true); /* nobody is to find it uncleared */
    free(m);
    return r;
  }

  mapped = (struct map_want){ m->device, -1, false, false };
  pthread_mutex_lock(&cache_lock);
  if ((existing = mapping_find(m->instance_id, m->id, m->read_only, false, &mapped))) {
    /* mapped already, through another handle: that mapping holds the segment too */
    existing->users++;
    client_segment_unuse(seg);
    free(m);
    m = existing;
  } else {
    mapping_insert(m);
  }
  h = join_handle(conn, m, generation, want->write_discard, &extra);
  id = m->id; /* read under the lock: unless last, m is another handle's from here */
  last = (!h || extra) && unuse_mapping(m);
  pthread_mutex_unlock(&cache_lock);
  if (!h || extra) {
    if (last) { /* (conn->lock is held: an eviction, which takes it, waits for a put) */
      client_segment_unuse(m->segment);
      free(m);
    }
    release_locked(conn, id, false);
  }
  if (!h)
    return client_error(GPUSHM_E_NOMEM, "out of memory");
  *out = h;
  return 0;
}

/* Turns an open/create reply into conn's handle: maps a new mapping, or joins the one
 * another handle (of any connection) or thread made meanwhile.  ck: what was asked
 * for, which the reply must be. */
static int adopt_reply(gpushm_t *conn, const Gpushm__OpenReply *open, enum client_kind ck,
                       struct map_want *want, struct client_fds *fds, uint64_t generation,
                       gpushm_buffer_t **out)
{
  const Gpushm__BufferInfo *info = open->info;
  struct client_mapping *m, *existing;
  struct gpushm_buffer *h;
  struct map_want mapped;
  bool extra, last;
  uint64_t id;
  int r;

  pthread_mutex_lock(&cache_lock);
  existing = mapping_find(conn->instance_id, info->id, open->read_only, ck, want);
  if (existing)
    existing->users++;
  pthread_mutex_unlock(&cache_lock);
  if (existing) {
    client_close_fds(fds); /* mapped already: what came to map it is not needed */
    m = existing;
  } else {
    if (!(m = new_mapping(conn, open))) {
      client_close_fds(fds);
      release_on_daemon(conn, info->id);
      return client_error(GPUSHM_E_NOMEM, "out of memory");
    }
    /* Map outside the lock: mapping device memory can take a while. */
    r = map_mapping(m, conn, fds, open, want->map_request);
    client_close_fds(fds);
    if (r < 0) {
      release_on_daemon(conn, m->id);
      free(m);
      return r;
    }
    /* Whatever was asked, this mapping is for m->device: another thread may have
     * mapped the same one meanwhile. */
    mapped = (struct map_want){ m->device, -1, false, false };
    pthread_mutex_lock(&cache_lock);
    existing = mapping_find(m->instance_id, m->id, m->read_only, kind_of(m), &mapped);
    if (existing) {
      existing->users++;
      pthread_mutex_unlock(&cache_lock);
      unmap_mapping(m);
      free(m);
      m = existing;
    } else {
      mapping_insert(m);
      pthread_mutex_unlock(&cache_lock);
    }
  }
  pthread_mutex_lock(&cache_lock);
  h = join_handle(conn, m, generation, want->write_discard, &extra);
  id = m->id; /* read under the lock: unless last, m is another handle's from here */
  last = (!h || extra) && unuse_mapping(m);
  pthread_mutex_unlock(&cache_lock);
  if (!h || extra) {
    if (last)
      end_mapping(m); /* unmap before release */
    release_on_daemon(conn, id);
  }
  if (!h)
    return client_error(GPUSHM_E_NOMEM, "out of memory");
  *out = h;
  return 0;
}

/* An open or create reply, with conn->lock held: 1 where it is done with (a carved
 * buffer's handle made in *out, which must be before anyone can unmap its segment);
 * 0 where the reply is for adopt_reply() after the lock; < 0 on a refusal or a
 * malformed reply (freed, what it brought released). */
static int take_open_reply_locked(gpushm_t *conn, Gpushm__Reply *reply, struct client_fds *fds,
                                  enum client_kind ck, struct map_want *want,
                                  uint64_t generation, gpushm_buffer_t **out)
{
  int r = 0;

  if (reply->body_case != GPUSHM__REPLY__BODY_OPEN ||
      (r = check_open_reply(reply->open, ck)) < 0) {
    Gpushm__OpenReply *open = reply->body_case == GPUSHM__REPLY__BODY_OPEN ? reply->open : NULL;
    client_close_fds(fds);
    if (open && open->info) {
      if (open->info->segment_id && open->segment_attached)
        client_segment_attach_refused(conn, open->info->segment_id, open->read_only);
      release_locked(conn, open->info->id, false);
    }
    gpushm__reply__free_unpacked(reply, NULL);
    return r < 0 ? r : client_error(GPUSHM_E_PROTO, "malformed open reply");
  }
  if (!reply->open->info->segment_id)
    return 0;
  r = adopt_carved(conn, reply->open, want, fds, generation, out);
  gpushm__reply__free_unpacked(reply, NULL);
  return r < 0 ? r : 1;
}

static int open_round_trip(gpushm_t *conn, Gpushm__Request *req, int send_fd, enum client_kind ck,
                           struct map_want *want, gpushm_buffer_t **out)
{
  /* Read before asking: a name cached with this generation is at worst re-checked. */
  uint64_t generation = client_unlink_generation(conn);
  Gpushm__Reply *reply;
  struct client_fds fds;
  int r;

  pthread_mutex_lock(&conn->lock);
  if ((r = client_call_locked_fd(conn, req, send_fd, &reply, &fds)) == 0)
    r = take_open_reply_locked(conn, reply, &fds, ck, want, generation, out);
  pthread_mutex_unlock(&conn->lock);
  if (r != 0)
    return r < 0 ? r : 0;
  r = adopt_reply(conn, reply->open, ck, want, &fds, generation, out);
  gpushm__reply__free_unpacked(reply, NULL);
  return r;
}

/* A pipelined open or create (gpushm_buffer_open_start(), gpushm_buffer_create_start()):
 * its request is out; its reply, taken by whichever call on the connection reads it,
 * becomes what open_round_trip() would have returned. */
struct gpushm_pending {
  struct client_pending_reply reply; /* first: what the connection queues */
  gpushm_t *conn;                    /* referenced until finished */
  enum client_kind ck;
  struct map_want want;
  uint64_t generation;
  unsigned forks; /* forks_here at the start */
  /* The outcome: r < 0 and why; or buf (a carved buffer's handle, made as the reply
   * came, or an open of a handle this connection had); or the reply and its fds, for
   * adopt_reply() in gpushm_pending_finish(), outside the connection's lock. */
  int r;
  char *why;
  gpushm_buffer_t *buf;
  Gpushm__Reply *kept;
  struct client_fds fds;
};

static void pending_arrived(struct client_pending_reply *reply_of, gpushm_t *conn, int r,
                            Gpushm__Reply *reply, struct client_fds *fds)
{
  struct gpushm_pending *p = (struct gpushm_pending *)reply_of;

  if (r == 0) {
    int prev = client_cuda_assume_current(p->want.current_device);
    r = take_open_reply_locked(conn, reply, fds, p->ck, &p->want, p->generation, &p->buf);
    client_cuda_assume_current(prev);
  }
  if (r == 0) {
    p->kept = reply;
    p->fds = *fds;
  } else if (r < 0) {
    /* (the reading thread's last error, which may be another call's: kept here) */
    p->r = r;
    p->why = strdup(gpushm_last_error_message());
  }
}

static int pending_start(gpushm_t *conn, Gpushm__Request *req, enum client_kind ck,
                         const struct map_want *want, gpushm_buffer_t *done,
                         gpushm_pending_t **out)
{
  struct gpushm_pending *p = calloc(1, sizeof *p);
  int r = 0;

  if (!p) {
    if (done)
      gpushm_buffer_close(done);
    return client_error(GPUSHM_E_NOMEM, "out of memory");
  }
  p->reply.arrived = pending_arrived;
  p->conn = conn;
  p->ck = ck;
  p->want = *want;
  p->buf = done;
  p->reply.answered = done != NULL; /* (an open of a handle this connection has) */
  p->generation = client_unlink_generation(conn);
  p->forks = __atomic_load_n(&forks_here, __ATOMIC_RELAXED);
  /* the default map device is the starting thread's, whoever takes the reply */
  if (p->want.map_request == -1 && p->want.current_device == CURRENT_UNKNOWN)
    p->want.current_device = client_cuda_current_device();
  pthread_mutex_lock(&conn->lock);
  if (!done)
    r = client_send_pending_locked(conn, req, &p->reply);
  if (r == 0)
    client_conn_ref(conn);
  pthread_mutex_unlock(&conn->lock);
  if (r < 0) {
    free(p);
    return r;
  }
  *out = p;
  return 0;
}

int gpushm_pending_finish(gpushm_pending_t *p, gpushm_buffer_t **out)
{
  gpushm_buffer_t *buf = NULL;
  gpushm_t *conn;
  bool idle;
  int r;

  client_clear_error();
  if (out)
    *out = NULL;
  if (!p)
    return client_error(GPUSHM_E_INVAL, "pending is NULL");
  if (p->forks != __atomic_load_n(&forks_here, __ATOMIC_RELAXED))
    return client_error(GPUSHM_E_INVAL, "this open or create was started before fork(), "
                        "in the parent: the child leaves it alone (its reply is the "
                        "parent's)");
  conn = p->conn;
  pthread_mutex_lock(&conn->lock);
  client_pending_settle_locked(conn, &p->reply);
  idle = conn->pending_n == 0;
  pthread_mutex_unlock(&conn->lock);
  if (p->kept) {
    int prev = client_cuda_assume_current(p->want.current_device);
    r = adopt_reply(conn, p->kept->open, p->ck, &p->want, &p->fds, p->generation, &buf);
    client_cuda_assume_current(prev);
    gpushm__reply__free_unpacked(p->kept, NULL);
  } else if (p->r < 0) {
    r = client_error(p->r, "%s", p->why ? p->why : "the request failed (out of memory "
                     "keeping why)");
  } else {
    buf = p->buf;
    r = 0;
  }
  /* segments kept mapped for replies then on their way (segment.c) */
  if (idle && !__atomic_load_n(&client_pending_in_process, __ATOMIC_ACQUIRE))
    client_segment_trim();
  free(p->why);
  free(p);
  if (r == 0 && out)
    *out = buf;
  else if (r == 0)
    r = gpushm_buffer_close(buf);
  client_conn_unref(conn);
  return r;
}

_Static_assert(GPUSHM_CREATE_OPTS_SIZE_V1 == offsetof(gpushm_create_opts_t, flags) +
               sizeof(uint32_t), "the first published layout ends after flags, for ever");

_Static_assert(GPUSHM_METADATA_MAX == GPUSHM_LIMIT_METADATA, "one limit, two spellings");
_Static_assert(GPUSHM_PENDING_MAX == GPUSHM_LIMIT_PENDING_PER_CONN, "one limit, two spellings");

void gpushm_create_opts_init(gpushm_create_opts_t *opts)
{
  memset(opts, 0, sizeof *opts);
  opts->size = sizeof *opts;
  opts->backend = GPUSHM_BACKEND_DEFAULT;
  opts->lifetime = GPUSHM_LIFETIME_PERSISTENT;
  opts->group = GPUSHM_GROUP_OF_CREATOR;
}

int gpushm_buffer_create(gpushm_t *conn, const char *name, uint64_t size,
                         const gpushm_create_opts_t *opts, gpushm_buffer_t **out)
{
  return client_create(conn, name, size, opts, CLIENT_BUFFER, out);
}

int client_create(gpushm_t *conn, const char *name, uint64_t size,
                  const gpushm_create_opts_t *user_opts, enum client_kind ck,
                  gpushm_buffer_t **out)
{
  return create_with(conn, name, size, user_opts, ck, NULL, 0, out, NULL);
}

int client_create_image(gpushm_t *conn, const char *name, const Gpushm__ImageDesc *desc,
                        const gpushm_create_opts_t *opts, gpushm_buffer_t **out)
{
  return create_with(conn, name, 0, opts, CLIENT_BUFFER, desc, 0, out, NULL);
}

int client_create_ring(gpushm_t *conn, const char *name, uint64_t slot_size, uint32_t slots,
                       const Gpushm__ImageDesc *image, const gpushm_create_opts_t *opts,
                       gpushm_buffer_t **out)
{
  return create_with(conn, name, slot_size, opts, CLIENT_RING, image, slots, out, NULL);
}

int client_ring_attach(gpushm_t *conn, uint64_t ring_id, gpushm_buffer_t **done)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__OpenRequest body = GPUSHM__OPEN_REQUEST__INIT;
  struct map_want want = { GPUSHM_DEVICE_NONE, CURRENT_UNKNOWN, false, false };

  *done = NULL;
  body.key_case = GPUSHM__OPEN_REQUEST__KEY_ID;
  body.id = ring_id;
  body.kind = GPUSHM__KIND__KIND_TIMELINE;
  body.ring_attach = true;
  req.body_case = GPUSHM__REQUEST__BODY_OPEN;
  req.open = &body;
  return open_round_trip(conn, &req, -1, CLIENT_TIMELINE, &want, done);
}

int client_register(gpushm_t *conn, Gpushm__Request *req, int send_fd, gpushm_buffer_t **out)
{
  struct map_want want = { GPUSHM_DEVICE_NONE, CURRENT_UNKNOWN, false, false };

  pthread_once(&atfork_once, register_atfork);
  *out = NULL;
  return open_round_trip(conn, req, send_fd, CLIENT_BUFFER, &want, out);
}

static int create_with(gpushm_t *conn, const char *name, uint64_t size,
                       const gpushm_create_opts_t *user_opts, enum client_kind ck,
                       const Gpushm__ImageDesc *image, uint32_t ring_slots,
                       gpushm_buffer_t **out, gpushm_pending_t **pending)
{
  const bool event = ck == CLIENT_EVENT, timeline = ck == CLIENT_TIMELINE, ring = ck == CLIENT_RING;
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__CreateRequest body = GPUSHM__CREATE_REQUEST__INIT;
  gpushm_create_opts_t opts;
  struct map_want want;
  int r;

  client_clear_error();
  pthread_once(&atfork_once, register_atfork);
  if (!conn || !(pending ? (void *)pending : (void *)out))
    return client_error(GPUSHM_E_INVAL, "conn and out must not be NULL");
  *(pending ? (void **)pending : (void **)out) = NULL;
  if (!wire_name_valid(name))
    return client_error(GPUSHM_E_NAME, "invalid buffer name: use 1-%u characters of "
                        "[A-Za-z0-9._-], not starting with '.' or '-'", GPUSHM_LIMIT_NAME_LEN);
  gpushm_create_opts_init(&opts);
  if (user_opts && (r = client_copy_opts(&opts, sizeof opts, user_opts,
                                         GPUSHM_CREATE_OPTS_SIZE_V1, "gpushm_create_opts_t")) < 0)
    return r;
  if (opts.flags & ~(GPUSHM_CREATE_OPEN_EXISTING | GPUSHM_CREATE_SYNC | GPUSHM_CREATE_STRICT_MODE |
                     GPUSHM_CREATE_UNINITIALIZED | GPUSHM_MAP_DEVICE_MASK))
    return client_error(GPUSHM_E_INVAL, "unknown create flags 0x%x", opts.flags);
  /* An older daemon would drop the field and keep the mode it cannot keep. */
  if ((opts.flags & GPUSHM_CREATE_STRICT_MODE) && !(conn->features & GPUSHM_FEATURE_STRICT_MODE))
    return client_error(GPUSHM_E_UNSUPPORTED, "gpushmd %s cannot be asked to refuse modes its "
                        "backends do not keep (GPUSHM_FEATURE_STRICT_MODE)", conn->daemon_version);
  want = (struct map_want){ map_request_of(opts.flags), CURRENT_UNKNOWN, false,
                            (opts.flags & GPUSHM_CREATE_UNINITIALIZED) != 0 };
  if (opts.open) {
    gpushm_open_opts_t open_opts;

    if ((r = read_open_opts(opts.open, &open_opts)) < 0)
      return r;
    if (open_opts.flags & GPUSHM_OPEN_READONLY)
      return client_error(GPUSHM_E_INVAL, "create_opts.open->flags: a creator opens "
                          "read-write");
    want.write_discard = (open_opts.flags & GPUSHM_OPEN_WRITE_DISCARD) != 0;
    if (opts.flags & GPUSHM_MAP_DEVICE_MASK)
      return client_error(GPUSHM_E_INVAL, "the map device is named twice: in create flags "
                          "(GPUSHM_MAP_DEVICE) and in create_opts.open");
    want.map_request = open_opts.map_device;
  }
  if (event && (opts.flags & GPUSHM_CREATE_SYNC))
    return client_error(GPUSHM_E_INVAL, "an event has no sync of its own");
  if ((opts.flags & GPUSHM_CREATE_UNINITIALIZED) && (event || timeline || ring || image))
    return client_error(GPUSHM_E_INVAL, "GPUSHM_CREATE_UNINITIALIZED is for buffers, whose "
                        "creator writes every byte; %s starts from state gpushm sets",
                        event      ? "an event"
                        : timeline ? "a timeline"
                        : ring     ? "a ring"
                                   : "an image");
  if (timeline && (opts.flags & GPUSHM_MAP_DEVICE_MASK || opts.open))
    return client_error(GPUSHM_E_INVAL, "a timeline is mapped for no device: no map device "
                        "and no open options");
  if (timeline && opts.backend)
    return client_error(GPUSHM_E_INVAL, "a timeline has no backend: its counter lives in "
                        "gpushmd's host memory (backend %u asked)", opts.backend);
  /* opts.backend is ignored for events, which have none; a buffer cannot ask for the
   * value that spelt one before Kind, which daemons before 0.8 (no "core" family) still
   * need. */
  body.kind = event      ? GPUSHM__KIND__KIND_EVENT
              : timeline ? GPUSHM__KIND__KIND_TIMELINE
              : ring     ? GPUSHM__KIND__KIND_RING
              : image    ? GPUSHM__KIND__KIND_IMAGE
                         : GPUSHM__KIND__KIND_BUFFER;
  if (timeline)
    body.backend = GPUSHM__BACKEND__BACKEND_UNSPECIFIED;
  else if (event)
    body.backend = gpushm_daemon_family_version(conn, "core") ? GPUSHM__BACKEND__BACKEND_UNSPECIFIED
                                                              : GPUSHM__BACKEND__BACKEND_CUDA_EVENT;
  else if (opts.backend == GPUSHM__BACKEND__BACKEND_CUDA_EVENT)
    return client_error(GPUSHM_E_INVAL, "backend %u is reserved: events are made with "
                        "gpushm_event_create()", opts.backend);
  else
    body.backend = (Gpushm__Backend)opts.backend;
  body.name = (char *)name;
  body.size = size;
  body.device = opts.device;
  body.mode = opts.mode;
  body.lifetime = (Gpushm__Lifetime)opts.lifetime;
  body.open_existing = (opts.flags & GPUSHM_CREATE_OPEN_EXISTING) != 0;
  body.sync = (opts.flags & GPUSHM_CREATE_SYNC) != 0 && !timeline;
  body.strict_mode = (opts.flags & GPUSHM_CREATE_STRICT_MODE) != 0;
  if (opts.group != GPUSHM_GROUP_OF_CREATOR) {
    if (opts.group < 0 || opts.group >= (int64_t)UINT32_MAX)
      return client_error(GPUSHM_E_INVAL, "group %lld is no group id (GPUSHM_GROUP_OF_CREATOR: "
                          "the creator's primary group)", (long long)opts.group);
    if (!(conn->features & GPUSHM_FEATURE_CREATE_GROUP))
      return client_error(GPUSHM_E_UNSUPPORTED, "gpushmd %s gives every buffer its creator's "
                          "primary group (no GPUSHM_FEATURE_CREATE_GROUP): run the creator "
                          "with that group (sg GROUP)", conn->daemon_version);
    body.set_group = true;
    body.group = (uint32_t)opts.group;
  }
  if (ring) {
    if (!(conn->features & GPUSHM_FEATURE_RINGS))
      return client_error(GPUSHM_E_UNSUPPORTED, "gpushmd %s makes no rings "
                          "(GPUSHM_FEATURE_RINGS)", conn->daemon_version);
    if (body.sync || body.open_existing)
      return client_error(GPUSHM_E_INVAL, "a ring is made once, ordered by its own "
                          "timelines: no GPUSHM_CREATE_SYNC or GPUSHM_CREATE_OPEN_EXISTING");
    body.ring_slots = ring_slots;
  }
  if (image) {
    if (!(conn->features & GPUSHM_FEATURE_GRAPHICS))
      return client_error(GPUSHM_E_UNSUPPORTED, "gpushmd %s makes no images "
                          "(GPUSHM_FEATURE_GRAPHICS)", conn->daemon_version);
    if (!ring && (body.sync || body.open_existing))
      return client_error(GPUSHM_E_INVAL, "an image is made once, without sync of its own: "
                          "no GPUSHM_CREATE_SYNC or GPUSHM_CREATE_OPEN_EXISTING");
    body.image = (Gpushm__ImageDesc *)image;
  }
  if (opts.metadata_size) {
    if (event || timeline)
      return client_error(GPUSHM_E_INVAL, "%s carries no metadata",
                          event ? "an event" : "a timeline");
    if (!opts.metadata)
      return client_error(GPUSHM_E_INVAL, "metadata_size is %u but metadata is NULL",
                          opts.metadata_size);
    if (opts.metadata_size > GPUSHM_METADATA_MAX)
      return client_error(GPUSHM_E_LIMIT, "metadata of %u bytes is over the limit of %u",
                          opts.metadata_size, GPUSHM_METADATA_MAX);
    /* an older daemon would drop the field unread, and the buffer come without it */
    if (!(conn->features & GPUSHM_FEATURE_METADATA))
      return client_error(GPUSHM_E_UNSUPPORTED, "gpushmd %s keeps no metadata with buffers "
                          "(GPUSHM_FEATURE_METADATA)", conn->daemon_version);
    body.metadata.data = (uint8_t *)opts.metadata;
    body.metadata.len = opts.metadata_size;
  }
  req.body_case = GPUSHM__REQUEST__BODY_CREATE;
  req.create = &body;
  if (pending)
    return pending_start(conn, &req, ck, &want, NULL, pending);
  return open_round_trip(conn, &req, -1, ck, &want, out);
}

void gpushm_open_opts_init(gpushm_open_opts_t *opts)
{
  memset(opts, 0, sizeof *opts);
  opts->size = sizeof *opts;
  opts->map_device = GPUSHM_DEVICE_AUTO;
}

/* A caller's open options, checked: flags known, the map device a device or AUTO. */
static int read_open_opts(const gpushm_open_opts_t *user, gpushm_open_opts_t *opts)
{
  int r;

  gpushm_open_opts_init(opts);
  if (user && (r = client_copy_opts(opts, sizeof *opts, user, GPUSHM_OPEN_OPTS_SIZE_V1,
                                    "gpushm_open_opts_t")) < 0)
    return r;
  if (opts->flags & ~(GPUSHM_OPEN_READONLY | GPUSHM_OPEN_WRITE_DISCARD))
    return client_error(GPUSHM_E_INVAL, "unknown open flags 0x%x%s", opts->flags,
                        opts->flags & GPUSHM_MAP_DEVICE_MASK
                          ? " (the map device is gpushm_open_opts_t.map_device)" : "");
  if ((opts->flags & GPUSHM_OPEN_READONLY) && (opts->flags & GPUSHM_OPEN_WRITE_DISCARD))
    return client_error(GPUSHM_E_INVAL, "GPUSHM_OPEN_WRITE_DISCARD promises writes: not with "
                        "GPUSHM_OPEN_READONLY");
  if (opts->map_device != GPUSHM_DEVICE_AUTO && opts->map_device != GPUSHM_DEVICE_NONE &&
      (opts->map_device < 0 || opts->map_device >= (int32_t)GPUSHM_LIMIT_DEVICES))
    return client_error(GPUSHM_E_INVAL, "map_device %d is neither GPUSHM_DEVICE_AUTO, "
                        "GPUSHM_DEVICE_NONE nor a device ordinal below %u", opts->map_device,
                        GPUSHM_LIMIT_DEVICES);
  return 0;
}

static int open_flags(gpushm_t *conn, const char *name, uint64_t id, unsigned flags,
                      enum client_kind ck, gpushm_buffer_t **out, gpushm_pending_t **pending)
{
  struct map_want want = { map_request_of(flags), CURRENT_UNKNOWN,
                           (flags & GPUSHM_OPEN_WRITE_DISCARD) != 0, false };

  client_clear_error();
  if (flags & ~(GPUSHM_OPEN_READONLY |
                (ck == CLIENT_BUFFER ? GPUSHM_MAP_DEVICE_MASK | GPUSHM_OPEN_WRITE_DISCARD
                 : ck == CLIENT_RING ? GPUSHM_MAP_DEVICE_MASK
                                     : 0)))
    return client_error(GPUSHM_E_INVAL, "unknown open flags 0x%x", flags);
  if ((flags & GPUSHM_OPEN_READONLY) && (flags & GPUSHM_OPEN_WRITE_DISCARD))
    return client_error(GPUSHM_E_INVAL, "GPUSHM_OPEN_WRITE_DISCARD promises writes: not with "
                        "GPUSHM_OPEN_READONLY");
  return open_for(conn, name, id, 0, (flags & GPUSHM_OPEN_READONLY) != 0, &want, ck, out,
                  pending);
}

int client_open(gpushm_t *conn, const char *name, uint64_t id, unsigned flags,
                enum client_kind ck, gpushm_buffer_t **out)
{
  return open_flags(conn, name, id, flags, ck, out, NULL);
}

int gpushm_buffer_open_start(gpushm_t *conn, const char *name, unsigned flags,
                             gpushm_pending_t **out)
{
  client_clear_error();
  if (!name)
    return client_error(GPUSHM_E_NAME, "name is NULL");
  return open_flags(conn, name, 0, flags, CLIENT_BUFFER, NULL, out);
}

int gpushm_buffer_create_start(gpushm_t *conn, const char *name, uint64_t size,
                               const gpushm_create_opts_t *opts, gpushm_pending_t **out)
{
  return create_with(conn, name, size, opts, CLIENT_BUFFER, NULL, 0, NULL, out);
}

int client_open_unmapped(gpushm_t *conn, const char *name, bool read_only, enum client_kind ck,
                         gpushm_buffer_t **out)
{
  struct map_want want = { GPUSHM_DEVICE_NONE, CURRENT_UNKNOWN, false, false };

  return open_for(conn, name, 0, 0, read_only, &want, ck, out, NULL);
}

int gpushm_buffer_open_ex(gpushm_t *conn, const char *name, uint64_t id,
                          const gpushm_open_opts_t *user_opts, gpushm_buffer_t **out)
{
  gpushm_open_opts_t opts;
  struct map_want want;
  int r;

  client_clear_error();
  if ((r = read_open_opts(user_opts, &opts)) < 0)
    return r;
  if (opts.wait_ms && !name)
    return client_error(GPUSHM_E_INVAL, "wait_ms is for an open by name, not by id");
  if (opts.wait_ms > (int32_t)GPUSHM_LIMIT_OPEN_WAIT_MS)
    return client_error(GPUSHM_E_INVAL, "wait_ms %d is past the %u ms an open may wait "
                        "(GPUSHM_LIMIT_OPEN_WAIT_MS; a negative value waits for ever)",
                        opts.wait_ms, GPUSHM_LIMIT_OPEN_WAIT_MS);
  /* For ever: waits of the longest kind gpushmd grants, one after the other. */
  do {
    want = (struct map_want){ opts.map_device, CURRENT_UNKNOWN,
                              (opts.flags & GPUSHM_OPEN_WRITE_DISCARD) != 0, false };
    r = open_waiting(conn, name, id, (opts.flags & GPUSHM_OPEN_READONLY) != 0, &want,
                     opts.wait_ms < 0 ? GPUSHM_LIMIT_OPEN_WAIT_MS : (unsigned)opts.wait_ms,
                     out);
  } while (opts.wait_ms < 0 && r == GPUSHM_E_NOENT);
  return r;
}

int client_open_via(gpushm_t *conn, uint64_t id, uint64_t via, gpushm_buffer_t **out)
{
  struct map_want want = { -1, CURRENT_UNKNOWN, false, false };

  return open_for(conn, NULL, id, via, true, &want, CLIENT_BUFFER, out, NULL);
}

/* An open of a buffer (or event) by name, or by id where name is NULL (as one of
 * weight-set generation via's buffers, via nonzero), for that access and want (its map
 * device, -1 for the default rule). */
static int open_for(gpushm_t *conn, const char *name, uint64_t id, uint64_t via, bool read_only,
                    struct map_want *want, enum client_kind ck, gpushm_buffer_t **out,
                    gpushm_pending_t **pending)
{
  return open_with_wait(conn, name, id, via, read_only, want, ck, 0, out, pending);
}

/* open_for() of a buffer by name that gpushmd waits wait_ms for. */
static int open_waiting(gpushm_t *conn, const char *name, uint64_t id, bool read_only,
                        struct map_want *want, unsigned wait_ms, gpushm_buffer_t **out)
{
  return open_with_wait(conn, name, id, 0, read_only, want, CLIENT_BUFFER, wait_ms, out, NULL);
}

static int open_with_wait(gpushm_t *conn, const char *name, uint64_t id, uint64_t via,
                          bool read_only, struct map_want *want, enum client_kind ck,
                          unsigned wait_ms, gpushm_buffer_t **out, gpushm_pending_t **pending)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__OpenRequest body = GPUSHM__OPEN_REQUEST__INIT;
  struct gpushm_buffer *hit;

  pthread_once(&atfork_once, register_atfork);
  if (!conn || !(pending ? (void *)pending : (void *)out))
    return client_error(GPUSHM_E_INVAL, "conn and out must not be NULL");
  *(pending ? (void **)pending : (void **)out) = NULL;
  if (name && !wire_name_valid(name))
    return client_error(GPUSHM_E_NAME, "invalid buffer name");

  pthread_mutex_lock(&cache_lock);
  hit = name ? handle_find_name(conn, name, read_only, ck, want)
             : handle_find_id(conn, id, read_only, ck, want);
  if (hit) {
    hit->refs++;
    hit->write_discard = hit->write_discard && want->write_discard;
  }
  pthread_mutex_unlock(&cache_lock);
  if (hit && pending)
    return pending_start(conn, NULL, ck, want, hit, pending);
  if (hit) {
    *out = hit;
    return 0;
  }

  if (name) {
    body.key_case = GPUSHM__OPEN_REQUEST__KEY_NAME;
    body.name = (char *)name;
  } else {
    body.key_case = GPUSHM__OPEN_REQUEST__KEY_ID;
    body.id = id;
  }
  body.read_only = read_only;
  body.via_weights = via;
  body.event = ck == CLIENT_EVENT;
  body.wait_ms = wait_ms;
  if (wait_ms && !gpushm_daemon_has(conn, GPUSHM_FEATURE_OPEN_WAIT))
    return client_error(GPUSHM_E_UNSUPPORTED, "gpushmd %s does not wait for names "
                        "(GPUSHM_FEATURE_OPEN_WAIT, 0.8): open again until it is there",
                        conn->daemon_version);
  /* Daemons before 0.8 know no kind in an open, nor timelines. */
  body.kind = ck == CLIENT_TIMELINE ? GPUSHM__KIND__KIND_TIMELINE
              : ck == CLIENT_RING   ? GPUSHM__KIND__KIND_RING
                                    : GPUSHM__KIND__KIND_UNSPECIFIED;
  req.body_case = GPUSHM__REQUEST__BODY_OPEN;
  req.open = &body;
  if (pending)
    return pending_start(conn, &req, ck, want, NULL, pending);
  return open_round_trip(conn, &req, -1, ck, want, out);
}

int gpushm_buffer_open(gpushm_t *conn, const char *name, unsigned flags, gpushm_buffer_t **out)
{
  if (!name) {
    client_clear_error();
    return client_error(GPUSHM_E_NAME, "name is NULL");
  }
  return client_open(conn, name, 0, flags, CLIENT_BUFFER, out);
}

int gpushm_buffer_open_id(gpushm_t *conn, uint64_t id, unsigned flags, gpushm_buffer_t **out)
{
  return client_open(conn, NULL, id, flags, CLIENT_BUFFER, out);
}

/* What a close tells the daemon, copied under cache_lock: once the lock is dropped,
 * another close (this handle's last, or another connection's of the same mapping) may
 * free the handle and its mapping. */
struct release {
  gpushm_t *conn;
  uint64_t id;
  char name[GPUSHM_LIMIT_NAME_LEN + 1];
};

static struct release release_of(const struct gpushm_buffer *buf)
{
  struct release rel = { .conn = buf->conn, .id = buf->map->id };

  memcpy(rel.name, buf->map->name, sizeof rel.name);
  return rel;
}

/* Removes the name while it still names the buffer: by id, one-way where the daemon
 * can. */
static int unlink_entry(const struct release *rel)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__UnlinkRequest body = GPUSHM__UNLINK_REQUEST__INIT;

  if (!(rel->conn->features & GPUSHM_FEATURE_ONEWAY))
    return gpushm_unlink(rel->conn, rel->name);
  body.name = (char *)rel->name;
  body.id = rel->id;
  req.body_case = GPUSHM__REQUEST__BODY_UNLINK;
  req.unlink = &body;
  return client_send_oneway(rel->conn, &req);
}

/* The daemon's reference goes (and the name, with unlink): one request, not waited for
 * where the daemon offers that. */
static int release_entry(const struct release *rel, bool unlink)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__CloseRequest body = GPUSHM__CLOSE_REQUEST__INIT;
  int r;

  if (!(rel->conn->features & GPUSHM_FEATURE_ONEWAY)) {
    int unlinked = unlink ? gpushm_unlink(rel->conn, rel->name) : 0;
    r = release_on_daemon(rel->conn, rel->id);
    return r < 0 ? r : unlinked;
  }
  body.id = rel->id;
  body.unlink = unlink;
  req.body_case = GPUSHM__REQUEST__BODY_CLOSE;
  req.close = &body;
  return client_send_oneway(rel->conn, &req);
}

/* Garbage collectors (a Python object's, a tensor's deleter) close what they hold
 * whenever they run, in a forked child too: a parent's handle is refused there, not
 * closed — its socket is the parent's, and it is in no cache of this process. */
static int inherited_error(const struct gpushm_buffer *buf)
{
  return client_error(GPUSHM_E_INVAL, "'%s' was opened by the parent of this process, "
                      "before fork(): the child leaves it alone (it is unmapped when the "
                      "child exits)", buf->map->name);
}

static int close_entry(gpushm_buffer_t *buf, bool unlink)
{
  struct client_mapping *m;
  struct release rel;
  gpushm_t *conn;
  bool last_open, last_user = false;
  int r, unmapped = 0;

  client_clear_error();
  if (!buf)
    return client_error(GPUSHM_E_INVAL, "buffer is NULL");
  pthread_mutex_lock(&cache_lock);
  if (buf->inherited) {
    pthread_mutex_unlock(&cache_lock);
    return inherited_error(buf);
  }
  m = buf->map;
  last_open = --buf->refs == 0;
  /* a close that is neither (a tensor of the buffer going) sends nothing: no copy */
  if (last_open || unlink)
    rel = release_of(buf);
  if (last_open) {
    handle_remove(buf);
    last_user = unuse_mapping(m);
  } else if (unlink) {
    client_conn_ref(rel.conn); /* the handle's last close may end it meanwhile */
  }
  pthread_mutex_unlock(&cache_lock);
  if (!last_open) {
    if (!unlink)
      return 0;
    r = unlink_entry(&rel);
    client_conn_unref(rel.conn);
    return r;
  }

  conn = buf->conn;
  if (!last_user) {
    /* Another connection's handle maps it still, with a reference of its own: m is
     * that handle's now, and may be gone by the time the request is sent. */
    r = release_entry(&rel, unlink);
  } else if (m->segment) {
    /* The segment stays mapped (idle) after the release: the daemon counts the mapping
     * until this process says it unmapped it, so it frees nothing this process maps. */
    r = release_entry(&rel, unlink);
    client_segment_put(m->segment);
    free(m);
  } else {
    /* unmap before release, always: the daemon may free the memory at once */
    unmapped = unmap_mapping(m);
    r = release_entry(&rel, unlink);
    free(m);
  }
  client_conn_unref(conn);
  free(buf);
  return r < 0 ? r : unmapped;
}

_Static_assert(GPUSHM_BUFFER_REFS_MAX == GPUSHM_LIMIT_BUFFER_REFS, "one limit, two spellings");

/* The caller holds an open, so refs cannot reach 0 (and buf be freed) meanwhile; the
 * count is the open cache's, under its lock, like every open and close. */
int gpushm_buffer_ref(gpushm_buffer_t *buf)
{
  unsigned refs;

  client_clear_error();
  if (!buf)
    return client_error(GPUSHM_E_INVAL, "buffer is NULL");
  if (is_event(buf->map))
    return client_error(GPUSHM_E_INVAL, "'%s' is an event, not a buffer", buf->map->name);
  pthread_mutex_lock(&cache_lock);
  if (buf->inherited) {
    pthread_mutex_unlock(&cache_lock);
    return inherited_error(buf);
  }
  refs = buf->refs;
  if (refs < GPUSHM_LIMIT_BUFFER_REFS)
    buf->refs++;
  pthread_mutex_unlock(&cache_lock);
  if (refs >= GPUSHM_LIMIT_BUFFER_REFS)
    return client_error(GPUSHM_E_LIMIT, "'%s' has %u opens in this process, the most "
                        "gpushm_buffer_ref() takes (GPUSHM_BUFFER_REFS_MAX): are tensors of "
                        "it leaking?", buf->map->name, refs);
  return 0;
}

bool client_buffer_sole_open(gpushm_buffer_t *buf)
{
  bool sole;

  pthread_mutex_lock(&cache_lock);
  sole = buf->refs == 1 && !buf->inherited;
  pthread_mutex_unlock(&cache_lock);
  return sole;
}

int gpushm_buffer_close(gpushm_buffer_t *buf)
{
  return close_entry(buf, false);
}

int gpushm_buffer_close_unlink(gpushm_buffer_t *buf)
{
  return close_entry(buf, true);
}

int gpushm_unlink(gpushm_t *conn, const char *name)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__UnlinkRequest body = GPUSHM__UNLINK_REQUEST__INIT;
  Gpushm__Reply *reply;
  int r;

  client_clear_error();
  if (!conn)
    return client_error(GPUSHM_E_INVAL, "conn is NULL");
  if (!wire_name_valid(name))
    return client_error(GPUSHM_E_NAME, "invalid buffer name");
  body.name = (char *)name;
  req.body_case = GPUSHM__REQUEST__BODY_UNLINK;
  req.unlink = &body;
  if ((r = client_call(conn, &req, &reply, NULL)) < 0)
    return r;
  gpushm__reply__free_unpacked(reply, NULL);
  return 0;
}

gpushm_t *gpushm_buffer_connection(const gpushm_buffer_t *buf)
{
  return buf ? buf->conn : NULL;
}

void *gpushm_buffer_ptr(const gpushm_buffer_t *buf)
{
  return buf ? buf->map->ptr : NULL;
}

uint64_t gpushm_buffer_size(const gpushm_buffer_t *buf)
{
  return buf ? buf->map->size : 0;
}

uint64_t gpushm_buffer_id(const gpushm_buffer_t *buf)
{
  return buf ? buf->map->id : 0;
}

const char *gpushm_buffer_name(const gpushm_buffer_t *buf)
{
  return buf ? buf->map->name : NULL;
}

int gpushm_buffer_device(const gpushm_buffer_t *buf)
{
  return buf ? buf->map->home_device : -1;
}

int gpushm_buffer_map_device(const gpushm_buffer_t *buf)
{
  return buf ? buf->map->device : -1;
}

gpushm_backend_t gpushm_buffer_backend(const gpushm_buffer_t *buf)
{
  return buf ? buf->map->backend : GPUSHM_BACKEND_DEFAULT;
}

gpushm_kind_t gpushm_buffer_kind(const gpushm_buffer_t *buf)
{
  return buf ? buf->map->kind : GPUSHM_KIND_BUFFER;
}

int gpushm_buffer_is_readonly(const gpushm_buffer_t *buf)
{
  return buf ? buf->map->read_only : 0;
}

int gpushm_buffer_owner(const gpushm_buffer_t *buf, uint32_t *uid, uint32_t *gid)
{
  client_clear_error();
  if (!buf)
    return client_error(GPUSHM_E_INVAL, "buffer is NULL");
  if (uid)
    *uid = buf->map->owner_uid;
  if (gid)
    *gid = buf->map->owner_gid;
  return 0;
}

const void *gpushm_buffer_metadata(const gpushm_buffer_t *buf, size_t *size)
{
  const struct client_mapping *m = buf ? buf->map : NULL;

  if (size)
    *size = m && m->metadata_len ? m->metadata_len : 0;
  return m && m->metadata_len ? m->metadata : NULL;
}

_Static_assert(sizeof(gpushm_buffer_desc_t) == GPUSHM_BUFFER_DESC_SIZE_V1,
               "the first published layout, for ever");

int gpushm_buffer_describe(const gpushm_buffer_t *buf, gpushm_buffer_desc_t *desc)
{
  const struct client_mapping *m;
  gpushm_buffer_desc_t d;
  uint32_t size;

  client_clear_error();
  if (!buf || !desc)
    return client_error(GPUSHM_E_INVAL, "buf and desc must not be NULL");
  size = desc->size;
  if (size < offsetof(gpushm_buffer_desc_t, bytes))
    return client_error(GPUSHM_E_INVAL, "desc->size is %u: set it to "
                        "sizeof(gpushm_buffer_desc_t)", size);
  m = buf->map;
  memset(&d, 0, sizeof d);
  d.size = size < sizeof d ? size : (uint32_t)sizeof d;
  d.kind = (uint32_t)m->kind;
  d.id = m->id;
  d.bytes = m->size;
  d.ptr = m->ptr;
  d.name = m->name;
  d.metadata = m->metadata_len ? m->metadata : NULL;
  d.metadata_size = m->metadata_len;
  d.backend = (uint32_t)m->backend;
  d.device = m->home_device;
  d.map_device = m->device;
  d.read_only = m->read_only ? 1 : 0;
  d.owner_uid = m->owner_uid;
  d.owner_gid = m->owner_gid;
  memcpy(desc, &d, d.size);
  return 0;
}

void gpushm_disconnect(gpushm_t *conn)
{
  void (*drop_weights_kept)(gpushm_t *);

  if (!conn)
    return;
  drop_weights_kept = __atomic_load_n(&conn->drop_weights_kept, __ATOMIC_ACQUIRE);
  /* Idle segments, and buffers kept of weight sets, mapped through it would keep the
   * socket open for nothing.  Here, not in conn.c, so that the connection knows nothing
   * of what is mapped through it. */
  __atomic_store_n(&conn->user_gone, true, __ATOMIC_RELEASE);
  client_segment_disconnect(conn);
  if (drop_weights_kept)
    drop_weights_kept(conn);
  client_conn_unref(conn);
}

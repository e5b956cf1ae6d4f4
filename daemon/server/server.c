/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "server/server.h"
#include "backends/cuda_warmup.h"
#include "protocol.h"
#include "registry/registry.h"
#include "server/busy_poll.h"
#include "server/detached.h"
#include "server/fence_repair.h"
#include "server/handlers.h"
#include "server/listener.h"
#include "server/persist.h"
#include "server/session.h"
#include "server/status.h"
#include "server/transport.h"
#include "util/list.h"
#include "util/log.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

struct server {
  uv_loop_t *loop;
  struct server_config cfg;
  struct registry *reg;
  struct persist *persist; /* NULL: none */
  struct listener listener;
  struct status_page_owner status;
  bool serving;
  bool shut; /* server_shutdown() ran */
  uv_timer_t hello_sweep; /* closes connections that never said Hello */
  struct costly_share costly;
  struct busy_poll busy_poll;
  struct name_waits name_waits;
  uint32_t open_fds;          /* as counted at open_fds_at_ms (uv_now) */
  uint64_t open_fds_at_ms;
  bool open_fds_counted;
  struct list sessions; /* session.link, in ascending client id */
  uint32_t n_clients;
  uint32_t next_client_id;
  uint64_t instance_id;
  uint64_t started_ms; /* uv_now() at start */
  struct request_counters counters;
  struct detached_set detached; /* live processes whose connection ended while holding */
  struct fence_repair fence_repair;
  struct cuda_warmup warmup;
  /* What sessions and handlers see of the server. */
  struct transport_limits transport_limits;
  struct session_env session_env;
  struct handler_server handler_server;
};

uint32_t server_count_open_fds(void)
{
  DIR *d = opendir("/proc/self/fd");
  uint32_t n = 0;
  struct dirent *e;

  if (!d)
    return 0;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.')
      n++;
  closedir(d);
  return n - 1; /* the directory's own fd */
}

static void on_hello_sweep(uv_timer_t *timer)
{
  struct server *srv = timer->data;
  uint64_t now = uv_now(srv->loop);
  char why[96];

  snprintf(why, sizeof why, "no hello within %u ms", srv->cfg.hello_timeout_ms);
  for (struct list *l = srv->sessions.next, *next; l != &srv->sessions; l = next) {
    struct session *s = list_entry(l, struct session, link);
    next = l->next;
    if (!s->hello_done && now - s->accepted_loop_ms >= srv->cfg.hello_timeout_ms)
      session_close(s, PROTO_E_TIMEOUT, why);
  }
}

/* Back on the loop: every request parked on the device goes on (or gets the error). */
static void on_device_warm(void *ctx, int device, int status, const char *why)
{
  struct server *srv = ctx;

  for (struct list *l = srv->sessions.next, *next; l != &srv->sessions; l = next) {
    struct session *s = list_entry(l, struct session, link);
    next = l->next;
    if (s->waiting_device == device)
      session_resume(s, status, why);
  }
}

static void warm_device(void *ctx, int device)
{
  struct server *srv = ctx;
  cuda_warmup_start(&srv->warmup, device);
}

/* A process that held sync buffers read-write has exited (detached.h). */
static void on_process_exit(void *ctx, uint32_t client_id, pid_t pid, uid_t uid,
                            const uint64_t *ids, size_t n)
{
  struct server *srv = ctx;
  fence_repair_exited(&srv->fence_repair, client_id, pid, uid, ids, n);
}

/* A client closed its last handle of a buffer it promised values of (registry.h). */
static void on_closed_promiser(void *ctx, uint64_t id, uint32_t client_id, pid_t pid, uid_t uid)
{
  struct server *srv = ctx;
  fence_repair_closed(&srv->fence_repair, id, client_id, pid, uid);
}

static void on_session_gone(void *ctx, struct session *s)
{
  struct server *srv = ctx;

  list_del(&s->link);
  srv->n_clients--;
  listener_left(&srv->listener, s->client.uid);
  /* Not while stopping: every connection ends then, and nobody is left to ask. */
  if (srv->serving)
    detached_track(&srv->detached, &s->client);
}

/* A session for fd, counted by the listener; *status: what admission said (0, or a
 * PROTO_E_* with why).  NULL if the session could not be set up. */
static struct session *add_session(struct server *srv, int fd, int *status, char *why,
                                   size_t why_len)
{
  struct session *s = session_start(&srv->session_env, fd, ++srv->next_client_id,
                                    srv->cfg.has_admin_group ? &srv->cfg.admin_gid : NULL);

  if (!s)
    return NULL;
  list_add_tail(&srv->sessions, &s->link);
  srv->n_clients++;
  *status = listener_admit(&srv->listener, s->client.uid, s->client.admin, why, why_len);
  return s;
}

struct session *server_connect(struct server *srv, int fd)
{
  char why[256];
  int status;
  struct session *s = add_session(srv, fd, &status, why, sizeof why);

  /* No limits here: only a client the listener could not count is refused. */
  if (s && status == PROTO_E_NOMEM) {
    session_close(s, status, why);
    return NULL;
  }
  return s;
}

static void on_accept(void *ctx, int fd)
{
  struct server *srv = ctx;
  char why[256];
  int status;
  struct session *s = add_session(srv, fd, &status, why, sizeof why);

  if (s && status < 0) {
    srv->counters.clients_dropped++;
    session_close(s, status, why);
  }
}

/* The handlers' view of the server. */
static uint32_t handler_open_fds(void *ctx, bool exact)
{
  struct server *srv = ctx;
  uint64_t now = uv_now(srv->loop);

  if (exact || !srv->open_fds_counted || now - srv->open_fds_at_ms >= GPUSHM_LIMIT_OPEN_FDS_AGE_MS) {
    srv->open_fds = server_count_open_fds();
    srv->open_fds_at_ms = now;
    srv->open_fds_counted = true;
  }
  return srv->open_fds;
}

static uint64_t handler_uptime_ms(void *ctx)
{
  struct server *srv = ctx;
  return uv_now(srv->loop) - srv->started_ms;
}

static uint32_t handler_n_clients(void *ctx)
{
  return ((struct server *)ctx)->n_clients;
}

static bool handler_each_client(void *ctx, bool (*fn)(void *arg, const struct handler_peer *peer),
                                void *arg)
{
  struct server *srv = ctx;

  for (const struct list *l = srv->sessions.next; l != &srv->sessions; l = l->next) {
    const struct session *s = list_entry(l, struct session, link);
    const struct handler_peer peer = {
      .client = &s->client,
      .name = s->name,
      .connected_unix_ms = s->connected_unix_ms,
    };
    if (!fn(arg, &peer))
      return true;
  }
  return false;
}

static void handler_disconnect(void *ctx, uint32_t client_id, int status, const char *why)
{
  struct server *srv = ctx;

  for (struct list *l = srv->sessions.next; l != &srv->sessions; l = l->next) {
    struct session *s = list_entry(l, struct session, link);
    if (s->client.id == client_id) {
      session_close(s, status, why);
      return;
    }
  }
}

static void on_unlink(void *ctx, struct reg_object *obj)
{
  struct server *srv = ctx;

  status_page_bump_unlink(&srv->status);
  if (srv->persist)
    persist_unlinked(srv->persist, srv->reg, obj);
  log_event(LOG_LEVEL_DEBUG, LOG_FIELDS(.buffer = obj->name, .buffer_id = obj->id),
            "'%s' (id %llu) unlinked", obj->name, (unsigned long long)obj->id);
}

static void on_created(void *ctx, struct reg_object *obj)
{
  struct server *srv = ctx;

  if (srv->persist)
    persist_created(srv->persist, srv->reg, obj);
  if (obj->key.linked)
    name_waits_made(&srv->name_waits, obj->name);
}

struct server *server_new(uv_loop_t *loop, const struct server_config *cfg, struct registry *reg,
                          struct persist *persist, char *err, size_t errlen)
{
  struct server *srv = calloc(1, sizeof *srv);

  if (!srv) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  srv->loop = loop;
  srv->cfg = *cfg;
  srv->reg = reg;
  srv->persist = persist;
  srv->listener.fd = -1;
  listener_set_limits(&srv->listener, cfg->max_clients, cfg->max_clients_per_uid);
  list_init(&srv->sessions);
  if (getrandom(&srv->instance_id, sizeof srv->instance_id, 0) != sizeof srv->instance_id) {
    snprintf(err, errlen, "getrandom: %s", strerror(errno));
    free(srv);
    return NULL;
  }
  if (status_page_create(&srv->status, err, errlen) < 0) {
    free(srv);
    return NULL;
  }
  registry_set_hooks(reg, on_unlink, on_created, srv);
  registry_set_promise_hook(reg, on_closed_promiser);
  fence_repair_init(&srv->fence_repair, loop, reg, srv->instance_id,
                    &srv->counters.fences_raised, &srv->counters.promises_broken);
  detached_init(&srv->detached, loop, on_process_exit, srv);
  srv->detached.reg = reg;
  cuda_warmup_init(&srv->warmup, loop, on_device_warm, srv);
  srv->transport_limits = (struct transport_limits){
    .max_queued_frames = cfg->max_queued_frames,
    .max_queued_bytes = cfg->max_queued_bytes,
  };
  srv->handler_server = (struct handler_server){
    .ctx = srv,
    .instance_id = srv->instance_id,
    .features = PROTO_FEATURE_DISCONNECT | PROTO_FEATURE_SEGMENTS | PROTO_FEATURE_ONEWAY |
                PROTO_FEATURE_METADATA | PROTO_FEATURE_GRAPHICS | PROTO_FEATURE_STRICT_MODE |
                PROTO_FEATURE_IPC_FENCES | PROTO_FEATURE_PROMISES | PROTO_FEATURE_TIMELINES |
                PROTO_FEATURE_RINGS | PROTO_FEATURE_SEMAPHORES | PROTO_FEATURE_WEIGHTS |
                PROTO_FEATURE_OPEN_WAIT | PROTO_FEATURE_CREATE_GROUP |
                (persist && persist_enabled(persist) ? PROTO_FEATURE_FDSTORE : 0),
    .status = &srv->status,
    .counters = &srv->counters,
    .uptime_ms = handler_uptime_ms,
    .n_clients = handler_n_clients,
    .open_fds = handler_open_fds,
    .each_client = handler_each_client,
    .disconnect = handler_disconnect,
    .detached = &srv->detached,
  };
  srv->handler_server.n_families = handler_families(&srv->handler_server.families);
  srv->session_env = (struct session_env){
    .loop = loop,
    .reg = reg,
    .limits = &srv->transport_limits,
    .handler_server = &srv->handler_server,
    .counters = &srv->counters,
    .gone = on_session_gone,
    .device_ready = cuda_warmup_ready,
    .warm_device = warm_device,
    .costly = &srv->costly,
    .busy_poll = &srv->busy_poll,
    .name_waits = &srv->name_waits,
    .ctx = srv,
  };
  costly_share_init(&srv->costly, loop, session_costly_turn);
  busy_poll_init(&srv->busy_poll, loop, cfg->busy_poll_us);
  name_waits_init(&srv->name_waits, loop, session_name_made, session_name_expired);
  uv_timer_init(loop, &srv->hello_sweep);
  srv->hello_sweep.data = srv;
  return srv;
}

int server_listen(struct server *srv, char *err, size_t errlen)
{
  return listener_bind(&srv->listener, srv->cfg.socket_path, srv->cfg.socket_mode,
                       srv->cfg.has_socket_group ? &srv->cfg.socket_gid : NULL, err, errlen);
}

void server_adopt_socket(struct server *srv, int fd)
{
  listener_adopt(&srv->listener, fd);
}

void server_start(struct server *srv)
{
  /* A few sweeps per deadline bound how late a silent connection is closed. */
  uint32_t sweep_ms = srv->cfg.hello_timeout_ms / 4 + 1;

  srv->started_ms = uv_now(srv->loop);
  srv->serving = true;
  uv_timer_start(&srv->hello_sweep, on_hello_sweep, sweep_ms, sweep_ms);
  listener_start(&srv->listener, srv->loop, on_accept, srv);
}

void server_reload(struct server *srv, const struct server_config *cfg)
{
  struct server_config next = *cfg;
  uint32_t sweep_ms = next.hello_timeout_ms / 4 + 1;

  /* The socket is bound once; connections already open keep their slots. */
  memcpy(next.socket_path, srv->cfg.socket_path, sizeof next.socket_path);
  next.socket_mode = srv->cfg.socket_mode;
  next.has_socket_group = srv->cfg.has_socket_group;
  next.socket_gid = srv->cfg.socket_gid;
  srv->cfg = next;
  listener_set_limits(&srv->listener, next.max_clients, next.max_clients_per_uid);
  srv->transport_limits.max_queued_frames = next.max_queued_frames;
  srv->transport_limits.max_queued_bytes = next.max_queued_bytes;
  busy_poll_set(&srv->busy_poll, next.busy_poll_us);
  if (srv->serving)
    uv_timer_start(&srv->hello_sweep, on_hello_sweep, sweep_ms, sweep_ms);
}

void server_shutdown(struct server *srv)
{
  /* Also for a server that never served (its socket was another daemon's): the loop
   * can close only once every handle server_new() made is closed. */
  if (srv->shut)
    return;
  srv->shut = true;
  srv->serving = false;
  if (!uv_is_closing((uv_handle_t *)&srv->hello_sweep))
    uv_close((uv_handle_t *)&srv->hello_sweep, NULL);
  costly_share_close(&srv->costly);
  busy_poll_close(&srv->busy_poll);
  name_waits_close(&srv->name_waits);
  listener_stop(&srv->listener);
  while (!list_empty(&srv->sessions))
    session_close(list_entry(srv->sessions.next, struct session, link), 0, NULL);
  detached_shutdown(&srv->detached);
  fence_repair_shutdown(&srv->fence_repair);
}

void server_free(struct server *srv)
{
  if (!srv)
    return;
  status_page_destroy(&srv->status);
  free(srv);
}

uint64_t server_instance_id(const struct server *srv)
{
  return srv->instance_id;
}

bool server_socket_inherited(const struct server *srv)
{
  return srv->listener.inherited;
}

uint32_t server_client_count(const struct server *srv)
{
  return srv->n_clients;
}

void server_status_line(const struct server *srv, char *out, size_t len)
{
  struct reg_totals t;

  registry_totals(srv->reg, &t);
  snprintf(out, len, "%u clients, %zu buffers, %llu bytes (%llu of host memory)", srv->n_clients,
           t.objects, (unsigned long long)t.bytes_allocated, (unsigned long long)t.host_bytes);
}

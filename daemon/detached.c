#include "config.h"
#include "detached.h"
#include "log.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

static void on_sweep(uv_timer_t *timer);

void detached_init(struct detached_set *set, uv_loop_t *loop)
{
  memset(set, 0, sizeof *set);
  set->loop = loop;
  list_init(&set->list);
  uv_timer_init(loop, &set->sweep);
  set->sweep.data = set;
}

static void free_detached(uv_handle_t *handle)
{
  struct detached *d = handle->data;
  close(d->pidfd);
  free(d);
}

static void forget(struct detached *d)
{
  struct detached_set *set = d->set;

  list_del(&d->link);
  set->n--;
  set->warned_full = false;
  if (d->pidfd >= 0) {
    uv_close((uv_handle_t *)&d->watch, free_detached);
    return;
  }
  free(d);
  if (--set->n_swept == 0)
    uv_timer_stop(&set->sweep);
}

/* Without pidfds: a process is gone once kill(pid, 0) finds no such process. */
static void on_sweep(uv_timer_t *timer)
{
  struct detached_set *set = timer->data;
  struct list *l, *next;

  for (l = set->list.next; l != &set->list; l = next) {
    struct detached *d = list_entry(l, struct detached, link);
    next = l->next;
    if (d->pidfd < 0 && kill(d->pid, 0) < 0 && errno == ESRCH)
      forget(d);
  }
}

static void on_process_exit(uv_poll_t *watch, int status, int events)
{
  struct detached *d = watch->data;
  (void)status, (void)events;
  log_debug("pid %d, detached from client %u, has exited: what it mapped is free", (int)d->pid,
            d->client_id);
  forget(d);
}

/* A pidfd is readable once its process has exited (a zombie included). */
static bool exited(int pidfd)
{
  struct pollfd p = { .fd = pidfd, .events = POLLIN };
  return poll(&p, 1, 0) > 0;
}

static uint64_t now_unix_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static unsigned tracked_for_uid(const struct detached_set *set, uid_t uid)
{
  unsigned n = 0;
  for (const struct list *l = set->list.next; l != &set->list; l = l->next)
    n += list_entry(l, struct detached, link)->uid == uid;
  return n;
}

void detached_track(struct detached_set *set, const struct reg_client *client)
{
  const struct list *l;
  struct detached *d;
  size_t n = 0, keep;
  uint64_t bytes = 0;
  int pidfd;

  for (l = client->holdings.next; l != &client->holdings; l = l->next) {
    const struct reg_holding *h = list_entry(l, struct reg_holding, client_link);
    if (h->refs && h->buffer->kind == REG_BUFFER) {
      n++;
      bytes += h->buffer->allocated;
    }
  }
  if (n == 0 || client->pid <= 0)
    return;
  /* Opened now: from here on the pidfd names this process, even if its pid is reused. */
  pidfd = set->no_pidfd ? -1 : (int)syscall(SYS_pidfd_open, client->pid, 0);
  if (pidfd < 0 && !set->no_pidfd) {
    if (errno == ESRCH)
      return; /* the usual end: the process exited, and its mappings with it */
    if (errno == ENOSYS) {
      set->no_pidfd = true;
      log_info("no pidfd_open here: processes that keep memory after their connection "
               "ended are checked every %u ms", GPUSHM_DETACHED_SWEEP_MS);
    }
    /* otherwise (no fds left, say) this one is swept like the rest */
  }
  if (pidfd < 0 && kill(client->pid, 0) < 0 && errno == ESRCH)
    return;
  if (pidfd >= 0 && exited(pidfd)) {
    close(pidfd);
    return;
  }
  keep = n < GPUSHM_LIMIT_DETACHED_BUFFERS_KEPT ? n : GPUSHM_LIMIT_DETACHED_BUFFERS_KEPT;
  if (set->n >= GPUSHM_LIMIT_DETACHED_PROCESSES ||
      tracked_for_uid(set, client->uid) >= GPUSHM_LIMIT_DETACHED_PER_UID ||
      !(d = calloc(1, sizeof *d + keep * sizeof d->buffers[0]))) {
    set->untracked++;
    if (!set->warned_full)
      log_warn("pid %d (uid %u) keeps %zu buffers mapped after its connection ended; not "
               "listed: %u such processes are (%u per uid at most); said once until there "
               "is room", (int)client->pid, (unsigned)client->uid, n, set->n,
               GPUSHM_LIMIT_DETACHED_PER_UID);
    set->warned_full = true;
    if (pidfd >= 0)
      close(pidfd);
    return;
  }
  d->set = set;
  d->pidfd = pidfd;
  d->pid = client->pid;
  d->uid = client->uid;
  d->client_id = client->id;
  d->since_unix_ms = now_unix_ms();
  d->n_total = n;
  d->bytes_total = bytes;
  for (l = client->holdings.next; l != &client->holdings && d->n < keep; l = l->next) {
    const struct reg_holding *h = list_entry(l, struct reg_holding, client_link);
    const struct reg_object *b = h->buffer;
    struct detached_buffer *db;
    if (!h->refs || b->kind != REG_BUFFER)
      continue;
    db = &d->buffers[d->n++];
    db->id = b->id;
    snprintf(db->name, sizeof db->name, "%s", b->name);
    db->backend = b->backend->kind;
    db->device = b->device;
    db->allocated = b->allocated;
  }
  if (pidfd < 0) {
    if (set->n_swept++ == 0)
      uv_timer_start(&set->sweep, on_sweep, GPUSHM_DETACHED_SWEEP_MS, GPUSHM_DETACHED_SWEEP_MS);
  } else if (uv_poll_init(set->loop, &d->watch, pidfd) < 0 ||
             uv_poll_start(&d->watch, UV_READABLE, on_process_exit) < 0) {
    set->untracked++;
    close(pidfd);
    free(d);
    return;
  } else {
    d->watch.data = d;
  }
  list_add_tail(&set->list, &d->link);
  set->n++;
  /* Debug only: a process that is exiting closes its socket before its pidfd turns
   * readable, so most of these are forgotten again within milliseconds. */
  log_debug("client %u (pid %d, uid %u) ended its connection while holding %zu buffers; it "
            "keeps what it maps until it exits", d->client_id, (int)d->pid, (unsigned)d->uid,
            d->n_total);
}

void detached_forget_all(struct detached_set *set)
{
  while (set->list.next != &set->list)
    forget(list_entry(set->list.next, struct detached, link));
}

void detached_shutdown(struct detached_set *set)
{
  detached_forget_all(set);
  uv_close((uv_handle_t *)&set->sweep, NULL);
}

/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "protocol.h"
#include "server/detached.h"
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
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

void detached_init(struct detached_set *set, uv_loop_t *loop, detached_exit_fn *exited,
                   void *exited_ctx)
{
  memset(set, 0, sizeof *set);
  set->loop = loop;
  set->exited = exited;
  set->exited_ctx = exited_ctx;
  list_init(&set->list);
  uv_timer_init(loop, &set->sweep);
  set->sweep.data = set;
}

static void free_detached(uv_handle_t *handle)
{
  struct detached *d = handle->data;
  close(d->pidfd);
  free(d->fences);
  free(d);
}

static void forget(struct detached *d)
{
  struct detached_set *set = d->set;

  for (size_t i = 0; i < d->n_segments; i++)
    registry_undetach_segment(set->reg, d->segments[i]);
  free(d->segments);
  d->segments = NULL;
  d->n_segments = 0;

  list_del(&d->link);
  if (d->listed) {
    set->n--;
    set->warned_full = false;
  }
  if (d->pidfd >= 0) {
    uv_close((uv_handle_t *)&d->watch, free_detached);
    return;
  }
  free(d->fences);
  free(d);
  if (--set->n_swept == 0)
    uv_timer_stop(&set->sweep);
}

/* The process has exited: what its queued fence writes were to do is the daemon's now. */
static void report_exit(struct detached_set *set, uint32_t client_id, pid_t pid, uid_t uid,
                        const uint64_t *fences, size_t n_fences)
{
  if (n_fences && set->exited)
    set->exited(set->exited_ctx, client_id, pid, uid, fences, n_fences);
}

static void exited_forget(struct detached *d)
{
  report_exit(d->set, d->client_id, d->pid, d->uid, d->fences, d->n_fences);
  forget(d);
}

/* Without a pidfd: a process is gone once kill(pid, 0) finds no such process, or it is
 * a zombie (exited, its mappings and CUDA contexts gone, its parent not yet reaping it:
 * kill(pid, 0) still finds it).  A pidfd says it at exit already. */
static bool process_gone(pid_t pid)
{
  char path[64], stat[256], *paren;
  ssize_t n;
  int fd;

  if (kill(pid, 0) < 0 && errno == ESRCH)
    return true;
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
    return false;
  n = read(fd, stat, sizeof stat - 1);
  close(fd);
  if (n <= 0)
    return false;
  stat[n] = '\0';
  /* "pid (comm) S ...": comm may hold spaces and parentheses; the state follows the
   * last ')' */
  return (paren = strrchr(stat, ')')) && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

static void on_sweep(uv_timer_t *timer)
{
  struct detached_set *set = timer->data;
  struct list *l, *next;

  for (l = set->list.next; l != &set->list; l = next) {
    struct detached *d = list_entry(l, struct detached, link);
    next = l->next;
    if (d->pidfd < 0 && process_gone(d->pid))
      exited_forget(d);
  }
}

static void on_process_exit(uv_poll_t *watch, int status, int events)
{
  struct detached *d = watch->data;
  (void)status, (void)events;
  log_debug("pid %d, detached from client %u, has exited: what it mapped is free", (int)d->pid,
            d->client_id);
  exited_forget(d);
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
  for (const struct list *l = set->list.next; l != &set->list; l = l->next) {
    const struct detached *d = list_entry(l, struct detached, link);
    n += d->listed && d->uid == uid;
  }
  return n;
}

/* Whether the holding may have left a fence write queued or a promise unkept: a sync
 * buffer with a fence (the daemon can do nothing for an IPC event: docs/sync.md), or
 * one whose promise the client made, opened read-write (read-only openers can neither
 * release nor promise). */
static bool may_owe_fence(const struct reg_holding *h)
{
  struct reg_description d;

  if (!h->refs || !h->read_write)
    return false;
  registry_describe(h->buffer, &d);
  return d.fenced || (d.promiser && d.promiser == h->client->id);
}

/* What a process maps of an object it held: memory, or a timeline's control block
 * (events map nothing). */
static bool holds_mapping(const struct reg_object *b)
{
  return b->kind == REG_BUFFER || b->kind == REG_TIMELINE || b->kind == REG_RING;
}

/* The segments the process maps: held by d until it exits, else (d NULL) retired. */
static void take_segments(struct detached_set *set, struct detached *d, struct reg_client *client)
{
  struct segment **segs;
  ssize_t n;

  if (!set->reg)
    return;
  if (!d) {
    registry_retire_segments(set->reg, client);
    return;
  }
  if ((n = registry_detach_segments(set->reg, client, &segs)) > 0) {
    d->segments = segs;
    d->n_segments = (size_t)n;
  }
}

void detached_track(struct detached_set *set, struct reg_client *client)
{
  const struct list *l;
  struct detached *d;
  size_t n = 0, n_fences = 0, keep;
  uint64_t bytes = 0, *fences = NULL;
  bool gone, over;
  int pidfd;

  for (l = client->holdings.next; l != &client->holdings; l = l->next) {
    const struct reg_holding *h = list_entry(l, struct reg_holding, client_link);
    if (h->refs && holds_mapping(h->buffer)) {
      n++;
      bytes += h->buffer->allocated;
      n_fences += may_owe_fence(h);
    }
  }
  if (n == 0)
    return;
  if (n_fences && !(fences = malloc(n_fences * sizeof *fences)))
    log_error("client %u (pid %d): out of memory: should its process have died with fence "
              "writes queued, they are not repaired", client->id, (int)client->pid);
  n_fences = 0;
  for (l = client->holdings.next; fences && l != &client->holdings; l = l->next) {
    const struct reg_holding *h = list_entry(l, struct reg_holding, client_link);
    if (may_owe_fence(h))
      fences[n_fences++] = h->buffer->id;
  }
  if (client->pid <= 0) {
    take_segments(set, NULL, client);
    if (n_fences)
      log_warn("client %u held %zu fenced or promised sync buffers read-write as its "
               "connection ended, and its process is invisible to gpushmd (another PID "
               "namespace): its exit cannot be seen, so fence writes it may leave queued are "
               "not repaired, and its promises are broken now (pid 0: the exit handler "
               "raises no fence)", client->id, n_fences);
    /* Waiters of its promises would wait for ever: broken now, its fences left alone. */
    report_exit(set, client->id, 0, client->uid, fences, n_fences);
    free(fences);
    return;
  }
  /* Opened now: from here on the pidfd names this process, even if its pid is reused. */
  pidfd = set->no_pidfd ? -1 : (int)syscall(SYS_pidfd_open, client->pid, 0);
  gone = pidfd < 0 && !set->no_pidfd && errno == ESRCH;
  if (pidfd < 0 && !set->no_pidfd && errno == ENOSYS) {
    set->no_pidfd = true;
    log_info("no pidfd_open here: processes that keep memory after their connection "
             "ended are checked every %u ms", GPUSHM_DETACHED_SWEEP_MS);
  }
  /* otherwise (no fds left, say) this one is swept like the rest */
  if (!gone)
    gone = pidfd < 0 ? process_gone(client->pid) : exited(pidfd);
  if (gone) {
    /* the usual end: the process exited, and its mappings with it */
    if (pidfd >= 0)
      close(pidfd);
    report_exit(set, client->id, client->pid, client->uid, fences, n_fences);
    free(fences);
    return;
  }
  over = set->n >= GPUSHM_LIMIT_DETACHED_PROCESSES ||
         tracked_for_uid(set, client->uid) >= GPUSHM_LIMIT_DETACHED_PER_UID;
  keep = over ? 0 : n < GPUSHM_LIMIT_DETACHED_BUFFERS_KEPT ? n : GPUSHM_LIMIT_DETACHED_BUFFERS_KEPT;
  d = over && !n_fences ? NULL : calloc(1, sizeof *d + keep * sizeof d->buffers[0]);
  if (over || !d) {
    set->untracked++;
    if (!set->warned_full)
      log_warn("pid %d (uid %u) keeps %zu buffers mapped after its connection ended; not "
               "listed: %u such processes are (%u per uid at most); said once until there "
               "is room", (int)client->pid, (unsigned)client->uid, n, set->n,
               GPUSHM_LIMIT_DETACHED_PER_UID);
    set->warned_full = true;
    if (pidfd >= 0)
      close(pidfd);
    pidfd = -1;
    if (!d) {
      take_segments(set, NULL, client);
      if (n_fences)
        log_error("client %u (pid %d): out of memory: should its process die with fence "
                  "writes queued, they are not repaired", client->id, (int)client->pid);
      free(fences);
      return;
    }
  }
  d->set = set;
  d->pidfd = pidfd;
  d->listed = !over;
  d->pid = client->pid;
  d->uid = client->uid;
  d->client_id = client->id;
  d->since_unix_ms = now_unix_ms();
  d->n_total = n;
  d->bytes_total = bytes;
  d->n_fences = n_fences;
  d->fences = fences;
  take_segments(set, d, client);
  for (l = client->holdings.next; l != &client->holdings && d->n < keep; l = l->next) {
    const struct reg_holding *h = list_entry(l, struct reg_holding, client_link);
    const struct reg_object *b = h->buffer;
    struct detached_buffer *db;
    if (!h->refs || !holds_mapping(b))
      continue;
    db = &d->buffers[d->n++];
    db->id = b->id;
    snprintf(db->name, sizeof db->name, "%s", b->name);
    db->backend = b->backend       ? b->backend->kind
                  : b->kind == REG_TIMELINE ? PROTO_BACKEND_HOST /* its control block */
                                            : PROTO_BACKEND_EXTERNAL;
    db->device = b->device;
    db->allocated = b->allocated;
  }
  if (pidfd >= 0 && uv_poll_init(set->loop, &d->watch, pidfd) < 0) {
    close(pidfd); /* cannot happen with a pidfd; if it did, swept rather than lost */
    d->pidfd = pidfd = -1;
  }
  if (pidfd >= 0) {
    d->watch.data = d;
    /* Fails only for an fd another handle watches (EEXIST), which a new pidfd is not. */
    uv_poll_start(&d->watch, UV_READABLE, on_process_exit);
  } else if (set->n_swept++ == 0) {
    uv_timer_start(&set->sweep, on_sweep, GPUSHM_DETACHED_SWEEP_MS, GPUSHM_DETACHED_SWEEP_MS);
  }
  list_add_tail(&set->list, &d->link);
  set->n += d->listed;
  /* Debug only: a process that is exiting closes its socket before its pidfd turns
   * readable, so most of these are forgotten again within milliseconds. */
  log_debug("client %u (pid %d, uid %u) ended its connection while holding %zu buffers; it "
            "keeps what it maps until it exits%s", d->client_id, (int)d->pid, (unsigned)d->uid,
            d->n_total, d->listed ? "" : " (not listed: watched for its fences only)");
}

void detached_forget_all(struct detached_set *set)
{
  while (set->list.next != &set->list)
    forget(list_entry(set->list.next, struct detached, link));
}

void detached_shutdown(struct detached_set *set)
{
  for (struct list *l = set->list.next, *next; l != &set->list; l = next) {
    struct detached *d = list_entry(l, struct detached, link);
    next = l->next;
    if (!d->n_fences)
      continue;
    if (d->pidfd >= 0 ? exited(d->pidfd) : process_gone(d->pid))
      exited_forget(d);
    else
      log_warn("pid %d (client %u) outlives gpushmd: should it die with fence writes "
               "queued on %zu sync buffers, they are not repaired", (int)d->pid, d->client_id,
               d->n_fences);
  }
  detached_forget_all(set);
  uv_close((uv_handle_t *)&set->sweep, NULL);
}

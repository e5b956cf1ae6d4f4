/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "server/fence_repair.h"
#include "gpushm_limits.h"
#include "protocol.h"
#include "util/log.h"
#include "shm_layout.h"

#include <stdlib.h>

/* A dead releaser's fence to raise, or a promise to break, waiting for the releases
 * published before to land: one per buffer and client. */
struct pending_break {
  uint64_t id;
  uint32_t client_id;
  pid_t pid;
  uid_t uid;
  uint64_t deadline_ms; /* uv_now(): go on regardless from then */
  uint64_t next_ms;     /* the next look */
  uint64_t interval_ms; /* after it */
  bool raise;           /* the fence its releases left short is still to raise */
  bool brk;             /* its promise is still to break */
  bool closed;          /* its promiser closed it (else exited) */
};

void fence_repair_init(struct fence_repair *fr, uv_loop_t *loop, struct registry *reg,
                       uint64_t instance_id, uint64_t *fences_raised, uint64_t *promises_broken)
{
  *fr = (struct fence_repair){ .reg = reg, .instance_id = instance_id,
                               .fences_raised = fences_raised,
                               .promises_broken = promises_broken };
  uv_timer_init(loop, &fr->retry);
  fr->retry.data = fr;
}

/* Returns 2 where the raise must be tried again (the release before is still queued),
 * else 1 where it said the control block's header was overwritten, else 0. */
static int raise_signed(struct fence_repair *fr, struct reg_object *b, uint32_t client_id,
                        pid_t pid, bool force)
{
  const uint32_t releaser = sync_releaser_id(fr->instance_id, client_id);
  struct reg_raised_fence out;
  char err[256];
  int r = registry_raise_fence(fr->reg, b, releaser, force, &out, err, sizeof err);

  if (r < 0 && out.seq == 0) {
    /* A scribbled header is a holder's doing, not the daemon's failing. */
    log_msg(r == PROTO_E_PROTO ? LOG_LEVEL_WARN : LOG_LEVEL_ERROR,
            "'%s' (id %llu): client %u (pid %d) has exited, and its fence cannot be "
            "checked: %s", b->name, (unsigned long long)b->id, client_id, (int)pid, err);
  } else if (r < 0) {
    log_error("'%s' (id %llu): release %llu by client %u (pid %d), which has exited: raising "
              "its fence failed, streams that acquire it may wait for ever: %s", b->name,
              (unsigned long long)b->id, (unsigned long long)out.seq, client_id, (int)pid,
              err);
  } else if (r == 2) {
    log_debug("'%s': release %llu by client %u (pid %d, exited) waits for release %llu "
              "(fence at %llu) before its fence is raised", b->name,
              (unsigned long long)out.seq, client_id, (int)pid,
              (unsigned long long)out.before, (unsigned long long)out.was);
    return 2;
  } else if (r > 0) {
    (*fr->fences_raised)++;
    log_warn("'%s' (id %llu): release %llu by client %u (pid %d) was published, but its "
             "process exited before its GPU wrote the fence (it held %llu); fence raised%s: "
             "waiters go on with what its work left", b->name, (unsigned long long)b->id,
             (unsigned long long)out.seq, client_id, (int)pid, (unsigned long long)out.was,
             force && out.before > out.was ? " without waiting longer for the releases "
                                             "before it to land" : "");
  } else if (out.seq) {
    log_debug("'%s': release %llu by client %u (pid %d, exited) had its fence written",
              b->name, (unsigned long long)out.seq, client_id, (int)pid);
  }
  return r == PROTO_E_PROTO && out.seq == 0;
}

/* Returns whether the break must be tried again (the fence is not yet at the
 * counter).  said_scribbled: a scribbled header was logged already; closed: the promiser
 * closed the buffer (else its process exited). */
static bool break_promise(struct fence_repair *fr, struct reg_object *b, uint32_t client_id,
                          pid_t pid, bool force, bool said_scribbled, bool closed)
{
  struct reg_broken_promise out;
  char err[256];
  int r = registry_break_promise(fr->reg, b, client_id, force, &out, err, sizeof err);

  if (r == 2)
    return true;
  if (r == PROTO_E_PROTO && said_scribbled)
    return false;
  if (r < 0) {
    log_msg(r == PROTO_E_PROTO ? LOG_LEVEL_WARN : LOG_LEVEL_ERROR,
            "'%s' (id %llu): client %u (pid %d) %s, and its promise cannot be broken, "
            "waiters of what it promised may wait for ever: %s", b->name,
            (unsigned long long)b->id, client_id, (int)pid,
            closed ? "closed its last handle of it" : "has exited", err);
  } else if (r > 0 && closed && (b->kind == REG_RING || b->ring_of)) {
    /* A ring's producer and consumers promise ahead (docs/rings.md): their closes owe
     * values by design, and waiters are told the stream ended. */
    log_debug("'%s' (id %llu): client %u (pid %d) closed its last handle; values %llu to "
              "%llu it promised ahead count as lost", b->name, (unsigned long long)b->id,
              client_id, (int)pid, (unsigned long long)out.lost_from + 1,
              (unsigned long long)out.upto);
  } else if (r > 0) {
    (*fr->promises_broken)++;
    log_warn("'%s' (id %llu): client %u (pid %d) %s owing values %llu to %llu it "
             "promised; counter raised to %llu%s, those values count as lost (signaller lost)",
             b->name, (unsigned long long)b->id, client_id, (int)pid,
             closed ? "closed its last handle of it" : "has exited",
             (unsigned long long)out.lost_from + 1, (unsigned long long)out.upto,
             (unsigned long long)out.upto,
             force ? " without waiting longer for the releases before it to land" : "");
  }
  return false;
}

static void on_retry(uv_timer_t *timer);

/* The timer fires once, at the earliest look due. */
static void schedule(struct fence_repair *fr)
{
  uint64_t now = uv_now(fr->retry.loop), next = UINT64_MAX;

  for (size_t i = 0; i < fr->n_pending; i++)
    if (fr->pending[i].next_ms < next)
      next = fr->pending[i].next_ms;
  if (next == UINT64_MAX)
    uv_timer_stop(&fr->retry);
  else
    uv_timer_start(&fr->retry, on_retry, next > now ? next - now : 0, 0);
}

/* Does what is left of p (its raise, then its break: the break waits for every
 * release, the raised one too) at once, as far as it can; returns whether some is left. */
static bool repair(struct fence_repair *fr, struct reg_object *b, struct pending_break *p,
                   bool force, bool said_scribbled)
{
  if (p->raise) {
    int r = raise_signed(fr, b, p->client_id, p->pid, force);
    if (r == 2)
      return true;
    p->raise = false;
    said_scribbled = said_scribbled || r == 1;
  }
  if (p->brk && break_promise(fr, b, p->client_id, p->pid, force, said_scribbled, p->closed))
    return true;
  p->brk = false;
  return false;
}

/* Tries p now; what cannot be done yet waits, up to the limits. */
static void start_repair(struct fence_repair *fr, struct reg_object *b, struct pending_break p)
{
  uint64_t now = uv_now(fr->retry.loop);
  const char *why = NULL;
  unsigned of_uid = 0;

  if (!repair(fr, b, &p, false, false))
    return;
  for (size_t i = 0; i < fr->n_pending; i++) {
    struct pending_break *q = &fr->pending[i];
    if (q->id == p.id && q->client_id == p.client_id) {
      q->raise = q->raise || p.raise; /* its exit after its close: one wait */
      q->brk = q->brk || p.brk;
      return;
    }
    of_uid += q->uid == p.uid;
  }
  if (fr->n_pending >= GPUSHM_LIMIT_PENDING_BREAKS || of_uid >= GPUSHM_LIMIT_PENDING_BREAKS_PER_UID)
    why = of_uid >= GPUSHM_LIMIT_PENDING_BREAKS_PER_UID ? "too many repairs of its uid waiting"
                                                        : "too many repairs waiting";
  else if (fr->n_pending == fr->cap) {
    size_t cap = fr->cap ? 2 * fr->cap : 8;
    struct pending_break *grown = realloc(fr->pending, cap * sizeof *grown);
    if (grown) {
      fr->pending = grown;
      fr->cap = cap;
    } else {
      why = "out of memory";
    }
  }
  if (why) {
    log_error("%s: the %s on '%s' (id %llu) of client %u (pid %d) %s without waiting for "
              "the releases before it to land", why,
              p.raise ? "fence its release left short" : "promise", b->name,
              (unsigned long long)b->id, p.client_id, (int)p.pid,
              p.raise ? "is raised" : "is broken");
    repair(fr, b, &p, true, false);
    return;
  }
  p.deadline_ms = now + GPUSHM_PROMISE_BREAK_WAIT_MS;
  p.next_ms = now + GPUSHM_PROMISE_BREAK_RETRY_MS;
  p.interval_ms = GPUSHM_PROMISE_BREAK_RETRY_MS;
  fr->pending[fr->n_pending++] = p;
  schedule(fr);
}

static void on_retry(uv_timer_t *timer)
{
  struct fence_repair *fr = timer->data;
  uint64_t now = uv_now(timer->loop);
  size_t kept = 0;

  for (size_t i = 0; i < fr->n_pending; i++) {
    struct pending_break p = fr->pending[i];
    struct reg_object *b = registry_find_id(fr->reg, p.id);

    /* Freed since (ids are never reused): nobody holds it, so nobody waits on it. */
    if (!b)
      continue;
    if (now >= p.next_ms) {
      if (!repair(fr, b, &p, now >= p.deadline_ms, false))
        continue;
      p.interval_ms = 2 * p.interval_ms < GPUSHM_PROMISE_BREAK_RETRY_MAX_MS
                        ? 2 * p.interval_ms : GPUSHM_PROMISE_BREAK_RETRY_MAX_MS;
      p.next_ms = now + p.interval_ms;
      if (p.next_ms > p.deadline_ms)
        p.next_ms = p.deadline_ms;
    }
    fr->pending[kept++] = p;
  }
  fr->n_pending = kept;
  schedule(fr);
}

void fence_repair_exited(struct fence_repair *fr, uint32_t client_id, pid_t pid, uid_t uid,
                         const uint64_t *ids, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    struct reg_object *b = registry_find_id(fr->reg, ids[i]);

    if (b)
      /* pid 0: a process gpushmd cannot see, perhaps alive: its writes may still land */
      start_repair(fr, b, (struct pending_break){ .id = b->id, .client_id = client_id,
                                                  .pid = pid, .uid = uid, .raise = pid > 0,
                                                  .brk = true });
  }
}

void fence_repair_closed(struct fence_repair *fr, uint64_t id, uint32_t client_id, pid_t pid,
                         uid_t uid)
{
  struct reg_object *b = registry_find_id(fr->reg, id);

  if (b)
    start_repair(fr, b, (struct pending_break){ .id = id, .client_id = client_id, .pid = pid,
                                                .uid = uid, .brk = true, .closed = true });
}

void fence_repair_shutdown(struct fence_repair *fr)
{
  /* Nobody would break them after: broken now, the releases before them still queued. */
  for (size_t i = 0; i < fr->n_pending; i++) {
    struct reg_object *b = registry_find_id(fr->reg, fr->pending[i].id);
    if (b)
      repair(fr, b, &fr->pending[i], true, false);
  }
  free(fr->pending);
  fr->pending = NULL;
  fr->n_pending = fr->cap = 0;
  if (!uv_is_closing((uv_handle_t *)&fr->retry))
    uv_close((uv_handle_t *)&fr->retry, NULL);
}

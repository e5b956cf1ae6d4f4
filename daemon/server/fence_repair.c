/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "server/fence_repair.h"
#include "gpushm_limits.h"
#include "protocol.h"
#include "util/log.h"
#include "shm_layout.h"

#include <stdlib.h>

struct pending_break {
  uint64_t id;
  uint32_t client_id;
  pid_t pid;
  uid_t uid;
  uint64_t deadline_ms; /* uv_now(): break regardless from then */
  uint64_t next_ms;     /* the next look */
  uint64_t interval_ms; /* after it */
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

/* Returns whether it said the control block's header was overwritten. */
static bool raise_signed(struct fence_repair *fr, struct reg_object *b, uint32_t releaser,
                         uint32_t client_id, pid_t pid)
{
  uint64_t seq, was;
  char err[256];
  int r = registry_raise_fence(fr->reg, b, releaser, &seq, &was, err, sizeof err);

  if (r < 0 && seq == 0) {
    /* A scribbled header is a holder's doing, not the daemon's failing. */
    log_msg(r == PROTO_E_PROTO ? LOG_LEVEL_WARN : LOG_LEVEL_ERROR,
            "'%s' (id %llu): client %u (pid %d) has exited, and its fence cannot be "
            "checked: %s", b->name, (unsigned long long)b->id, client_id, (int)pid, err);
  } else if (r < 0) {
    log_error("'%s' (id %llu): release %llu by client %u (pid %d), which has exited: raising "
              "its fence failed, streams that acquire it may wait for ever: %s", b->name,
              (unsigned long long)b->id, (unsigned long long)seq, client_id, (int)pid, err);
  } else if (r > 0) {
    (*fr->fences_raised)++;
    log_warn("'%s' (id %llu): release %llu by client %u (pid %d) was published, but its "
             "process exited before its GPU wrote the fence (it held %llu); fence raised: "
             "waiters go on with what its work left", b->name, (unsigned long long)b->id,
             (unsigned long long)seq, client_id, (int)pid, (unsigned long long)was);
  } else if (seq) {
    log_debug("'%s': release %llu by client %u (pid %d, exited) had its fence written",
              b->name, (unsigned long long)seq, client_id, (int)pid);
  }
  return r == PROTO_E_PROTO && seq == 0;
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

static void keep_pending(struct fence_repair *fr, struct reg_object *b, uint32_t client_id,
                         pid_t pid, uid_t uid, bool closed)
{
  uint64_t now = uv_now(fr->retry.loop);
  const char *why = NULL;
  unsigned of_uid = 0;

  for (size_t i = 0; i < fr->n_pending; i++) {
    if (fr->pending[i].id == b->id)
      return; /* one promise a buffer, and its break is waiting already */
    of_uid += fr->pending[i].uid == uid;
  }
  if (fr->n_pending >= GPUSHM_LIMIT_PENDING_BREAKS || of_uid >= GPUSHM_LIMIT_PENDING_BREAKS_PER_UID)
    why = of_uid >= GPUSHM_LIMIT_PENDING_BREAKS_PER_UID ? "too many breaks of its uid waiting"
                                                        : "too many breaks waiting";
  else if (fr->n_pending == fr->cap) {
    size_t cap = fr->cap ? 2 * fr->cap : 8;
    struct pending_break *p = realloc(fr->pending, cap * sizeof *p);
    if (p) {
      fr->pending = p;
      fr->cap = cap;
    } else {
      why = "out of memory";
    }
  }
  if (why) {
    log_error("%s: the promise on '%s' (id %llu) of client %u (pid %d) is broken without "
              "waiting for the releases before it to land", why, b->name,
              (unsigned long long)b->id, client_id, (int)pid);
    break_promise(fr, b, client_id, pid, true, false, closed);
    return;
  }
  fr->pending[fr->n_pending++] = (struct pending_break){
    .id = b->id, .client_id = client_id, .pid = pid, .uid = uid,
    .deadline_ms = now + GPUSHM_PROMISE_BREAK_WAIT_MS,
    .next_ms = now + GPUSHM_PROMISE_BREAK_RETRY_MS,
    .interval_ms = GPUSHM_PROMISE_BREAK_RETRY_MS, .closed = closed,
  };
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
      if (!break_promise(fr, b, p.client_id, p.pid, now >= p.deadline_ms, false, p.closed))
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
  const uint32_t releaser = sync_releaser_id(fr->instance_id, client_id);

  for (size_t i = 0; i < n; i++) {
    struct reg_object *b = registry_find_id(fr->reg, ids[i]);
    bool scribbled;

    if (!b)
      continue;
    /* pid 0: a process gpushmd cannot see, perhaps alive: its writes may still land */
    scribbled = pid > 0 && raise_signed(fr, b, releaser, client_id, pid);
    if (break_promise(fr, b, client_id, pid, false, scribbled, false))
      keep_pending(fr, b, client_id, pid, uid, false);
  }
}

void fence_repair_closed(struct fence_repair *fr, uint64_t id, uint32_t client_id, pid_t pid,
                         uid_t uid)
{
  struct reg_object *b = registry_find_id(fr->reg, id);

  if (b && break_promise(fr, b, client_id, pid, false, false, true))
    keep_pending(fr, b, client_id, pid, uid, true);
}

void fence_repair_shutdown(struct fence_repair *fr)
{
  /* Nobody would break them after: broken now, the releases before them still queued. */
  for (size_t i = 0; i < fr->n_pending; i++) {
    struct reg_object *b = registry_find_id(fr->reg, fr->pending[i].id);
    if (b)
      break_promise(fr, b, fr->pending[i].client_id, fr->pending[i].pid, true, false,
                    fr->pending[i].closed);
  }
  free(fr->pending);
  fr->pending = NULL;
  fr->n_pending = fr->cap = 0;
  if (!uv_is_closing((uv_handle_t *)&fr->retry))
    uv_close((uv_handle_t *)&fr->retry, NULL);
}

/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "registry/sync.h"
#include "protocol.h"
#include "util/log.h"
#include "shm_layout.h"

#include <errno.h>
#include <stdint.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

void sync_release(struct sync_state *s)
{
  if (s->events)
    s->events->release(s->events, s->event);
  backend_host.release(&backend_host, &s->control);
  s->events = NULL;
  s->event = NULL;
}

static struct sync_control *map_control(int fd, char *err, size_t errlen)
{
  struct sync_control *ctl =
    mmap(NULL, SYNC_CONTROL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (ctl == MAP_FAILED) {
    snprintf(err, errlen, "mapping a control block: %s", strerror(errno));
    return NULL;
  }
  return ctl;
}

int sync_alloc(struct sync_state *s, const struct event_source *events, int device,
               const char *label, char *err, size_t errlen)
{
  struct sync_control *ctl;
  uint64_t allocated;
  int r;

  memset(s, 0, sizeof *s);
  s->control.fd = -1;
  r = backend_host.alloc(&backend_host, SYNC_CONTROL_SIZE, -1, label, &s->control, &allocated,
                         err, errlen);
  if (r < 0)
    return r;
  if (!(ctl = map_control(s->control.fd, err, errlen))) {
    sync_release(s);
    return PROTO_E_IO;
  }
  shm_layout_init(ctl, SYNC_CONTROL_MAGIC, sizeof *ctl);
  munmap(ctl, SYNC_CONTROL_SIZE);
  if (!events)
    return 0;
  if ((r = events->alloc(events, device, label, &s->event, err, errlen)) < 0) {
    sync_release(s);
    return r;
  }
  s->events = events;
  return 0;
}

int sync_adopt(struct sync_state *s, const struct backend_mem *control, const char *label,
               char *err, size_t errlen)
{
  struct sync_control *ctl = map_control(control->fd, err, errlen);
  const char *why;

  if (!ctl)
    return PROTO_E_IO;
  /* The record says what the fd is; the header is writable by every read-write holder,
   * so a scribbled one is restored rather than believed: writing a buffer must not be
   * a way to make the daemon drop it.  One of gpushm 0.1 is brought up to date.
   * Holders still mapping it read release_seq at offset 8, which stays as it is. */
  if ((why = shm_layout_check(ctl, SYNC_CONTROL_SIZE, SYNC_CONTROL_MAGIC,
                              offsetof(struct sync_control, release_seq) + 8)))
    log_warn("%s: control block header overwritten (%s); restored", label, why);
  shm_layout_init(ctl, SYNC_CONTROL_MAGIC, sizeof *ctl);
  munmap(ctl, SYNC_CONTROL_SIZE);
  memset(s, 0, sizeof *s);
  s->control = *control;
  return 0;
}

/* Maps the control block, the header checked as the daemon wrote it: a read-write
 * holder may have scribbled on it since, and then the block's fields are taken for
 * nothing. */
static struct sync_control *map_checked(const struct sync_state *s, int prot, size_t need,
                                        char *err, size_t errlen)
{
  struct sync_control *ctl = mmap(NULL, SYNC_CONTROL_SIZE, prot, MAP_SHARED, s->control.fd, 0);
  const char *why;

  if (ctl == MAP_FAILED) {
    snprintf(err, errlen, "mapping its control block: %s", strerror(errno));
    return NULL;
  }
  if ((why = shm_layout_check(ctl, SYNC_CONTROL_SIZE, SYNC_CONTROL_MAGIC, need))) {
    snprintf(err, errlen, "its control block's header was overwritten (%s): who released "
             "or promised it is not known", why);
    munmap(ctl, SYNC_CONTROL_SIZE);
    errno = EPROTO;
    return NULL;
  }
  return ctl;
}

static int map_error(void)
{
  return errno == EPROTO ? PROTO_E_PROTO : PROTO_E_IO;
}

/* One acquire read of the sequence, then the slots: whoever published a number up to
 * it signed its slot before publishing, so the slots read after show that signature or
 * a later one (a later release's, which names its own number and so is told apart by
 * its releaser or number).  A match is therefore a number that releaser queued a fence
 * write of and that was published: no second read of the sequence is needed to make it
 * consistent.  Every slot is scanned: libraries before 0.8 sign slot n % KEPT for
 * release n, 0.8 ones the next slot in turn, and numbers are the caller's to choose.
 * The slots are the client's to write (any read-write holder can forge one): believed
 * only as far as raising a fence to a published number goes, which such a holder can
 * do itself. */
int sync_signed_release(const struct sync_state *s, uint32_t releaser_id, uint64_t *seq,
                        uint64_t *before, char *err, size_t errlen)
{
  const size_t need = offsetof(struct sync_control, released_by) +
                      sizeof ((struct sync_control *)NULL)->released_by;
  uint64_t numbers[GPUSHM_LIMIT_RELEASERS_KEPT];
  unsigned n_numbers = 0;
  struct sync_control *ctl;
  uint64_t last;

  *seq = *before = 0;
  if (!(ctl = map_checked(s, PROT_READ, need, err, errlen)))
    return map_error();
  last = __atomic_load_n(&ctl->release_seq, __ATOMIC_ACQUIRE);
  for (unsigned i = 0; i < GPUSHM_LIMIT_RELEASERS_KEPT && last; i++) {
    uint64_t sig = __atomic_load_n(&ctl->released_by[i], __ATOMIC_RELAXED), n;
    uint64_t whole = ctl->layout_size >= sizeof *ctl
                       ? __atomic_load_n(&ctl->released_value[i], __ATOMIC_RELAXED) : 0;

    if (!sig)
      continue;
    /* The whole number where a 0.8 library wrote it beside its signature (the same low
     * bits, and published); else the latest published one with those low bits. */
    if (whole && (uint32_t)whole == (uint32_t)sig && whole <= last)
      n = whole;
    else if (!(n = sync_signed_number(sig, last)))
      continue;
    if ((uint32_t)(sig >> 32) != releaser_id)
      numbers[n_numbers++] = n;
    else if (n > *seq)
      *seq = n;
  }
  munmap(ctl, SYNC_CONTROL_SIZE);
  for (unsigned i = 0; i < n_numbers && *seq; i++)
    if (numbers[i] < *seq && numbers[i] > *before)
      *before = numbers[i];
  return 0;
}

int sync_promise(struct sync_state *s, uint32_t client_id, uint32_t releaser, uint64_t upto,
                 char *err, size_t errlen)
{
  struct sync_promise_record *rec = &s->promise;
  struct sync_control *ctl;
  uint64_t last;
  int r = 0;

  /* A scribbled header is the holders' doing, refused as an argument would be (not a
   * protocol violation, which would end this client's session). */
  if (!(ctl = map_checked(s, PROT_READ | PROT_WRITE, sizeof *ctl, err, errlen)))
    return map_error() == PROTO_E_PROTO ? PROTO_E_INVAL : PROTO_E_IO;
  last = __atomic_load_n(&ctl->release_seq, __ATOMIC_ACQUIRE);
  if (upto <= last) {
    snprintf(err, errlen, "its counter is at %llu already: promise a value above it, not %llu",
             (unsigned long long)last, (unsigned long long)upto);
    r = PROTO_E_INVAL;
  } else if (rec->client_id && rec->breaking) {
    snprintf(err, errlen, "the promise of client %u (up to %llu) is being broken: it went "
             "owing values, and gpushmd waits for the releases before them to land; promise "
             "again once the counter is at %llu", rec->client_id,
             (unsigned long long)rec->upto, (unsigned long long)rec->upto);
    r = PROTO_E_INVAL;
  } else if (rec->client_id && rec->upto > last && rec->client_id != client_id) {
    snprintf(err, errlen, "client %u promised the values up to %llu and is their only "
             "signaller (one promiser at a time)", rec->client_id,
             (unsigned long long)rec->upto);
    r = PROTO_E_INVAL;
  } else if (rec->client_id == client_id && rec->upto > last && upto <= rec->upto) {
    snprintf(err, errlen, "this connection promised up to %llu already; a promise only grows",
             (unsigned long long)rec->upto);
    r = PROTO_E_INVAL;
  } else if (rec->client_id == client_id && rec->upto > last) {
    rec->upto = upto; /* grows: readers see a larger upto, nothing else */
    __atomic_store_n(&ctl->promise.upto, upto, __ATOMIC_RELEASE);
  } else {
    /* A new one: not live while it is written (upto 0 first), then live all at once. */
    *rec = (struct sync_promise_record){ client_id, releaser, last, upto, false };
    __atomic_store_n(&ctl->promise.upto, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&ctl->promise.owner, sync_promise_owner(releaser), __ATOMIC_RELAXED);
    __atomic_store_n(&ctl->promise.from, last, __ATOMIC_RELAXED);
    __atomic_store_n(&ctl->promise.upto, upto, __ATOMIC_SEQ_CST);
  }
  if (r == 0) {
    __atomic_add_fetch(&ctl->wake, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &ctl->wake, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
  }
  munmap(ctl, SYNC_CONTROL_SIZE);
  return r;
}

int sync_unkept_promise(struct sync_state *s, uint32_t client_id, uint64_t *upto,
                        uint64_t *last, char *err, size_t errlen)
{
  struct sync_control *ctl;

  *upto = *last = 0;
  if (!s->promise.client_id || s->promise.client_id != client_id)
    return 0;
  if (!(ctl = map_checked(s, PROT_READ, offsetof(struct sync_control, released_by), err,
                          errlen)))
    return map_error();
  *last = __atomic_load_n(&ctl->release_seq, __ATOMIC_ACQUIRE);
  munmap(ctl, SYNC_CONTROL_SIZE);
  if (s->promise.upto > *last)
    *upto = s->promise.upto;
  else
    memset(&s->promise, 0, sizeof s->promise); /* kept: nothing to break, ever */
  return 0;
}

void sync_forget_promise(struct sync_state *s)
{
  struct sync_control *ctl = mmap(NULL, SYNC_CONTROL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
                                  s->control.fd, 0);
  if (ctl != MAP_FAILED) {
    __atomic_store_n(&ctl->promise.owner, 0, __ATOMIC_SEQ_CST);
    munmap(ctl, SYNC_CONTROL_SIZE);
  }
  memset(&s->promise, 0, sizeof s->promise);
}

int sync_lose_promise(struct sync_state *s, uint64_t *lost_from, char *err, size_t errlen)
{
  struct sync_control *ctl;

  if (!(ctl = map_checked(s, PROT_READ | PROT_WRITE, sizeof *ctl, err, errlen)))
    return map_error();
  *lost_from = __atomic_load_n(&ctl->release_seq, __ATOMIC_ACQUIRE);
  sync_mark_lost(ctl, s->promise.releaser, *lost_from, s->promise.upto);
  munmap(ctl, SYNC_CONTROL_SIZE);
  return 0;
}

int sync_keep_broken_promise(struct sync_state *s, char *err, size_t errlen)
{
  struct sync_control *ctl;

  if (!(ctl = map_checked(s, PROT_READ | PROT_WRITE, sizeof *ctl, err, errlen)))
    return map_error();
  sync_publish_upto(ctl, s->promise.upto);
  __atomic_store_n(&ctl->promise.owner, 0, __ATOMIC_SEQ_CST);
  memset(&s->promise, 0, sizeof s->promise);
  /* Shared futexes: the waiters map the same memfd. */
  syscall(SYS_futex, sync_seq_futex_word(ctl), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
  syscall(SYS_futex, &ctl->wake, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
  munmap(ctl, SYNC_CONTROL_SIZE);
  return 0;
}

int sync_adopted_promise(struct sync_state *s, uint64_t *upto, uint64_t *last, char *err,
                         size_t errlen)
{
  struct sync_control *ctl;
  uint64_t owner;

  *upto = *last = 0;
  if (!(ctl = map_checked(s, PROT_READ, sizeof *ctl, err, errlen)))
    return map_error();
  owner = __atomic_load_n(&ctl->promise.owner, __ATOMIC_ACQUIRE);
  *last = __atomic_load_n(&ctl->release_seq, __ATOMIC_ACQUIRE);
  if (owner && __atomic_load_n(&ctl->promise.upto, __ATOMIC_ACQUIRE) > *last) {
    s->promise = (struct sync_promise_record){
      .client_id = UINT32_MAX, .releaser = (uint32_t)(owner >> 32),
      .from = __atomic_load_n(&ctl->promise.from, __ATOMIC_RELAXED),
      .upto = __atomic_load_n(&ctl->promise.upto, __ATOMIC_RELAXED), .breaking = true };
    *upto = s->promise.upto;
  }
  munmap(ctl, SYNC_CONTROL_SIZE);
  return 0;
}

int sync_export(struct sync_state *s, bool read_only, int *control_fd, uint8_t event_handle[64],
                size_t *event_handle_len, char *err, size_t errlen)
{
  int r, fd;

  /* Whoever may write the buffer may publish releases of it; a read-only opener gets
   * a read-only description, so it can neither forge nor rewind the sequence. */
  if ((r = backend_host_export_fd(&s->control, read_only, &fd, err, errlen)) < 0)
    return r;
  *event_handle_len = 0;
  if (s->events && (r = s->events->export(s->events, s->event, event_handle, event_handle_len,
                                          err, errlen)) < 0) {
    close(fd);
    return r;
  }
  *control_fd = fd;
  return 0;
}

int sync_fence_raise(struct sync_state *s, uint64_t value, uint64_t *was, char *err,
                     size_t errlen)
{
  struct sync_control *ctl = map_control(s->control.fd, err, errlen);
  uint64_t n;
  int raised = 0;

  if (!ctl)
    return PROTO_E_IO;
  n = __atomic_load_n(&ctl->fence, __ATOMIC_ACQUIRE);
  *was = n;
  /* Bounded: any read-write holder can write the fence, and gpushmd must not spin on
   * it.  A GPU write landing after the raise can lower it again: the caller raises only
   * once what was published has landed (break_recorded), or for a releaser whose
   * process is gone. */
  for (int tries = 0; value && n < value && tries < 64; tries++)
    if (__atomic_compare_exchange_n(&ctl->fence, &n, value, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_ACQUIRE)) {
      raised = 1;
      break;
    }
  if (raised) {
    __atomic_add_fetch(&ctl->wake, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &ctl->wake, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
  }
  munmap(ctl, SYNC_CONTROL_SIZE);
  return raised;
}

/* ---- semaphore planes (kind_timeline.c) --------------------------------------------- */

uint64_t sync_fence(const struct sync_state *s)
{
  struct sync_control *ctl = mmap(NULL, SYNC_CONTROL_SIZE, PROT_READ, MAP_SHARED, s->control.fd, 0);
  uint64_t n;

  if (ctl == MAP_FAILED)
    return 0;
  n = __atomic_load_n(&ctl->fence, __ATOMIC_ACQUIRE);
  munmap(ctl, SYNC_CONTROL_SIZE);
  return n;
}

int sync_mark_semaphore(struct sync_state *s, bool plane, char *err, size_t errlen)
{
  struct sync_control *ctl = map_control(s->control.fd, err, errlen);

  if (!ctl)
    return PROTO_E_IO;
  __atomic_store_n(&ctl->semaphore, plane ? 1 : 0, __ATOMIC_SEQ_CST);
  munmap(ctl, SYNC_CONTROL_SIZE);
  return 0;
}

/* ---- frame rings (kind_ring.c) ------------------------------------------------------ */

uint64_t sync_counter(const struct sync_state *s)
{
  struct sync_control *ctl = mmap(NULL, SYNC_CONTROL_SIZE, PROT_READ, MAP_SHARED, s->control.fd, 0);
  uint64_t n;

  if (ctl == MAP_FAILED)
    return 0;
  n = __atomic_load_n(&ctl->release_seq, __ATOMIC_ACQUIRE);
  munmap(ctl, SYNC_CONTROL_SIZE);
  return n;
}

int sync_start_at(struct sync_state *s, uint64_t value, char *err, size_t errlen)
{
  struct sync_control *ctl = map_control(s->control.fd, err, errlen);

  if (!ctl)
    return PROTO_E_IO;
  __atomic_store_n(&ctl->fence, value, __ATOMIC_RELEASE);
  __atomic_store_n(&ctl->release_seq, value, __ATOMIC_RELEASE);
  munmap(ctl, SYNC_CONTROL_SIZE);
  return 0;
}

int sync_raise_all(struct sync_state *s, uint64_t value, char *err, size_t errlen)
{
  struct sync_control *ctl = map_control(s->control.fd, err, errlen);
  uint64_t n;

  if (!ctl)
    return PROTO_E_IO;
  /* Counter first: a waiter the fence lets go must not find the value unsignalled. */
  sync_publish_upto(ctl, value);
  n = __atomic_load_n(&ctl->fence, __ATOMIC_ACQUIRE);
  for (int tries = 0; n < value && tries < 64; tries++)
    if (__atomic_compare_exchange_n(&ctl->fence, &n, value, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_ACQUIRE))
      break;
  __atomic_add_fetch(&ctl->wake, 1, __ATOMIC_SEQ_CST);
  syscall(SYS_futex, sync_seq_futex_word(ctl), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
  syscall(SYS_futex, &ctl->wake, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
  munmap(ctl, SYNC_CONTROL_SIZE);
  return 0;
}

int sync_weights_held_write(struct sync_state *s, uint64_t oldest, char *err, size_t errlen)
{
  struct sync_control *ctl = map_control(s->control.fd, err, errlen);

  if (!ctl)
    return PROTO_E_IO;
  __atomic_store_n(&weights_held_of(ctl)->oldest, oldest, __ATOMIC_RELEASE);
  __atomic_add_fetch(&ctl->wake, 1, __ATOMIC_SEQ_CST);
  syscall(SYS_futex, &ctl->wake, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
  munmap(ctl, SYNC_CONTROL_SIZE);
  return 0;
}

int sync_ring_table_write(struct sync_state *s, const uint64_t *done_ids, uint32_t n,
                          uint32_t planes, char *err, size_t errlen)
{
  struct sync_control *ctl = map_control(s->control.fd, err, errlen);
  struct ring_table *t;
  uint32_t gen;

  if (!ctl)
    return PROTO_E_IO;
  t = ring_table_of(ctl);
  /* From its own count: a producer may have written over the table's. */
  gen = __atomic_load_n(&t->generation, __ATOMIC_RELAXED) | 1u;
  __atomic_store_n(&t->generation, gen, __ATOMIC_SEQ_CST);
  /* the odd count before any entry: a reader that sees an entry change sees it odd */
  __atomic_thread_fence(__ATOMIC_RELEASE);
  for (uint32_t i = 0; i < GPUSHM_LIMIT_RING_CONSUMERS; i++)
    __atomic_store_n(&t->done_id[i], i < n ? done_ids[i] : 0, __ATOMIC_RELAXED);
  __atomic_store_n(&t->consumers, n, __ATOMIC_RELAXED);
  __atomic_store_n(&t->planes, planes, __ATOMIC_RELAXED);
  __atomic_store_n(&t->generation, gen + 1, __ATOMIC_SEQ_CST);
  munmap(ctl, SYNC_CONTROL_SIZE);
  return 0;
}

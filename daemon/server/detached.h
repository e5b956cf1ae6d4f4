/* SPDX-License-Identifier: MIT */
/* Processes that may still map memory the daemon no longer counts against them.
 *
 * A connection can end while its process lives on: gpushmctl disconnect, a protocol
 * error, a closed socket.  The registry then drops the connection's references, and may
 * free what nobody else holds — but the process's mappings (a host memfd, an imported
 * cuda-fd handle, an opened IPC handle) keep that memory allocated until it unmaps or
 * exits.  The daemon cannot see unmaps, so it lists such a process, with what it held,
 * until a pidfd says it has exited (where there are no pidfds, until kill(pid, 0) says so,
 * checked every GPUSHM_DETACHED_SWEEP_MS); statistics show them and the memory only they
 * keep (docs/cuda.md).
 *
 * The same watch serves fences: a connection that ends holding cuda-fd sync buffers
 * read-write may have released them with fence writes still queued, which die with its
 * process (and only then: a process alive after its connection ended still has its
 * context, and its writes still land).  The set is told once such a process has exited
 * (at once if it already had), with those buffers' ids, for the daemon to raise what
 * the dead writes left (fence_repair.h).  Such a process is watched past the limits
 * below, which bound what is listed and the pidfds held: there it is swept without a
 * pidfd, which costs a small entry and no fd, and a repair is at worst late (a pid
 * reused before the sweep sees it keeps it waiting), never early, never dropped. */
#ifndef GPUSHMD_DETACHED_H
#define GPUSHMD_DETACHED_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "gpushm_limits.h"
#include "util/list.h"
#include "registry/registry.h"

struct detached_buffer {
  uint64_t id;
  char name[GPUSHM_LIMIT_NAME_LEN + 1];
  int backend; /* enum proto_backend */
  int device;
  uint64_t allocated;
};

struct detached {
  struct list link;
  struct detached_set *set;
  uv_poll_t watch; /* on the pidfd: readable once the process has exited */
  int pidfd;       /* -1 where the kernel (or valgrind) has no pidfd_open, or past the
                    * limits: swept */
  bool listed;     /* within the limits: counted and listed; else kept for its fences */
  pid_t pid;
  uid_t uid;
  uint32_t client_id;
  uint64_t since_unix_ms;
  size_t n_total;       /* buffers it held */
  uint64_t bytes_total; /* their memory */
  size_t n;             /* of them, remembered (GPUSHM_LIMIT_DETACHED_BUFFERS_KEPT) */
  size_t n_fences;      /* cuda-fd sync buffers it held read-write, all of them: */
  uint64_t *fences;     /* their ids, for the exit callback */
  size_t n_segments;    /* segments it mapped, held until it exits (segment.h) */
  struct segment **segments;
  struct detached_buffer buffers[];
};

/* Told that client_id's process (pid, of uid) has exited, with the ids of the fenced or
 * promised sync buffers its connection held read-write when it ended; pid 0: a process
 * gpushmd cannot see (another PID namespace), told as its connection ends. */
typedef void detached_exit_fn(void *ctx, uint32_t client_id, pid_t pid, uid_t uid,
                              const uint64_t *ids, size_t n);

struct detached_set {
  uv_loop_t *loop;
  struct list list; /* struct detached.link, oldest first */
  unsigned n;
  unsigned n_swept; /* of them, without a pidfd: checked by the sweep timer */
  bool no_pidfd;    /* pidfd_open said ENOSYS once: not asked again */
  bool warned_full; /* said once that processes go untracked, until there is room */
  uv_timer_t sweep;
  uint64_t untracked; /* processes past GPUSHM_LIMIT_DETACHED_PROCESSES, not listed */
  detached_exit_fn *exited;
  void *exited_ctx;
  struct registry *reg; /* whose segments such processes map (may be NULL: none) */
};

void detached_init(struct detached_set *set, uv_loop_t *loop, detached_exit_fn *exited,
                   void *exited_ctx);
/* As client's connection ends, before the registry drops its references: keeps what it
 * holds while its process lives.  Nothing held, or the process gone: nothing kept.  The
 * segments it maps are held (carved from no more) until it exits, or retired where it
 * cannot be watched; its mappings are taken over either way. */
void detached_track(struct detached_set *set, struct reg_client *client);
/* Forgets them all (their pidfds close once the loop runs the watchers' close). */
void detached_forget_all(struct detached_set *set);
/* detached_forget_all, and the set is done with (the daemon is stopping): processes
 * found gone by now are reported first; for those still alive it is logged that their
 * fences will not be repaired. */
void detached_shutdown(struct detached_set *set);

#endif

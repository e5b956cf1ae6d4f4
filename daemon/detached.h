/* Processes that may still map memory the daemon no longer counts against them.
 *
 * A connection can end while its process lives on: gpushmctl disconnect, a protocol
 * error, a closed socket.  The registry then drops the connection's references, and may
 * free what nobody else holds — but the process's mappings (a host memfd, an imported
 * cuda-fd handle, an opened IPC handle) keep that memory allocated until it unmaps or
 * exits.  The daemon cannot see unmaps, so it lists such a process, with what it held,
 * until a pidfd says it has exited (where there are no pidfds, until kill(pid, 0) says so,
 * checked every GPUSHM_DETACHED_SWEEP_MS); statistics show them and the memory only they
 * keep (docs/cuda.md). */
#ifndef GPUSHMD_DETACHED_H
#define GPUSHMD_DETACHED_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "gpushm_limits.h"
#include "list.h"
#include "registry.h"

struct detached_buffer {
  uint64_t id;
  char name[GPUSHM_LIMIT_NAME_LEN + 1];
  int backend; /* gpushm_backend_t */
  int device;
  uint64_t allocated;
};

struct detached {
  struct list link;
  struct detached_set *set;
  uv_poll_t watch; /* on the pidfd: readable once the process has exited */
  int pidfd;       /* -1 where the kernel (or valgrind) has no pidfd_open: swept */
  pid_t pid;
  uid_t uid;
  uint32_t client_id;
  uint64_t since_unix_ms;
  size_t n_total;       /* buffers it held */
  uint64_t bytes_total; /* their memory */
  size_t n;             /* of them, remembered (GPUSHM_LIMIT_DETACHED_BUFFERS_KEPT) */
  struct detached_buffer buffers[];
};

struct detached_set {
  uv_loop_t *loop;
  struct list list; /* struct detached.link, oldest first */
  unsigned n;
  unsigned n_swept; /* of them, without a pidfd: checked by the sweep timer */
  bool no_pidfd;    /* pidfd_open said ENOSYS once: not asked again */
  bool warned_full; /* said once that processes go untracked, until there is room */
  uv_timer_t sweep;
  uint64_t untracked; /* processes past GPUSHM_LIMIT_DETACHED_PROCESSES, not listed */
};

void detached_init(struct detached_set *set, uv_loop_t *loop);
/* As client's connection ends, before the registry drops its references: keeps what it
 * holds while its process lives.  Nothing held, or the process gone: nothing kept. */
void detached_track(struct detached_set *set, const struct reg_client *client);
/* Forgets them all (their pidfds close once the loop runs the watchers' close). */
void detached_forget_all(struct detached_set *set);
/* detached_forget_all, and the set is done with (the daemon is stopping). */
void detached_shutdown(struct detached_set *set);

#endif

/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "server/fence_repair.h"
#include "protocol.h"
#include "util/log.h"
#include "shm_layout.h"

unsigned fence_repair(struct registry *reg, uint64_t instance_id, uint32_t client_id, pid_t pid,
                      const uint64_t *ids, size_t n)
{
  const uint32_t releaser = sync_releaser_id(instance_id, client_id);
  unsigned raised = 0;

  for (size_t i = 0; i < n; i++) {
    struct reg_object *b = registry_find_id(reg, ids[i]);
    uint64_t seq, was;
    char err[256];
    int r;

    /* Freed since (ids are never reused): nobody holds it, so nobody waits on it. */
    if (!b)
      continue;
    r = registry_raise_fence(reg, b, releaser, &seq, &was, err, sizeof err);
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
      raised++;
      log_warn("'%s' (id %llu): release %llu by client %u (pid %d) was published, but its "
               "process exited before its GPU wrote the fence (it held %llu); fence raised: "
               "waiters go on with what its work left", b->name, (unsigned long long)b->id,
               (unsigned long long)seq, client_id, (int)pid, (unsigned long long)was);
    } else if (seq) {
      log_debug("'%s': release %llu by client %u (pid %d, exited) had its fence written",
                b->name, (unsigned long long)seq, client_id, (int)pid);
    }
  }
  return raised;
}

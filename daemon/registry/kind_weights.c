/* SPDX-License-Identifier: MIT */
/* Weight sets (docs/weights.md): a name that denotes the newest of a chain of immutable
 * generations.  Each generation is an object of its own: its manifest (a memfd its
 * publisher sealed against every change; gpushmd never parses it: readers' libgpushm
 * checks every tensor against the buffers it lies in), the buffers its tensors lie in
 * (pinned by the registry: they live while the generation does, and take no new
 * writers), and a control block whose fence is the set's newest generation, raised at
 * each publish so that a holder of an older one waits for a newer one on a futex.
 * Publishing makes the next generation and moves the name to it (registry.c); holders
 * keep theirs until they let go.  What the generations of one set share is their chain:
 * how many live (GPUSHM_LIMIT_WEIGHT_GENERATIONS) and which, so that each can be told of
 * a newer one, and of the oldest one still held (a publisher that recycles buffers waits
 * for the generations that named them to go). */
#include "config.h"
#include "registry/kind.h"
#include "registry/kind_buffer.h"
#include "protocol.h"
#include "shm_layout.h"
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A set's live generations, oldest first; freed with the last. */
struct weights_chain {
  struct list generations; /* reg_weights.chain_link */
  uint32_t live;
  uint64_t newest;
};

struct reg_weights {
  struct reg_buffer buf; /* first: its control block is a timeline's (sync_state) */
  struct weights_chain *chain;
  struct list chain_link;
  struct reg_weights_info info;
  int manifest_fd;
};

static struct reg_weights *weights_of(struct reg_object *obj)
{
  return (struct reg_weights *)obj;
}

static const struct reg_weights *weights_of_const(const struct reg_object *obj)
{
  return (const struct reg_weights *)obj;
}

/* What a manifest must be for every reader to trust that it stays what it is: a memfd
 * sealed against writes, growth and shrinking.  Its size, then, is w->manifest_size. */
static int check_manifest(struct reg_weights_args *w, char *err, size_t errlen)
{
  const int needed = F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK;
  struct stat st;
  int seals;

  if (w->manifest_fd < 0) {
    snprintf(err, errlen, "a publish comes with its manifest's fd");
    return PROTO_E_INVAL;
  }
  if ((seals = fcntl(w->manifest_fd, F_GET_SEALS)) < 0 || (seals & needed) != needed) {
    snprintf(err, errlen, "the manifest's fd is %s: publish a memfd sealed with F_SEAL_WRITE, "
             "F_SEAL_GROW and F_SEAL_SHRINK, so that no reader sees it change",
             seals < 0 ? "no memfd" : "not sealed against changes");
    return PROTO_E_INVAL;
  }
  if (fstat(w->manifest_fd, &st) < 0) {
    snprintf(err, errlen, "the manifest's memfd: %s", strerror(errno));
    return PROTO_E_INVAL;
  }
  w->manifest_size = (uint64_t)st.st_size;
  if (w->manifest_size == 0 || w->manifest_size > GPUSHM_LIMIT_WEIGHT_MANIFEST) {
    snprintf(err, errlen, "a manifest has 1 to %llu bytes (GPUSHM_LIMIT_WEIGHT_MANIFEST), "
             "not %llu", (unsigned long long)GPUSHM_LIMIT_WEIGHT_MANIFEST,
             (unsigned long long)w->manifest_size);
    return w->manifest_size ? PROTO_E_LIMIT : PROTO_E_INVAL;
  }
  return 0;
}

static int weights_check(const struct registry *reg, const struct reg_create_args *args,
                         const struct reg_policy *policy, const struct backend **be, char *err,
                         size_t errlen)
{
  struct reg_weights_args *w = args->weights;

  (void)reg;
  (void)policy;
  *be = NULL;
  if (!w || args->size || args->backend || args->metadata_len || args->image ||
      args->external || args->open_existing || args->sync) {
    snprintf(err, errlen, "a weight set is published: a manifest over buffers, no size, "
             "backend, metadata or sync of its own");
    return PROTO_E_INVAL;
  }
  if (w->n_tensors == 0 || w->n_tensors > GPUSHM_LIMIT_WEIGHT_TENSORS) {
    snprintf(err, errlen, "a generation names 1 to %u tensors (GPUSHM_LIMIT_WEIGHT_TENSORS), "
             "not %u", GPUSHM_LIMIT_WEIGHT_TENSORS, w->n_tensors);
    return w->n_tensors ? PROTO_E_LIMIT : PROTO_E_INVAL;
  }
  if (w->previous) {
    const struct weights_chain *chain = weights_of_const(w->previous)->chain;
    if (chain->live >= GPUSHM_LIMIT_WEIGHT_GENERATIONS) {
      snprintf(err, errlen, "%u generations of '%s' are alive (GPUSHM_LIMIT_WEIGHT_GENERATIONS)"
               ": its readers must close older ones before another is published",
               chain->live, args->name);
      return PROTO_E_LIMIT;
    }
  }
  return check_manifest(w, err, errlen);
}

/* The oldest generation of chain still held: the first, since generations are made in
 * order and freed in any. */
static uint64_t oldest_held(const struct weights_chain *chain)
{
  return list_entry(chain->generations.next, struct reg_weights, chain_link)->info.generation;
}

/* Tells g's holders which generations are still held: a recycling publisher waits for
 * the ones before its newest to go (gpushm_weights_wait_released()). */
static void tell_held(struct reg_weights *g, uint64_t oldest)
{
  char err[128];

  if (sync_weights_held_write(&g->buf.sync_state, oldest, err, sizeof err) < 0)
    log_warn("weight set '%s' generation %llu: telling its holders that generation %llu is "
             "the oldest held: %s", g->buf.obj.name, (unsigned long long)g->info.generation,
             (unsigned long long)oldest, err);
}

/* Its control block and its manifest's pages, both host memory. */
static void weights_estimate(const struct registry *reg, const struct reg_create_args *args,
                             const struct backend *be, struct quota_cost *cost)
{
  (void)reg;
  (void)be;
  *cost = (struct quota_cost){ .host = SYNC_CONTROL_SIZE + args->weights->manifest_size,
                               .device = -1 };
}

static int weights_alloc(struct registry *reg, struct reg_object *obj,
                         const struct reg_create_args *args, const struct backend *be,
                         const struct reg_client *client, char *err, size_t errlen)
{
  struct reg_weights *g = weights_of(obj);
  const struct reg_weights_args *w = args->weights;
  struct weights_chain *chain = w->previous ? weights_of(w->previous)->chain : NULL;
  int r;

  (void)reg;
  (void)be;
  (void)client;
  g->manifest_fd = -1;
  if (!chain && !(chain = calloc(1, sizeof *chain))) {
    snprintf(err, errlen, "daemon out of memory");
    return PROTO_E_NOMEM;
  }
  if ((r = sync_alloc(&g->buf.sync_state, NULL, -1, args->name, err, errlen)) < 0 ||
      (g->manifest_fd = fcntl(w->manifest_fd, F_DUPFD_CLOEXEC, 3)) < 0) {
    if (r == 0) {
      snprintf(err, errlen, "keeping the manifest: %s", strerror(errno));
      sync_release(&g->buf.sync_state);
      r = PROTO_E_LIMIT;
    }
    if (!w->previous)
      free(chain);
    return r;
  }
  g->buf.sync = true;
  g->buf.fence_in_control = true;
  g->info.generation = chain->newest + 1;
  g->info.newest = g->info.generation;
  g->info.manifest_size = w->manifest_size;
  g->info.n_tensors = w->n_tensors;
  if (!w->previous)
    list_init(&chain->generations);
  g->chain = chain;
  list_add_tail(&chain->generations, &g->chain_link);
  chain->live++;
  tell_held(g, oldest_held(chain));
  obj->device = -1;
  obj->host_bytes = SYNC_CONTROL_SIZE + w->manifest_size;
  return 0;
}

/* Now the name's: every live generation's fence says so, and their waiters wake. */
static void weights_linked(struct registry *reg, struct reg_object *obj)
{
  struct weights_chain *chain = weights_of(obj)->chain;
  char err[128];

  (void)reg;
  chain->newest = weights_of(obj)->info.generation;
  for (struct list *l = chain->generations.next; l != &chain->generations; l = l->next) {
    struct reg_weights *g = list_entry(l, struct reg_weights, chain_link);
    g->info.newest = chain->newest;
    if (sync_raise_all(&g->buf.sync_state, chain->newest, err, sizeof err) < 0)
      log_warn("weight set '%s' generation %llu: telling its holders of generation %llu: %s",
               g->buf.obj.name, (unsigned long long)g->info.generation,
               (unsigned long long)chain->newest, err);
  }
}

/* The name went and no generation will follow: holders waiting for a newer one wake
 * (and find none: GPUSHM_WEIGHTS_GONE). */
static void weights_unlinked(struct registry *reg, struct reg_object *obj)
{
  struct reg_weights *g = weights_of(obj);
  char err[128];

  (void)reg;
  if (g->chain->newest != g->info.generation)
    return; /* superseded: the next one told them */
  for (struct list *l = g->chain->generations.next; l != &g->chain->generations; l = l->next) {
    struct reg_weights *h = list_entry(l, struct reg_weights, chain_link);
    if (sync_raise_all(&h->buf.sync_state, SHM_WEIGHTS_GONE, err, sizeof err) < 0)
      log_warn("weight set '%s' generation %llu: telling its holders it is gone: %s",
               h->buf.obj.name, (unsigned long long)h->info.generation, err);
  }
}

/* The manifest, then the control block (read-only to everyone: only gpushmd writes it). */
static int weights_export(struct registry *reg, struct reg_object *obj, struct reg_client *client,
                          const struct reg_policy *policy, bool read_only,
                          struct reg_export *out, char *err, size_t errlen)
{
  struct reg_weights *g = weights_of(obj);
  int r;

  (void)reg;
  (void)client;
  (void)policy;
  (void)read_only;
  if ((out->fds[0] = fcntl(g->manifest_fd, F_DUPFD_CLOEXEC, 3)) < 0) {
    snprintf(err, errlen, "sending the manifest: %s", strerror(errno));
    return PROTO_E_LIMIT;
  }
  if ((r = sync_export(&g->buf.sync_state, true, &out->fds[1], out->event_handle,
                       &out->event_handle_len, err, errlen)) < 0) {
    close(out->fds[0]);
    out->fds[0] = -1;
    return r;
  }
  out->n_fds = 2;
  out->read_only = true;
  return 0;
}

static void weights_release(struct registry *reg, struct reg_object *obj)
{
  struct reg_weights *g = weights_of(obj);

  (void)reg;
  sync_release(&g->buf.sync_state);
  if (g->manifest_fd >= 0)
    close(g->manifest_fd);
  if (g->chain) {
    struct weights_chain *chain = g->chain;
    const uint64_t was = oldest_held(chain);

    list_del(&g->chain_link);
    if (--chain->live == 0) {
      free(chain);
    } else if (oldest_held(chain) != was) {
      for (struct list *l = chain->generations.next; l != &chain->generations; l = l->next)
        tell_held(list_entry(l, struct reg_weights, chain_link), oldest_held(chain));
    }
  }
}

static void weights_describe(const struct reg_object *obj, struct reg_description *out)
{
  memset(out, 0, sizeof *out);
  out->kind = "weight set";
  out->backend = PROTO_BACKEND_HOST; /* where its manifest and control block live */
  out->weights = &weights_of_const(obj)->info;
}

const struct reg_kind_ops reg_kind_weights = {
  .name = "weight set",
  .kind = REG_WEIGHTS,
  .object_size = sizeof(struct reg_weights),
  .memory_name = "a weight set's manifest",
  .check = weights_check,
  .estimate = weights_estimate,
  .alloc = weights_alloc,
  .linked = weights_linked,
  .unlinked = weights_unlinked,
  .export = weights_export,
  .release = weights_release,
  .describe = weights_describe,
};

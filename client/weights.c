/* SPDX-License-Identifier: MIT */
/* Weight sets (docs/weights.md): building and publishing a generation's manifest, and
 * opening one.  A generation is the daemon's object; what this file keeps of it is its
 * manifest, decoded once and checked against the buffers it names before anything is
 * handed out, the buffers opened through it on demand, and the control block whose fence
 * says the set's newest generation. */
#include "config.h"
#include "gpushm-weights.h"

#include "buffer.h"
#include "conn.h"
#include "device.h"
#include "error.h"
#include "manifest_codec.h"
#include "sync.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct gpushm_weights_builder {
  struct manifest_writer writer;
  gpushm_buffer_t **buffers;
  uint64_t *sizes;
  uint32_t n_buffers, cap_buffers;
};

struct weights_buffer {
  uint64_t id, size;
  int device;
  gpushm_buffer_t *open; /* through the generation, at the first use */
};

/* A generation's manifest: its bytes and their decoding, checked against the sizes of
 * the buffers it names.  Shared by the generations of a set that one connection holds
 * and whose bytes and buffer sizes are the same (a publisher that recycles its buffers
 * publishes one layout again and again): the GPU host decodes a model's 291 tensors in
 * ~55 us of a sync's ~150 us open, and compares their bytes in ~2.  Immutable once
 * decoded. */
struct decoded_manifest {
  unsigned refs; /* __atomic builtins */
  const uint8_t *bytes;
  size_t size;
  bool mapped; /* else read into the heap */
  uint64_t *sizes;
  uint32_t n_sizes;
  struct manifest m;
};

struct gpushm_weights {
  gpushm_t *conn; /* a reference held */
  pid_t pid;      /* the process that opened it: a forked child's copy is not its own */
  uint64_t id, generation;
  char name[GPUSHM_LIMIT_NAME_LEN + 1];
  struct decoded_manifest *decoded; /* a reference held */
  const struct manifest *manifest;   /* decoded's */
  struct sync_control *control; /* mapped read-only: its fence is the newest generation */
  struct weights_buffer *buffers;
  uint32_t n_buffers;
  pthread_mutex_t lock; /* buffers' opens, copy_order, marks */
  /* gpushm_weights_copy()'s: the tensors buffer by buffer (those of buffer b at
   * copy_order[copy_start[b]] up to copy_start[b + 1]), made at its first call */
  uint32_t *copy_order, *copy_start;
  /* a stream's copies out of this generation, waited for before its memory is unmapped */
  struct client_cuda_mark *marks;
  size_t n_marks;
  bool counted; /* in its set's weights_kept held (opened, not published) */
};

/* What a connection keeps of one weight set between generations, so that a reader of a
 * publisher that recycles buffers (writes generation n+1 into those of n-1 once nobody
 * holds n-1) maps them once, not at every sync: the buffer ids of the generation it
 * closed last, to see them named again, and once they are, the handles of each closed
 * generation's buffers (still mapped), which the next generation to name them takes
 * over.  Only while it holds a later generation of the set (a reader following it
 * does): one that lets go of the set's last keeps nothing, so that a set unlinked, or a
 * publisher gone, leaves no memory behind in its readers.  Handles of a closed
 * generation keep its memory, not the generation: they do not hold a recycling
 * publisher back, and are never read. */
struct weights_kept {
  struct weights_kept *next;
  char name[GPUSHM_LIMIT_NAME_LEN + 1];
  uint64_t *closed_ids; /* sorted */
  uint32_t n_closed;
  gpushm_buffer_t **kept; /* a handle taken over: NULL */
  uint64_t *kept_ids;     /* kept[i]'s id, sorted */
  uint32_t n_kept;
  uint32_t held; /* generations of the set open through the connection */
  struct decoded_manifest *decoded; /* the last opened's, while one is held */
  uint64_t newest_opened; /* a close of it (or a newer one) says nothing of recycling */
  bool recycles;
};

/* Every connection's weights_kept list: short (GPUSHM_LIMIT_WEIGHT_SETS_KEPT), most
 * recently used first.  Handles are closed outside it (a close is a round trip). */
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

/* A failed system call, its errno kept for gpushm_last_errno(). */
static int io_error(int err, const char *what, const char *name)
{
  int r = client_error(GPUSHM_E_IO, "%s%s%s: %s", what, name ? " of " : "", name ? name : "",
                       strerror(err));
  client_set_errno(err);
  return r;
}

/* ---- building -------------------------------------------------------------------------- */

int gpushm_weights_builder_new(gpushm_weights_builder_t **out)
{
  gpushm_weights_builder_t *b;

  client_clear_error();
  if (!out)
    return client_error(GPUSHM_E_INVAL, "out is NULL");
  if (!(*out = b = calloc(1, sizeof *b)))
    return client_error(GPUSHM_E_NOMEM, "out of memory");
  manifest_writer_init(&b->writer);
  return 0;
}

void gpushm_weights_builder_free(gpushm_weights_builder_t *b)
{
  struct client_saved_error saved;

  if (!b)
    return;
  client_save_error(&saved); /* what a failed publish said, read after the free */
  for (uint32_t i = 0; i < b->n_buffers; i++)
    gpushm_buffer_close(b->buffers[i]); /* the builder's open of it */
  client_restore_error(&saved);
  manifest_writer_free(&b->writer);
  free(b->buffers);
  free(b->sizes);
  free(b);
}

int gpushm_weights_builder_add_buffer(gpushm_weights_builder_t *b, gpushm_buffer_t *buf,
                                      uint32_t *index)
{
  int r;

  client_clear_error();
  if (!b || !buf || !index)
    return client_error(GPUSHM_E_INVAL, "builder, buffer and index must not be NULL");
  if (gpushm_buffer_kind(buf) != GPUSHM_KIND_BUFFER)
    return client_error(GPUSHM_E_INVAL, "'%s' is no plain buffer: a generation's tensors lie "
                        "in buffers", gpushm_buffer_name(buf));
  for (uint32_t i = 0; i < b->n_buffers; i++)
    if (gpushm_buffer_id(b->buffers[i]) == gpushm_buffer_id(buf)) {
      *index = i;
      return 0;
    }
  if (b->n_buffers == GPUSHM_LIMIT_WEIGHT_BUFFERS)
    return client_error(GPUSHM_E_LIMIT, "a generation's tensors lie in at most %u buffers",
                        GPUSHM_LIMIT_WEIGHT_BUFFERS);
  if (b->n_buffers == b->cap_buffers) {
    uint32_t cap = b->cap_buffers ? b->cap_buffers * 2 : 8;
    gpushm_buffer_t **bufs = realloc(b->buffers, cap * sizeof *bufs);
    uint64_t *sizes = bufs ? realloc(b->sizes, cap * sizeof *sizes) : NULL;
    if (bufs)
      b->buffers = bufs;
    if (!sizes)
      return client_error(GPUSHM_E_NOMEM, "out of memory");
    b->sizes = sizes;
    b->cap_buffers = cap;
  }
  /* an open of its own: the caller may close theirs before publishing */
  if ((r = gpushm_buffer_ref(buf)) < 0)
    return r;
  b->buffers[b->n_buffers] = buf;
  b->sizes[b->n_buffers] = gpushm_buffer_size(buf);
  *index = b->n_buffers++;
  return 0;
}

/* The codec's refusals in the API's words. */
static int codec_error(int r, const char *why)
{
  return client_error(r == PROTO_E_LIMIT ? GPUSHM_E_LIMIT
                      : r == PROTO_E_NOMEM ? GPUSHM_E_NOMEM
                                           : GPUSHM_E_INVAL, "%s", why);
}

int gpushm_weights_builder_add_tensor(gpushm_weights_builder_t *b, const char *name,
                                      uint32_t buffer, const gpushm_tensor_desc_t *desc)
{
  struct manifest_tensor t;
  char why[256];
  int r;

  client_clear_error();
  if (!b || !name || !desc)
    return client_error(GPUSHM_E_INVAL, "builder, name and desc must not be NULL");
  if (desc->size < GPUSHM_TENSOR_DESC_SIZE_V1)
    return client_error(GPUSHM_E_INVAL, "desc was not initialised "
                        "(gpushm_tensor_desc_init())");
  if (desc->ndim && !desc->shape)
    return client_error(GPUSHM_E_INVAL, "desc has %u dimensions and no shape", desc->ndim);
  t = (struct manifest_tensor){
    .name = name, .name_len = (uint32_t)strnlen(name, GPUSHM_LIMIT_WEIGHT_NAME + 1),
    .dtype_code = desc->dtype.code, .dtype_bits = desc->dtype.bits,
    .dtype_lanes = desc->dtype.lanes, .ndim = desc->ndim, .shape = desc->shape,
    .strides = desc->strides, .buffer = buffer, .offset = desc->offset,
  };
  if ((r = manifest_writer_add(&b->writer, &t, b->sizes, b->n_buffers, why, sizeof why)) < 0)
    return codec_error(r, why);
  return 0;
}

void gpushm_weights_publish_opts_init(gpushm_weights_publish_opts_t *opts)
{
  if (!opts)
    return;
  memset(opts, 0, sizeof *opts);
  opts->size = sizeof *opts;
}

/* The manifest as a memfd sealed against every change: what gpushmd keeps and hands to
 * readers, who can then trust that it stays what they checked. */
static int sealed_manifest(const struct manifest_writer *w)
{
  const int seals = F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL;
  int fd = memfd_create("gpushm-manifest", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  size_t done = 0;

  if (fd < 0)
    return io_error(errno, "memfd_create", NULL);
  while (done < w->len) {
    ssize_t n = write(fd, w->data + done, w->len - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      close(fd);
      return io_error(n < 0 ? errno : ENOSPC, "writing the manifest", NULL);
    }
    done += (size_t)n;
  }
  if (fcntl(fd, F_ADD_SEALS, seals) < 0) {
    close(fd);
    return io_error(errno, "sealing the manifest", NULL);
  }
  return fd;
}

static int adopt_generation(gpushm_t *conn, const Gpushm__OpenReply *open, struct client_fds *fds,
                            gpushm_weights_t **out);

/* Sends req (and send_fd) and makes the generation its open reply names. */
static int generation_round_trip(gpushm_t *conn, Gpushm__Request *req, int send_fd,
                                 gpushm_weights_t **out)
{
  Gpushm__Reply *reply;
  struct client_fds fds;
  uint64_t id;
  int r;

  pthread_mutex_lock(&conn->lock);
  r = client_call_locked_fd(conn, req, send_fd, &reply, &fds);
  pthread_mutex_unlock(&conn->lock);
  if (r < 0)
    return r;
  if (reply->body_case != GPUSHM__REPLY__BODY_OPEN || !reply->open->info ||
      !reply->open->weights || fds.n != 2) {
    id = reply->body_case == GPUSHM__REPLY__BODY_OPEN && reply->open->info
           ? reply->open->info->id : 0;
    client_close_fds(&fds);
    gpushm__reply__free_unpacked(reply, NULL);
    if (id)
      client_release_id(conn, id);
    return client_error(GPUSHM_E_PROTO, "malformed weight set reply");
  }
  r = adopt_generation(conn, reply->open, &fds, out);
  gpushm__reply__free_unpacked(reply, NULL);
  return r;
}

int gpushm_weights_publish(gpushm_t *conn, const char *name, const gpushm_weights_builder_t *b,
                           const gpushm_weights_publish_opts_t *opts, gpushm_weights_t **out)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__PublishRequest body = GPUSHM__PUBLISH_REQUEST__INIT;
  gpushm_weights_publish_opts_t o;
  gpushm_weights_t *w = NULL;
  struct manifest check;
  uint64_t *ids;
  char why[256];
  int fd, r;

  client_clear_error();
  if (out)
    *out = NULL;
  if (!conn || !name || !b)
    return client_error(GPUSHM_E_INVAL, "conn, name and builder must not be NULL");
  if (!wire_name_valid(name))
    return client_error(GPUSHM_E_NAME, "invalid weight set name");
  if ((r = client_need_feature(conn, GPUSHM_FEATURE_WEIGHTS, "weight sets")) < 0)
    return r;
  gpushm_weights_publish_opts_init(&o);
  if (opts && (r = client_copy_opts(&o, sizeof o, opts, GPUSHM_WEIGHTS_PUBLISH_OPTS_SIZE_V1,
                                    "gpushm_weights_publish_opts_t")) < 0)
    return r;
  if (!b->writer.n_tensors)
    return client_error(GPUSHM_E_INVAL, "a generation names at least one tensor");
  /* what every reader will check, checked here first, overlaps too */
  if ((r = manifest_decode(b->writer.data, b->writer.len, b->sizes, b->n_buffers, &check, why,
                           sizeof why)) < 0)
    return codec_error(r, why);
  r = manifest_check_overlaps(&check, why, sizeof why);
  manifest_free(&check);
  if (r < 0)
    return codec_error(r, why);
  if (!(ids = malloc(b->n_buffers * sizeof *ids)))
    return client_error(GPUSHM_E_NOMEM, "out of memory");
  for (uint32_t i = 0; i < b->n_buffers; i++) {
    if (gpushm_buffer_connection(b->buffers[i]) != conn) {
      free(ids);
      return client_error(GPUSHM_E_INVAL, "'%s' is open on another connection: publish on "
                          "the one that holds the buffers", gpushm_buffer_name(b->buffers[i]));
    }
    ids[i] = gpushm_buffer_id(b->buffers[i]);
  }
  if ((fd = sealed_manifest(&b->writer)) < 0) {
    free(ids);
    return fd;
  }
  body.name = (char *)name;
  body.buffers = ids;
  body.n_buffers = b->n_buffers;
  body.mode = o.mode;
  body.lifetime = (Gpushm__Lifetime)o.lifetime;
  body.after = o.after;
  body.tensors = (uint32_t)b->writer.n_tensors;
  req.body_case = GPUSHM__REQUEST__BODY_PUBLISH;
  req.publish = &body;
  r = generation_round_trip(conn, &req, fd, &w);
  close(fd);
  free(ids);
  if (r < 0)
    return r;
  if (out)
    *out = w;
  else
    gpushm_weights_close(w);
  return 0;
}

/* ---- reading --------------------------------------------------------------------------- */

static void decoded_unref(struct decoded_manifest *d)
{
  if (!d || __atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) != 0)
    return;
  manifest_free(&d->m);
  if (d->mapped)
    munmap((void *)d->bytes, d->size);
  else
    free((void *)d->bytes);
  free(d->sizes);
  free(d);
}

static void unmap_generation(gpushm_weights_t *w)
{
  decoded_unref(w->decoded);
  if (w->control)
    munmap(w->control, SYNC_CONTROL_SIZE);
  free(w->buffers);
  free(w->copy_order);
  free(w->copy_start);
  free(w->marks);
  pthread_mutex_destroy(&w->lock);
}

/* A manifest up to this size is read into memory of the reader's; a larger one mapped.
 * Reading a model's (tens of KB) costs one system call; mapping it, a mapping, a fault
 * a page and an unmapping (a TLB shootdown across a CUDA process's threads) at the
 * close. */
#define MANIFEST_READ_MAX (1u << 20)

/* d's bytes (sealed: they stay what they are read as) out of fd, d->size of them. */
static int take_manifest(struct decoded_manifest *d, int fd, const char *set)
{
  uint8_t *copy;
  size_t done = 0;

  if (d->size > MANIFEST_READ_MAX) {
    void *map = mmap(NULL, d->size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
      return io_error(errno, "mapping the manifest", set);
    d->bytes = map;
    d->mapped = true;
    return 0;
  }
  if (!(copy = malloc(d->size)))
    return client_error(GPUSHM_E_NOMEM, "out of memory");
  while (done < d->size) {
    ssize_t n = pread(fd, copy + done, d->size - done, (off_t)done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int err = n < 0 ? errno : 0;
      free(copy);
      if (!err)
        return client_error(GPUSHM_E_PROTO, "'%s': its manifest has fewer than the %zu bytes "
                            "gpushmd said", set, d->size);
      return io_error(err, "reading the manifest", set);
    }
    done += (size_t)n;
  }
  d->bytes = copy;
  return 0;
}

static struct weights_kept *kept_find(gpushm_t *conn, const char *name, bool make,
                                      struct weights_kept **dropped);

/* The decoding conn keeps of set's generation opened last, where fresh's bytes and
 * buffer sizes are its: a reference, or NULL. */
static struct decoded_manifest *decoded_again(gpushm_t *conn, const char *set,
                                              const struct decoded_manifest *fresh)
{
  struct decoded_manifest *d = NULL;
  struct weights_kept *k;

  pthread_mutex_lock(&kept_lock);
  if ((k = kept_find(conn, set, false, NULL)) && k->decoded && k->decoded->size == fresh->size &&
      k->decoded->n_sizes == fresh->n_sizes &&
      memcmp(k->decoded->sizes, fresh->sizes, fresh->n_sizes * sizeof *fresh->sizes) == 0) {
    d = k->decoded;
    __atomic_add_fetch(&d->refs, 1, __ATOMIC_RELAXED);
  }
  pthread_mutex_unlock(&kept_lock);
  /* immutable: compared outside the lock */
  if (d && memcmp(d->bytes, fresh->bytes, fresh->size) != 0) {
    decoded_unref(d);
    d = NULL;
  }
  return d;
}

/* The generation's manifest out of fd, over the buffers info names: the decoding its
 * connection keeps of the set's last, where the bytes are the same, else decoded and
 * checked (nothing the publisher wrote is trusted: every tensor inside its buffer,
 * aligned). */
static int decode_generation(gpushm_weights_t *w, const Gpushm__WeightsInfo *info, int fd)
{
  struct decoded_manifest *d = calloc(1, sizeof *d), *again;
  char why[256];
  int r;

  if (!d)
    return client_error(GPUSHM_E_NOMEM, "out of memory");
  d->refs = 1;
  d->size = (size_t)info->manifest_size;
  d->n_sizes = w->n_buffers;
  if (!(d->sizes = malloc(d->n_sizes * sizeof *d->sizes))) {
    decoded_unref(d);
    return client_error(GPUSHM_E_NOMEM, "out of memory");
  }
  for (uint32_t i = 0; i < d->n_sizes; i++)
    d->sizes[i] = w->buffers[i].size;
  if ((r = take_manifest(d, fd, w->name)) < 0) {
    decoded_unref(d);
    return r;
  }
  if ((again = decoded_again(w->conn, w->name, d))) {
    decoded_unref(d);
    d = again;
  } else if ((r = manifest_decode(d->bytes, d->size, d->sizes, d->n_sizes, &d->m, why,
                                  sizeof why)) < 0) {
    decoded_unref(d);
    return client_error(r == PROTO_E_NOMEM ? GPUSHM_E_NOMEM : GPUSHM_E_INVAL, "weight set "
                        "'%s' generation %llu: its manifest %s", w->name,
                        (unsigned long long)w->generation, why);
  }
  w->decoded = d;
  w->manifest = &d->m;
  return 0;
}

static int adopt_generation(gpushm_t *conn, const Gpushm__OpenReply *open, struct client_fds *fds,
                            gpushm_weights_t **out)
{
  const Gpushm__WeightsInfo *info = open->weights;
  gpushm_weights_t *w = calloc(1, sizeof *w);
  int r;

  if (!w) {
    r = client_error(GPUSHM_E_NOMEM, "out of memory");
    goto fail;
  }
  pthread_mutex_init(&w->lock, NULL);
  w->conn = conn;
  w->pid = getpid();
  w->id = open->info->id;
  w->generation = info->generation;
  snprintf(w->name, sizeof w->name, "%s", open->info->name);
  if (info->n_buffers == 0 || info->n_buffers > GPUSHM_LIMIT_WEIGHT_BUFFERS ||
      info->manifest_size == 0 || info->manifest_size > GPUSHM_LIMIT_WEIGHT_MANIFEST ||
      !client_fd_sealed(fds->fd[0])) {
    r = client_error(GPUSHM_E_PROTO, "'%s': a malformed generation (its manifest unsealed, or "
                     "of %llu bytes over %zu buffers)", w->name,
                     (unsigned long long)info->manifest_size, info->n_buffers);
    goto fail_w;
  }
  w->control = mmap(NULL, SYNC_CONTROL_SIZE, PROT_READ, MAP_SHARED, fds->fd[1], 0);
  if (w->control == MAP_FAILED) {
    w->control = NULL;
    r = io_error(errno, "mapping the control block", w->name);
    goto fail_w;
  }
  w->n_buffers = (uint32_t)info->n_buffers;
  if (!(w->buffers = calloc(w->n_buffers, sizeof *w->buffers))) {
    r = client_error(GPUSHM_E_NOMEM, "out of memory");
    goto fail_w;
  }
  for (uint32_t i = 0; i < w->n_buffers; i++) {
    w->buffers[i].id = info->buffers[i]->id;
    w->buffers[i].size = info->buffers[i]->size;
    w->buffers[i].device = info->buffers[i]->device;
  }
  if ((r = decode_generation(w, info, fds->fd[0])) < 0)
    goto fail_w;
  /* the count listings show is the publisher's word: a holder sees whether it was true */
  if (info->tensors != w->manifest->n_tensors) {
    r = client_error(GPUSHM_E_INVAL, "weight set '%s' generation %llu: its publisher "
                     "declared %u tensors, its manifest names %zu", w->name,
                     (unsigned long long)w->generation, info->tensors,
                     w->manifest->n_tensors);
    goto fail_w;
  }
  client_close_fds(fds);
  client_conn_ref(conn);
  *out = w;
  return 0;

fail_w:
  unmap_generation(w);
  free(w);
fail:
  client_close_fds(fds);
  client_release_id(conn, open->info->id);
  return r;
}

/* ---- keeping buffers between generations ------------------------------------------ */

static int cmp_id(const void *a, const void *b)
{
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

  return (x > y) - (x < y);
}

static void drop_kept(gpushm_t *conn);

/* conn's entry for the set name, made the most recently used; NULL where there is none
 * and make is false (or memory is short).  Making one past GPUSHM_LIMIT_WEIGHT_SETS_KEPT
 * unlinks the least recently used into *dropped, for the caller to free outside the
 * lock. */
static struct weights_kept *kept_find(gpushm_t *conn, const char *name, bool make,
                                      struct weights_kept **dropped)
{
  struct weights_kept **link = &conn->weights_kept, **last = NULL, *k;
  unsigned n = 0;

  for (; (k = *link); link = &k->next, n++) {
    if (strcmp(k->name, name) == 0) {
      *link = k->next;
      k->next = conn->weights_kept;
      conn->weights_kept = k;
      return k;
    }
    last = link;
  }
  /* after gpushm_disconnect() (generations closed late): nothing kept, nothing to free */
  if (!make || __atomic_load_n(&conn->user_gone, __ATOMIC_ACQUIRE) || !(k = calloc(1, sizeof *k)))
    return NULL;
  if (n >= GPUSHM_LIMIT_WEIGHT_SETS_KEPT) {
    *dropped = *last;
    *last = NULL;
  }
  snprintf(k->name, sizeof k->name, "%s", name);
  __atomic_store_n(&conn->drop_weights_kept, drop_kept, __ATOMIC_RELEASE);
  k->next = conn->weights_kept;
  conn->weights_kept = k;
  return k;
}

/* Closes handles a set's entry let go of, keeping the caller's error: what its own call
 * said is what it reports. */
static void close_handles(gpushm_buffer_t **handles, uint32_t n)
{
  struct client_saved_error saved;

  client_save_error(&saved);
  for (uint32_t i = 0; i < n; i++)
    if (handles[i])
      gpushm_buffer_close(handles[i]);
  client_restore_error(&saved);
}

/* Closes h, its error the caller's *r where that is the first. */
static void close_reporting(gpushm_buffer_t *h, int *r)
{
  if (*r < 0)
    close_handles(&h, 1);
  else
    *r = gpushm_buffer_close(h);
}

static void kept_free(struct weights_kept *k)
{
  decoded_unref(k->decoded);
  close_handles(k->kept, k->n_kept);
  free(k->kept);
  free(k->kept_ids);
  free(k->closed_ids);
  free(k);
}

/* gpushm_disconnect()'s: every handle conn keeps closed. */
static void drop_kept(gpushm_t *conn)
{
  struct weights_kept *all, *next;

  pthread_mutex_lock(&kept_lock);
  all = conn->weights_kept;
  conn->weights_kept = NULL;
  pthread_mutex_unlock(&kept_lock);
  for (; all; all = next) {
    next = all->next;
    kept_free(all);
  }
}

/* A generation just opened takes over the handles its connection kept of the buffers it
 * names (mapped: no round trip, no mapping) and lets go of the others; the set recycles
 * while its generations name buffers of the one closed before. */
static void kept_take(gpushm_weights_t *w)
{
  struct weights_kept *k, *dropped = NULL;
  struct decoded_manifest *old_decoded = NULL;
  gpushm_buffer_t **stale = NULL;
  uint32_t n_stale = 0;

  pthread_mutex_lock(&kept_lock);
  if ((k = kept_find(w->conn, w->name, true, &dropped))) {
    k->held++;
    w->counted = true;
    if (w->generation > k->newest_opened)
      k->newest_opened = w->generation;
    if (k->decoded != w->decoded) {
      old_decoded = k->decoded;
      __atomic_add_fetch(&w->decoded->refs, 1, __ATOMIC_RELAXED);
      k->decoded = w->decoded;
    }
    k->recycles = false;
    for (uint32_t i = 0; i < w->n_buffers; i++) {
      const uint64_t *at = NULL;
      /* (bsearch() takes no NULL base, even for nothing) */
      if (k->n_closed && bsearch(&w->buffers[i].id, k->closed_ids, k->n_closed,
                                 sizeof *k->closed_ids, cmp_id))
        k->recycles = true;
      if (k->n_kept)
        at = bsearch(&w->buffers[i].id, k->kept_ids, k->n_kept, sizeof *k->kept_ids, cmp_id);
      if (at && k->kept[at - k->kept_ids] && !w->buffers[i].open) {
        w->buffers[i].open = k->kept[at - k->kept_ids];
        k->kept[at - k->kept_ids] = NULL;
      }
    }
    stale = k->kept;
    n_stale = k->n_kept;
    k->kept = NULL;
    free(k->kept_ids);
    k->kept_ids = NULL;
    k->n_kept = 0;
  }
  pthread_mutex_unlock(&kept_lock);
  decoded_unref(old_decoded);
  close_handles(stale, n_stale);
  free(stale);
  if (dropped)
    kept_free(dropped);
}

/* The handle and id of a buffer kept, sorted together by id. */
struct kept_pair {
  uint64_t id;
  gpushm_buffer_t *handle;
};

static int cmp_pair(const void *a, const void *b)
{
  return cmp_id(&((const struct kept_pair *)a)->id, &((const struct kept_pair *)b)->id);
}

/* At w's close: its buffers' ids noted and, where the set recycles and a later
 * generation is held, the handles nothing but w opens kept (a tensor made of one,
 * holding an open of its own, is not taken over by anybody); every other handle closed.
 * Any handles the set's entry kept before (two generations closed in a row) are let go
 * of. */
static int kept_put(gpushm_weights_t *w)
{
  struct weights_kept *k = NULL, *dropped = NULL;
  struct decoded_manifest *old_decoded = NULL;
  uint64_t *ids = malloc((size_t)w->n_buffers * sizeof *ids);
  struct kept_pair *pairs = malloc((size_t)w->n_buffers * sizeof *pairs);
  gpushm_buffer_t **closing = calloc((size_t)w->n_buffers, sizeof *closing), **stale = NULL;
  uint32_t n_pairs = 0, n_stale = 0;
  int r = 0;

  pthread_mutex_lock(&kept_lock);
  if (ids && pairs && closing) /* a publisher's own hold makes no entry */
    k = kept_find(w->conn, w->name, w->counted, &dropped);
  for (uint32_t i = 0; i < w->n_buffers; i++) {
    gpushm_buffer_t *h = w->buffers[i].open;
    if (ids)
      ids[i] = w->buffers[i].id;
    if (!h)
      continue;
    if (k && w->counted && k->recycles && k->held > 1 && client_buffer_sole_open(h))
      pairs[n_pairs++] = (struct kept_pair){ w->buffers[i].id, h };
    else if (closing)
      closing[i] = h;
    else
      close_reporting(h, &r); /* memory short: no list (a close takes no lock of ours) */
    w->buffers[i].open = NULL;
  }
  if (k) {
    if (w->counted && k->held)
      k->held--;
    if (!k->held) {
      old_decoded = k->decoded; /* nothing of the set held: nothing of it kept */
      k->decoded = NULL;
    }
    /* a generation older than one opened since: what the next may name again (a second
     * hold of the newest, let go of, is not) */
    if (w->generation < k->newest_opened) {
      qsort(ids, w->n_buffers, sizeof *ids, cmp_id);
      free(k->closed_ids);
      k->closed_ids = ids;
      k->n_closed = w->n_buffers;
      ids = NULL;
    }
    stale = k->kept;
    n_stale = k->n_kept;
    free(k->kept_ids);
    k->kept = NULL;
    k->kept_ids = NULL;
    k->n_kept = 0;
    if (n_pairs && (k->kept = malloc(n_pairs * sizeof *k->kept)) &&
        (k->kept_ids = malloc(n_pairs * sizeof *k->kept_ids))) {
      qsort(pairs, n_pairs, sizeof *pairs, cmp_pair);
      for (uint32_t j = 0; j < n_pairs; j++) {
        k->kept_ids[j] = pairs[j].id;
        k->kept[j] = pairs[j].handle;
      }
      k->n_kept = n_pairs;
      n_pairs = 0;
    } else {
      free(k->kept);
      k->kept = NULL;
    }
  }
  pthread_mutex_unlock(&kept_lock);
  /* handles that could not be kept after all: closed as any other */
  for (uint32_t j = 0; j < n_pairs; j++)
    close_reporting(pairs[j].handle, &r);
  for (uint32_t i = 0; closing && i < w->n_buffers; i++)
    if (closing[i])
      close_reporting(closing[i], &r);
  close_handles(stale, n_stale);
  free(stale);
  decoded_unref(old_decoded);
  if (dropped)
    kept_free(dropped);
  free(closing);
  free(pairs);
  free(ids);
  return r;
}

int gpushm_weights_open(gpushm_t *conn, const char *name, gpushm_weights_t **out)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__OpenRequest body = GPUSHM__OPEN_REQUEST__INIT;
  int r;

  client_clear_error();
  if (!conn || !name || !out)
    return client_error(GPUSHM_E_INVAL, "conn, name and out must not be NULL");
  *out = NULL;
  if (!wire_name_valid(name))
    return client_error(GPUSHM_E_NAME, "invalid weight set name");
  if ((r = client_need_feature(conn, GPUSHM_FEATURE_WEIGHTS, "weight sets")) < 0)
    return r;
  body.key_case = GPUSHM__OPEN_REQUEST__KEY_NAME;
  body.name = (char *)name;
  body.read_only = true;
  body.kind = GPUSHM__KIND__KIND_WEIGHTS;
  req.body_case = GPUSHM__REQUEST__BODY_OPEN;
  req.open = &body;
  if ((r = generation_round_trip(conn, &req, -1, out)) == 0)
    kept_take(*out);
  return r;
}

int gpushm_weights_close(gpushm_weights_t *w)
{
  int r = 0, rb;

  client_clear_error();
  if (!w)
    return client_error(GPUSHM_E_INVAL, "w is NULL");
  if (w->pid != getpid()) {
    /* the parent's socket and opens: the child lets go of its copy of the memory only */
    char name[sizeof w->name];
    snprintf(name, sizeof name, "%s", w->name);
    unmap_generation(w);
    free(w);
    return client_error(GPUSHM_E_INVAL, "weight set '%s' was opened by the parent of this "
                        "process, before fork(): the child leaves it alone", name);
  }
  /* copies out of the memory still queued would fault once it is unmapped */
  for (size_t i = 0; i < w->n_marks; i++)
    if ((rb = client_cuda_mark_wait(&w->marks[i])) < 0 && r == 0)
      r = rb;
  /* the buffers' opens before the generation's, which keeps them alive */
  if ((rb = kept_put(w)) < 0 && r == 0)
    r = rb;
  unmap_generation(w);
  if ((rb = client_release_id(w->conn, w->id)) < 0 && r == 0)
    r = rb;
  client_conn_unref(w->conn);
  free(w);
  return r;
}

const char *gpushm_weights_name(const gpushm_weights_t *w)
{
  return w ? w->name : NULL;
}

uint64_t gpushm_weights_id(const gpushm_weights_t *w)
{
  return w ? w->id : 0;
}

uint64_t gpushm_weights_generation(const gpushm_weights_t *w)
{
  return w ? w->generation : 0;
}

uint64_t gpushm_weights_newest(const gpushm_weights_t *w)
{
  return w ? __atomic_load_n(&w->control->fence, __ATOMIC_ACQUIRE) : 0;
}

uint64_t gpushm_weights_oldest(const gpushm_weights_t *w)
{
  return w ? __atomic_load_n(&weights_held_of(w->control)->oldest, __ATOMIC_ACQUIRE) : 0;
}

/* gpushmd changes the block's wake word and wakes its sleepers at every publish and
 * whenever the oldest generation held changes; a slice bounds a sleep where the kernel
 * cannot wait on that word and the sequence's at once. */
#define WAIT_SLICE_NS 100000000ull

enum weights_wait { WAIT_NEWER, WAIT_RELEASED };

/* Sleeps on w's control block until what it waits for holds: 1; 0 once timeout_ms
 * (< 0: never) has passed; or an error. */
static int wait_control(gpushm_weights_t *w, enum weights_wait what, uint64_t upto,
                        int timeout_ms)
{
  const uint64_t deadline =
    client_sync_now_ns() + (timeout_ms >= 0 ? (uint64_t)timeout_ms * 1000000u : 0);

  for (;;) {
    uint32_t wake = __atomic_load_n(&w->control->wake, __ATOMIC_SEQ_CST);
    uint64_t last = __atomic_load_n(&w->control->release_seq, __ATOMIC_SEQ_CST);
    uint64_t newest = gpushm_weights_newest(w), oldest = gpushm_weights_oldest(w), now, nap;

    if (what == WAIT_NEWER && newest == GPUSHM_WEIGHTS_GONE)
      return client_error(GPUSHM_E_NOENT, "weight set '%s' is gone: no generation after %llu "
                          "will come", w->name, (unsigned long long)w->generation);
    if (what == WAIT_NEWER && newest > w->generation)
      return 1;
    if (what == WAIT_RELEASED && oldest == 0)
      return client_error(GPUSHM_E_UNSUPPORTED, "gpushmd does not say which generations of "
                          "'%s' are held (it is older than this library)", w->name);
    if (what == WAIT_RELEASED && oldest > upto)
      return 1;
    now = client_sync_now_ns();
    if (timeout_ms >= 0 && now >= deadline)
      return 0;
    nap = WAIT_SLICE_NS;
    if (timeout_ms >= 0 && deadline - now < nap)
      nap = deadline - now;
    client_sync_sleep(w->control, wake, last, nap);
  }
}

int gpushm_weights_wait_newer(gpushm_weights_t *w, int timeout_ms)
{
  int r;

  client_clear_error();
  if (!w)
    return client_error(GPUSHM_E_INVAL, "w is NULL");
  if ((r = wait_control(w, WAIT_NEWER, 0, timeout_ms)) == 0)
    return client_error(GPUSHM_E_TIMEOUT, "no generation of '%s' after %llu within %d ms",
                        w->name, (unsigned long long)w->generation, timeout_ms);
  return r < 0 ? r : 0;
}

int gpushm_weights_wait_released(gpushm_weights_t *w, uint64_t generation, int timeout_ms)
{
  int r;

  client_clear_error();
  if (!w)
    return client_error(GPUSHM_E_INVAL, "w is NULL");
  if (generation >= w->generation)
    return client_error(GPUSHM_E_INVAL, "generation %llu of '%s' is held through w itself "
                        "(generation %llu): wait for older ones", (unsigned long long)generation,
                        w->name, (unsigned long long)w->generation);
  if ((r = wait_control(w, WAIT_RELEASED, generation, timeout_ms)) == 0)
    return client_error(GPUSHM_E_TIMEOUT, "generation %llu of '%s' is still held after %d ms "
                        "(gpushmctl show %s says by whom)",
                        (unsigned long long)gpushm_weights_oldest(w), w->name, timeout_ms,
                        w->name);
  return r < 0 ? r : 0;
}

size_t gpushm_weights_tensor_count(const gpushm_weights_t *w)
{
  return w ? w->manifest->n_tensors : 0;
}

int gpushm_weights_tensor(const gpushm_weights_t *w, size_t index, gpushm_weight_tensor_t *out)
{
  const struct manifest_tensor *t;

  client_clear_error();
  if (!w || !out)
    return client_error(GPUSHM_E_INVAL, "w and out must not be NULL");
  if (index >= w->manifest->n_tensors)
    return client_error(GPUSHM_E_INVAL, "tensor %zu of %zu", index, w->manifest->n_tensors);
  t = &w->manifest->tensors[index];
  out->name = t->name;
  out->name_len = t->name_len;
  out->buffer = t->buffer;
  /* the first layout, whatever this library's is: the caller's struct may be older */
  memset(&out->desc, 0, GPUSHM_TENSOR_DESC_SIZE_V1);
  out->desc.size = GPUSHM_TENSOR_DESC_SIZE_V1;
  out->desc.ndim = t->ndim;
  out->desc.offset = t->offset;
  out->desc.dtype.code = t->dtype_code;
  out->desc.dtype.bits = t->dtype_bits;
  out->desc.dtype.lanes = t->dtype_lanes;
  out->desc.shape = t->shape;
  out->desc.strides = t->strides;
  return 0;
}

long gpushm_weights_find(const gpushm_weights_t *w, const char *name)
{
  long i;

  client_clear_error();
  if (!w || !name)
    return client_error(GPUSHM_E_INVAL, "w and name must not be NULL");
  if ((i = manifest_find(w->manifest, name, strlen(name))) < 0)
    return client_error(GPUSHM_E_NOENT, "weight set '%s' generation %llu has no tensor '%s'",
                        w->name, (unsigned long long)w->generation, name);
  return i;
}

uint32_t gpushm_weights_buffer_count(const gpushm_weights_t *w)
{
  return w ? w->n_buffers : 0;
}

int gpushm_weights_buffer(gpushm_weights_t *w, uint32_t index, gpushm_buffer_t **out)
{
  int r = 0;

  client_clear_error();
  if (!w || !out)
    return client_error(GPUSHM_E_INVAL, "w and out must not be NULL");
  if (index >= w->n_buffers)
    return client_error(GPUSHM_E_INVAL, "buffer %u of %u", index, w->n_buffers);
  pthread_mutex_lock(&w->lock);
  if (!w->buffers[index].open)
    r = client_open_via(w->conn, w->buffers[index].id, w->id, &w->buffers[index].open);
  /* the manifest was checked against the size the daemon named: the memory must be it */
  if (r == 0 && gpushm_buffer_size(w->buffers[index].open) != w->buffers[index].size) {
    gpushm_buffer_close(w->buffers[index].open);
    w->buffers[index].open = NULL;
    r = client_error(GPUSHM_E_PROTO, "buffer %u of '%s' changed size", index, w->name);
  }
  *out = w->buffers[index].open;
  pthread_mutex_unlock(&w->lock);
  return r;
}

int gpushm_weights_tensor_ptr(gpushm_weights_t *w, size_t index, void **ptr)
{
  gpushm_buffer_t *buf;
  char *base;
  int r;

  client_clear_error();
  if (!w || !ptr)
    return client_error(GPUSHM_E_INVAL, "w and ptr must not be NULL");
  if (index >= w->manifest->n_tensors)
    return client_error(GPUSHM_E_INVAL, "tensor %zu of %zu", index, w->manifest->n_tensors);
  if ((r = gpushm_weights_buffer(w, w->manifest->tensors[index].buffer, &buf)) < 0)
    return r;
  if (!(base = gpushm_buffer_ptr(buf)))
    return client_error(GPUSHM_E_UNSUPPORTED, "buffer %u of '%s' is not mapped in this process",
                        w->manifest->tensors[index].buffer, w->name);
  *ptr = base + w->manifest->tensors[index].offset;
  return 0;
}

_Static_assert(GPUSHM_WEIGHTS_PUBLISH_OPTS_SIZE_V1 == sizeof(gpushm_weights_publish_opts_t),
               "the first published layout, for ever: grow it at its end");

/* ---- copying ----------------------------------------------------------------------------- */

/* The tensors grouped by buffer, each group in manifest order (a stable counting sort:
 * neighbours in a buffer stay neighbours, for copies to merge). */
static int make_copy_order(gpushm_weights_t *w)
{
  const size_t n = w->manifest->n_tensors;
  uint32_t *order = malloc(n * sizeof *order);
  uint32_t *start = calloc((size_t)w->n_buffers + 1, sizeof *start);

  if (!order || !start) {
    free(order);
    free(start);
    return client_error(GPUSHM_E_NOMEM, "out of memory");
  }
  for (size_t i = 0; i < n; i++)
    start[w->manifest->tensors[i].buffer + 1]++;
  for (uint32_t b = 0; b < w->n_buffers; b++)
    start[b + 1] += start[b];
  for (size_t i = 0; i < n; i++)
    order[start[w->manifest->tensors[i].buffer]++] = (uint32_t)i;
  /* the fill advanced each start to the next's: shift back */
  memmove(start + 1, start, w->n_buffers * sizeof *start);
  start[0] = 0;
  w->copy_order = order;
  w->copy_start = start;
  return 0;
}

/* Records s's copies out of w, for gpushm_weights_close() to wait for: one mark a
 * stream, recorded again after each call's copies on it. */
static int mark_copies(gpushm_weights_t *w, const struct client_stream *s)
{
  struct client_cuda_mark *m = NULL, *grown;
  int r;

  pthread_mutex_lock(&w->lock);
  for (size_t i = 0; i < w->n_marks && !m; i++)
    if (w->marks[i].stream == s->stream && w->marks[i].ctx == s->ctx)
      m = &w->marks[i];
  if (!m) {
    if (!(grown = realloc(w->marks, (w->n_marks + 1) * sizeof *grown))) {
      pthread_mutex_unlock(&w->lock);
      return client_error(GPUSHM_E_NOMEM, "out of memory");
    }
    w->marks = grown;
    m = &w->marks[w->n_marks];
    memset(m, 0, sizeof *m);
  }
  if ((r = client_cuda_mark(m, s)) == 0 && m == &w->marks[w->n_marks])
    w->n_marks++;
  pthread_mutex_unlock(&w->lock);
  return r;
}

/* One copy of len bytes from src to dst: by the CPU (s NULL) or queued on s. */
static int copy_span(uintptr_t dst, uintptr_t src, uint64_t len, const struct client_stream *s)
{
  if (!s) {
    memcpy((void *)dst, (const void *)src, (size_t)len);
    return 0;
  }
  return client_cuda_copy((void *)dst, (const void *)src, len, s);
}

/* The copy being built: spans adjacent in both memories go as one. */
struct copy_run {
  uintptr_t dst, src;
  uint64_t len;
};

/* len bytes from src to dst added to run, which is queued first where they do not
 * follow it in both memories. */
static int run_add(struct copy_run *run, uintptr_t dst, uintptr_t src, uint64_t len,
                   const struct client_stream *s)
{
  int r;

  if (run->len && run->src + run->len == src && run->dst + run->len == dst) {
    run->len += len;
    return 0;
  }
  if (run->len && (r = copy_span(run->dst, run->src, run->len, s)) < 0)
    return r;
  *run = (struct copy_run){ dst, src, len };
  return 0;
}

/* Tensor i of w out of base to dst (where its element [0, ..., 0] goes).  Only its
 * elements: the bytes between them at dst are the caller's (a fused weight's other
 * parts), not the publisher's to write.  So its span goes whole only where its
 * innermost dimensions (by stride) fill it; else one block of those that do for each
 * index of the others. */
static int copy_tensor(const gpushm_weights_t *w, size_t i, uintptr_t base, uintptr_t dst,
                       struct copy_run *run, const struct client_stream *s)
{
  const struct manifest_tensor *t = &w->manifest->tensors[i];
  const int64_t size = (int64_t)(t->dtype_bits / 8) * t->dtype_lanes;
  uint32_t order[GPUSHM_LIMIT_TENSOR_NDIM], n = 0, inner = 0, k;
  int64_t at[GPUSHM_LIMIT_TENSOR_NDIM] = { 0 }, reach = 0, low = 0, blocks = 1;
  uint64_t first, end;

  if (!manifest_tensor_span(t, &first, &end))
    return 0;
  /* dimensions of more than one element, by |stride| (decode kept every product of a
   * stride and an extent inside the span: no overflow below) */
  for (k = 0; k < t->ndim; k++) {
    uint32_t j;
    if (t->shape[k] < 2)
      continue;
    for (j = n++; j > 0 && llabs(t->strides[order[j - 1]]) > llabs(t->strides[k]); j--)
      order[j] = order[j - 1];
    order[j] = k;
  }
  /* each next one's stride no more than one past what those before reach: no gap */
  for (; inner < n && llabs(t->strides[order[inner]]) <= reach + 1; inner++) {
    reach += (t->shape[order[inner]] - 1) * llabs(t->strides[order[inner]]);
    if (t->strides[order[inner]] < 0)
      low += (t->shape[order[inner]] - 1) * t->strides[order[inner]];
  }
  if (inner == n)
    return run_add(run, dst - (uintptr_t)(t->offset - first), base + (uintptr_t)first,
                   end - first, s);
  /* blocks that overlap (a stride of the outer dimensions repeating one of the inner
   * ones) could outnumber the elements of its span many times over */
  for (k = inner; k < n; k++)
    if (__builtin_mul_overflow(blocks, t->shape[order[k]], &blocks))
      blocks = INT64_MAX;
  if (blocks > (int64_t)((end - first) / (uint64_t)size) / (reach + 1))
    return client_error(GPUSHM_E_UNSUPPORTED, "tensor %zu \"%s\" of weight set '%s' has "
                        "elements both apart and overlapping: copy it element by element",
                        i, t->name, w->name);
  for (;;) {
    int64_t from = low; /* elements from [0, ..., 0] */
    int r;
    for (k = inner; k < n; k++)
      from += at[k] * t->strides[order[k]];
    if ((r = run_add(run, dst + (uintptr_t)(from * size),
                     base + (uintptr_t)t->offset + (uintptr_t)(from * size),
                     (uint64_t)(reach + 1) * (uint64_t)size, s)) < 0)
      return r;
    for (k = inner; k < n && ++at[k] == t->shape[order[k]]; k++)
      at[k] = 0;
    if (k == n)
      return 0;
  }
}

/* Buffer b's tensors that have a destination, copied out of base, neighbours merged. */
static int copy_buffer(gpushm_weights_t *w, uint32_t b, uintptr_t base, void *const dst[],
                       const struct client_stream *s)
{
  struct copy_run run = { 0, 0, 0 };
  int r;

  for (uint32_t k = w->copy_start[b]; k < w->copy_start[b + 1]; k++) {
    const uint32_t i = w->copy_order[k];
    if (dst[i] && (r = copy_tensor(w, i, base, (uintptr_t)dst[i], &run, s)) < 0)
      return r;
  }
  return run.len ? copy_span(run.dst, run.src, run.len, s) : 0;
}

int gpushm_weights_copy(gpushm_weights_t *w, void *const dst[], size_t n, void *stream)
{
  int r = 0;

  client_clear_error();
  if (!w || !dst)
    return client_error(GPUSHM_E_INVAL, "w and dst must not be NULL");
  if (n != w->manifest->n_tensors)
    return client_error(GPUSHM_E_INVAL, "dst has %zu places for the %zu tensors of weight set "
                        "'%s' generation %llu", n, w->manifest->n_tensors, w->name,
                        (unsigned long long)w->generation);
  if (w->pid != getpid())
    return client_error(GPUSHM_E_INVAL, "weight set '%s' was opened by the parent of this "
                        "process, before fork()", w->name);
  pthread_mutex_lock(&w->lock);
  if (!w->copy_order)
    r = make_copy_order(w);
  pthread_mutex_unlock(&w->lock);
  for (uint32_t b = 0; r == 0 && b < w->n_buffers; b++) {
    struct client_stream s;
    gpushm_buffer_t *buf;
    bool wanted = false, by_cpu;
    char *base;

    for (uint32_t k = w->copy_start[b]; k < w->copy_start[b + 1] && !wanted; k++)
      wanted = dst[w->copy_order[k]] != NULL;
    if (!wanted)
      continue; /* not even opened */
    if ((r = gpushm_weights_buffer(w, b, &buf)) < 0)
      break;
    if (!(base = gpushm_buffer_ptr(buf))) {
      r = client_error(GPUSHM_E_UNSUPPORTED, "buffer %u of weight set '%s' is not mapped in "
                       "this process (device memory where CUDA is not)", b, w->name);
      break;
    }
    by_cpu = !stream && gpushm_buffer_backend(buf) == GPUSHM_BACKEND_HOST;
    if (!by_cpu && (r = client_cuda_stream(stream, gpushm_buffer_device(buf), &s)) < 0)
      break;
    r = copy_buffer(w, b, (uintptr_t)base, dst, by_cpu ? NULL : &s);
    /* marked whatever came of it: what was queued must be waited for */
    if (!by_cpu) {
      int rm = mark_copies(w, &s);
      r = r < 0 ? r : rm;
    }
  }
  return r;
}

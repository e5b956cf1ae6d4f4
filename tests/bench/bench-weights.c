/* SPDX-License-Identifier: MIT */
/* Weight sets against their floors (issue 39; docs/weights.md), a publisher and a
 * reader in processes of their own, each row beside a floor measured in the same run:
 *   W1  one copy per sync: the reader wakes for a new generation of an 8B-shaped model
 *       (291 bf16 tensors, Llama-3-8B's, 16 GB on a GPU, in buffers of at most 1 GiB as
 *       publish_weights() lays them out), opens it and copies it with
 *       gpushm_weights_copy() into memory of its own: into tensors of its own (a copy a
 *       tensor), and (an engine that keeps the set's layout) into one region, where
 *       neighbours merge into a copy a buffer; against the same copies out of memory of
 *       its own mapped all along (target <= 1.05 x); beside them where the time goes,
 *       the same copies out of new memory of its own mapped afresh, as any receiver of
 *       new memory must, and raw CUDA IPC's open and copy of a new buffer; on a GPU, a
 *       diagnosis: the same syncs with every buffer opened and mapped before any copy;
 *   W2  publish to visible: a reader waiting in gpushm_weights_wait_newer() has the new
 *       generation of 291 tensors open and mapped (target <= 2 ms), beside two ping
 *       round trips;
 *   W3  first open of the model, and of a 100,000-tensor set (the median of 5, and of 5
 *       more with its manifest decoded on one thread), by a reader that has not opened it
 *       before or has closed it since, its CUDA context made, to its last tensor's pointer
 *       (target <= 20 ms), beside a ping round trip.
 * Host memory always (scaled down: 1/16 of the model's bytes, 1/256 with --quick, which
 * .ci/run uses); device memory (cuda-fd, the whole model) where a GPU is.  Printed, not
 * asserted: exits non-zero only when data came back wrong or something failed.
 * Usage: bench-weights [--quick] */
#include "config.h"
#include "cuda-test.h"
#include "gpushm-weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LAYERS 32
#define TENSORS (LAYERS * 9 + 3)
#define SYNC_ROUNDS 5
#define VISIBLE_ROUNDS 30
#define BIG_TENSORS 100000
#define BIG_TENSOR_BYTES 640u
#define FIRST_OPENS 5
#define ALIGN 256u
#define TARGET_SYNC_RATIO 1.05
/* w1_rows()'s mode of a publisher double-buffering the set (generation n written into
 * the buffers of n - 2), and the syncs not counted there: the reader maps each buffer
 * afresh until it has seen one named again (generation 3), keeps them from then on. */
#define W1_RECYCLED 3
#define RECYCLE_WARMUP 2
/* A diagnosis of the recycled mode: the reader pings gpushmd as soon as it is woken,
 * before it opens the generation (what a round trip costs a process just woken). */
#define W1_WOKEN 4
#define TARGET_VISIBLE_MS 2.0
#define TARGET_FIRST_OPEN_MS 20.0
/* The most bytes one buffer of a generation holds (python/gpushm/weights.py's bucket) */
#define BUCKET (1ull << 30)
/* Between tensors of the reader's own (a copy a tensor): no two of them adjacent */
#define OWN_GAP 256u

static struct test_daemon d;
static char self[4096];
static bool quick, recycled_only;

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, unsigned n)
{
  qsort(v, n, sizeof v[0], cmp_double);
  return v[n / 2];
}

/* ---- the model's shape --------------------------------------------------------------- */

struct shaped {
  char name[64];
  int64_t shape[2];
  unsigned ndim;
  uint64_t offset, bytes; /* offset: in the whole set, laid out back to back */
  uint32_t buffer;        /* which buffer of the generation (layout()) */
  uint64_t in_buffer;     /* and where in it */
};

/* What layout() puts in one buffer at most: BUCKET, as publish_weights() does (each
 * buffer of a new generation mapped while the one before is copied); a recycled set's
 * buffers stay mapped in its reader, and one buffer is one copy. */
static uint64_t bucket = BUCKET;

/* The set's buffers: the tensors in order, a new buffer where the next would take the
 * one before past bucket (a tensor larger than that in one of its own).  Fills each
 * tensor's buffer and in_buffer, start[] with each buffer's offset in the whole set
 * (start[n] its end); returns n. */
static uint32_t layout(struct shaped *t, unsigned n, uint64_t total, uint64_t *start)
{
  uint32_t b = 0;

  start[0] = 0;
  for (unsigned k = 0; k < n; k++) {
    if (t[k].offset > start[b] && t[k].offset + t[k].bytes - start[b] > bucket)
      start[++b] = t[k].offset;
    t[k].buffer = b;
    t[k].in_buffer = t[k].offset - start[b];
  }
  start[++b] = total;
  return b;
}

/* Llama-3-8B's 291 tensors, every dimension divided by scale (1: the real one), laid out
 * back to back at ALIGN; returns the bytes in all. */
static uint64_t model(struct shaped *t, unsigned scale)
{
  static const struct {
    const char *name;
    int64_t rows, cols; /* cols 0: a vector */
  } layer[] = {
    { "self_attn.q_proj.weight", 4096, 4096 }, { "self_attn.k_proj.weight", 1024, 4096 },
    { "self_attn.v_proj.weight", 1024, 4096 }, { "self_attn.o_proj.weight", 4096, 4096 },
    { "mlp.gate_proj.weight", 14336, 4096 },   { "mlp.up_proj.weight", 14336, 4096 },
    { "mlp.down_proj.weight", 4096, 14336 },   { "input_layernorm.weight", 4096, 0 },
    { "post_attention_layernorm.weight", 4096, 0 },
  };
  uint64_t at = 0;
  unsigned n = 0;

#define ADD(fmt, arg, r, c)                                                              \
  do {                                                                                   \
    snprintf(t[n].name, sizeof t[n].name, fmt, arg);                                     \
    t[n].shape[0] = (r) / scale;                                                         \
    t[n].shape[1] = (c) / scale;                                                         \
    t[n].ndim = (c) ? 2 : 1;                                                             \
    t[n].bytes = (uint64_t)t[n].shape[0] * ((c) ? (uint64_t)t[n].shape[1] : 1) * 2;      \
    t[n].offset = at;                                                                    \
    at = (at + t[n].bytes + ALIGN - 1) / ALIGN * ALIGN;                                  \
    n++;                                                                                 \
  } while (0)
  ADD("%s", "model.embed_tokens.weight", 128256, 4096);
  for (unsigned l = 0; l < LAYERS; l++)
    for (unsigned k = 0; k < sizeof layer / sizeof layer[0]; k++) {
      char name[64];
      snprintf(name, sizeof name, "model.layers.%u.%s", l, layer[k].name);
      ADD("%s", name, layer[k].rows, layer[k].cols);
    }
  ADD("%s", "model.norm.weight", 4096, 0);
  ADD("%s", "lm_head.weight", 128256, 4096);
#undef ADD
  return at;
}

/* ---- memory either side can copy ------------------------------------------------------ */

struct place {
  bool device;
  void *host;
  CUdeviceptr dev;
};

static struct place alloc_local(bool device, uint64_t bytes)
{
  struct place p = { .device = device };

  if (device) {
    CU_CHECK(CU_CALL(&drv, cuMemAlloc, &p.dev, bytes));
    CU_CHECK(CU_CALL(&drv, cuMemsetD32, p.dev, 0x5a5a5a5au, bytes / 4));
  } else {
    CHECK((p.host = malloc(bytes)) != NULL);
    memset(p.host, 0x5a, bytes); /* touched: the copies time no page faults */
  }
  return p;
}

/* Memory of the reader's own that it maps afresh for each copy out of it: what any
 * receiver of new memory does before its copy (device: a cuMemCreate'd allocation
 * mapped with cuMemMap + cuMemSetAccess, as an import is; host: a memfd mmap'd, its
 * pages faulted in by the copy), written once through a first mapping. */
struct fresh {
  bool device;
  uint64_t size;
  CUmemGenericAllocationHandle handle;
  int fd;
};

static struct fresh fresh_new(bool device, uint64_t bytes)
{
  struct fresh f = { .device = device, .fd = -1 };

  if (device) {
    CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
    CUmemAccessDesc rw = { .location = prop.location,
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    size_t granule = 0;
    CUdeviceptr va;

    CU_CHECK(CU_CALL(&drv, cuMemGetAllocationGranularity, &granule, &prop,
                     CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    f.size = (bytes + granule - 1) / granule * granule;
    CU_CHECK(CU_CALL(&drv, cuMemCreate, &f.handle, f.size, &prop, 0));
    CU_CHECK(CU_CALL(&drv, cuMemAddressReserve, &va, f.size, 0, 0, 0));
    CU_CHECK(CU_CALL(&drv, cuMemMap, va, f.size, 0, f.handle, 0));
    CU_CHECK(CU_CALL(&drv, cuMemSetAccess, va, f.size, &rw, 1));
    CU_CHECK(CU_CALL(&drv, cuMemsetD32, va, 0x5a5a5a5au, f.size / 4));
    CU_CHECK(CU_CALL(&drv, cuCtxSynchronize));
    CU_CHECK(CU_CALL(&drv, cuMemUnmap, va, f.size));
    CU_CHECK(CU_CALL(&drv, cuMemAddressFree, va, f.size));
  } else {
    void *p;

    f.size = bytes;
    CHECK((f.fd = memfd_create("bench-weights-fresh", MFD_CLOEXEC)) >= 0);
    CHECK(ftruncate(f.fd, (off_t)bytes) == 0);
    CHECK((p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd, 0)) != MAP_FAILED);
    memset(p, 0x5a, bytes);
    CHECK(munmap(p, bytes) == 0);
  }
  return f;
}

static struct place fresh_map(const struct fresh *f)
{
  struct place p = { .device = f->device };

  if (f->device) {
    CUmemAccessDesc r = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READ };
    CU_CHECK(CU_CALL(&drv, cuMemAddressReserve, &p.dev, f->size, 0, 0, 0));
    CU_CHECK(CU_CALL(&drv, cuMemMap, p.dev, f->size, 0, f->handle, 0));
    CU_CHECK(CU_CALL(&drv, cuMemSetAccess, p.dev, f->size, &r, 1));
  } else {
    CHECK((p.host = mmap(NULL, f->size, PROT_READ, MAP_SHARED, f->fd, 0)) != MAP_FAILED);
  }
  return p;
}

static void fresh_unmap(const struct fresh *f, struct place *p)
{
  if (f->device) {
    CU_CHECK(CU_CALL(&drv, cuMemUnmap, p->dev, f->size));
    CU_CHECK(CU_CALL(&drv, cuMemAddressFree, p->dev, f->size));
  } else {
    CHECK(munmap(p->host, f->size) == 0);
  }
}

static void copy(bool device, CUstream s, uint64_t dst, uint64_t src, uint64_t bytes)
{
  if (device)
    CU_CHECK(CU_CALL(&drv, cuMemcpyDtoDAsync, (CUdeviceptr)dst, (CUdeviceptr)src, bytes, s));
  else
    memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
}

static uint64_t base_of(const struct place *p)
{
  return p->device ? (uint64_t)p->dev : (uint64_t)(uintptr_t)p->host;
}

/* ---- the reader (commands on stdin, figures on stdout) -------------------------------- */

static void answer(const char *word, double value)
{
  printf("%s %.4f\n", word, value);
  fflush(stdout);
}

/* The reader's copy of the set: its tensors, their places in the reader's memory (each
 * a tensor of its own, or the set's layout in one region) and the memory itself. */
static struct shaped own_t[TENSORS];
static uint64_t own_start[TENSORS + 1];
static void *at_tensor[TENSORS], *at_layout[TENSORS];
static bool reader_device;

static void *place_at(const struct place *p, uint64_t offset)
{
  return (void *)(uintptr_t)(base_of(p) + offset);
}

/* The places of the set's tensors in dst, for scale (what the publisher's model() is). */
static uint64_t reader_places(const struct place *dst, unsigned scale)
{
  uint64_t bytes = model(own_t, scale);

  layout(own_t, TENSORS, bytes, own_start);
  for (unsigned i = 0; i < TENSORS; i++) {
    at_layout[i] = place_at(dst, own_t[i].offset);
    at_tensor[i] = place_at(dst, own_t[i].offset + (uint64_t)i * OWN_GAP);
  }
  return bytes;
}

/* The last word tensor last of a sync landed at. */
static uint16_t last_word(void *const *to)
{
  uint64_t at = (uint64_t)(uintptr_t)to[TENSORS - 1] + own_t[TENSORS - 1].bytes - 2;
  uint16_t seen;

  if (reader_device)
    CU_CHECK(CU_CALL(&drv, cuMemcpyDtoH, &seen, (CUdeviceptr)at, sizeof seen));
  else
    memcpy(&seen, (const void *)(uintptr_t)at, sizeof seen);
  return seen;
}

/* A sync's copies: w into the reader's places (whole: the set's layout) with
 * gpushm_weights_copy(), waited for; false where a word came back wrong. */
static double queued_ms; /* copy_generation()'s gpushm_weights_copy() call, the last */
static double premapped_ms; /* its buffers' opens first, where map_first */

static bool copy_generation(gpushm_weights_t *w, bool whole, bool map_first, CUstream s,
                            uint16_t g)
{
  void *const *to = whole ? at_layout : at_tensor;
  double t0 = now_ms();

  if (map_first) {
    gpushm_buffer_t *b;
    for (uint32_t i = 0; i < gpushm_weights_buffer_count(w); i++)
      CHECK_OK(gpushm_weights_buffer(w, i, &b));
    premapped_ms = now_ms() - t0;
    t0 = now_ms();
  }

  CHECK_OK(gpushm_weights_copy(w, to, TENSORS, reader_device ? s : NULL));
  queued_ms = now_ms() - t0;
  if (reader_device)
    CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
  return last_word(to) == g;
}

/* The same copies out of memory of the reader's own (from, the set laid out in it as in
 * the whole set): one copy of it all (whole), or one a tensor. */
static void copy_own(const struct place *from, bool whole, CUstream s, uint64_t bytes)
{
  if (whole) {
    copy(reader_device, s, (uint64_t)(uintptr_t)at_layout[0], base_of(from), bytes);
  } else {
    for (unsigned i = 0; i < TENSORS; i++)
      copy(reader_device, s, (uint64_t)(uintptr_t)at_tensor[i],
           base_of(from) + own_t[i].offset, own_t[i].bytes);
  }
  if (reader_device)
    CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
}

static int role_reader(const char *socket)
{
  struct place dst = { 0 }, src = { 0 };
  struct fresh fresh = { 0 };
  gpushm_weights_t *w = NULL, *next;
  CUstream s = NULL;
  gpushm_t *conn;
  char cmd[256], set[64], hex[129];
  unsigned long long bytes = 0;
  int device, rounds, whole, threads;
  unsigned scale;
  gpushm_buffer_t *kept = NULL; /* "keep": a buffer of the publisher's, mapped all along */

  CHECK_OK(gpushm_connect(socket, "bench-weights-reader", &conn));
  while (fgets(cmd, sizeof cmd, stdin)) {
    if (sscanf(cmd, "setup %d %u", &device, &scale) == 2) {
      struct shaped t[TENSORS];
      reader_device = device;
      if (device) {
        cuda_test_setup(0);
        CU_CHECK(CU_CALL(&drv, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING));
      }
      bytes = model(t, scale);
      dst = alloc_local(device, bytes + TENSORS * OWN_GAP);
      src = alloc_local(device, bytes);
      fresh = fresh_new(device, bytes);
      reader_places(&dst, scale);
      answer("ok", 0);
    } else if (sscanf(cmd, "follow %63s %d %d", set, &rounds, &whole) == 3) {
      /* rounds of: wait for a new generation, open it, copy it all (sync), or (rounds
       * negative) open and map it only (visible) */
      const bool copies = rounds > 0;
      CHECK_OK(gpushm_weights_open(conn, set, &w));
      for (int i = 0; i < (copies ? rounds : -rounds); i++) {
        void *p;
        answer("ready", (double)gpushm_weights_generation(w));
        CHECK_OK(gpushm_weights_wait_newer(w, 60000));
        double t0 = now_ms(), t1, pinged = 0;
        if (whole == W1_WOKEN) {
          CHECK_OK(gpushm_ping(conn)); /* the round trip a process just woken pays */
          pinged = now_ms() - t0;
        }
        CHECK_OK(gpushm_weights_open(conn, set, &next));
        t1 = now_ms();
        double again = 0;
        if (whole == W1_WOKEN) {
          /* the same open once more, at once: what an open costs a process awake */
          gpushm_weights_t *twice;
          CHECK_OK(gpushm_weights_open(conn, set, &twice));
          again = now_ms() - t1;
          CHECK_OK(gpushm_weights_close(twice));
          const double aside = now_ms() - t1; /* not in the sync */
          t0 += aside;
          t1 += aside;
        }
        if (copies) {
          const uint16_t g = (uint16_t)gpushm_weights_generation(next);
          bool right = copy_generation(next, whole != 0, whole == 2, s, g);
          const double t2 = now_ms(), queued = queued_ms;
          CHECK_OK(gpushm_weights_close(w));
          w = next;
          answer(right ? "sync" : "wrong", t2 - t0);
          /* where it went, each part timed on its own: the open; the buffers' opens and
           * the copies; not in the sync: the close of the generation before, the same
           * copies again (mapped now), out of the reader's own memory mapped all along
           * (the floor), and out of new memory of its own mapped afresh (the mapping
           * also timed alone) */
          const double t3 = now_ms();
          right = copy_generation(w, whole != 0, false, s, g) && right;
          const double t4 = now_ms();
          copy_own(&src, whole != 0, s, bytes);
          const double t5 = now_ms();
          struct place mapped = fresh_map(&fresh);
          const double t5m = now_ms();
          copy_own(&mapped, whole != 0, s, bytes);
          const double t6 = now_ms();
          fresh_unmap(&fresh, &mapped);
          /* out of the reader's own memory just written by itself, as a set is at every
           * sync by its publisher */
          if (reader_device) {
            CU_CHECK(CU_CALL(&drv, cuMemsetD32, src.dev, (uint32_t)g << 16 | g, bytes / 4));
            CU_CHECK(CU_CALL(&drv, cuCtxSynchronize));
          }
          const double t7 = now_ms();
          copy_own(&src, whole != 0, s, bytes);
          const double t8 = now_ms();
          printf("parts %.4f %.4f %.4f %.4f %.4f %.4f %.4f %.4f %.4f %.4f %.4f\n", t1 - t0,
                 t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t5m - t5, queued,
                 whole == 2 ? premapped_ms : pinged, t8 - t7, again);
          fflush(stdout);
          if (kept) {
            /* the publisher has just written its buffer, mapped here all along: the one
             * copy a sync is, without a sync (no wake, no open) */
            CHECK(fgets(cmd, sizeof cmd, stdin) != NULL);
            const double r0 = now_ms();
            copy(true, s, (uint64_t)(uintptr_t)at_layout[0],
                 (CUdeviceptr)(uintptr_t)gpushm_buffer_ptr(kept), bytes);
            CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
            answer("copied", now_ms() - r0);
          }
          if (!right)
            answer("wrong", 0);
        } else {
          CHECK_OK(gpushm_weights_close(w));
          w = next;
          CHECK_OK(gpushm_weights_tensor_ptr(w, gpushm_weights_tensor_count(w) - 1, &p));
          answer("seen", now_ms());
        }
      }
      CHECK_OK(gpushm_weights_close(w));
    } else if (sscanf(cmd, "keep %63s", set) == 1) {
      CHECK_OK(gpushm_buffer_open(conn, set, GPUSHM_OPEN_READONLY, &kept));
      answer("ok", 0);
    } else if (strncmp(cmd, "unkeep", 6) == 0) {
      CHECK_OK(gpushm_buffer_close(kept));
      kept = NULL;
      answer("ok", 0);
    } else if (sscanf(cmd, "raw %128s %d", hex, &rounds) == 2) {
      /* the floor of a sync of new memory without gpushm: a cuMemAlloc'd buffer of the
       * publisher's, written there, opened here with legacy CUDA IPC and copied whole */
      CUipcMemHandle h;
      CUdeviceptr p;
      double t0 = now_ms();
      uint16_t seen;

      for (size_t k = 0; k < sizeof h.reserved; k++)
        CHECK(sscanf(hex + 2 * k, "%2hhx", (unsigned char *)&h.reserved[k]) == 1);
      CU_CHECK(CU_CALL(&drv, cuIpcOpenMemHandle, &p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
      copy(true, s, base_of(&dst), (uint64_t)p, bytes);
      CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
      double ms = now_ms() - t0;
      CU_CHECK(CU_CALL(&drv, cuMemcpyDtoH, &seen, dst.dev + bytes - 2, sizeof seen));
      CU_CHECK(CU_CALL(&drv, cuIpcCloseMemHandle, p));
      answer(seen == (uint16_t)rounds ? "raw" : "wrong", ms);
    } else if (sscanf(cmd, "first %63s %d", set, &threads) == 2) {
      double t0;
      void *p;

      /* threads 0: the library's choice; else its manifest decode capped at that many */
      if (threads > 0) {
        char cap[16];
        snprintf(cap, sizeof cap, "%d", threads);
        CHECK(setenv("GPUSHM_MANIFEST_THREADS", cap, 1) == 0);
      } else {
        CHECK(unsetenv("GPUSHM_MANIFEST_THREADS") == 0);
      }
      t0 = now_ms();
      CHECK_OK(gpushm_weights_open(conn, set, &w));
      CHECK_OK(gpushm_weights_tensor_ptr(w, gpushm_weights_tensor_count(w) - 1, &p));
      answer("open", now_ms() - t0);
      CHECK_OK(gpushm_weights_close(w));
    }
  }
  gpushm_disconnect(conn);
  return 0;
}

/* ---- the publisher -------------------------------------------------------------------- */

struct reader {
  pid_t pid;
  FILE *in, *out;
};

static void start_reader(struct reader *r)
{
  int to[2], from[2];

  CHECK(pipe(to) == 0 && pipe(from) == 0);
  fflush(stdout);
  CHECK((r->pid = fork()) >= 0);
  if (r->pid == 0) {
    CHECK(dup2(to[0], 0) == 0 && dup2(from[1], 1) == 1);
    close(to[1]);
    close(from[0]);
    cuda_test_child_env();
    execl(self, self, "reader", d.socket, (char *)NULL);
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  CHECK((r->in = fdopen(to[1], "w")) != NULL && (r->out = fdopen(from[0], "r")) != NULL);
}

static double hear(struct reader *r, const char *word)
{
  char line[128], got[32];
  double v;

  CHECK(fgets(line, sizeof line, r->out) != NULL);
  CHECK(sscanf(line, "%31s %lf", got, &v) == 2);
  if (strcmp(got, word) != 0) {
    fprintf(stderr, "bench-weights: the reader said '%s', not '%s'\n", got, word);
    exit(1);
  }
  return v;
}

#define PARTS 11

/* The reader's "parts" line: where one sync's time went (see role_reader()). */
static void hear_parts(struct reader *r, double *part)
{
  char line[512];

  CHECK(fgets(line, sizeof line, r->out) != NULL);
  CHECK(sscanf(line, "parts %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf", &part[0],
               &part[1], &part[2], &part[3], &part[4], &part[5], &part[6], &part[7], &part[8],
               &part[9], &part[10]) == PARTS);
}

static double part_median(double parts[][PARTS], unsigned rounds, unsigned which)
{
  double v[SYNC_ROUNDS];

  for (unsigned i = 0; i < rounds; i++)
    v[i] = parts[i][which];
  return median(v, rounds);
}

/* A generation's buffers, the publisher's handles of them. */
struct gen {
  gpushm_buffer_t *buf[TENSORS];
  uint32_t n;
};

/* Generation g of a set, made ready to publish: new buffers (layout()) whose every bf16
 * holds g, and the builder naming the tensors t in them. */
struct staged {
  struct gen gen;
  gpushm_weights_builder_t *builder;
};

/* Generation g in gen's buffers: their every bf16 set to g (waited for), and the
 * builder naming the tensors t in them. */
static struct staged stage_in(struct gen gen, gpushm_backend_t backend, struct shaped *t,
                              unsigned n, uint16_t g)
{
  gpushm_tensor_desc_t desc;
  struct staged st = { .gen = gen };
  uint32_t index;

  CHECK_OK(gpushm_weights_builder_new(&st.builder));
  for (uint32_t b = 0; b < gen.n; b++) {
    gpushm_buffer_t *buf = gen.buf[b];
    const uint64_t size = gpushm_buffer_size(buf);

    if (backend == GPUSHM_BACKEND_HOST) {
      uint16_t *p = gpushm_buffer_ptr(buf);
      for (uint64_t k = 0; k < size / 2; k++)
        p[k] = g;
    } else {
      /* two bf16 words of g each (the driver table has 32-bit sets; sizes are of ALIGN) */
      CU_CHECK(CU_CALL(&drv, cuMemsetD32, cuda_test_dptr(buf), (uint32_t)g << 16 | g,
                       size / 4));
    }
    CHECK_OK(gpushm_weights_builder_add_buffer(st.builder, buf, &index));
    CHECK(index == b);
  }
  if (backend != GPUSHM_BACKEND_HOST)
    CU_CHECK(CU_CALL(&drv, cuCtxSynchronize)); /* published only once written */
  gpushm_tensor_desc_init(&desc);
  desc.dtype = (gpushm_dlpack_dtype_t){ GPUSHM_DLPACK_BFLOAT, 16, 1 };
  for (unsigned k = 0; k < n; k++) {
    desc.ndim = t[k].ndim;
    desc.shape = t[k].shape;
    desc.offset = t[k].in_buffer;
    CHECK_OK(gpushm_weights_builder_add_tensor(st.builder, t[k].name, t[k].buffer, &desc));
  }
  return st;
}

/* Generation g of a set, made ready to publish: new buffers (layout()) and stage_in(). */
static struct staged stage(gpushm_t *conn, const char *set, gpushm_backend_t backend,
                           uint64_t bytes, struct shaped *t, unsigned n, uint16_t g)
{
  static uint64_t start[BIG_TENSORS + 1];
  gpushm_create_opts_t opts;
  struct gen gen;
  char name[96];

  gpushm_create_opts_init(&opts);
  opts.backend = backend;
  opts.mode = 0600;
  opts.lifetime = GPUSHM_LIFETIME_SESSION;
  gen.n = layout(t, n, bytes, start);
  CHECK(gen.n <= TENSORS);
  for (uint32_t b = 0; b < gen.n; b++) {
    snprintf(name, sizeof name, "%s-%u-%u", set, g, b);
    CHECK_OK(gpushm_buffer_create(conn, name, start[b + 1] - start[b], &opts, &gen.buf[b]));
  }
  return stage_in(gen, backend, t, n, g);
}

/* Publishes what stage() made; returns its buffers, the caller's to let go. */
static struct gen publish_staged(gpushm_t *conn, const char *set, struct staged st)
{
  CHECK_OK(gpushm_weights_publish(conn, set, st.builder, NULL, NULL));
  gpushm_weights_builder_free(st.builder);
  return st.gen;
}

static struct gen publish(gpushm_t *conn, const char *set, gpushm_backend_t backend,
                          uint64_t bytes, struct shaped *t, unsigned n, uint16_t g)
{
  return publish_staged(conn, set, stage(conn, set, backend, bytes, t, n, g));
}

/* The publisher lets go of a generation's buffers (it keeps them while held). */
static void drop(struct gen *gen)
{
  for (uint32_t b = 0; b < gen->n; b++)
    CHECK_OK(gpushm_buffer_close_unlink(gen->buf[b]));
  gen->n = 0;
}

static double ping_ms(gpushm_t *conn)
{
  double ms[101];

  for (int i = 0; i < 101; i++) {
    double t0 = now_ms();
    CHECK_OK(gpushm_ping(conn));
    ms[i] = now_ms() - t0;
  }
  return median(ms, 101);
}

/* Raw CUDA IPC's sync of a new buffer, the median of rounds: see role_reader()'s raw. */
static double raw_ipc_floor(struct reader *r, uint64_t bytes, unsigned rounds)
{
  double ms[SYNC_ROUNDS];

  for (unsigned i = 0; i < rounds; i++) {
    const uint16_t g = (uint16_t)(100 + i);
    CUipcMemHandle h;
    CUdeviceptr p;
    char hex[2 * sizeof h.reserved + 1];

    CU_CHECK(CU_CALL(&drv, cuMemAlloc, &p, bytes));
    CU_CHECK(CU_CALL(&drv, cuMemsetD32, p, (uint32_t)g << 16 | g, bytes / 4));
    CU_CHECK(CU_CALL(&drv, cuCtxSynchronize));
    CU_CHECK(CU_CALL(&drv, cuIpcGetMemHandle, &h, p));
    for (size_t k = 0; k < sizeof h.reserved; k++)
      snprintf(hex + 2 * k, 3, "%02x", (unsigned char)h.reserved[k]);
    fprintf(r->in, "raw %s %u\n", hex, g);
    fflush(r->in);
    ms[i] = hear(r, "raw");
    CU_CHECK(CU_CALL(&drv, cuMemFree, p));
  }
  return median(ms, rounds);
}

/* W1: rounds generations of set, each in new buffers (gen1 the first's, published), the
 * one before let go by the publisher once the reader has copied the new one, by the
 * reader after its copy; the reader copies into tensors of its own or (whole) into the
 * set's layout. */
static void w1_rows(gpushm_t *conn, struct reader *r, const char *set, struct gen gen1,
                    gpushm_backend_t backend, uint64_t bytes, struct shaped *t, int mode,
                    const char *size)
{
  const bool whole = mode != 0, recycled = mode == W1_RECYCLED || mode == W1_WOKEN;
  const char *where = backend == GPUSHM_BACKEND_HOST ? "host" : "cuda-fd";
  const unsigned rounds = quick ? 3 : SYNC_ROUNDS, skipped = recycled ? RECYCLE_WARMUP : 0;
  double sync[SYNC_ROUNDS], parts[SYNC_ROUNDS][PARTS], m, own, fresh, raw = 0;
  struct gen before = gen1, now, two[2] = { gen1, { .n = 0 } };
  gpushm_weights_t *newest = NULL, *next;
  const bool kept = recycled && backend != GPUSHM_BACKEND_HOST;
  double written[SYNC_ROUNDS];
  gpushm_buffer_t *floor_buf = NULL;

  if (kept) {
    /* the floor of a sync's one copy: a buffer of the publisher's (the set's kind of
     * memory, one buffer), mapped by the reader all along, written before each copy */
    gpushm_create_opts_t opts;
    gpushm_create_opts_init(&opts);
    opts.backend = backend;
    opts.mode = 0600;
    opts.lifetime = GPUSHM_LIFETIME_SESSION;
    CHECK_OK(gpushm_buffer_create(conn, "w1-written", bytes, &opts, &floor_buf));
    fprintf(r->in, "keep w1-written\n");
    fflush(r->in);
    hear(r, "ok");
  }

  fprintf(r->in, "follow %s %u %d\n", set, rounds + skipped, mode == W1_RECYCLED ? 1 : mode);
  fflush(r->in);
  for (unsigned i = 0; i < rounds + skipped; i++) {
    const uint16_t g = (uint16_t)(i + 2);
    hear(r, "ready");
    if (!recycled) {
      now = publish(conn, set, backend, bytes, t, TENSORS, g);
    } else {
      /* generation g in the buffers of g - 2 (new ones for 2), once nobody holds g - 2 */
      struct staged st;
      if (newest)
        CHECK_OK(gpushm_weights_wait_released(newest, g - 2u, 60000));
      st = two[g % 2].n ? stage_in(two[g % 2], backend, t, TENSORS, g)
                        : stage(conn, set, backend, bytes, t, TENSORS, g);
      two[g % 2] = st.gen;
      CHECK_OK(gpushm_weights_publish(conn, set, st.builder, NULL, &next));
      gpushm_weights_builder_free(st.builder);
      if (newest)
        CHECK_OK(gpushm_weights_close(newest));
      newest = next;
    }
    if (i >= skipped) {
      sync[i - skipped] = hear(r, "sync");
      hear_parts(r, parts[i - skipped]);
    } else {
      double warmup[PARTS];
      hear(r, "sync");
      hear_parts(r, warmup);
    }
    if (kept) {
      CU_CHECK(CU_CALL(&drv, cuMemsetD32, cuda_test_dptr(floor_buf), (uint32_t)g << 16 | g,
                       bytes / 4));
      CU_CHECK(CU_CALL(&drv, cuCtxSynchronize));
      fprintf(r->in, "go\n");
      fflush(r->in);
      const double ms = hear(r, "copied");
      if (i >= skipped)
        written[i - skipped] = ms;
    }
    if (!recycled) {
      drop(&before); /* its generation kept it meanwhile */
      before = now;
    }
  }
  if (kept) {
    fprintf(r->in, "unkeep\n");
    fflush(r->in);
    hear(r, "ok");
    CHECK_OK(gpushm_buffer_close_unlink(floor_buf));
  }
  if (recycled) {
    CHECK_OK(gpushm_weights_close(newest));
    drop(&two[0]);
    drop(&two[1]);
  } else {
    drop(&before);
  }
  CHECK_OK(gpushm_unlink(conn, set)); /* its newest generation, and memory, go */
  m = median(sync, rounds);
  own = part_median(parts, rounds, 4);
  fresh = part_median(parts, rounds, 5);
  if (mode == 2) {
    printf("W1 %-8s a diagnosis, into the set's layout with its %u buffers opened and mapped "
           "first: the sync %.3f ms, of which the generation's open %.3f, the buffers' %.3f, "
           "the copies %.3f (%.3f once mapped; one copy out of memory mapped all along "
           "%.3f)\n", where, gen1.n, m, part_median(parts, rounds, 0),
           part_median(parts, rounds, 8),
           part_median(parts, rounds, 1) - part_median(parts, rounds, 8),
           part_median(parts, rounds, 3), own);
    return;
  }
  if (mode == W1_WOKEN) {
    printf("W1 %-8s a diagnosis, recycled, the reader pinging gpushmd as soon as it is woken: "
           "the sync %.3f ms, of which the ping %.3f, the generation's open after it %.3f "
           "(the same open again at once %.3f), the copies %.3f (%.3f once mapped; one copy "
           "out of memory mapped all along %.3f, out of the same just written by the reader "
           "%.3f, out of a buffer just written by the publisher %.3f)\n", where, m,
           part_median(parts, rounds, 8),
           part_median(parts, rounds, 0) - part_median(parts, rounds, 8),
           part_median(parts, rounds, 10), part_median(parts, rounds, 1),
           part_median(parts, rounds, 3), own, part_median(parts, rounds, 9),
           median(written, rounds));
    return;
  }
  if (whole && !recycled && backend != GPUSHM_BACKEND_HOST)
    raw = raw_ipc_floor(r, bytes, rounds);
  printf("W1 %-8s one copy per sync, %u tensors (%s, %u buffers), %s: median of %u %.3f ms "
         "(woken, the new generation opened, mapped and copied); floor: the same copies out "
         "of memory of the reader's own mapped all along %.3f ms; %.3f x the floor | target "
         "<= %.2f: %s\n", where, TENSORS, size, gen1.n,
         recycled ? "recycled (generation n written into the buffers of n - 2 once nobody "
                    "held it, which the reader keeps mapped), into the set's layout"
         : whole ? "into the set's layout (a copy a buffer)"
                 : "into tensors of its own (a copy a tensor)",
         rounds, m, own, m / own, TARGET_SYNC_RATIO,
         backend == GPUSHM_BACKEND_HOST ? "(a GPU's: host memory's new pages fault in)"
         : m / own <= TARGET_SYNC_RATIO ? "met" : "NOT met");
  printf("W1 %-8s where it goes (medians, ms): open %.3f, buffers opened, mapped and copied "
         "%.3f (the copies queued after %.3f); not in the sync: closing the generation "
         "before %.3f, the same copies again %.3f; out of new memory of the reader's own "
         "mapped afresh %.3f (mapping it %.3f; the sync %.3f x that); out of the reader's "
         "own memory just written by itself "
         "%.3f\n", where, part_median(parts, rounds, 0),
         part_median(parts, rounds, 1), part_median(parts, rounds, 7),
         part_median(parts, rounds, 2),
         part_median(parts, rounds, 3), fresh, part_median(parts, rounds, 6), m / fresh,
         part_median(parts, rounds, 9));
  if (kept) {
    const double bare = median(written, rounds);
    printf("W1 %-8s the same sync against its one copy alone: out of a buffer of the "
           "publisher's (%s, one), mapped by the reader all along, written by the publisher "
           "before each copy: median of %u %.3f ms; the sync %.3f x that | target <= %.2f: "
           "%s\n", where, where, rounds, bare, m / bare, TARGET_SYNC_RATIO,
           m / bare <= TARGET_SYNC_RATIO ? "met" : "NOT met");
  }
  if (raw > 0)
    printf("W1 %-8s raw CUDA IPC of new memory (a cuMemAlloc'd buffer written by the "
           "publisher; cuIpcOpenMemHandle + one copy): median of %u %.3f ms; a sync into the "
           "set's layout %.3f x that\n", where, rounds, raw, m / raw);
}

static void rows(gpushm_t *conn, gpushm_backend_t backend, unsigned scale)
{
  const bool device = backend != GPUSHM_BACKEND_HOST;
  const char *where = device ? "cuda-fd" : "host";
  static struct shaped t[TENSORS];
  uint64_t bytes = model(t, scale);
  double seen[VISIBLE_ROUNDS], rtt = ping_ms(conn), first, model_open;
  struct gen first_gen, vis[VISIBLE_ROUNDS + 1];
  struct reader r;
  char line[64], set[32];

  start_reader(&r);
  fprintf(r.in, "setup %d %u\n", device, scale);
  fflush(r.in);
  hear(&r, "ok");
  /* W3's first row: the model itself, opened for the first time */
  snprintf(set, sizeof set, "bench-%s", where);
  first_gen = publish(conn, set, backend, bytes, t, TENSORS, 1);
  fprintf(r.in, "first %s 0\n", set);
  fflush(r.in);
  model_open = hear(&r, "open");
  snprintf(line, sizeof line, "%.2f GB", bytes / 1e9);
  if (!recycled_only) {
    w1_rows(conn, &r, set, first_gen, backend, bytes, t, 0, line);
    snprintf(set, sizeof set, "whole-%s", where);
    w1_rows(conn, &r, set, publish(conn, set, backend, bytes, t, TENSORS, 1), backend, bytes,
            t, 1, line);
  } else {
    drop(&first_gen);
    CHECK_OK(gpushm_unlink(conn, set));
  }
  bucket = UINT64_MAX;
  snprintf(set, sizeof set, "recycled-%s", where);
  w1_rows(conn, &r, set, publish(conn, set, backend, bytes, t, TENSORS, 1), backend, bytes, t,
          W1_RECYCLED, line);
  if (device) {
    snprintf(set, sizeof set, "woken-%s", where);
    w1_rows(conn, &r, set, publish(conn, set, backend, bytes, t, TENSORS, 1), backend, bytes,
            t, W1_WOKEN, line);
  }
  bucket = BUCKET;
  if (recycled_only)
    goto done;
  if (device) {
    snprintf(set, sizeof set, "mapped-first-%s", where);
    w1_rows(conn, &r, set, publish(conn, set, backend, bytes, t, TENSORS, 1), backend, bytes,
            t, 2, line);
  }
  /* W2: small generations of the same 291 tensors, one after another */
  {
    static struct shaped small[TENSORS];
    uint64_t small_bytes = model(small, 64);
    double sorted[VISIBLE_ROUNDS];

    snprintf(set, sizeof set, "visible-%s", where);
    vis[0] = publish(conn, set, backend, small_bytes, small, TENSORS, 1);
    fprintf(r.in, "follow %s %d 0\n", set, -VISIBLE_ROUNDS);
    fflush(r.in);
    for (int i = 0; i < VISIBLE_ROUNDS; i++) {
      struct staged st = stage(conn, set, backend, small_bytes, small, TENSORS,
                               (uint16_t)(i + 2));
      double t0;
      hear(&r, "ready");
      usleep(2000); /* the reader asleep in its wait */
      t0 = now_ms();
      vis[i + 1] = publish_staged(conn, set, st);
      seen[i] = hear(&r, "seen") - t0;
      drop(&vis[i]);
    }
    drop(&vis[VISIBLE_ROUNDS]);
    double m;

    memcpy(sorted, seen, sizeof sorted);
    m = median(sorted, VISIBLE_ROUNDS); /* sorts: p90 below reads the sorted array */
    printf("W2 %-8s publish to visible (291 tensors opened, mapped): median of %d %.3f ms, "
           "p90 %.3f ms; 2 ping round trips %.3f ms | target <= %.1f ms: %s\n", where,
           VISIBLE_ROUNDS, m, sorted[VISIBLE_ROUNDS * 9 / 10], 2 * rtt, TARGET_VISIBLE_MS,
           m <= TARGET_VISIBLE_MS ? "met" : "NOT met");
  }
  /* W3: 100,000 small tensors in one buffer */
  {
    static struct shaped many[BIG_TENSORS];
    double first_many[FIRST_OPENS], first_one[FIRST_OPENS];
    struct gen b;

    for (unsigned k = 0; k < BIG_TENSORS; k++) {
      snprintf(many[k].name, sizeof many[k].name, "model.blocks.%u.weight", k);
      many[k].ndim = 1;
      many[k].shape[0] = BIG_TENSOR_BYTES / 2;
      many[k].offset = (uint64_t)k * BIG_TENSOR_BYTES;
      many[k].bytes = BIG_TENSOR_BYTES;
    }
    snprintf(set, sizeof set, "many-%s", where);
    b = publish(conn, set, backend, (uint64_t)BIG_TENSORS * BIG_TENSOR_BYTES, many,
                BIG_TENSORS, 1);
    /* the median of FIRST_OPENS first opens, its manifest decoded on the library's
     * threads and on one, alternately (closed in between: nothing of it is kept) */
    for (unsigned k = 0; k < 2 * FIRST_OPENS; k++) {
      fprintf(r.in, "first %s %u\n", set, k % 2);
      fflush(r.in);
      (k % 2 ? first_one : first_many)[k / 2] = hear(&r, "open");
    }
    first = median(first_many, FIRST_OPENS);
    snprintf(line, sizeof line, "%.2f GB", bytes / 1e9);
    printf("W3 %-8s first open of the model (%u tensors, %s) to the last one's pointer: "
           "%.3f ms | target <= %.0f ms: %s\n", where, TENSORS, line, model_open,
           TARGET_FIRST_OPEN_MS, model_open <= TARGET_FIRST_OPEN_MS ? "met" : "NOT met");
    printf("W3 %-8s first open of %u tensors to the last one's pointer: median of %u %.3f "
           "ms (its manifest decoded on one thread: %.3f ms); a ping round trip %.3f ms | "
           "target <= %.0f ms: %s\n", where, BIG_TENSORS, FIRST_OPENS, first,
           median(first_one, FIRST_OPENS), rtt, TARGET_FIRST_OPEN_MS,
           first <= TARGET_FIRST_OPEN_MS ? "met" : "NOT met");
    drop(&b);
  }
done:
  fclose(r.in);
  check_child(r.pid);
  fclose(r.out);
}

int main(int argc, char **argv)
{
  gpushm_t *conn;
  char why[256];
  int count = 0;

  if (argc == 3 && strcmp(argv[1], "reader") == 0)
    return role_reader(argv[2]);
  quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  snprintf(self, sizeof self, "%s", test_self_path());
  cuda_test_parent_outside_mps(); /* before any context: see cuda-test.h */
  daemon_start(&d, NULL);
  CHECK_OK(gpushm_connect(d.socket, "bench-weights", &conn));
  printf("bench-weights: an 8B-shaped model (%u bf16 tensors) as a weight set, a reader in a "
         "process of its own\n", TENSORS);
  /* the recycled rows alone, on the GPU (a diagnosis's quicker run) */
  recycled_only = getenv("GPUSHM_BENCH_WEIGHTS_RECYCLED_ONLY") != NULL;
  if (!recycled_only)
    rows(conn, GPUSHM_BACKEND_HOST, quick ? 16 : 4);
  if (cuda_driver_load(&drv, why, sizeof why) == 0 && CU_CALL(&drv, cuInit, 0) == CUDA_SUCCESS &&
      CU_CALL(&drv, cuDeviceGetCount, &count) == CUDA_SUCCESS && count > 0) {
    cuda_test_setup(0);
    rows(conn, GPUSHM_BACKEND_CUDA_FD, quick ? 16 : 1);
  } else {
    printf("W1-W3 cuda-fd: skipped: no GPU\n");
  }
  gpushm_disconnect(conn);
  daemon_stop(&d);
  return 0;
}

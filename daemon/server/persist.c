/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "server/persist.h"
#include "gpushm.h"
#include "util/log.h"
#include "shm_layout.h"
#include "wire.h"
#include "backends/backend_cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

/* FDNAME allows up to 255 printable ASCII characters but ':'.  Records use digits, dots
 * and name characters, and fit: the longest host record is about 220 bytes, the longest
 * device record 255. */
#define RECORD_MAX 256
#define RECORD_FLAG_SYNC 1u
/* The buffer has metadata, deposited beside it as a sealed memfd ("x.<id>"): FDNAME is
 * too short for it.  Daemons before 0.3 ignore the flag and drop the "x." record. */
#define RECORD_FLAG_METADATA 2u

static unsigned record_flags(const struct reg_object *b)
{
  return (b->sync ? RECORD_FLAG_SYNC : 0u) | (b->metadata_len ? RECORD_FLAG_METADATA : 0u);
}

/* What a deposited buffer takes of the fd store: its memory, a sync buffer's control
 * block, its metadata. */
static unsigned fds_of(const struct reg_object *b)
{
  return 1u + (b->sync ? 1u : 0u) + (b->metadata_len ? 1u : 0u);
}

/* Host memory: the sealed memfd.  The format of gpushm 0.1 ("m."), unchanged, so that a
 * daemon of either version takes the other's host buffers back. */
static void memory_record(const struct reg_object *b, char *out, size_t len)
{
  snprintf(out, len, SDN_FDSTORE_PREFIX "m.%" PRIu64 ".%d.%u.%u.%u.%o.%" PRIu64 ".%" PRIu64 ".%s",
           b->id, b->backend->kind, record_flags(b), (unsigned)b->owner_uid,
           (unsigned)b->owner_gid, b->mode, b->size, b->created_unix_ms, b->name);
}

/* Device memory ("d."): the fd a cuda-fd allocation was exported as.  It adds what the
 * import needs: the allocated size (clients map all of it) and the device's UUID
 * (ordinals may differ at the next start).  Numbers are hex, so that the longest record
 * (64-bit id and time, 127-byte name) still fits FDNAME.  Daemons that know no "d." drop
 * these records as unknown and keep the rest. */
static bool device_record(const struct reg_adopt_args *a, unsigned flags, const uint8_t uuid[16],
                          char *out, size_t len)
{
  char hex[33];
  int n;

  for (int i = 0; i < 16; i++)
    snprintf(hex + 2 * i, 3, "%02x", uuid[i]);
  n = snprintf(out, len, SDN_FDSTORE_PREFIX "d.%" PRIx64 ".%d.%x.%x.%x.%o.%" PRIx64 ".%" PRIx64
               ".%" PRIx64 ".%s.%s", a->id, a->backend, flags, (unsigned)a->owner_uid,
               (unsigned)a->owner_gid, a->mode, a->size, a->allocated, a->created_unix_ms, hex,
               a->name);
  return n > 0 && (size_t)n < len;
}

/* The record a deposited buffer is stored under; false if it has none. */
static bool record_of(const struct reg_object *b, char *out, size_t len)
{
  if (b->backend->kind == GPUSHM_BACKEND_HOST) {
    memory_record(b, out, len);
    return true;
  }
  if (b->backend->kind == GPUSHM_BACKEND_CUDA_FD) {
    const uint8_t *uuid = backend_cuda_device_uuid(b->device);
    struct reg_adopt_args a = {
      .id = b->id, .name = b->name, .backend = b->backend->kind, .size = b->size,
      .allocated = b->allocated, .owner_uid = b->owner_uid, .owner_gid = b->owner_gid,
      .mode = b->mode, .created_unix_ms = b->created_unix_ms,
    };
    return uuid && device_record(&a, record_flags(b), uuid, out, len);
  }
  return false;
}

static void control_record(uint64_t id, char *out, size_t len)
{
  snprintf(out, len, SDN_FDSTORE_PREFIX "c.%" PRIu64, id);
}

static void metadata_record(uint64_t id, char *out, size_t len)
{
  snprintf(out, len, SDN_FDSTORE_PREFIX "x.%" PRIu64, id);
}

/* Deposits b's metadata in a sealed memfd of its own (the store keeps its copy). */
static int deposit_metadata(const struct reg_object *b)
{
  char name[RECORD_MAX];
  int fd = memfd_create("gpushm-metadata", MFD_CLOEXEC | MFD_ALLOW_SEALING), r;

  if (fd < 0)
    return -errno;
  if (write(fd, b->metadata, b->metadata_len) != (ssize_t)b->metadata_len ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
    r = errno ? -errno : -EIO;
    close(fd);
    return r;
  }
  metadata_record(b->id, name, sizeof name);
  r = sdn_fdstore_add(name, fd);
  close(fd);
  return r;
}

bool persist_enabled(const struct persist *p)
{
  return p->enabled;
}

void persist_init(struct persist *p)
{
  memset(p, 0, sizeof *p);
  p->max = sdn_fdstore_max(GPUSHM_DEFAULT_FDSTORE_MAX);
  p->enabled = sdn_fdstore_reachable();
  if (!p->enabled)
    log_info("not run by systemd (no NOTIFY_SOCKET of its own): persistent buffers will not "
             "survive a restart of gpushmd");
}

void persist_created(struct persist *p, struct reg_object *b)
{
  char name[RECORD_MAX];
  unsigned need = fds_of(b);
  int r;

  /* Only kinds that can be adopted again are worth a record (no images, no registered
   * memory). */
  if (!p->enabled || b->lifetime != GPUSHM_LIFETIME_PERSISTENT || b->kind != REG_BUFFER ||
      !registry_can_adopt(b))
    return;
  /* Device memory of the legacy-IPC backend and events die with the daemon's context; a
   * cuda-fd allocation lives on in its exported fd, a sync buffer's fence with it. */
  if (b->backend->kind != GPUSHM_BACKEND_HOST && b->backend->kind != GPUSHM_BACKEND_CUDA_FD)
    return;
  if (p->stored + need > p->max) {
    if (!p->warned_full)
      log_warn("systemd's fd store is full (%u fds): newer persistent buffers will not survive "
               "a restart", p->max);
    p->warned_full = true;
    return;
  }
  if (!record_of(b, name, sizeof name)) {
    log_warn("'%s' will not survive a restart of gpushmd: it has no fd store record", b->name);
    return;
  }
  if ((r = sdn_fdstore_add(name, b->mem.fd)) < 0) {
    log_warn("could not deposit '%s' in systemd's fd store: %s", b->name, strerror(-r));
    return;
  }
  if (b->sync) {
    char control[RECORD_MAX];
    control_record(b->id, control, sizeof control);
    if ((r = sdn_fdstore_add(control, b->sync_state.control.fd)) < 0) {
      log_warn("could not deposit the control block of '%s': %s", b->name, strerror(-r));
      sdn_fdstore_remove(name);
      return;
    }
  }
  if (b->metadata_len && (r = deposit_metadata(b)) < 0) {
    char control[RECORD_MAX];
    log_warn("could not deposit the metadata of '%s': %s", b->name, strerror(-r));
    sdn_fdstore_remove(name);
    control_record(b->id, control, sizeof control);
    if (b->sync)
      sdn_fdstore_remove(control);
    return;
  }
  p->stored += need;
  b->persisted = true;
}

void persist_report_dropped(const struct persist *p, const struct registry *reg)
{
  unsigned n = 0;
  uint64_t bytes = 0;
  char amount[64];

  for (size_t i = 0; i < registry_count(reg); i++) {
    const struct reg_object *b = registry_at(reg, i);
    if (b->kind != REG_BUFFER || !b->linked || b->lifetime != GPUSHM_LIFETIME_PERSISTENT ||
        b->persisted)
      continue;
    n++;
    bytes += b->size;
  }
  if (!n)
    return;
  if (bytes >= 1u << 20)
    snprintf(amount, sizeof amount, "%" PRIu64 " bytes, %.1f MiB", bytes,
             (double)bytes / (1u << 20));
  else
    snprintf(amount, sizeof amount, "%" PRIu64 " bytes", bytes);
  /* Said at the stop, where it happens: the start-up line saying that persistent buffers
   * will not survive is long gone from the terminal of a daemon started by hand. */
  if (!p->enabled)
    log_warn("stopping drops %u persistent buffer%s (%s): gpushmd was not run by systemd (no "
             "NOTIFY_SOCKET of its own), so no fd store keeps them for the next start", n,
             n == 1 ? "" : "s", amount);
  else
    log_warn("stopping drops %u persistent buffer%s (%s) that systemd's fd store does not hold "
             "(cuda-ipc or cuda-fabric memory, images, registered memory, or buffers created "
             "once the store was full)", n, n == 1 ? "" : "s", amount);
}

void persist_unlinked(struct persist *p, struct reg_object *b)
{
  char name[RECORD_MAX];

  if (!b->persisted)
    return;
  if (record_of(b, name, sizeof name))
    sdn_fdstore_remove(name);
  if (b->sync) {
    control_record(b->id, name, sizeof name);
    sdn_fdstore_remove(name);
  }
  if (b->metadata_len) {
    metadata_record(b->id, name, sizeof name);
    sdn_fdstore_remove(name);
  }
  p->stored -= fds_of(b);
  b->persisted = false;
}

struct memory_entry {
  struct reg_adopt_args args;
  unsigned flags;
  char name[GPUSHM_LIMIT_NAME_LEN + 1];
};

static bool parse_memory_record(const char *record, struct memory_entry *e)
{
  unsigned long long id, size, created;
  unsigned flags, uid, gid, mode;
  int backend, used = -1;

  memset(e, 0, sizeof *e);
  if (sscanf(record, SDN_FDSTORE_PREFIX "m.%llu.%d.%u.%u.%u.%o.%llu.%llu.%n", &id, &backend,
             &flags, &uid, &gid, &mode, &size, &created, &used) != 8 || used < 0 ||
      !wire_name_valid(record + used))
    return false;
  snprintf(e->name, sizeof e->name, "%s", record + used);
  e->flags = flags;
  e->args = (struct reg_adopt_args){
    .id = id, .name = e->name, .backend = backend, .device = -1, .size = size,
    .owner_uid = uid, .owner_gid = gid, .mode = mode, .created_unix_ms = created,
  };
  return true;
}

struct device_entry {
  struct reg_adopt_args args;
  unsigned flags;
  uint8_t uuid[16];
  char name[GPUSHM_LIMIT_NAME_LEN + 1];
};

static int hex_digit(char c)
{
  return c >= '0' && c <= '9' ? c - '0' : c - 'a' + 10;
}

static bool parse_device_record(const char *record, struct device_entry *e)
{
  unsigned long long id, size, allocated, created;
  unsigned flags, uid, gid, mode;
  int backend, used = -1;
  char hex[33], canonical[RECORD_MAX];

  memset(e, 0, sizeof *e);
  if (sscanf(record, SDN_FDSTORE_PREFIX "d.%llx.%d.%x.%x.%x.%o.%llx.%llx.%llx.%32[0-9a-f].%n", &id,
             &backend, &flags, &uid, &gid, &mode, &size, &allocated, &created, hex, &used) != 10 ||
      used < 0 || strlen(hex) != 32 || !wire_name_valid(record + used))
    return false;
  for (int i = 0; i < 16; i++)
    e->uuid[i] = (uint8_t)(hex_digit(hex[2 * i]) << 4 | hex_digit(hex[2 * i + 1]));
  snprintf(e->name, sizeof e->name, "%s", record + used);
  e->flags = flags;
  e->args = (struct reg_adopt_args){
    .id = id, .name = e->name, .backend = backend, .device = -1, .size = size,
    .allocated = allocated, .owner_uid = uid, .owner_gid = gid, .mode = mode,
    .created_unix_ms = created,
  };
  /* Only the daemon's own spelling (no leading zeros, no 0x): withdrawing the record
   * when the name goes away rebuilds it from the buffer, and must hit this one. */
  return device_record(&e->args, flags, e->uuid, canonical, sizeof canonical) &&
         strcmp(canonical, record) == 0;
}

static void drop(const char *record, int fd, const char *why)
{
  log_warn("dropping '%s' from systemd's fd store: %s", record, why);
  sdn_fdstore_remove(record);
  if (fd >= 0)
    close(fd);
}

/* A kept buffer that cannot come back (its device gone, its import failed): said with
 * its name, which is what its users know it by. */
static void drop_device(const char *record, const struct device_entry *e, int fd, const char *why)
{
  log_warn("dropping persistent cuda-fd buffer '%s' (id %llu) from systemd's fd store: %s",
           e->name, (unsigned long long)e->args.id, why);
  sdn_fdstore_remove(record);
  if (fd >= 0)
    close(fd);
}

/* A sync buffer's control block, deposited beside its memory record: taken out of passed
 * and adopted.  Returns its slot in passed (for a later drop), or -1 with why: missing,
 * or unusable (then dropped from the store). */
/* The fd the store passed under that record name, now the caller's (*index: where it
 * was, for its name); -1 when there is none. */
static int take_stored(struct sdn_passed *passed, const char *name, size_t *index)
{
  for (size_t i = 0; i < passed->n_stored; i++)
    if (passed->stored_fds[i] >= 0 && strcmp(passed->stored_names[i], name) == 0) {
      int fd = passed->stored_fds[i];
      passed->stored_fds[i] = -1;
      *index = i;
      return fd;
    }
  return -1;
}

static ssize_t take_control(struct sdn_passed *passed, uint64_t id, struct backend_mem *control,
                            const char **why)
{
  char want[RECORD_MAX], err[256];
  size_t c;
  int fd;

  control_record(id, want, sizeof want);
  if ((fd = take_stored(passed, want, &c)) < 0) {
    *why = "its control block is missing";
    return -1;
  }
  if (backend_host_adopt(fd, SYNC_CONTROL_SIZE, control, NULL, err, sizeof err) < 0) {
    drop(passed->stored_names[c], fd, err);
    *why = "its control block is unusable";
    return -1;
  }
  return (ssize_t)c;
}

/* A buffer's metadata, deposited beside its memory record: read into out (room for
 * GPUSHM_LIMIT_METADATA bytes) and its fd closed.  Returns its bytes, or -1 with why:
 * missing, or unusable (then dropped from the store).  As with a control block, a
 * buffer whose metadata is lost is dropped: a consumer would misread it without. */
static ssize_t take_metadata(struct sdn_passed *passed, uint64_t id, uint8_t *out,
                             const char **why)
{
  char want[RECORD_MAX];
  uint8_t extra;
  ssize_t n;
  size_t m;
  int fd;

  metadata_record(id, want, sizeof want);
  if ((fd = take_stored(passed, want, &m)) < 0) {
    *why = "its metadata is missing";
    return -1;
  }
  n = pread(fd, out, GPUSHM_LIMIT_METADATA, 0);
  /* the daemon wrote at most the limit: more is not its record */
  if (n <= 0 || pread(fd, &extra, 1, n) != 0) {
    drop(passed->stored_names[m], fd, "not metadata this daemon wrote");
    *why = "its metadata is unusable";
    return -1;
  }
  close(fd);
  return n;
}

/* The metadata record of a buffer that could not come back goes with it. */
static void drop_metadata(uint64_t id)
{
  char name[RECORD_MAX];
  metadata_record(id, name, sizeof name);
  sdn_fdstore_remove(name);
}

/* Takes a cuda-fd buffer back: its fd imported again on the device of the recorded UUID
 * (and a sync buffer's control block with it: its fence lives in the allocation). */
static bool adopt_device(struct persist *p, struct registry *reg, struct sdn_passed *passed,
                         const char *record, int fd)
{
  struct device_entry e;
  struct backend_mem control;
  uint8_t metadata[GPUSHM_LIMIT_METADATA];
  ssize_t c = -1, m;
  const char *why;

  if (!parse_device_record(record, &e) || e.args.backend != GPUSHM_BACKEND_CUDA_FD) {
    drop(record, fd, "not a record this daemon understands");
    return false;
  }
  if ((e.flags & RECORD_FLAG_METADATA)) {
    if ((m = take_metadata(passed, e.args.id, metadata, &why)) < 0) {
      drop_device(record, &e, fd, why);
      return false;
    }
    e.args.metadata = metadata;
    e.args.metadata_len = (size_t)m;
  }
  if ((e.flags & RECORD_FLAG_SYNC) && (c = take_control(passed, e.args.id, &control, &why)) < 0) {
    drop_device(record, &e, fd, why);
    if (e.args.metadata_len)
      drop_metadata(e.args.id);
    return false;
  }
  {
    struct backend_mem mem;
    char err[256];

    if (backend_cuda_fd_adopt(fd, e.uuid, e.args.size, e.args.allocated, &mem, &e.args.device,
                              err, sizeof err) < 0) {
      drop_device(record, &e, fd, err);
      if (c >= 0)
        drop(passed->stored_names[c], control.fd, "its buffer is unusable");
      if (e.args.metadata_len)
        drop_metadata(e.args.id);
      return false;
    }
    if (registry_adopt(reg, &e.args, &mem, c >= 0 ? &control : NULL, err, sizeof err) < 0) {
      backend_cuda_fd.release(&backend_cuda_fd, &mem); /* the fd with it */
      drop_device(record, &e, -1, err);
      if (c >= 0)
        drop(passed->stored_names[c], control.fd, "its buffer is unusable");
      if (e.args.metadata_len)
        drop_metadata(e.args.id);
      return false;
    }
  }
  p->stored += (c >= 0 ? 2 : 1) + (e.args.metadata_len ? 1 : 0);
  log_debug("cuda-fd buffer '%s' (id %llu, %llu bytes) is back on device %d from systemd's fd "
            "store", e.name, (unsigned long long)e.args.id, (unsigned long long)e.args.size,
            e.args.device);
  return true;
}

unsigned persist_adopt(struct persist *p, struct registry *reg, struct sdn_passed *passed)
{
  unsigned adopted = 0;
  char err[256];

  /* Memory records first; each sync buffer takes its control block along. */
  for (size_t i = 0; i < passed->n_stored; i++) {
    const char *record = passed->stored_names[i];
    int fd = passed->stored_fds[i], control_fd = -1;
    struct backend_mem mem, control;
    struct memory_entry e;
    uint8_t metadata[GPUSHM_LIMIT_METADATA];
    size_t c = passed->n_stored;

    if (fd < 0)
      continue;
    if (strncmp(record, SDN_FDSTORE_PREFIX "d.", strlen(SDN_FDSTORE_PREFIX "d.")) == 0) {
      passed->stored_fds[i] = -1;
      adopted += adopt_device(p, reg, passed, record, fd);
      continue;
    }
    if (strncmp(record, SDN_FDSTORE_PREFIX "m.", strlen(SDN_FDSTORE_PREFIX "m.")) != 0)
      continue;
    passed->stored_fds[i] = -1;
    if (!parse_memory_record(record, &e) || e.args.backend != GPUSHM_BACKEND_HOST) {
      drop(record, fd, "not a record this daemon understands");
      continue;
    }
    if (e.flags & RECORD_FLAG_METADATA) {
      const char *why;
      ssize_t m = take_metadata(passed, e.args.id, metadata, &why);
      if (m < 0) {
        drop(record, fd, why);
        continue;
      }
      e.args.metadata = metadata;
      e.args.metadata_len = (size_t)m;
    }
    if (e.flags & RECORD_FLAG_SYNC) {
      const char *why;
      ssize_t slot = take_control(passed, e.args.id, &control, &why);
      if (slot < 0) {
        drop(record, fd, why);
        if (e.args.metadata_len)
          drop_metadata(e.args.id);
        continue;
      }
      c = (size_t)slot;
      control_fd = control.fd;
    }
    if (backend_host_adopt(fd, e.args.size, &mem, &e.args.allocated, err, sizeof err) < 0 ||
        registry_adopt(reg, &e.args, &mem, control_fd >= 0 ? &control : NULL, err,
                       sizeof err) < 0) {
      drop(record, fd, err);
      if (control_fd >= 0)
        drop(passed->stored_names[c], control_fd, "its buffer is unusable");
      if (e.args.metadata_len)
        drop_metadata(e.args.id);
      continue;
    }
    p->stored += (control_fd >= 0 ? 2 : 1) + (e.args.metadata_len ? 1 : 0);
    adopted++;
    log_debug("'%s' (id %llu, %llu bytes) is back from systemd's fd store", e.name,
              (unsigned long long)e.args.id, (unsigned long long)e.args.size);
  }
  for (size_t i = 0; i < passed->n_stored; i++)
    if (passed->stored_fds[i] >= 0)
      drop(passed->stored_names[i], passed->stored_fds[i], "no buffer claims it");
  return adopted;
}

/* SPDX-License-Identifier: MIT */
/* Registered memory: an allocation a client exported from a graphics API (Vulkan
 * OPAQUE_FD) and gave gpushmd under a name, a buffer or an image.  gpushmd keeps a copy
 * of the fd and sends each opener a dup; the memory lives while gpushmd or any importer
 * holds it, so the registrar may exit.  Nothing a client says about the fd is taken on
 * trust: NVIDIA memory is imported into CUDA (the backend's verify_external) at the
 * size claimed, a memfd (what Mesa's lavapipe exports) must be that large, and any
 * other kind of fd is refused. */
#include "config.h"
#include "registry/kind.h"
#include "registry/backends.h"
#include "protocol.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* The character devices of NVIDIA's kernel driver (/dev/nvidia*, major 195), behind
 * which its OPAQUE_FD exports live. */
#define NVIDIA_DEVICE_MAJOR 195u

enum fd_class { FD_OTHER, FD_MEMFD, FD_NVIDIA };

static enum fd_class classify(int fd, uint64_t *memfd_size, char *what, size_t len)
{
  char link[64], target[256];
  struct stat st;
  ssize_t n;

  if (fstat(fd, &st) < 0) {
    snprintf(what, len, "an fd that cannot be stat'ed");
    return FD_OTHER;
  }
  if (S_ISCHR(st.st_mode) && major(st.st_rdev) == NVIDIA_DEVICE_MAJOR)
    return FD_NVIDIA;
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  n = readlink(link, target, sizeof target - 1);
  target[n > 0 ? n : 0] = '\0';
  if (S_ISREG(st.st_mode) && strncmp(target, "/memfd:", 7) == 0) {
    *memfd_size = (uint64_t)st.st_size;
    return FD_MEMFD;
  }
  snprintf(what, len, "%s%s%s",
           S_ISSOCK(st.st_mode) ? "a socket" : S_ISFIFO(st.st_mode) ? "a pipe"
           : S_ISDIR(st.st_mode) ? "a directory" : S_ISCHR(st.st_mode) ? "a character device"
           : S_ISREG(st.st_mode) ? "a file" : "an fd",
           *target ? " " : "", target);
  return FD_OTHER;
}

static uint64_t page_rounded(uint64_t bytes)
{
  const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  return (bytes + page - 1) / page * page;
}

/* At least the claim: smaller, importers' mappings would fault.  Larger is what
 * lavapipe exports (measured: 11816 bytes for an allocationSize of 7680, 69672 for
 * 65536): allowed, up to the buffer limit, and charged whole (external_estimate). */
static int memfd_size_fits(int fd, uint64_t claim, uint64_t *size, char *err, size_t errlen)
{
  struct stat st;

  if (fstat(fd, &st) < 0) {
    snprintf(err, errlen, "fstat of the memfd: %s", strerror(errno));
    return PROTO_E_INVAL;
  }
  *size = (uint64_t)st.st_size;
  if (*size < claim) {
    snprintf(err, errlen, "the memfd holds %llu bytes, not the %llu claimed",
             (unsigned long long)*size, (unsigned long long)claim);
    return PROTO_E_INVAL;
  }
  if (*size > GPUSHM_LIMIT_BUFFER_SIZE) {
    snprintf(err, errlen, "the memfd holds %llu bytes, past the limit of %llu",
             (unsigned long long)*size, (unsigned long long)GPUSHM_LIMIT_BUFFER_SIZE);
    return PROTO_E_LIMIT;
  }
  return 0;
}

/* A read-only opener is sent an O_RDONLY reopen of the memfd (external_export), which
 * the kernel keeps read-only (no writable shared mapping, mprotect, write, fallocate or
 * resize) unless its receiver can reopen it read-write through /proc/self/fd: memfds
 * are born mode 0777.  0400, as gpushmd's own: the registrant's uid still owns the inode
 * and could widen it again, but it can write its memory anyway.  A gpushmd that may not
 * (not root, another uid's memfd) refuses it rather than hand out a read-only that is
 * not. */
static int narrow_file_mode(int fd, char *err, size_t errlen)
{
  if (fchmod(fd, 0400) == 0)
    return 0;
  snprintf(err, errlen, "gpushmd may not make the memfd read-only for its read-only "
           "openers (fchmod 0400: %s): register as gpushmd's uid, or run gpushmd as root",
           strerror(errno));
  return PROTO_E_PERM;
}

/* What gpushmd takes from a registrant of a memfd: changing its size, either way
 * (F_SEAL_SHRINK: one cut short faults every importer's mapping; F_SEAL_GROW: one grown
 * after registering pins memory its uid was charged nothing for), and adding seals
 * (F_SEAL_SEAL: F_SEAL_FUTURE_WRITE added later fails importers' writable mappings).
 * What it keeps: writing its own memory, punching holes included (zeros, which a write
 * could put there as well).  It must have sent the memfd read-write: importers map it
 * so.  Its file mode is narrowed (narrow_file_mode) before sealing.  Checked before sealing (a refused memfd is left as it came, but for a size that
 * changes meanwhile), and its size again after. */
static int seal_memfd(int fd, uint64_t claim, uint64_t *size, char *err, size_t errlen)
{
  const int need = F_SEAL_SHRINK | F_SEAL_GROW;
  int flags = fcntl(fd, F_GETFL), seals = fcntl(fd, F_GET_SEALS), r;

  if (flags < 0 || (flags & O_ACCMODE) != O_RDWR) {
    snprintf(err, errlen, "the memfd was sent open %s: importers map registered memory "
             "read-write; send an O_RDWR fd", flags >= 0 && (flags & O_ACCMODE) == O_WRONLY
                                                ? "for writing only" : "for reading only");
    return PROTO_E_INVAL;
  }
  if (seals < 0) {
    snprintf(err, errlen, "the memfd allows no seals (create it with MFD_ALLOW_SEALING): "
             "its size could change under importers");
    return PROTO_E_INVAL;
  }
  if (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) {
    snprintf(err, errlen, "the memfd is sealed against writing: importers map registered "
             "memory read-write");
    return PROTO_E_INVAL;
  }
  if ((seals & need) != need && (seals & F_SEAL_SEAL)) {
    snprintf(err, errlen, "the memfd takes no more seals (F_SEAL_SEAL: made without "
             "MFD_ALLOW_SEALING, or sealed so) and lacks F_SEAL_SHRINK and F_SEAL_GROW: its "
             "size could change under importers");
    return PROTO_E_INVAL;
  }
  if ((r = memfd_size_fits(fd, claim, size, err, errlen)) < 0 ||
      (r = narrow_file_mode(fd, err, errlen)) < 0)
    return r;
  if (((seals & need) != need && fcntl(fd, F_ADD_SEALS, need & ~seals) < 0) ||
      (!(seals & F_SEAL_SEAL) && fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL) < 0)) {
    snprintf(err, errlen, "sealing the memfd: %s", strerror(errno));
    return PROTO_E_INVAL;
  }
  return memfd_size_fits(fd, claim, size, err, errlen);
}

static int external_check(const struct registry *reg, const struct reg_create_args *args,
                          const struct reg_policy *policy, const struct backend **be,
                          char *err, size_t errlen)
{
  const struct reg_external *x = args->external;
  uint64_t memfd_size = 0;
  char what[300];
  int r;

  (void)policy;
  *be = NULL;
  if (args->sync || args->open_existing || args->backend) {
    snprintf(err, errlen, "registered memory is registered once, with no backend or sync "
             "of its own");
    return PROTO_E_INVAL;
  }
  if (x->fd < 0) {
    snprintf(err, errlen, "a registration carries the memory's fd");
    return PROTO_E_INVAL;
  }
  if (!x->allocation_size || x->allocation_size > GPUSHM_LIMIT_BUFFER_SIZE) {
    snprintf(err, errlen, "allocation size must be 1..%llu bytes",
             (unsigned long long)GPUSHM_LIMIT_BUFFER_SIZE);
    return PROTO_E_INVAL;
  }
  if (!args->size || args->size > x->allocation_size) {
    snprintf(err, errlen, "size %llu must be 1..%llu (the allocation)",
             (unsigned long long)args->size, (unsigned long long)x->allocation_size);
    return PROTO_E_INVAL;
  }
  if (args->image) {
    struct image_params p = *args->image;
    if ((r = image_check(&p, err, errlen)) < 0)
      return r;
    if (image_linear_bytes(&p) > x->allocation_size) {
      snprintf(err, errlen, "a linear image of %llu bytes in an allocation of %llu",
               (unsigned long long)image_linear_bytes(&p),
               (unsigned long long)x->allocation_size);
      return PROTO_E_INVAL;
    }
    /* Importers map size bytes, and code that walks the rows walks all of them. */
    if (args->size < image_linear_bytes(&p)) {
      snprintf(err, errlen, "a linear image of %llu bytes of rows (row pitch %llu) registered "
               "with a size of %llu: its size covers its rows",
               (unsigned long long)image_linear_bytes(&p), (unsigned long long)p.row_pitch,
               (unsigned long long)args->size);
      return PROTO_E_INVAL;
    }
  }
  switch (classify(x->fd, &memfd_size, what, sizeof what)) {
  case FD_MEMFD:
    return seal_memfd(x->fd, x->allocation_size, &memfd_size, err, errlen);
  case FD_NVIDIA:
    *be = registry_backend(reg, PROTO_BACKEND_CUDA_FD);
    if (!*be || !(*be)->verify_external || ((*be)->unavailable && (*be)->unavailable(*be))) {
      snprintf(err, errlen, "unsupported: NVIDIA memory is checked through CUDA, which this "
               "gpushmd lacks");
      return PROTO_E_UNSUPPORTED;
    }
    return 0;
  default:
    snprintf(err, errlen, "the fd is %s, not memory a graphics API exported", what);
    return PROTO_E_INVAL;
  }
}

static void external_estimate(const struct registry *reg, const struct reg_create_args *args,
                              const struct backend *be, struct quota_cost *cost)
{
  uint64_t *bytes = &cost->bytes;
  struct stat st;

  (void)reg;
  /* The pages are charged to the registrar's cgroup, not the daemon's host budget; its
   * uid pays for what gpushmd keeps alive: all a memfd holds, in whole pages (be NULL;
   * checked and sealed against growing by now), NVIDIA memory as claimed (its import
   * checked that). */
  *bytes = args->external->allocation_size;
  if (!be && fstat(args->external->fd, &st) == 0 && (uint64_t)st.st_size > *bytes)
    *bytes = (uint64_t)st.st_size;
  if (!be)
    *bytes = page_rounded(*bytes);
  /* its device is known once its fd is checked: the check after alloc() counts it */
  cost->host = 0;
  cost->device = -1;
  cost->device_bytes = 0;
}

struct reg_registered {
  struct reg_object obj;
  struct reg_external x;
  bool has_image;
  struct image_params image;
};

static struct reg_registered *registered_of(struct reg_object *obj)
{
  return (struct reg_registered *)obj;
}

static int external_alloc(struct registry *reg, struct reg_object *obj,
                          const struct reg_create_args *args, const struct backend *be,
                          const struct reg_client *client, char *err, size_t errlen)
{
  struct reg_registered *rr = registered_of(obj);
  struct reg_external *x = &rr->x;
  int device = -1, r;

  (void)reg;
  (void)client;
  *x = *args->external;
  x->driver_info[sizeof x->driver_info - 1] = '\0';
  if (be && (r = be->verify_external(be, args->external->fd, x->allocation_size, x->dedicated,
                                     x->device_uuid, &device, err, errlen)) < 0)
    return r;
  x->nvidia = be != NULL;
  if ((x->fd = fcntl(args->external->fd, F_DUPFD_CLOEXEC, 3)) < 0) {
    snprintf(err, errlen, "keeping the fd: %s", strerror(errno));
    return PROTO_E_IO;
  }
  if (args->image) {
    /* Kept as create keeps an image's: completed (a linear row pitch of 0 is the
     * default one), which external_check found valid. */
    rr->image = *args->image;
    rr->has_image = true;
    image_check(&rr->image, err, errlen);
  }
  obj->device = device;
  obj->allocated = x->allocation_size;
  if (!be) {
    /* what the sealed memfd holds, which its uid is charged for */
    struct stat st;
    if (fstat(x->fd, &st) < 0) {
      snprintf(err, errlen, "keeping the memfd: %s", strerror(errno));
      close(x->fd);
      return PROTO_E_IO;
    }
    obj->allocated = page_rounded((uint64_t)st.st_size);
  }
  obj->host_bytes = 0;
  return 0;
}

/* A read-only opener of a memfd gets a read-only reopen, which the kernel holds it to
 * (narrow_file_mode); Mesa's drivers, which export memfds, import only what they can
 * map read-write (measured: lavapipe's vkAllocateMemory fails such an import with
 * VK_ERROR_INVALID_EXTERNAL_HANDLE, llvmpipe's glNamedBufferStorageMemEXT with
 * GL_OUT_OF_MEMORY), so their readers open read-write, as host buffers' do.  Every other
 * opener gets a dup of the file: NVIDIA's OPAQUE_FD cannot be narrowed, so a read-only
 * open of it stops bugs in the importer's own code (the helpers refuse write usage on
 * one), not a hostile holder (docs/security.md). */
static int external_export(struct registry *reg, struct reg_object *obj,
                           struct reg_client *client, const struct reg_policy *policy,
                           bool read_only, struct reg_export *out, char *err, size_t errlen)
{
  const struct reg_external *x = &registered_of(obj)->x;
  char path[64];
  int fd;

  (void)reg;
  (void)client;
  (void)policy;
  if (read_only && !x->nvidia) {
    snprintf(path, sizeof path, "/proc/self/fd/%d", x->fd);
    fd = open(path, O_RDONLY | O_CLOEXEC);
  } else {
    fd = fcntl(x->fd, F_DUPFD_CLOEXEC, 3);
  }
  if (fd < 0) {
    snprintf(err, errlen, "exporting registered memory: %s", strerror(errno));
    return errno == EMFILE || errno == ENFILE ? PROTO_E_LIMIT : PROTO_E_IO;
  }
  out->fds[out->n_fds++] = fd;
  return 0;
}

static void external_release(struct registry *reg, struct reg_object *obj)
{
  (void)reg;
  close(registered_of(obj)->x.fd);
}

static void external_describe(const struct reg_object *obj, struct reg_description *out)
{
  const struct reg_registered *rr = (const struct reg_registered *)obj;

  memset(out, 0, sizeof *out);
  out->kind = rr->has_image ? "registered image" : "registered memory";
  out->backend = PROTO_BACKEND_EXTERNAL;
  out->image = rr->has_image ? &rr->image : NULL;
  out->external = &rr->x;
}

/* No persistence: registered memory does not come back after a restart
 * (docs/graphics.md). */
const struct reg_kind_ops reg_kind_external = {
  .name = "registered memory",
  .kind = REG_BUFFER,
  .object_size = sizeof(struct reg_registered),
  .memory_name = "registered NVIDIA memory", /* a memfd's modes are kept: never named */
  .check = external_check,
  .estimate = external_estimate,
  .alloc = external_alloc,
  .export = external_export,
  .release = external_release,
  .describe = external_describe,
};

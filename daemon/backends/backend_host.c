/* SPDX-License-Identifier: MIT */
/* Host backend: a sealed memfd per buffer.  Clients mmap the fd they are sent. */
#include "config.h"
#include "backends/backend.h"
#include "protocol.h"
#include "gpushm_limits.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* A sealed memfd of size rounded up to pages, its pages committed or (commit false, a
 * segment: slots are committed one by one) not. */
static int host_memfd(uint64_t size, const char *label, bool commit, struct backend_mem *mem,
                      uint64_t *allocated, char *err, size_t errlen)
{
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t rounded = (size + page - 1) / page * page;
  int fd, r;

  fd = memfd_create(label, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    snprintf(err, errlen, "memfd_create: %s", strerror(errno));
    return errno == EMFILE || errno == ENFILE ? PROTO_E_LIMIT : PROTO_E_IO;
  }
  if (ftruncate(fd, (off_t)rounded) < 0) {
    snprintf(err, errlen, "ftruncate %llu: %s", (unsigned long long)rounded, strerror(errno));
    close(fd);
    return PROTO_E_NOMEM;
  }
  /* Commit the pages now, as cuMemAlloc would: out-of-memory is a clean error at
   * create time, not a SIGBUS in some client later. */
  r = commit ? posix_fallocate(fd, 0, (off_t)rounded) : 0;
  if (r != 0) {
    snprintf(err, errlen, "cannot reserve %llu bytes of shared memory: %s",
             (unsigned long long)rounded, strerror(r));
    close(fd);
    return r == ENOSPC || r == ENOMEM || r == EFBIG ? PROTO_E_NOMEM : PROTO_E_IO;
  }
  /* Clients may neither resize the object nor lift the seals. */
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
    snprintf(err, errlen, "sealing memfd: %s", strerror(errno));
    close(fd);
    return PROTO_E_IO;
  }
  /* memfds are born mode 0777: anyone handed a read-only fd could reopen it read-write
   * through /proc/self/fd/N.  Owner-read-only leaves that path to the daemon alone
   * (it reopens read-only to export read-only descriptions). */
  if (fchmod(fd, 0400) < 0) {
    snprintf(err, errlen, "fchmod memfd: %s", strerror(errno));
    close(fd);
    return PROTO_E_IO;
  }
  mem->fd = fd;
  mem->priv = NULL;
  *allocated = rounded;
  return 0;
}

static int host_alloc(const struct backend *be, uint64_t size, int device, const char *label,
                      struct backend_mem *mem, uint64_t *allocated, char *err, size_t errlen)
{
  (void)be, (void)device;
  return host_memfd(size, label, true, mem, allocated, err, errlen);
}

static int host_alloc_segment(const struct backend *be, uint64_t size, int device,
                              const char *label, struct backend_mem *mem, uint64_t *allocated,
                              char *err, size_t errlen)
{
  (void)be, (void)device;
  return host_memfd(size, label, false, mem, allocated, err, errlen);
}

/* Punching first makes the range read as zeros whatever was written there since it was
 * freed (a holder's stale mapping of the segment, say); committing after makes running
 * out an error here. */
static int host_zero_range(const struct backend *be, struct backend_mem *mem, uint64_t offset,
                           uint64_t len, bool known_zero, char *err, size_t errlen)
{
  int r;

  (void)be;
  if (!known_zero && fallocate(mem->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset,
                (off_t)len) < 0) {
    snprintf(err, errlen, "clearing %llu bytes of shared memory: %s", (unsigned long long)len,
             strerror(errno));
    return PROTO_E_IO;
  }
  if ((r = posix_fallocate(mem->fd, (off_t)offset, (off_t)len)) != 0) {
    snprintf(err, errlen, "cannot reserve %llu bytes of shared memory: %s",
             (unsigned long long)len, strerror(r));
    return r == ENOSPC || r == ENOMEM ? PROTO_E_NOMEM : PROTO_E_IO;
  }
  return 0;
}

static void host_discard_range(const struct backend *be, struct backend_mem *mem, uint64_t offset,
                               uint64_t len)
{
  (void)be;
  (void)fallocate(mem->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)len);
}

/* A write, not a memset through a mapping: its pages stay where they are (no fault in
 * any process mapping the segment), and a page a holder punched out meanwhile is
 * allocated again with an error for an answer, not a SIGBUS in the daemon. */
static int host_zero_warm_range(const struct backend *be, struct backend_mem *mem,
                                uint64_t offset, uint64_t len, char *err, size_t errlen)
{
  static const uint8_t zeros[4096];
  struct iovec iov[GPUSHM_LIMIT_WARM_SLOT / sizeof zeros];
  uint64_t done = 0;

  (void)be;
  while (done < len) {
    unsigned n = 0;
    ssize_t w;

    for (uint64_t at = done; at < len && n < sizeof iov / sizeof *iov; n++) {
      size_t part = len - at < sizeof zeros ? (size_t)(len - at) : sizeof zeros;
      iov[n] = (struct iovec){ (void *)zeros, part };
      at += part;
    }
    w = pwritev(mem->fd, iov, (int)n, (off_t)(offset + done));
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      int e = w < 0 ? errno : ENOSPC;
      snprintf(err, errlen, "clearing %llu bytes of shared memory: %s", (unsigned long long)len,
               strerror(e));
      return e == ENOSPC || e == ENOMEM ? PROTO_E_NOMEM : PROTO_E_IO;
    }
    done += (uint64_t)w;
  }
  return 0;
}

int backend_host_export_fd(const struct backend_mem *mem, bool read_only, int *fd_out,
                           char *err, size_t errlen)
{
  int fd;

  if (read_only) {
    /* A fresh open file description that is O_RDONLY: a PROT_WRITE shared mapping
     * of it fails with EACCES in the client. */
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", mem->fd);
    fd = open(path, O_RDONLY | O_CLOEXEC);
  } else {
    fd = fcntl(mem->fd, F_DUPFD_CLOEXEC, 0);
  }
  if (fd < 0) {
    snprintf(err, errlen, "exporting memfd: %s", strerror(errno));
    return errno == EMFILE || errno == ENFILE ? PROTO_E_LIMIT : PROTO_E_IO;
  }
  *fd_out = fd;
  return 0;
}

static int host_export(const struct backend *be, struct backend_mem *mem, bool read_only,
                       struct backend_export *out, char *err, size_t errlen)
{
  out->handle_len = 0;
  return backend_host_export_fd(mem, read_only, &out->fd, err, errlen);
}

static void host_release(const struct backend *be, struct backend_mem *mem)
{
  if (mem->fd >= 0)
    close(mem->fd);
  mem->fd = -1;
}

static int host_adopt(const struct backend *be, int fd, const uint8_t uuid[16], uint64_t size,
                      uint64_t *allocated, struct backend_mem *mem, int *device, char *err,
                      size_t errlen)
{
  (void)be;
  (void)uuid;
  *device = -1;
  return backend_host_adopt(fd, size, mem, allocated, err, errlen);
}

const struct backend backend_host = {
  .name = "host",
  .kind = PROTO_BACKEND_HOST,
  .alloc = host_alloc,
  .export = host_export,
  .release = host_release,
  .alloc_segment = host_alloc_segment,
  .zero_range = host_zero_range,
  .discard_range = host_discard_range,
  .zero_warm_range = host_zero_warm_range,
  .granule = 4096,
  .adopt = host_adopt,
};

int backend_host_adopt(int fd, uint64_t size, struct backend_mem *mem, uint64_t *allocated,
                       char *err, size_t errlen)
{
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t rounded = (size + page - 1) / page * page;
  const int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  struct stat st;
  int have;

  /* Only what host_alloc made: a sealed memfd of exactly the rounded size, so that no
   * client mapping it can be cut short. */
  if (size == 0 || size > GPUSHM_LIMIT_BUFFER_SIZE || fstat(fd, &st) < 0 ||
      !S_ISREG(st.st_mode) || (uint64_t)st.st_size != rounded ||
      (have = fcntl(fd, F_GET_SEALS)) < 0 || (have & seals) != seals) {
    snprintf(err, errlen, "not a sealed shared-memory object of %llu bytes",
             (unsigned long long)rounded);
    return PROTO_E_INVAL;
  }
  if ((st.st_mode & 07777) != 0400 && fchmod(fd, 0400) < 0) {
    snprintf(err, errlen, "fchmod: %s", strerror(errno));
    return PROTO_E_IO;
  }
  mem->fd = fd;
  mem->priv = NULL;
  if (allocated)
    *allocated = rounded;
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* gpushm_buffer_export(): every type from the open that can give it, with the range and
 * the parameters an importer needs, and each type refused, naming the one that works,
 * where the memory or the open cannot give it.  Host memory here, cuda-fd memory and
 * registered memory through the fake driver (make check's GPUSHM_FAKE_CUDA_LIB), which
 * maps what an OPAQUE_FD import would, and makes dma-bufs as the driver would. */
#include "config.h"
#include "harness.h"
#include "gpushm-admin.h"
#include "gpushm-graphics.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static struct test_daemon d;

static gpushm_export_desc_t desc(void)
{
  return (gpushm_export_desc_t){ .size = sizeof(gpushm_export_desc_t) };
}

/* Host memory: its pointer, page-aligned, the range at its offset; no fd, no device
 * address, no dma-buf. */
static void test_host(gpushm_t *conn)
{
  gpushm_create_opts_t opts;
  gpushm_export_desc_t e = desc();
  gpushm_buffer_t *small, *big;

  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_HOST;
  CHECK_OK(gpushm_buffer_create(conn, "x-small", 100, &opts, &small));
  CHECK_OK(gpushm_buffer_create(conn, "x-big", 3u << 20, &opts, &big));
  memset(gpushm_buffer_ptr(small), 0x3c, 100);
  CHECK_OK(gpushm_buffer_export(small, GPUSHM_EXPORT_HOST_POINTER, 10, 20, &e));
  CHECK(e.type == GPUSHM_EXPORT_HOST_POINTER && e.fd == -1 && e.device == -1 && e.length == 20);
  CHECK(((uintptr_t)e.ptr % (uintptr_t)sysconf(_SC_PAGESIZE)) == 0 &&
        e.offset + e.length <= e.allocation_size);
  CHECK((char *)e.ptr + e.offset == (char *)gpushm_buffer_ptr(small) + 10);
  CHECK(((unsigned char *)e.ptr)[e.offset] == 0x3c);
  /* length 0: to the end; an allocation of its own starts at its pointer */
  e = desc();
  CHECK_OK(gpushm_buffer_export(big, GPUSHM_EXPORT_HOST_POINTER, 4096, 0, &e));
  CHECK(e.ptr == gpushm_buffer_ptr(big) && e.offset == 4096 && e.length == (3u << 20) - 4096 &&
        e.allocation_size == 3u << 20);
  /* what host memory cannot give, each naming what it can */
  CHECK_ERR(gpushm_buffer_export(small, GPUSHM_EXPORT_DMABUF, 0, 4096, &e), GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(gpushm_last_error_message(), "GPUSHM_EXPORT_HOST_POINTER"));
  CHECK_ERR(gpushm_buffer_export(small, GPUSHM_EXPORT_OPAQUE_FD, 0, 0, &e), GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(gpushm_last_error_message(), "GPUSHM_EXPORT_HOST_POINTER"));
  CHECK_ERR(gpushm_buffer_export(small, GPUSHM_EXPORT_CUDA_VA, 0, 0, &e), GPUSHM_E_UNSUPPORTED);
  CHECK_ERR(gpushm_buffer_export(small, GPUSHM_EXPORT_FABRIC, 0, 0, &e), GPUSHM_E_INVAL);
  /* ranges outside it, unknown types, a descriptor whose size is not set */
  CHECK_ERR(gpushm_buffer_export(small, GPUSHM_EXPORT_HOST_POINTER, 90, 20, &e), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_buffer_export(small, GPUSHM_EXPORT_HOST_POINTER, 101, 0, &e), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_buffer_export(small, 77, 0, 0, &e), GPUSHM_E_INVAL);
  e.size = 4;
  CHECK_ERR(gpushm_buffer_export(small, GPUSHM_EXPORT_HOST_POINTER, 0, 0, &e), GPUSHM_E_INVAL);
  CHECK_OK(gpushm_buffer_close(small));
  CHECK_OK(gpushm_buffer_close(big));
  test_log("host memory: its page-aligned pointer and the range's offset; dma-buf, fd, device "
           "address and fabric handle refused, naming the pointer");
}

/* cuda-fd memory (the fake driver): a CUDA open gives its device address and, read-write,
 * a dma-buf of whole pages; an open for graphics gives the allocation's fd. */
static void test_device(gpushm_t *conn)
{
  gpushm_create_opts_t opts;
  gpushm_export_desc_t e = desc();
  gpushm_buffer_t *b, *ro, *none;
  const long page = sysconf(_SC_PAGESIZE);
  struct stat st;

  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FD;
  opts.mode = 0600;
  CHECK_OK(gpushm_buffer_create(conn, "x-dev", 2u << 20, &opts, &b));
  CHECK_OK(gpushm_buffer_export(b, GPUSHM_EXPORT_CUDA_VA, 64, 128, &e));
  CHECK(e.ptr == gpushm_buffer_ptr(b) && e.offset == 64 && e.length == 128 && e.device == 0 &&
        e.fd == -1 && e.allocation_size >= (2u << 20));
  e = desc();
  CHECK_OK(gpushm_buffer_export(b, GPUSHM_EXPORT_DMABUF, (uint64_t)page, (uint64_t)page, &e));
  CHECK(e.fd >= 0 && e.length == (uint64_t)page && e.offset == 0 && e.device == 0);
  CHECK((fcntl(e.fd, F_GETFD) & FD_CLOEXEC) && fstat(e.fd, &st) == 0);
  close(e.fd);
  CHECK_ERR(gpushm_buffer_export(b, GPUSHM_EXPORT_DMABUF, 1, (uint64_t)page, &e), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_buffer_export(b, GPUSHM_EXPORT_OPAQUE_FD, 0, 0, &e), GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(gpushm_last_error_message(), "GPUSHM_DEVICE_NONE"));
  CHECK_ERR(gpushm_buffer_export(b, GPUSHM_EXPORT_HOST_POINTER, 0, 0, &e), GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(gpushm_last_error_message(), "GPUSHM_EXPORT_CUDA_VA"));
  /* read-only: the device address, never a dma-buf (whoever registers one may write) */
  CHECK_OK(gpushm_buffer_open(conn, "x-dev", GPUSHM_OPEN_READONLY, &ro));
  e = desc();
  CHECK_OK(gpushm_buffer_export(ro, GPUSHM_EXPORT_CUDA_VA, 0, 0, &e));
  CHECK(e.access == GPUSHM_OPEN_READONLY);
  CHECK_ERR(gpushm_buffer_export(ro, GPUSHM_EXPORT_DMABUF, 0, (uint64_t)page, &e), GPUSHM_E_PERM);
  /* for graphics: the allocation's fd, and the range's offset in it */
  none = open_unmapped(conn, "x-dev", 0);
  e = desc();
  CHECK_OK(gpushm_buffer_export(none, GPUSHM_EXPORT_OPAQUE_FD, 4096, 100, &e));
  CHECK(e.fd >= 0 && e.offset == 4096 && e.length == 100 && e.allocation_size >= (2u << 20) &&
        e.ptr == NULL && (fcntl(e.fd, F_GETFD) & FD_CLOEXEC));
  close(e.fd);
  CHECK_ERR(gpushm_buffer_export(none, GPUSHM_EXPORT_CUDA_VA, 0, 0, &e), GPUSHM_E_UNSUPPORTED);
  /* a child keeps its parent's fd (as gpushm_buffer_memory_fd always gave it), never its
   * mappings */
  {
    pid_t pid = fork();
    int status;

    CHECK(pid >= 0);
    if (pid == 0) {
      gpushm_export_desc_t c = desc();
      int ok = gpushm_buffer_export(none, GPUSHM_EXPORT_OPAQUE_FD, 0, 0, &c) == GPUSHM_OK &&
               c.fd >= 0 &&
               gpushm_buffer_export(b, GPUSHM_EXPORT_CUDA_VA, 0, 0, &c) == GPUSHM_E_INVAL;
      _exit(ok ? 0 : 1);
    }
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  CHECK_OK(gpushm_buffer_close(none));
  CHECK_OK(gpushm_buffer_close(ro));
  CHECK_OK(gpushm_buffer_close(b));
  /* length 0 is to the end: for a dma-buf, of the last page, however long the buffer */
  CHECK_OK(gpushm_buffer_create(conn, "x-dev-odd", 2 * (uint64_t)page + 100, &opts, &b));
  e = desc();
  CHECK_OK(gpushm_buffer_export(b, GPUSHM_EXPORT_DMABUF, (uint64_t)page, 0, &e));
  CHECK(e.fd >= 0 && e.length == 2 * (uint64_t)page);
  close(e.fd);
  CHECK_ERR(gpushm_buffer_export(b, GPUSHM_EXPORT_DMABUF, 3 * (uint64_t)page, 0, &e),
            GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "nothing to export"));
  CHECK_OK(gpushm_buffer_close(b));
  test_log("cuda-fd: device address (read-only too), dma-buf of whole pages (read-write "
           "only, length 0 to the last page's end), the allocation's fd for graphics (in a "
           "forked child too); the rest refused naming what works");
}

/* Registered memory opened read-only by another uid: the fd comes read-only, and says so;
 * the fake driver's device 0's UUID is what it names. */
static void test_registered(gpushm_t *conn)
{
  gpushm_external_memory_t m;
  gpushm_create_opts_t opts;
  gpushm_export_desc_t e = desc();
  gpushm_buffer_t *reg;
  gpushm_local_device_list_t *list;
  int fd = memfd_create("x-reg", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  pid_t pid;

  CHECK(fd >= 0 && ftruncate(fd, 1 << 16) == 0);
  gpushm_external_memory_init(&m);
  m.fd = fd;
  m.allocation_size = 1 << 16;
  m.flags = GPUSHM_EXTERNAL_DEDICATED;
  CHECK_OK(gpushm_local_devices(&list));
  CHECK(gpushm_local_device_list_count(list) >= 1);
  CHECK_OK(gpushm_local_device_uuid(gpushm_local_device_list_get(list, 0), m.device_uuid));
  gpushm_local_device_list_free(list);
  gpushm_create_opts_init(&opts);
  opts.mode = 0644;
  CHECK_OK(gpushm_register_memory(conn, "x-reg", &m, &opts, &reg));
  close(fd);
  pid = geteuid() == 0 ? fork_as(65534, 65534) : fork();
  if (pid == 0) {
    gpushm_t *c;
    gpushm_buffer_t *b;
    CHECK_OK(gpushm_connect(d.socket, "x-reader", &c));
    b = open_unmapped(c, "x-reg", GPUSHM_OPEN_READONLY);
    CHECK_OK(gpushm_buffer_export(b, GPUSHM_EXPORT_OPAQUE_FD, 0, 0, &e));
    CHECK(e.allocation_size == 1 << 16 && e.offset == 0 && e.length == 1 << 16 &&
          (e.flags & GPUSHM_EXPORT_DEDICATED) && (e.flags & GPUSHM_EXPORT_READ_ONLY_FD) &&
          (fcntl(e.fd, F_GETFL) & O_ACCMODE) == O_RDONLY && e.access == GPUSHM_OPEN_READONLY);
    CHECK(mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_SHARED, e.fd, 0) == MAP_FAILED);
    close(e.fd);
    CHECK_OK(gpushm_buffer_close(b));
    gpushm_disconnect(c);
    _exit(0);
  }
  check_child(pid);
  CHECK_OK(gpushm_buffer_close(reg));
  CHECK_OK(gpushm_unlink(conn, "x-reg"));
  test_log("registered memfd, read-only open: its fd read-only, flagged so, dedicated");
}

int main(void)
{
  const char *fake = getenv("GPUSHM_FAKE_CUDA_LIB");
  gpushm_t *conn;

  if (!fake || !*fake) {
    fprintf(stderr, "GPUSHM_FAKE_CUDA_LIB is not set (make check sets it)\n");
    return 1;
  }
  setenv("GPUSHM_CUDA_LIBRARY", fake, 1);
  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  test_host(conn);
  test_device(conn);
  test_registered(conn);
  gpushm_disconnect(conn);
  daemon_stop(&d);
  return 0;
}

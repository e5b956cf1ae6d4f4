/* SPDX-License-Identifier: MIT */
/* What leaves the host (issue 15, docs/multinode.md), against the real driver on a GPU
 * host and the fake one in CI (test-cuda-multinode-fake.sh):
 *   - dma-buf export of cuda-fd buffers, carved and whole: the fd is a dma-buf of the
 *     range (its size; on the real driver fdinfo's exp_name nv_dmabuf), close-on-exec,
 *     still valid in another process it was passed to after the exporter closed
 *     everything; misaligned and outside ranges, read-only opens, host, cuda-ipc (the
 *     driver's own refusal checked too) and events refused;
 *   - on the real driver, that a dma-buf keeps the memory allocated after the buffer is
 *     closed and freed, until the fd is closed (the documented lifetime);
 *   - cuda-fabric: refused naming the missing IMEX channel where there is none, and
 *     where there is one (GPUSHM_FAKE_CUDA_IMEX=1 plays it): the handle comes with
 *     read-write opens only, is the same for every opener, and imports the memory (read
 *     in a child through cuMemImportFromShareableHandle, as another node would);
 *   - with the fake driver's fault injection: the driver refusing the dma-buf, and
 *     gpushmd's fabric export failing (the create fails, nothing stays allocated).
 * Children are started with exec: CUDA does not survive fork() alone. */
#include "config.h"
#include "cuda-test.h"
#include "gpushm-graphics.h"

#include <fcntl.h>
#include <glob.h>
#include <string.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1ull << 20)
#define CARVED_BYTES MIB         /* a slot of a shared segment */
#define WHOLE_BYTES (64ull * MIB) /* above the carve limit: an allocation of its own */

static struct test_daemon d;
static const char *self;
static bool fake;

static size_t page_size(void)
{
  return (size_t)sysconf(_SC_PAGESIZE);
}

/* The fd is a dma-buf of bytes: its size as the kernel reports it. */
static void check_dmabuf(int fd, uint64_t bytes)
{
  char path[64], text[1024];
  ssize_t n;
  int f;

  CHECK(fd >= 0);
  CHECK(lseek(fd, 0, SEEK_END) == (off_t)bytes);
  CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  if (fake)
    return;
  snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
  CHECK((f = open(path, O_RDONLY | O_CLOEXEC)) >= 0);
  n = read(f, text, sizeof text - 1);
  close(f);
  CHECK(n > 0);
  text[n] = '\0';
  CHECK(strstr(text, "exp_name:\tnv_dmabuf") != NULL);
  snprintf(path, sizeof path, "size:\t%llu\n", (unsigned long long)bytes);
  CHECK(strstr(text, path) != NULL);
}

static gpushm_buffer_t *create(gpushm_t *conn, const char *name, uint64_t bytes,
                               gpushm_backend_t backend)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;

  gpushm_create_opts_init(&opts);
  opts.backend = backend;
  opts.lifetime = GPUSHM_LIFETIME_SESSION;
  CHECK_OK(gpushm_buffer_create(conn, name, bytes, &opts, &b));
  return b;
}

static pid_t spawn(const char *role, const char *a, const char *b)
{
  pid_t pid = fork();

  CHECK(pid >= 0);
  if (pid == 0) {
    setenv("GPUSHM_SOCKET", d.socket, 1);
    cuda_test_child_env();
    execl(self, self, role, a, b, (char *)NULL);
    _exit(127);
  }
  return pid;
}

/* examples/multinode/dmabuf-export on buffer: exits 0 and prints what a registration
 * takes, and expect. */
static void run_example(const char *buffer, const char *expect)
{
  const char *build = getenv("GPUSHM_TEST_BUILDDIR") ? getenv("GPUSHM_TEST_BUILDDIR") : ".";
  char path[4096], out[] = "/tmp/gpushm-dmabuf-example.XXXXXX", text[4096];
  int fd = mkstemp(out);
  ssize_t n;
  pid_t pid;

  CHECK(fd >= 0);
  snprintf(path, sizeof path, "%s/examples/multinode/dmabuf-export", build);
  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dup2(fd, 1);
    cuda_test_child_env();
    execl(path, path, buffer, d.socket, (char *)NULL);
    _exit(127);
  }
  check_child(pid);
  n = pread(fd, text, sizeof text - 1, 0);
  close(fd);
  unlink(out);
  CHECK(n > 0);
  text[n] = '\0';
  CHECK(strstr(text, "ibv_reg_dmabuf_mr(pd, 0, "));
  CHECK(strstr(text, expect));
}

/* Child: receives a dma-buf over fd 3 once the exporter has closed everything, and
 * checks it is still the range it was. */
static int role_receiver(char **argv)
{
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } control;
  char byte;
  struct iovec iov = { &byte, 1 };
  struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                        .msg_controllen = sizeof control.buf };
  struct cmsghdr *c;
  int fd;

  CHECK(recvmsg(3, &msg, MSG_CMSG_CLOEXEC) == 1);
  CHECK((c = CMSG_FIRSTHDR(&msg)) && c->cmsg_type == SCM_RIGHTS);
  memcpy(&fd, CMSG_DATA(c), sizeof fd);
  CHECK(read(3, &byte, 1) == 1); /* the exporter has closed its fd and the buffer */
  check_dmabuf(fd, strtoull(argv[3], NULL, 0));
  close(fd);
  return 0;
}

static void test_dmabuf_ranges(gpushm_t *conn)
{
  const uint64_t page = page_size();
  gpushm_buffer_t *carved = create(conn, "dmabuf-carved", CARVED_BYTES, GPUSHM_BACKEND_CUDA_FD);
  gpushm_buffer_t *whole = create(conn, "dmabuf-whole", WHOLE_BYTES, GPUSHM_BACKEND_CUDA_FD);
  gpushm_buffer_t *odd = create(conn, "dmabuf-odd", 5000, GPUSHM_BACKEND_CUDA_FD);
  gpushm_buffer_t *ro;
  int fd;

  CHECK_OK(gpushm_buffer_export_dmabuf(carved, 0, CARVED_BYTES, &fd));
  check_dmabuf(fd, CARVED_BYTES);
  close(fd);
  CHECK_OK(gpushm_buffer_export_dmabuf(whole, 0, WHOLE_BYTES, &fd));
  check_dmabuf(fd, WHOLE_BYTES);
  close(fd);
  CHECK_OK(gpushm_buffer_export_dmabuf(whole, 16 * page, 16 * page, &fd));
  check_dmabuf(fd, 16 * page);
  close(fd);
  CHECK_OK(gpushm_buffer_export_dmabuf(carved, CARVED_BYTES - page, page, &fd));
  check_dmabuf(fd, page);
  close(fd);
  /* the page a buffer's last byte is in is its own */
  CHECK_OK(gpushm_buffer_export_dmabuf(odd, 0, 2 * page, &fd));
  check_dmabuf(fd, 2 * page);
  close(fd);

  /* refused ranges leave fd_out at -1 and say why */
  CHECK_ERR(gpushm_buffer_export_dmabuf(carved, 1, page, &fd), GPUSHM_E_INVAL);
  CHECK(fd == -1 && strstr(gpushm_last_error_message(), "page boundary"));
  CHECK_ERR(gpushm_buffer_export_dmabuf(carved, 0, page - 1, &fd), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_buffer_export_dmabuf(carved, 0, 0, &fd), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_buffer_export_dmabuf(carved, 0, CARVED_BYTES + page, &fd), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "outside"));
  CHECK_ERR(gpushm_buffer_export_dmabuf(carved, CARVED_BYTES, page, &fd), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_buffer_export_dmabuf(carved, UINT64_MAX - page + 1, page, &fd),
            GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_buffer_export_dmabuf(odd, 0, 3 * page, &fd), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_buffer_export_dmabuf(NULL, 0, page, &fd), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_buffer_export_dmabuf(carved, 0, page, NULL), GPUSHM_E_INVAL);

  /* a read-only open: whoever registers a dma-buf may write */
  CHECK_OK(gpushm_buffer_open(conn, "dmabuf-carved", GPUSHM_OPEN_READONLY, &ro));
  CHECK_ERR(gpushm_buffer_export_dmabuf(ro, 0, page, &fd), GPUSHM_E_PERM);
  CHECK(fd == -1 && strstr(gpushm_last_error_message(), "read-only"));
  CHECK_OK(gpushm_buffer_close(ro));
  /* no fabric handle for a cuda-fd buffer */
  {
    uint8_t handle[GPUSHM_FABRIC_HANDLE_BYTES];
    CHECK_ERR(gpushm_buffer_fabric_handle(carved, handle), GPUSHM_E_INVAL);
  }
  run_example("dmabuf-whole", "fabric    none: 'dmabuf-whole' is not a cuda-fabric buffer");
  CHECK_OK(gpushm_buffer_close(odd));
  CHECK_OK(gpushm_buffer_close(whole));
  CHECK_OK(gpushm_buffer_close(carved));
  test_log("dma-buf: carved and whole cuda-fd ranges exported, bad ones refused");
}

static void test_dmabuf_refused_backends(gpushm_t *conn)
{
  gpushm_buffer_t *host = create(conn, "dmabuf-host", MIB, GPUSHM_BACKEND_HOST);
  gpushm_buffer_t *ipc = create(conn, "dmabuf-ipc", 2 * MIB, GPUSHM_BACKEND_CUDA_IPC);
  gpushm_event_t *ev;
  int fd = -1;

  CHECK_ERR(gpushm_buffer_export_dmabuf(host, 0, page_size(), &fd), GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(gpushm_last_error_message(), "host memory"));
  CHECK_ERR(gpushm_buffer_export_dmabuf(ipc, 0, page_size(), &fd), GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(gpushm_last_error_message(), "legacy CUDA IPC"));
  /* The refusal stands on the driver's: it gives no dma-buf of IPC-opened memory.
   * Should a driver start to, this says so (and the refusal can go). */
  {
    int raw = -1;
    CUresult r = drv.cuMemGetHandleForAddressRange(&raw, cuda_test_dptr(ipc), 2 * MIB,
                                                   CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    CHECK(r == CUDA_ERROR_INVALID_VALUE && raw == -1);
  }
  CHECK_OK(gpushm_event_create(conn, "dmabuf-event", NULL, &ev));
  CHECK_ERR(gpushm_buffer_export_dmabuf((gpushm_buffer_t *)ev, 0, page_size(), &fd),
            GPUSHM_E_INVAL);
  CHECK_OK(gpushm_event_close(ev));
  CHECK_OK(gpushm_unlink(conn, "dmabuf-event"));
  CHECK_OK(gpushm_buffer_close(ipc));
  CHECK_OK(gpushm_buffer_close(host));
  test_log("dma-buf: host, cuda-ipc and event refused (the driver's own IPC refusal checked)");
}

/* A linear image in cuda-fd memory is memory with a row pitch: its pages export as a
 * buffer's do (both calls refused it as "not a buffer" in 0.7.0). */
static void test_dmabuf_image(gpushm_t *conn)
{
  uint8_t handle[GPUSHM_FABRIC_HANDLE_BYTES];
  gpushm_image_desc_t desc;
  gpushm_create_opts_t opts;
  gpushm_buffer_t *img;
  uint64_t bytes;
  int fd = -1;

  gpushm_image_desc_init(&desc);
  desc.width = 1920;
  desc.height = 1080;
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FD;
  CHECK_OK(gpushm_image_create(conn, "dmabuf-image", &desc, &opts, &img));
  bytes = (gpushm_buffer_size(img) + page_size() - 1) / page_size() * page_size();
  CHECK_OK(gpushm_buffer_export_dmabuf(img, 0, bytes, &fd));
  check_dmabuf(fd, bytes);
  close(fd);
  CHECK_ERR(gpushm_buffer_fabric_handle(img, handle), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "not a cuda-fabric buffer"));
  CHECK_OK(gpushm_unlink(conn, "dmabuf-image"));
  CHECK_OK(gpushm_buffer_close(img));
  test_log("dma-buf: a 1920x1080 linear image in cuda-fd memory exported whole (%llu bytes)",
           (unsigned long long)bytes);
}

/* Passed to another process, the dma-buf outlives the exporter's fd, buffer and
 * connection's hold on it. */
static void test_dmabuf_passed(gpushm_t *conn)
{
  const uint64_t bytes = 32 * page_size();
  gpushm_buffer_t *b = create(conn, "dmabuf-passed", CARVED_BYTES, GPUSHM_BACKEND_CUDA_FD);
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } control;
  char byte = 'x', text[32];
  struct iovec iov = { &byte, 1 };
  struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                        .msg_controllen = sizeof control.buf };
  struct cmsghdr *c;
  int sv[2], fd;
  pid_t child;

  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  snprintf(text, sizeof text, "%llu", (unsigned long long)bytes);
  child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    dup2(sv[1], 3); /* dup2 clears close-on-exec */
    setenv("GPUSHM_SOCKET", d.socket, 1);
    cuda_test_child_env();
    execl(self, self, "receiver", "-", text, (char *)NULL);
    _exit(127);
  }
  close(sv[1]);
  CHECK_OK(gpushm_buffer_export_dmabuf(b, 0, bytes, &fd));
  c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof fd);
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  CHECK(sendmsg(sv[0], &msg, 0) == 1);
  close(fd);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK(write(sv[0], "y", 1) == 1);
  check_child(child);
  close(sv[0]);
  test_log("dma-buf: valid in another process after the exporter closed it and the buffer");
}

static int bytes_allocated_is(const struct test_daemon *td, void *arg)
{
  gpushm_stats_t *s = daemon_stats(td);
  int done = gpushm_stats_bytes_allocated(s) == *(uint64_t *)arg;
  gpushm_stats_free(s);
  return done;
}

static uint64_t device_free(void)
{
  size_t free_bytes = 0, total = 0;
  CU_CHECK(drv.cuMemGetInfo(&free_bytes, &total));
  return free_bytes;
}

/* The documented lifetime, which only the real driver can show: a dma-buf keeps the
 * physical memory after the daemon freed the buffer, until the fd is closed. */
static void test_dmabuf_keeps_memory(gpushm_t *conn)
{
  gpushm_stats_t *s = daemon_stats(&d);
  uint64_t before = gpushm_stats_bytes_allocated(s), freed_with_fd, freed_after = 0;
  gpushm_buffer_t *b;
  int fd;

  gpushm_stats_free(s);
  if (fake) {
    test_log("dma-buf lifetime: a fact of the real driver, not checked with the fake");
    return;
  }
  b = create(conn, "dmabuf-lifetime", WHOLE_BYTES, GPUSHM_BACKEND_CUDA_FD);
  CHECK_OK(gpushm_buffer_export_dmabuf(b, 0, WHOLE_BYTES, &fd));
  uint64_t held = device_free();
  CHECK_OK(gpushm_buffer_close(b)); /* session lifetime, unlinked by... */
  CHECK_OK(gpushm_unlink(conn, "dmabuf-lifetime"));
  CHECK(wait_until(bytes_allocated_is, &d, &before));
  usleep(200 * 1000);
  freed_with_fd = device_free() > held ? device_free() - held : 0;
  close(fd);
  for (int i = 0; i < 100 && freed_after < WHOLE_BYTES; i++) {
    usleep(20 * 1000);
    freed_after = device_free() > held ? device_free() - held : 0;
  }
  test_log("dma-buf lifetime: buffer freed by gpushmd with the dma-buf open: %llu MiB came "
           "back; after closing the dma-buf: %llu MiB", (unsigned long long)(freed_with_fd >> 20),
           (unsigned long long)(freed_after >> 20));
  CHECK(freed_with_fd < WHOLE_BYTES);
  CHECK(freed_after >= WHOLE_BYTES);
}

/* Child: opens the fabric buffer argv[2] read-write, checks its handle is the one the
 * creator got (argv[3], hex), then imports that handle with the driver as another node
 * would, maps it and checks the creator's pattern; read-only, it gets no handle. */
static int role_fabric_importer(char **argv)
{
  gpushm_t *conn;
  gpushm_buffer_t *b, *ro;
  uint8_t handle[GPUSHM_FABRIC_HANDLE_BYTES];
  CUmemFabricHandle fh;
  CUmemGenericAllocationHandle imported;
  CUmemAccessDesc access = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
                             .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
  CUdeviceptr va;
  char hex[2 * GPUSHM_FABRIC_HANDLE_BYTES + 1];

  cuda_test_setup(0);
  CHECK_OK(gpushm_connect(getenv("GPUSHM_SOCKET"), "fabric-importer", &conn));
  CHECK_OK(gpushm_buffer_open(conn, argv[2], 0, &b));
  CHECK(gpushm_buffer_backend(b) == GPUSHM_BACKEND_CUDA_FABRIC);
  CHECK_OK(gpushm_buffer_fabric_handle(b, handle));
  for (int i = 0; i < GPUSHM_FABRIC_HANDLE_BYTES; i++)
    snprintf(hex + 2 * i, 3, "%02x", handle[i]);
  CHECK(strcmp(hex, argv[3]) == 0);
  CHECK(cuda_test_verify(cuda_test_dptr(b), MIB, 0xfab));
  CHECK_OK(gpushm_buffer_open(conn, argv[2], GPUSHM_OPEN_READONLY, &ro));
  CHECK_ERR(gpushm_buffer_fabric_handle(ro, handle), GPUSHM_E_PERM);
  CHECK_OK(gpushm_buffer_close(ro));

  memcpy(fh.data, handle, sizeof fh.data);
  CU_CHECK(drv.cuMemImportFromShareableHandle(&imported, &fh, CU_MEM_HANDLE_TYPE_FABRIC));
  CU_CHECK(drv.cuMemAddressReserve(&va, 2 * MIB, 0, 0, 0));
  CU_CHECK(drv.cuMemMap(va, 2 * MIB, 0, imported, 0));
  CU_CHECK(drv.cuMemSetAccess(va, 2 * MIB, &access, 1));
  CHECK(cuda_test_verify(va, MIB, 0xfab));
  CU_CHECK(drv.cuMemUnmap(va, 2 * MIB));
  CU_CHECK(drv.cuMemAddressFree(va, 2 * MIB));
  CU_CHECK(drv.cuMemRelease(imported));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  return 0;
}

/* Child, as uid 65534, on a 0644 fabric buffer argv[2] it may read: a read-write open
 * is refused, and the read-only open it gets carries no fabric handle and exports no
 * dma-buf (either would let it write).  The driver is loaded by a first open as root. */
static int role_fabric_nobody(char **argv)
{
  gpushm_t *conn;
  gpushm_buffer_t *b;
  uint8_t handle[GPUSHM_FABRIC_HANDLE_BYTES];
  int fd = -1;

  cuda_test_setup(0);
  conn = daemon_connect(&d);
  CHECK_OK(gpushm_buffer_open(conn, argv[2], GPUSHM_OPEN_READONLY, &b));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  CHECK(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(65534) == 0);
  conn = daemon_connect(&d);
  CHECK_ERR(gpushm_buffer_open(conn, argv[2], 0, &b), GPUSHM_E_PERM);
  CHECK_OK(gpushm_buffer_open(conn, argv[2], GPUSHM_OPEN_READONLY, &b));
  CHECK(cuda_test_verify(cuda_test_dptr(b), MIB, 0xfab));
  CHECK_ERR(gpushm_buffer_fabric_handle(b, handle), GPUSHM_E_PERM);
  CHECK_ERR(gpushm_buffer_export_dmabuf(b, 0, MIB, &fd), GPUSHM_E_PERM);
  CHECK(fd == -1);
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
  return 0;
}

static bool imex_channel_here(void)
{
  glob_t g;
  bool any = glob(GPUSHM_IMEX_CHANNELS_DIR "/channel*", 0, NULL, &g) == 0;

  if (any)
    globfree(&g);
  return any;
}

static void test_fabric(gpushm_t *conn)
{
  const bool imex = fake ? getenv("GPUSHM_FAKE_CUDA_IMEX") != NULL : imex_channel_here();
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;
  uint8_t handle[GPUSHM_FABRIC_HANDLE_BYTES], zero[GPUSHM_FABRIC_HANDLE_BYTES] = { 0 };
  char hex[2 * GPUSHM_FABRIC_HANDLE_BYTES + 1];
  int fd, r;

  CHECK(gpushm_daemon_backends(conn) & (1u << GPUSHM_BACKEND_CUDA_FABRIC));
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FABRIC;
  opts.lifetime = GPUSHM_LIFETIME_SESSION;
  opts.mode = 0644;
  r = gpushm_buffer_create(conn, "fabric", MIB, &opts, &b);
  if (!imex) {
    char why[512];
    CHECK_ERR(r, GPUSHM_E_UNSUPPORTED);
    snprintf(why, sizeof why, "%s", gpushm_last_error_message());
    CHECK(strstr(why, "no IMEX channel"));
    CHECK(strstr(why, "/dev/nvidia-caps-imex-channels"));
    CHECK(find_buffer(conn, "fabric") == NULL);
    test_log("cuda-fabric refused without an IMEX channel: %s", why);
    return;
  }
  CHECK_OK(r);
  CHECK(gpushm_buffer_backend(b) == GPUSHM_BACKEND_CUDA_FABRIC);
  CHECK(gpushm_buffer_info_segment_id(find_buffer(conn, "fabric")) == 0); /* never carved */
  CHECK_OK(gpushm_buffer_fabric_handle(b, handle));
  CHECK(memcmp(handle, zero, sizeof zero) != 0);
  cuda_test_fill(cuda_test_dptr(b), MIB, 0xfab);
  /* a fabric buffer's range is a dma-buf too */
  CHECK_OK(gpushm_buffer_export_dmabuf(b, 0, MIB, &fd));
  check_dmabuf(fd, MIB);
  close(fd);
  for (int i = 0; i < GPUSHM_FABRIC_HANDLE_BYTES; i++)
    snprintf(hex + 2 * i, 3, "%02x", handle[i]);
  check_child(spawn("fabric-importer", "fabric", hex));
  check_child(spawn("fabric-nobody", "fabric", NULL));
  {
    char line[2 * GPUSHM_FABRIC_HANDLE_BYTES + 16];
    snprintf(line, sizeof line, "fabric    %s\n", hex);
    run_example("fabric", line);
  }
  CHECK_OK(gpushm_buffer_close(b));
  test_log("cuda-fabric: handle to read-write opens only, the same for each, imported by "
           "another process through the driver; uid 65534 reading a 0644 one gets neither "
           "handle nor dma-buf");
}

/* test-cuda-multinode-fake.sh, with an IMEX channel and the driver refusing, here the
 * dma-buf and in gpushmd the third shareable-handle export (the first two: the carved
 * buffer's segment, the fabric buffer's fd; the third: its fabric handle). */
static void test_driver_refusals(gpushm_t *conn)
{
  gpushm_buffer_t *b = create(conn, "dmabuf-fault", CARVED_BYTES, GPUSHM_BACKEND_CUDA_FD), *fb;
  gpushm_create_opts_t opts;
  gpushm_stats_t *s;
  uint64_t free_before, allocated_before;
  int fd = 0;

  CHECK_ERR(gpushm_buffer_export_dmabuf(b, 0, CARVED_BYTES, &fd), GPUSHM_E_NOMEM);
  CHECK(fd == -1 && strstr(gpushm_last_error_message(), "cuMemGetHandleForAddressRange"));
  test_log("dma-buf: the driver's refusal reaches the caller, no fd handed out");

  s = daemon_stats(&d);
  free_before = gpushm_device_stats_free_memory(gpushm_stats_device(s, 0));
  allocated_before = gpushm_stats_bytes_allocated(s);
  gpushm_stats_free(s);
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FABRIC;
  CHECK_ERR(gpushm_buffer_create(conn, "fabric-fault", MIB, &opts, &fb), GPUSHM_E_NOMEM);
  CHECK(strstr(gpushm_last_error_message(), "cuMemExportToShareableHandle(FABRIC)"));
  CHECK(find_buffer(conn, "fabric-fault") == NULL);
  s = daemon_stats(&d);
  CHECK(gpushm_device_stats_free_memory(gpushm_stats_device(s, 0)) == free_before);
  CHECK(gpushm_stats_bytes_allocated(s) == allocated_before);
  gpushm_stats_free(s);
  CHECK_OK(gpushm_buffer_close(b));
  test_log("cuda-fabric: a refused fabric export fails the create and frees its memory");
}

int main(int argc, char **argv)
{
  gpushm_t *conn;

  self = "/proc/self/exe";
  fake = getenv("GPUSHM_CUDA_LIBRARY") && strstr(getenv("GPUSHM_CUDA_LIBRARY"), "fake");
  if (argc > 1) {
    snprintf(d.socket, sizeof d.socket, "%s", getenv("GPUSHM_SOCKET"));
    if (strcmp(argv[1], "receiver") == 0)
      return role_receiver(argv);
    if (strcmp(argv[1], "fabric-importer") == 0)
      return role_fabric_importer(argv);
    if (strcmp(argv[1], "fabric-nobody") == 0)
      return role_fabric_nobody(argv);
    return 2;
  }
  self = test_self_path();
  cuda_test_parent_outside_mps();
  cuda_test_setup(1);
  daemon_start(&d, "--allow-legacy-ipc=yes", NULL);
  conn = daemon_connect(&d);
  if (getenv("GPUSHM_CUDA_FAULTS")) {
    test_driver_refusals(conn);
    gpushm_disconnect(conn);
    daemon_stop(&d);
    return 0;
  }

  test_dmabuf_ranges(conn);
  test_dmabuf_refused_backends(conn);
  test_dmabuf_image(conn);
  test_dmabuf_passed(conn);
  test_dmabuf_keeps_memory(conn);
  test_fabric(conn);

  gpushm_disconnect(conn);
  daemon_stop(&d);
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* The graphics rows' speed targets, each beside its floor measured in the same run
 * (docs/graphics.md, docs/performance.md):
 *  [G1] importing a 64 MiB cuda-fd buffer into Vulkan through gpushm-vulkan.h (memory
 *       info, fd, device check, buffer, allocation, binding) against a raw
 *       vkAllocateMemory import of the same fd: target ratio <= 1.2;
 *  [G2] a 4-slot ring of 1920x1080 RGBA8 frames, a CUDA producer (a kernel writes each
 *       frame) and a Vulkan consumer (copies each out) in two processes, handing slots
 *       back and forth over a socket, the slots gpushm buffers against raw cuMemCreate
 *       allocations whose fds the producer sends itself: target ratio >= 0.9.
 * Prints rows; an unmet target is a finding, not a failure (exit 0 unless it cannot
 * measure).  Needs a GPU, Vulkan on it, and the test kernels (nvcc). */
#define _GNU_SOURCE
#include "config.h"
#include "cuda-test.h"
#include "vk-context.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern const char test_kernels_ptx[];

#define IMPORT_BYTES (64ull << 20)
#define IMPORT_ROUNDS 40
#define RING_SLOTS 4
#define FRAME_W 1920
#define FRAME_H 1080
#define FRAME_BYTES ((uint64_t)FRAME_W * FRAME_H * 4)
#define RING_FRAMES 600

static struct test_daemon d;
static char self[4096];

static double now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, unsigned n)
{
  qsort(v, n, sizeof *v, cmp_double);
  return v[n / 2];
}

static void open_vk(struct vkc *c)
{
  char why[256];
  if (vkc_open(c, NULL, why, sizeof why) < 0) {
    fprintf(stderr, "bench-graphics: Vulkan: %s\n", why);
    exit(1);
  }
}

/* ---- [G1] import --------------------------------------------------------------------- */

/* The floor: what any Vulkan program does with an OPAQUE_FD it was given. */
static void raw_import(struct vkc *c, int fd, VkDeviceSize size, VkBuffer *buffer,
                       VkDeviceMemory *memory)
{
  VkExternalMemoryBufferCreateInfo ext = {
    .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
    .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT };
  VkBufferCreateInfo bci = { .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .pNext = &ext,
                             .size = size, .usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT };
  VkImportMemoryFdInfoKHR import = { .sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_FD_INFO_KHR,
                                     .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT,
                                     .fd = fd };
  VkMemoryAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &import,
                              .allocationSize = size };
  VkMemoryRequirements req;

  CHECK(vkCreateBuffer(c->device, &bci, NULL, buffer) == VK_SUCCESS);
  vkGetBufferMemoryRequirements(c->device, *buffer, &req);
  CHECK(gpushm_vk_memory_type(&c->gpushm, req.memoryTypeBits, GPUSHM_MEMORY_TYPE_ANY,
                              &ai.memoryTypeIndex) == 0);
  CHECK(vkAllocateMemory(c->device, &ai, NULL, memory) == VK_SUCCESS);
  CHECK(vkBindBufferMemory(c->device, *buffer, *memory, 0) == VK_SUCCESS);
}

static void row_import(void)
{
  double gpushm_us[IMPORT_ROUNDS], raw_us[IMPORT_ROUNDS], g, r;
  gpushm_create_opts_t opts;
  gpushm_open_opts_t o;
  gpushm_memory_info_t info = { .size = sizeof info };
  gpushm_buffer_t *owner, *b;
  gpushm_t *conn;
  struct vkc c;

  CHECK_OK(gpushm_connect(d.socket, "bench-import", &conn));
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FD;
  CHECK_OK(gpushm_buffer_create(conn, "import-64m", IMPORT_BYTES, &opts, &owner));
  gpushm_open_opts_init(&o);
  o.map_device = GPUSHM_DEVICE_NONE;
  CHECK_OK(gpushm_buffer_open_ex(conn, "import-64m", 0, &o, &b));
  CHECK_OK(gpushm_buffer_memory_info(b, &info));
  open_vk(&c);
  /* alternate, so that a drift of the machine touches both */
  for (unsigned i = 0; i < IMPORT_ROUNDS; i++) {
    gpushm_vk_buffer_t vb;
    VkBuffer buffer;
    VkDeviceMemory memory;
    int fd;
    double t0;

    CHECK_OK(gpushm_buffer_memory_fd(b, &fd)); /* the raw path gets its fd for free */
    t0 = now_us();
    raw_import(&c, fd, info.allocation_size, &buffer, &memory);
    raw_us[i] = now_us() - t0;
    vkDestroyBuffer(c.device, buffer, NULL);
    vkFreeMemory(c.device, memory, NULL);

    t0 = now_us();
    CHECK(gpushm_vk_import_buffer(&c.gpushm, b, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, &vb) == 0);
    gpushm_us[i] = now_us() - t0;
    gpushm_vk_destroy_buffer(&c.gpushm, &vb);
  }
  g = median(gpushm_us, IMPORT_ROUNDS);
  r = median(raw_us, IMPORT_ROUNDS);
  printf("bench-graphics: [G1] Vulkan import, 64 MiB cuda-fd    gpushm_vk_import_buffer %.1f us | "
         "floor: raw vkAllocateMemory import of the same fd %.1f us | ratio %.2f (median of %d) "
         "| target <= 1.20  -> %s\n", g, r, g / r, IMPORT_ROUNDS, g / r <= 1.2 ? "met" : "NOT met");
  vkc_close(&c);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_buffer_close(owner));
  CHECK_OK(gpushm_unlink(conn, "import-64m"));
  gpushm_disconnect(conn);
}

/* ---- [G2] ring ----------------------------------------------------------------------- */

/* Messages on the socket: the producer says "slot s holds frame f", the consumer "slot
 * s is free again".  fds ride along once, for the raw ring. */
struct msg {
  uint32_t slot, frame;
};

static void send_fds(int sock, const int *fds, unsigned n)
{
  char byte = 0, control[CMSG_SPACE(sizeof(int) * RING_SLOTS)];
  struct iovec iov = { &byte, 1 };
  struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                      .msg_controllen = CMSG_SPACE(sizeof(int) * n) };
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);

  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * n);
  memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
  CHECK(sendmsg(sock, &m, 0) == 1);
}

static void recv_fds(int sock, int *fds, unsigned n)
{
  char byte, control[CMSG_SPACE(sizeof(int) * RING_SLOTS)];
  struct iovec iov = { &byte, 1 };
  struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                      .msg_controllen = sizeof control };
  struct cmsghdr *c;

  CHECK(recvmsg(sock, &m, 0) == 1 && (c = CMSG_FIRSTHDR(&m)) &&
        c->cmsg_len == CMSG_LEN(sizeof(int) * n));
  memcpy(fds, CMSG_DATA(c), sizeof(int) * n);
}

/* The producer: frames written by a kernel into the slot the consumer gave back. */
static double producer(int sock, bool raw)
{
  CUdeviceptr slot_ptr[RING_SLOTS];
  CUmemGenericAllocationHandle handles[RING_SLOTS];
  size_t slot_size = 0;
  gpushm_buffer_t *bufs[RING_SLOTS] = { 0 };
  gpushm_t *conn = NULL;
  CUmodule mod;
  CUfunction fill;
  CUstream s;
  unsigned long long words = FRAME_BYTES / 4, delay = 0;
  double t0 = 0;

  cuda_test_setup(0);
  CU_CHECK(cuda_test_load_module(test_kernels_ptx, &mod));
  CU_CHECK(CU_CALL(&drv, cuModuleGetFunction, &fill, mod, "slow_fill"));
  CU_CHECK(CU_CALL(&drv, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING));
  if (raw) {
    CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                 .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
    CUmemAccessDesc access = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    size_t granule;
    int fds[RING_SLOTS];
    CU_CHECK(CU_CALL(&drv, cuMemGetAllocationGranularity, &granule, &prop,
                     CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    slot_size = (FRAME_BYTES + granule - 1) / granule * granule;
    for (int i = 0; i < RING_SLOTS; i++) {
      CU_CHECK(CU_CALL(&drv, cuMemCreate, &handles[i], slot_size, &prop, 0));
      CU_CHECK(CU_CALL(&drv, cuMemExportToShareableHandle, &fds[i], handles[i],
                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
      CU_CHECK(CU_CALL(&drv, cuMemAddressReserve, &slot_ptr[i], slot_size, 0, 0, 0));
      CU_CHECK(CU_CALL(&drv, cuMemMap, slot_ptr[i], slot_size, 0, handles[i], 0));
      CU_CHECK(CU_CALL(&drv, cuMemSetAccess, slot_ptr[i], slot_size, &access, 1));
    }
    CHECK(write(sock, &slot_size, sizeof slot_size) == sizeof slot_size);
    send_fds(sock, fds, RING_SLOTS);
    for (int i = 0; i < RING_SLOTS; i++)
      close(fds[i]);
  } else {
    gpushm_create_opts_t opts;
    char name[32];
    CHECK_OK(gpushm_connect(d.socket, "ring-producer", &conn));
    gpushm_create_opts_init(&opts);
    opts.backend = GPUSHM_BACKEND_CUDA_FD;
    opts.lifetime = GPUSHM_LIFETIME_SESSION;
    for (int i = 0; i < RING_SLOTS; i++) {
      snprintf(name, sizeof name, "ring-%d", i);
      CHECK_OK(gpushm_buffer_create(conn, name, FRAME_BYTES, &opts, &bufs[i]));
      slot_ptr[i] = cuda_test_dptr(bufs[i]);
    }
    CHECK(write(sock, "go", 2) == 2); /* the consumer opens them by name */
  }
  for (uint32_t f = 0; f < RING_FRAMES + RING_SLOTS; f++) {
    struct msg m = { f % RING_SLOTS, f };
    unsigned seed = f;
    void *args[] = { &slot_ptr[m.slot], &words, &seed, &delay };
    if (f >= RING_SLOTS) { /* wait for the slot to come back */
      struct msg back;
      CHECK(read(sock, &back, sizeof back) == sizeof back && back.slot == m.slot);
    }
    if (f == RING_SLOTS)
      t0 = now_us(); /* the ring is full: from here on it is steady */
    if (f >= RING_FRAMES)
      continue;
    CU_CHECK(CU_CALL(&drv, cuLaunchKernel, fill, 512, 1, 1, 256, 1, 1, 0, s, args, NULL));
    CU_CHECK(CU_CALL(&drv, cuStreamSynchronize, s));
    CHECK(write(sock, &m, sizeof m) == sizeof m);
  }
  {
    double seconds = (now_us() - t0) / 1e6;
    struct msg end = { UINT32_MAX, 0 };
    CHECK(write(sock, &end, sizeof end) == sizeof end);
    for (int i = 0; i < RING_SLOTS; i++) {
      if (raw) {
        CU_CHECK(CU_CALL(&drv, cuMemUnmap, slot_ptr[i], slot_size));
        CU_CHECK(CU_CALL(&drv, cuMemAddressFree, slot_ptr[i], slot_size));
        CU_CHECK(CU_CALL(&drv, cuMemRelease, handles[i]));
      } else {
        CHECK_OK(gpushm_buffer_close(bufs[i]));
      }
    }
    if (conn)
      gpushm_disconnect(conn);
    return (RING_FRAMES - RING_SLOTS) / seconds;
  }
}

/* The consumer: copies each frame out of its slot, then gives the slot back. */
static void consumer(int sock, bool raw)
{
  VkBuffer slot[RING_SLOTS];
  VkDeviceMemory slot_memory[RING_SLOTS];
  gpushm_vk_buffer_t vb[RING_SLOTS];
  gpushm_buffer_t *bufs[RING_SLOTS];
  struct vkc_buffer out;
  gpushm_t *conn = NULL;
  struct vkc c;
  VkBufferCopy whole = { 0, 0, FRAME_BYTES };

  open_vk(&c);
  CHECK(vkc_host_buffer(&c, FRAME_BYTES, &out) == 0);
  if (raw) {
    int fds[RING_SLOTS];
    size_t slot_size;
    CHECK(read(sock, &slot_size, sizeof slot_size) == sizeof slot_size);
    recv_fds(sock, fds, RING_SLOTS);
    for (int i = 0; i < RING_SLOTS; i++)
      raw_import(&c, fds[i], slot_size, &slot[i], &slot_memory[i]);
  } else {
    char go[2], name[32];
    gpushm_open_opts_t o;
    CHECK(read(sock, go, 2) == 2);
    CHECK_OK(gpushm_connect(d.socket, "ring-consumer", &conn));
    gpushm_open_opts_init(&o);
    o.map_device = GPUSHM_DEVICE_NONE;
    o.flags = GPUSHM_OPEN_READONLY;
    for (int i = 0; i < RING_SLOTS; i++) {
      snprintf(name, sizeof name, "ring-%d", i);
      CHECK_OK(gpushm_buffer_open_ex(conn, name, 0, &o, &bufs[i]));
      CHECK(gpushm_vk_import_buffer(&c.gpushm, bufs[i], VK_BUFFER_USAGE_TRANSFER_SRC_BIT, &vb[i]) == 0);
      slot[i] = vb[i].buffer;
    }
  }
  for (;;) {
    struct msg m;
    VkCommandBuffer cb;
    CHECK(read(sock, &m, sizeof m) == sizeof m);
    if (m.slot == UINT32_MAX)
      break;
    cb = vkc_begin(&c);
    vkCmdCopyBuffer(cb, slot[m.slot], out.buffer, 1, &whole);
    CHECK(vkc_submit(&c, cb) == 0);
    /* a frame is what the producer wrote: the first word of it */
    CHECK(((uint32_t *)out.map)[0] == (0u ^ m.frame));
    CHECK(write(sock, &m, sizeof m) == sizeof m);
  }
  for (int i = 0; i < RING_SLOTS; i++) {
    if (raw) {
      vkDestroyBuffer(c.device, slot[i], NULL);
      vkFreeMemory(c.device, slot_memory[i], NULL);
    } else {
      gpushm_vk_destroy_buffer(&c.gpushm, &vb[i]);
      CHECK_OK(gpushm_buffer_close(bufs[i]));
    }
  }
  vkc_free_buffer(&c, &out);
  vkc_close(&c);
  if (conn)
    gpushm_disconnect(conn);
}

static double ring(bool raw)
{
  int sv[2], status;
  double rate;
  pid_t pid;

  CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) == 0);
  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    char fd_text[16];
    close(sv[0]);
    snprintf(fd_text, sizeof fd_text, "%d", sv[1]);
    setenv("GPUSHM_SOCKET", d.socket, 1);
    execl(self, self, "consumer", raw ? "raw" : "gpushm", fd_text, (char *)NULL);
    _exit(127);
  }
  close(sv[1]);
  rate = producer(sv[0], raw);
  close(sv[0]);
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return rate;
}

int main(int argc, char **argv)
{
  double g[3], r[3], ratios[3], gm, rm, ratio;

  if (argc == 4 && strcmp(argv[1], "consumer") == 0) {
    snprintf(d.socket, sizeof d.socket, "%s", getenv("GPUSHM_SOCKET"));
    consumer(atoi(argv[3]), strcmp(argv[2], "raw") == 0);
    return 0;
  }
  snprintf(self, sizeof self, "%s", test_self_path());
  cuda_test_setup(1);
  daemon_start(&d, NULL);
  row_import();
  /* the producer runs in this process: CUDA is current here, the consumer is fresh */
  for (int i = 0; i < 3; i++) {
    r[i] = ring(true);
    g[i] = ring(false);
    ratios[i] = g[i] / r[i];
  }
  gm = median(g, 3);
  rm = median(r, 3);
  ratio = median(ratios, 3); /* sorted now: [0] and [2] are the extremes */
  printf("bench-graphics: [G2] ring 4 x 1920x1080 RGBA8, CUDA->Vulkan %.0f frames/s | floor: raw "
         "cuMemCreate fds %.0f frames/s | ratio %.3f (median of 3, %.3f to %.3f) | target >= 0.90"
         "  -> %s\n", gm, rm, ratio, ratios[0], ratios[2], ratio >= 0.9 ? "met" : "NOT met");
  printf("bench-graphics:  (how) producer: a kernel writes each 8 MiB frame, stream synchronised,"
         " the slot's number sent over a socket; consumer: vkCmdCopyBuffer of the slot, fence "
         "waited, the slot sent back; %d frames after the ring fills\n", RING_FRAMES - RING_SLOTS);
  daemon_stop(&d);
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* gpushm objects in Vulkan (gpushm-vulkan.h), process to process, as CI runs it on
 * lavapipe and the GPU host on the NVIDIA driver:
 *  - a host buffer imported as a VkBuffer (VK_EXT_external_memory_host): Vulkan reads
 *    what the CPU wrote through gpushm, and the CPU what Vulkan wrote;
 *  - a buffer and an optimal image made exportable by one Vulkan process, filled,
 *    registered, the process gone; imported by another (uid 65534 where root runs
 *    this) and read back texel for texel: read-only where it is NVIDIA memory; a
 *    lavapipe memfd opened read-only comes read-only, which Mesa cannot import (refused
 *    by the helpers, naming the cure), so it is opened read-write;
 *  - a linear image gpushmd allocated, written by the CPU, read by Vulkan through the
 *    rows buffer (and the LINEAR image where the device lays it out alike);
 *  - refusals: memory of another device or driver (naming both), write usage on a
 *    read-only open.
 * Vulkan is opened in each process after any fork. */
#define _GNU_SOURCE
#include "config.h"
#include "harness.h"
#include "vk-verify.h"
#include "kept-read-only.h"
#include "header-only.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* not a multiple of 64 texels: a linear image of it has rows longer than its texels */
#define W 60
#define H 32

static const char *socket_path;

/* The pattern of tests/gpu/kernels.cu (and of the verify shaders): texel (x, y) of a
 * W-wide image is word y * W + x. */
static uint32_t texel(uint32_t x, uint32_t y, uint32_t seed)
{
  return ((y * W + x) * 2654435761u) ^ seed;
}

static void open_vk(struct vkc *c)
{
  char why[256];
  if (vkc_open(c, NULL, why, sizeof why) < 0) {
    fprintf(stderr, "vulkan: %s\n", why);
    exit(1);
  }
}

/* Writes seed's pattern (W×H texels, row_length texels a row) into a staging buffer. */
static void pattern(uint32_t *p, uint32_t row_length, uint32_t seed)
{
  for (uint32_t y = 0; y < H; y++)
    for (uint32_t x = 0; x < W; x++)
      p[y * row_length + x] = texel(x, y, seed);
}

static int pattern_ok(const uint32_t *p, uint32_t row_length, uint32_t seed)
{
  for (uint32_t y = 0; y < H; y++)
    for (uint32_t x = 0; x < W; x++)
      if (p[y * row_length + x] != texel(x, y, seed)) {
        fprintf(stderr, "texel (%u,%u) = 0x%08x, want 0x%08x\n", x, y, p[y * row_length + x],
                texel(x, y, seed));
        return 0;
      }
  return 1;
}

/* The registrar: a buffer and an optimal image, exportable, filled through staging
 * copies (device-local memory need not be host-visible), registered, then gone. */
static void registrar(void)
{
  struct vkc c;
  struct vkc_buffer staging;
  gpushm_vk_buffer_t vb;
  gpushm_vk_image_t vi;
  gpushm_image_desc_t d;
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b, *img;
  gpushm_t *conn;
  VkCommandBuffer cb;
  VkBufferCopy whole = { 0, 0, W * H * 4 };

  open_vk(&c);
  CHECK_OK(gpushm_connect(socket_path, "vk-registrar", &conn));
  CHECK(vkc_host_buffer(&c, W * H * 4, &staging) == 0);
  gpushm_create_opts_init(&opts);
  opts.mode = 0666; /* read-write for a reader of lavapipe's memfds (kept-read-only.h) */
  if (gpushm_vk_create_buffer(&c.gpushm, conn, "vk-buffer", W * H * 4,
                              VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                              &opts, &vb, &b) < 0) {
    fprintf(stderr, "gpushm_vk_create_buffer: %s\n", c.gpushm.error);
    exit(1);
  }
  gpushm_image_desc_init(&d);
  d.width = W;
  d.height = H;
  d.tiling = GPUSHM_TILING_OPTIMAL;
  d.usage = GPUSHM_IMAGE_USAGE_SAMPLED | GPUSHM_IMAGE_USAGE_STORAGE |
            GPUSHM_IMAGE_USAGE_TRANSFER_SRC | GPUSHM_IMAGE_USAGE_TRANSFER_DST;
  if (gpushm_vk_create_image(&c.gpushm, conn, "vk-image", &d, &opts, &vi, &img) < 0) {
    fprintf(stderr, "gpushm_vk_create_image: %s\n", c.gpushm.error);
    exit(1);
  }
  CHECK(gpushm_buffer_backend(b) == GPUSHM_BACKEND_EXTERNAL &&
        gpushm_buffer_kind(img) == GPUSHM_KIND_IMAGE);
  pattern(staging.map, W, 0xb0ff0000u);
  cb = vkc_begin(&c);
  vkCmdCopyBuffer(cb, staging.buffer, vb.buffer, 1, &whole);
  CHECK(vkc_submit(&c, cb) == 0);
  pattern(staging.map, W, 0x1a6e0000u);
  cb = vkc_begin(&c);
  vkc_copy_buffer_to_image(cb, staging.buffer, 0, vi.image, VK_IMAGE_LAYOUT_UNDEFINED,
                           vi.extent, 1, 1);
  CHECK(vkc_submit(&c, cb) == 0);
  vkc_free_buffer(&c, &staging);
  gpushm_vk_destroy_buffer(&c.gpushm, &vb);
  gpushm_vk_destroy_image(&c.gpushm, &vi);
  vkc_close(&c);
  /* the registrations outlive this process: gpushmd keeps the memory's fd */
  gpushm_disconnect(conn);
}

/* The consumer of what the registrar left. */
static void consumer(void)
{
  struct vkc c;
  struct vkc_buffer rb;
  gpushm_vk_buffer_t vb;
  gpushm_vk_image_t vi;
  gpushm_buffer_t *b, *img;
  gpushm_t *conn;
  VkCommandBuffer cb;
  VkBufferCopy whole = { 0, 0, W * H * 4 };

  open_vk(&c);
  CHECK_OK(gpushm_connect(socket_path, "vk-consumer", &conn));
  CHECK(vkc_host_buffer(&c, W * H * 4, &rb) == 0);
  b = open_unmapped(conn, "vk-buffer", GPUSHM_OPEN_READONLY);
  /* write usage on a read-only open: refused before anything is imported */
  CHECK_ERR(gpushm_vk_import_buffer(&c.gpushm, b, VK_BUFFER_USAGE_TRANSFER_DST_BIT, &vb),
            GPUSHM_E_PERM);
  if (kept_read_only(b)) {
    CHECK_ERR(gpushm_vk_import_buffer(&c.gpushm, b, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, &vb),
              GPUSHM_E_UNSUPPORTED);
    CHECK(strstr(c.gpushm.error, "open it read-write"));
    CHECK_OK(gpushm_buffer_close(b));
    b = open_unmapped(conn, "vk-buffer", 0);
  }
  if (gpushm_vk_import_buffer(&c.gpushm, b, VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                              VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, &vb) < 0) {
    fprintf(stderr, "import buffer: %s\n", c.gpushm.error);
    exit(1);
  }
  cb = vkc_begin(&c);
  vkCmdCopyBuffer(cb, vb.buffer, rb.buffer, 1, &whole);
  CHECK(vkc_submit(&c, cb) == 0);
  CHECK(pattern_ok(rb.map, W, 0xb0ff0000u));
  /* the same by a compute shader, which a wrong pattern fails */
  CHECK(vkv_words(&c, vb.buffer, 0, W * H * 4, W * H, 0xb0ff0000u, 0, 0) == 0);
  CHECK(vkv_words(&c, vb.buffer, 0, W * H * 4, W * H, 0xb0ff0001u, 0, 0) == W * H);
  gpushm_vk_destroy_buffer(&c.gpushm, &vb);

  img = open_unmapped(conn, "vk-image", GPUSHM_OPEN_READONLY);
  if (kept_read_only(img)) {
    CHECK_ERR(gpushm_vk_import_image(&c.gpushm, img, &vi), GPUSHM_E_UNSUPPORTED);
    CHECK_OK(gpushm_buffer_close(img));
    img = open_unmapped(conn, "vk-image", 0);
  }
  if (gpushm_vk_import_image(&c.gpushm, img, &vi) < 0) {
    fprintf(stderr, "import image: %s\n", c.gpushm.error);
    exit(1);
  }
  CHECK(vi.image && vi.old_layout == VK_IMAGE_LAYOUT_GENERAL && vi.extent.width == W);
  memset(rb.map, 0, W * H * 4);
  cb = vkc_begin(&c);
  vkc_copy_image_to_buffer(cb, vi.image, vi.old_layout, vi.extent, 1, 1, rb.buffer);
  CHECK(vkc_submit(&c, cb) == 0);
  CHECK(pattern_ok(rb.map, W, 0x1a6e0000u));
  CHECK(vkv_image(&c, vi.image, vi.format, W, H, 0x1a6e0000u) == 0);
  CHECK(vkv_image(&c, vi.image, vi.format, W, H, 0x1a6e0001u) == W * H);
  gpushm_vk_destroy_image(&c.gpushm, &vi);
  CHECK_OK(gpushm_buffer_close(img));
  CHECK_OK(gpushm_buffer_close(b));
  vkc_free_buffer(&c, &rb);
  vkc_close(&c);
  gpushm_disconnect(conn);
}

/* Host memory: the CPU and Vulkan see each other's writes, both ways. */
static void host_memory(void)
{
  struct vkc c;
  struct vkc_buffer rb;
  gpushm_vk_buffer_t vb;
  gpushm_vk_image_t vi;
  gpushm_image_desc_t d;
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b, *img;
  gpushm_t *conn;
  VkCommandBuffer cb;
  VkBufferCopy whole = { 0, 0, W * H * 4 };

  open_vk(&c);
  if (!c.has_host_import) {
    fprintf(stderr, "# this Vulkan device has no VK_EXT_external_memory_host: host memory "
            "part not run\n");
    vkc_close(&c);
    return;
  }
  CHECK_OK(gpushm_connect(socket_path, "vk-host", &conn));
  CHECK(vkc_host_buffer(&c, W * H * 4, &rb) == 0);
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_HOST;
  CHECK_OK(gpushm_buffer_create(conn, "host-words", W * H * 4, &opts, &b));
  pattern(gpushm_buffer_ptr(b), W, 0x40570000u);
  if (gpushm_vk_import_buffer(&c.gpushm, b, VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                              VK_BUFFER_USAGE_TRANSFER_DST_BIT, &vb) < 0) {
    fprintf(stderr, "import host buffer: %s\n", c.gpushm.error);
    exit(1);
  }
  cb = vkc_begin(&c);
  vkCmdCopyBuffer(cb, vb.buffer, rb.buffer, 1, &whole);
  vkCmdFillBuffer(cb, vb.buffer, 0, 256, 0x600df111u);
  CHECK(vkc_submit(&c, cb) == 0);
  CHECK(pattern_ok(rb.map, W, 0x40570000u));
  CHECK(((uint32_t *)gpushm_buffer_ptr(b))[0] == 0x600df111u &&
        ((uint32_t *)gpushm_buffer_ptr(b))[63] == 0x600df111u &&
        ((uint32_t *)gpushm_buffer_ptr(b))[64] == texel(64 % W, 64 / W, 0x40570000u));
  gpushm_vk_destroy_buffer(&c.gpushm, &vb);
  /* the header-only copy imports the same memory alike */
  CHECK(header_only_vk_import_buffer(&c.gpushm, b, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, &vb) == 0);
  CHECK(vb.size == W * H * 4);
  memset(rb.map, 0, W * H * 4);
  cb = vkc_begin(&c);
  vkCmdCopyBuffer(cb, vb.buffer, rb.buffer, 1, &whole);
  CHECK(vkc_submit(&c, cb) == 0);
  CHECK(((uint32_t *)rb.map)[0] == 0x600df111u && ((uint32_t *)rb.map)[W * H - 1] ==
        texel(W - 1, H - 1, 0x40570000u));
  header_only_vk_destroy_buffer(&c.gpushm, &vb);
  CHECK(!vb.buffer && !vb.memory);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_unlink(conn, "host-words"));

  /* a linear image gpushmd allocated: rows 256 bytes apart, 240 of them texels */
  gpushm_image_desc_init(&d);
  d.width = W;
  d.height = H;
  CHECK_OK(gpushm_image_create(conn, "linear", &d, &opts, &img));
  CHECK_OK(gpushm_buffer_image_desc(img, &d));
  CHECK(d.row_pitch == 256);
  pattern(gpushm_buffer_ptr(img), (uint32_t)(d.row_pitch / 4), 0x11ea0000u);
  if (gpushm_vk_import_image(&c.gpushm, img, &vi) < 0) {
    fprintf(stderr, "import linear image: %s\n", c.gpushm.error);
    exit(1);
  }
  CHECK(vi.buffer && vi.row_length == 64 && vi.row_length != W);
  /* its rows by a compute shader, a row_length apart */
  CHECK(vkv_words(&c, vi.buffer, 0, d.row_pitch * H, W * H, 0x11ea0000u, vi.row_length, W) == 0);
  CHECK(vkv_words(&c, vi.buffer, 0, d.row_pitch * H, W * H, 0x11ea0001u, vi.row_length, W) ==
        W * H);
  /* and copied into an image of this device, checked as one */
  CHECK(vkv_linear_as_image(&c, &vi, &d, 0x11ea0000u) == 0);
  CHECK(vkv_linear_as_image(&c, &vi, &d, 0x11ea0001u) == W * H);
  {
    VkBufferCopy rows = { 0, 0, d.row_pitch * H };
    struct vkc_buffer wide;
    CHECK(vkc_host_buffer(&c, d.row_pitch * H, &wide) == 0);
    cb = vkc_begin(&c);
    vkCmdCopyBuffer(cb, vi.buffer, wide.buffer, 1, &rows);
    CHECK(vkc_submit(&c, cb) == 0);
    CHECK(pattern_ok(wide.map, vi.row_length, 0x11ea0000u));
    vkc_free_buffer(&c, &wide);
  }
  if (vi.image) { /* this device lays out a LINEAR image with the same pitch */
    memset(rb.map, 0, W * H * 4);
    cb = vkc_begin(&c);
    vkc_copy_image_to_buffer(cb, vi.image, VK_IMAGE_LAYOUT_UNDEFINED, vi.extent, 1, 1,
                             rb.buffer);
    CHECK(vkc_submit(&c, cb) == 0);
    /* UNDEFINED may discard: a linear image's bytes stay on the drivers measured */
    fprintf(stderr, "# linear image bound directly: %s\n",
            pattern_ok(rb.map, W, 0x11ea0000u) ? "texels read back" : "texels not kept");
  } else {
    fprintf(stderr, "# linear image: row pitch differs here, read through its rows\n");
  }
  gpushm_vk_destroy_image(&c.gpushm, &vi);
  CHECK_OK(gpushm_buffer_close(img));
  CHECK_OK(gpushm_unlink(conn, "linear"));
  vkc_free_buffer(&c, &rb);
  vkc_close(&c);
  gpushm_disconnect(conn);
}

/* Memory that says it is another device's (and another driver's): refused by name. */
static void mismatch(void)
{
  gpushm_external_memory_t m;
  gpushm_vk_buffer_t vb;
  gpushm_buffer_t *reg, *b;
  gpushm_t *conn;
  struct vkc c;
  int fd = memfd_create("elsewhere", MFD_CLOEXEC | MFD_ALLOW_SEALING);

  CHECK(fd >= 0 && ftruncate(fd, 1 << 16) == 0);
  CHECK_OK(gpushm_connect(socket_path, "vk-mismatch", &conn));
  gpushm_external_memory_init(&m);
  m.fd = fd;
  m.allocation_size = 1 << 16;
  memset(m.device_uuid, 0x77, 16);
  memset(m.driver_uuid, 0x88, 16);
  snprintf(m.driver_info, sizeof m.driver_info, "some other driver");
  CHECK_OK(gpushm_register_memory(conn, "elsewhere", &m, NULL, &reg));
  close(fd);
  open_vk(&c);
  b = open_unmapped(conn, "elsewhere", 0);
  CHECK_ERR(gpushm_vk_import_buffer(&c.gpushm, b, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, &vb),
            GPUSHM_E_UNSUPPORTED);
  fprintf(stderr, "# %s\n", c.gpushm.error);
  CHECK(strstr(c.gpushm.error, "77777777-7777") && strstr(c.gpushm.error, c.props.deviceName));
  {
    /* the header-only copy refuses it in the same words (one matcher: libgpushm's) */
    char library_error[sizeof c.gpushm.error];
    snprintf(library_error, sizeof library_error, "%s", c.gpushm.error);
    c.gpushm.error[0] = 0;
    CHECK_ERR(header_only_vk_import_buffer(&c.gpushm, b, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, &vb),
              GPUSHM_E_UNSUPPORTED);
    CHECK(strcmp(c.gpushm.error, library_error) == 0);
  }
  for (uint32_t usage = 0; usage < 64; usage++)
    CHECK(gpushm_vk_image_usage(usage) == header_only_vk_image_usage(usage));
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_buffer_close(reg));
  CHECK_OK(gpushm_unlink(conn, "elsewhere"));
  vkc_close(&c);
  gpushm_disconnect(conn);
}

/* A ring consumer's release mirror (gpushm-vulkan.h; on the GPU host behind a real ring
 * in test-cuda-vulkan-ring): what the done semaphore reaches lands in the done
 * timeline's fence, a value gpushmd raised it to is never lowered, and a stop takes the
 * last value.  Its thread, found by its name, sleeps while nothing is released: under
 * a tenth of 300 ms on a CPU (a spinning wait would take the lot). */
static void mirror(void)
{
  gpushm_t *conn;
  VkSemaphoreTypeCreateInfo type = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                     .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE };
  VkSemaphoreCreateInfo sci = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &type };
  VkSemaphoreSignalInfo sig = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO };
  gpushm_timeline_t *tl;
  VkSemaphore sem;
  struct vkc c;
  uint64_t *fence;
  void *m, *page;
  size_t at;
  double idle_cpu;
  char why[256];

  CHECK_OK(gpushm_connect(socket_path, "vk-mirror", &conn));
  CHECK(vkc_open(&c, NULL, why, sizeof why) == 0);
  CHECK(c.has_timeline); /* a Vulkan 1.2 feature every device has */
  CHECK_OK(gpushm_timeline_create(conn, "mirrored", NULL, &tl));
  CHECK_OK(gpushm_timeline_fence_page(tl, &page, &at));
  fence = (uint64_t *)((char *)page + at);
  CHECK(vkCreateSemaphore(c.device, &sci, NULL, &sem) == VK_SUCCESS);
  sig.semaphore = sem;
  CHECK(header_only_vk_mirror_start(&c.gpushm, tl, sem, &m) == 0);
  usleep(10000); /* its name is its first act */
  idle_cpu = test_thread_cpu_ms(GPUSHM_VK_MIRROR_THREAD_NAME);
  usleep(300000);
  idle_cpu = test_thread_cpu_ms(GPUSHM_VK_MIRROR_THREAD_NAME) - idle_cpu;
  CHECK(idle_cpu < 30);
  sig.value = 5;
  CHECK(vkSignalSemaphore(c.device, &sig) == VK_SUCCESS);
  CHECK_OK(gpushm_timeline_wait(tl, 5, 5000));
  __atomic_store_n(fence, 100, __ATOMIC_RELEASE); /* as gpushmd raises it at a detach */
  sig.value = 7;
  CHECK(vkSignalSemaphore(c.device, &sig) == VK_SUCCESS);
  usleep(50000);
  CHECK(__atomic_load_n(fence, __ATOMIC_ACQUIRE) == 100);
  sig.value = 300;
  CHECK(vkSignalSemaphore(c.device, &sig) == VK_SUCCESS);
  header_only_vk_mirror_stop(m);
  CHECK(__atomic_load_n(fence, __ATOMIC_ACQUIRE) == 300);
  vkDestroySemaphore(c.device, sem, NULL);
  CHECK_OK(gpushm_timeline_close_unlink(tl));
  vkc_close(&c);
  gpushm_disconnect(conn);
}

static int run(void (*fn)(void), bool as_nobody)
{
  pid_t pid = as_nobody && geteuid() == 0 ? fork_as(65534, 65534) : fork();
  int status;

  CHECK(pid >= 0);
  if (pid == 0) {
    fn();
    _exit(0);
  }
  CHECK(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void probe(void)
{
  struct vkc c;
  char why[256];
  if (vkc_open(&c, NULL, why, sizeof why) < 0) {
    fprintf(stderr, "SKIP: %s\n", why);
    _exit(TEST_SKIP);
  }
  fprintf(stderr, "# Vulkan device: %s (API %u.%u)\n", c.props.deviceName,
          VK_API_VERSION_MAJOR(c.props.apiVersion), VK_API_VERSION_MINOR(c.props.apiVersion));
  vkc_close(&c);
}

int main(void)
{
  struct test_daemon d = { 0 };
  int r;

  /* Without a Vulkan device (no driver, no lavapipe) there is nothing to import into. */
  if ((r = run(probe, false)) != 0)
    return r;
  daemon_start(&d, NULL);
  socket_path = d.socket;
  CHECK(run(registrar, false) == 0);
  CHECK(run(consumer, true) == 0);
  test_log("Vulkan: a buffer and an optimal image registered by one process, imported by "
           "another%s after it exited", geteuid() == 0 ? " (uid 65534)" : "");
  CHECK(run(host_memory, false) == 0);
  test_log("Vulkan: host memory both ways; a linear image's rows");
  CHECK(run(mismatch, false) == 0);
  CHECK(run(mirror, false) == 0);
  test_log("Vulkan: a ring consumer's release mirror writes what its semaphore reached into "
           "the fence, never lowering it, the last value at its stop; idle, its thread "
           "sleeps");
  test_log("Vulkan: memory of another device refused, naming both; the header-only build "
           "imports and refuses as libgpushm-vulkan does");
  daemon_stop(&d);
  return 0;
}

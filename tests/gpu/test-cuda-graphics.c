/* SPDX-License-Identifier: MIT */
/* CUDA and graphics processes sharing through gpushmd, on a real GPU: every path of
 * docs/graphics.md, producer and consumer in separate processes of separate uids
 * (consumers run as 65534), the data checked on the consuming side by a kernel or a
 * shader (and each check shown to fail on a wrong pattern):
 *   CUDA buffer (cuda-fd)        -> Vulkan buffer   (compute shader)
 *   CUDA buffer (cuda-fd)        -> GL buffer       (GL compute shader)
 *   Vulkan optimal image         -> CUDA array      (kernel through a surface object)
 *   CUDA linear image (cuda-fd)  -> Vulkan image    (rows, then an image, by shaders)
 *   registered Vulkan memory     -> CUDA pointer    (kernel)
 * Skips (77) without a GPU; with one, a missing Vulkan or GL driver fails. */
#define _GNU_SOURCE
#include "config.h"
#include "cuda-vk-roles.h"
#include "egl-context.h"
#include "gl-verify.h"
#include "vk-verify.h"

#include <string.h>
#include <unistd.h>

#define BUFFER_BYTES (4u << 20)
/* not a multiple of 64 texels: the linear image's rows are longer than its texels */
#define W 200
#define H 120

static struct test_daemon d;
static char self[4096];

/* ---- CUDA roles ------------------------------------------------------------------- */

static void cuda_produce_buffer(const char *name, uint32_t seed)
{
  gpushm_t *conn = roles_connect("cuda-producer");
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;
  unsigned long long n = BUFFER_BYTES / 4, delay = 0;
  CUdeviceptr p;
  void *args[] = { &p, &n, &seed, &delay };

  cuda_test_setup(0);
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FD;
  opts.mode = 0644;
  CHECK_OK(gpushm_buffer_create(conn, name, BUFFER_BYTES, &opts, &b));
  p = cuda_test_dptr(b);
  CU_CHECK(CU_CALL(&drv, cuLaunchKernel, roles_kernel("slow_fill"), 64, 1, 1, 256, 1, 1, 0, NULL,
                   args, NULL));
  CU_CHECK(CU_CALL(&drv, cuCtxSynchronize));
  CHECK_OK(gpushm_buffer_close(b)); /* persistent: it stays for the consumer */
  gpushm_disconnect(conn);
}

static void cuda_produce_linear(const char *name, uint32_t seed)
{
  gpushm_t *conn = roles_connect("cuda-image-producer");
  gpushm_create_opts_t opts;
  gpushm_image_desc_t desc;
  gpushm_buffer_t *img;
  unsigned width = W, height = H;
  unsigned long long pitch_words;
  CUdeviceptr p;
  void *args[] = { &p, &width, &height, &pitch_words, &seed };

  cuda_test_setup(0);
  gpushm_image_desc_init(&desc);
  desc.width = W;
  desc.height = H;
  desc.usage |= GPUSHM_IMAGE_USAGE_STORAGE;
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FD;
  opts.mode = 0644;
  CHECK_OK(gpushm_image_create(conn, name, &desc, &opts, &img));
  CHECK_OK(gpushm_buffer_image_desc(img, &desc));
  pitch_words = desc.row_pitch / 4;
  p = cuda_test_dptr(img);
  CU_CHECK(CU_CALL(&drv, cuLaunchKernel, roles_kernel("fill_rows"), (W + 15) / 16, (H + 15) / 16, 1, 16, 16, 1, 0,
                   NULL, args, NULL));
  CU_CHECK(CU_CALL(&drv, cuCtxSynchronize));
  CHECK_OK(gpushm_buffer_close(img));
  gpushm_disconnect(conn);
}

static unsigned run_verify(CUdeviceptr p, uint32_t seed)
{
  unsigned long long n = BUFFER_BYTES / 4;
  unsigned *errors_host, zero = 0;
  CUdeviceptr errors;
  void *args[] = { &p, &n, &seed, &errors };
  unsigned got;

  (void)errors_host;
  CU_CHECK(CU_CALL(&drv, cuMemAlloc, &errors, 4));
  CU_CHECK(CU_CALL(&drv, cuMemcpyHtoD, errors, &zero, 4));
  CU_CHECK(CU_CALL(&drv, cuLaunchKernel, roles_kernel("verify"), 64, 1, 1, 256, 1, 1, 0, NULL, args,
                   NULL));
  CU_CHECK(CU_CALL(&drv, cuMemcpyDtoH, &got, errors, 4));
  CU_CHECK(CU_CALL(&drv, cuMemFree, errors));
  return got;
}

/* Registered Vulkan memory, mapped into CUDA: a kernel finds the pattern. */
static void cuda_check_buffer(const char *name, uint32_t seed)
{
  gpushm_t *conn = roles_connect("cuda-consumer");
  gpushm_buffer_t *b;

  cuda_test_setup(0);
  CHECK_OK(gpushm_buffer_open(conn, name, GPUSHM_OPEN_READONLY, &b));
  CHECK(gpushm_buffer_backend(b) == GPUSHM_BACKEND_EXTERNAL);
  CHECK(run_verify(cuda_test_dptr(b), seed) == 0);
  CHECK(run_verify(cuda_test_dptr(b), seed + 1) == BUFFER_BYTES / 4); /* the check can fail */
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
}

static unsigned run_verify_surface(CUarray array, uint32_t seed)
{
  CUDA_RESOURCE_DESC res = { .resType = CU_RESOURCE_TYPE_ARRAY };
  unsigned width = W, height = H, zero = 0, got;
  CUsurfObject surface;
  CUdeviceptr errors;
  void *args[] = { &surface, &width, &height, &seed, &errors };

  res.res.array.hArray = array;
  CU_CHECK(CU_CALL(&drv, cuSurfObjectCreate, &surface, &res));
  CU_CHECK(CU_CALL(&drv, cuMemAlloc, &errors, 4));
  CU_CHECK(CU_CALL(&drv, cuMemcpyHtoD, errors, &zero, 4));
  CU_CHECK(CU_CALL(&drv, cuLaunchKernel, roles_kernel("verify_surface"), (W + 15) / 16, (H + 15) / 16, 1, 16, 16, 1,
                   0, NULL, args, NULL));
  CU_CHECK(CU_CALL(&drv, cuMemcpyDtoH, &got, errors, 4));
  CU_CHECK(CU_CALL(&drv, cuMemFree, errors));
  CU_CHECK(CU_CALL(&drv, cuSurfObjectDestroy, surface));
  return got;
}

/* A Vulkan optimal image as a CUDA array: a kernel reads every texel. */
static void cuda_check_image(const char *name, uint32_t seed)
{
  gpushm_t *conn = roles_connect("cuda-image-consumer");
  gpushm_buffer_t *img;
  void *array;

  cuda_test_setup(0);
  CHECK_OK(gpushm_buffer_open(conn, name, GPUSHM_OPEN_READONLY, &img));
  CHECK(gpushm_buffer_kind(img) == GPUSHM_KIND_IMAGE);
  CHECK_OK(gpushm_image_cuda_array(img, 0, &array));
  CHECK(run_verify_surface((CUarray)array, seed) == 0);
  CHECK(run_verify_surface((CUarray)array, seed ^ 1) == W * H);
  CHECK_OK(gpushm_buffer_close(img));
  gpushm_disconnect(conn);
}

/* ---- Vulkan roles ----------------------------------------------------------------- */

static void fill_pattern(uint32_t *p, uint32_t words, uint32_t seed)
{
  for (uint32_t i = 0; i < words; i++)
    p[i] = (i * 2654435761u) ^ seed;
}

static void vk_produce_buffer(const char *name, uint32_t seed)
{
  gpushm_t *conn = roles_connect("vk-producer");
  gpushm_create_opts_t opts;
  struct vkc_buffer staging;
  gpushm_vk_buffer_t vb;
  gpushm_buffer_t *b;
  struct vkc c;
  VkCommandBuffer cb;
  VkBufferCopy whole = { 0, 0, BUFFER_BYTES };

  roles_open_vk(&c, false);
  CHECK(vkc_host_buffer(&c, BUFFER_BYTES, &staging) == 0);
  gpushm_create_opts_init(&opts);
  opts.mode = 0644;
  /* strict mode: 0644 would promise read-only to others, who get the OPAQUE_FD itself
   * (registered NVIDIA memory cannot be narrowed, as a memfd is) */
  opts.flags = GPUSHM_CREATE_STRICT_MODE;
  CHECK(gpushm_vk_create_buffer(&c.gpushm, conn, name, BUFFER_BYTES,
                                VK_BUFFER_USAGE_TRANSFER_DST_BIT, &opts, &vb, &b) ==
        GPUSHM_E_INVAL);
  CHECK(strstr(c.gpushm.error, "registered NVIDIA memory"));
  opts.flags = 0;
  if (gpushm_vk_create_buffer(&c.gpushm, conn, name, BUFFER_BYTES,
                              VK_BUFFER_USAGE_TRANSFER_DST_BIT, &opts, &vb, &b) < 0) {
    fprintf(stderr, "gpushm_vk_create_buffer: %s\n", c.gpushm.error);
    exit(1);
  }
  fill_pattern(staging.map, BUFFER_BYTES / 4, seed);
  cb = vkc_begin(&c);
  vkCmdCopyBuffer(cb, staging.buffer, vb.buffer, 1, &whole);
  CHECK(vkc_submit(&c, cb) == 0);
  vkc_free_buffer(&c, &staging);
  gpushm_vk_destroy_buffer(&c.gpushm, &vb);
  vkc_close(&c);
  gpushm_disconnect(conn);
}

static void vk_produce_image(const char *name, uint32_t seed)
{
  gpushm_t *conn = roles_connect("vk-image-producer");
  gpushm_create_opts_t opts;
  gpushm_image_desc_t desc;
  struct vkc_buffer staging;
  gpushm_vk_image_t vi;
  gpushm_buffer_t *img;
  struct vkc c;
  VkCommandBuffer cb;

  roles_open_vk(&c, false);
  CHECK(vkc_host_buffer(&c, W * H * 4, &staging) == 0);
  gpushm_image_desc_init(&desc);
  desc.width = W;
  desc.height = H;
  desc.tiling = GPUSHM_TILING_OPTIMAL;
  desc.usage |= GPUSHM_IMAGE_USAGE_STORAGE;
  gpushm_create_opts_init(&opts);
  opts.mode = 0644;
  if (gpushm_vk_create_image(&c.gpushm, conn, name, &desc, &opts, &vi, &img) < 0) {
    fprintf(stderr, "gpushm_vk_create_image: %s\n", c.gpushm.error);
    exit(1);
  }
  fill_pattern(staging.map, W * H, seed);
  cb = vkc_begin(&c);
  vkc_copy_buffer_to_image(cb, staging.buffer, 0, vi.image, VK_IMAGE_LAYOUT_UNDEFINED, vi.extent,
                           1, 1);
  CHECK(vkc_submit(&c, cb) == 0);
  vkc_free_buffer(&c, &staging);
  gpushm_vk_destroy_image(&c.gpushm, &vi);
  vkc_close(&c);
  gpushm_disconnect(conn);
}

/* A CUDA buffer imported into Vulkan: a compute shader finds the pattern. */
static void vk_check_buffer(const char *name, uint32_t seed)
{
  gpushm_t *conn = roles_connect("vk-consumer");
  gpushm_vk_buffer_t vb;
  gpushm_buffer_t *b;
  struct vkc c;

  roles_open_vk(&c, false);
  b = open_unmapped(conn, name, GPUSHM_OPEN_READONLY);
  if (gpushm_vk_import_buffer(&c.gpushm, b, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, &vb) < 0) {
    fprintf(stderr, "import: %s\n", c.gpushm.error);
    exit(1);
  }
  CHECK(vkv_words(&c, vb.buffer, 0, BUFFER_BYTES, BUFFER_BYTES / 4, seed, 0, 0) == 0);
  CHECK(vkv_words(&c, vb.buffer, 0, BUFFER_BYTES, BUFFER_BYTES / 4, seed + 1, 0, 0) ==
        BUFFER_BYTES / 4);
  gpushm_vk_destroy_buffer(&c.gpushm, &vb);
  CHECK_OK(gpushm_buffer_close(b));
  vkc_close(&c);
  gpushm_disconnect(conn);
}

/* A CUDA linear image in Vulkan: its rows checked by a shader, then copied into an image
 * of this device (optimal tiling) and checked as one. */
static void vk_check_linear(const char *name, uint32_t seed)
{
  gpushm_t *conn = roles_connect("vk-image-consumer");
  gpushm_image_desc_t desc;
  gpushm_vk_image_t vi;
  gpushm_buffer_t *img;
  struct vkc c;

  roles_open_vk(&c, false);
  img = open_unmapped(conn, name, GPUSHM_OPEN_READONLY);
  CHECK_OK(gpushm_buffer_image_desc(img, &desc));
  if (gpushm_vk_import_image(&c.gpushm, img, &vi) < 0) {
    fprintf(stderr, "import: %s\n", c.gpushm.error);
    exit(1);
  }
  CHECK(vi.buffer && vi.row_length * 4 == desc.row_pitch && vi.row_length != W);
  CHECK(vkv_words(&c, vi.buffer, 0, desc.row_pitch * H, W * H, seed, vi.row_length, W) == 0);
  CHECK(vkv_words(&c, vi.buffer, 0, desc.row_pitch * H, W * H, seed + 1, vi.row_length, W) ==
        W * H);
  CHECK(vkv_linear_as_image(&c, &vi, &desc, seed) == 0);
  CHECK(vkv_linear_as_image(&c, &vi, &desc, seed + 1) == W * H);
  gpushm_vk_destroy_image(&c.gpushm, &vi);
  CHECK_OK(gpushm_buffer_close(img));
  vkc_close(&c);
  gpushm_disconnect(conn);
}

/* ---- GL role ---------------------------------------------------------------------- */

/* A CUDA buffer imported into GL: a GL compute shader finds the pattern. */
static void gl_check_buffer(const char *name, uint32_t seed)
{
  gpushm_t *conn = roles_connect("gl-consumer");
  GLuint buffer, memory;
  gpushm_buffer_t *b;
  struct eglc e;
  gpushm_gl_t gl;
  char why[256] = "";

  if (eglc_open(&e, why, sizeof why) < 0 || gpushm_gl_init(&gl, eglc_proc) < 0) {
    fprintf(stderr, "GL on a GPU host: %s %s\n", why, gl.error);
    exit(1);
  }
  b = open_unmapped(conn, name, GPUSHM_OPEN_READONLY);
  if (gpushm_gl_import_buffer(&gl, b, 0, &buffer, &memory) < 0) {
    fprintf(stderr, "import: %s\n", gl.error);
    exit(1);
  }
  CHECK(glv_words(&gl, buffer, BUFFER_BYTES / 4, seed) == 0);
  CHECK(glv_words(&gl, buffer, BUFFER_BYTES / 4, seed + 1) == BUFFER_BYTES / 4);
  gl.DeleteBuffers(1, &buffer);
  gl.DeleteMemoryObjectsEXT(1, &memory);
  CHECK_OK(gpushm_buffer_close(b));
  eglc_close(&e);
  gpushm_disconnect(conn);
}

/* ---- the parent --------------------------------------------------------------------- */

static const struct {
  const char *name;
  void (*fn)(const char *, uint32_t);
} roles[] = {
  { "cuda-produce-buffer", cuda_produce_buffer }, { "cuda-produce-linear", cuda_produce_linear },
  { "cuda-check-buffer", cuda_check_buffer },     { "cuda-check-image", cuda_check_image },
  { "vk-produce-buffer", vk_produce_buffer },     { "vk-produce-image", vk_produce_image },
  { "vk-check-buffer", vk_check_buffer },         { "vk-check-linear", vk_check_linear },
  { "gl-check-buffer", gl_check_buffer },
};

/* Runs a role in a fresh process (CUDA and Vulkan each initialise there), as uid 65534
 * for consumers; its exit status. */
static int run_role(const char *role, const char *name, uint32_t seed, bool as_nobody)
{
  char seed_text[16];
  char *argv[] = { self, (char *)role, (char *)name, seed_text, NULL };

  snprintf(seed_text, sizeof seed_text, "%u", seed);
  return roles_finish(roles_start(self, d.socket, argv, as_nobody, NULL), -1);
}

static void path(const char *producer, const char *consumer, const char *name, uint32_t seed,
                 const char *what)
{
  bool nobody = geteuid() == 0;
  CHECK(run_role(producer, name, seed, false) == 0);
  CHECK(run_role(consumer, name, seed, nobody) == 0);
  test_log("%s%s", what, nobody ? " (consumer uid 65534)" : "");
}

int main(int argc, char **argv)
{
  if (argc == 4) {
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
      if (strcmp(argv[1], roles[i].name) == 0) {
        roles[i].fn(argv[2], (uint32_t)strtoul(argv[3], NULL, 0));
        return 0;
      }
    return 2;
  }
  snprintf(self, sizeof self, "%s", test_self_path());
  cuda_test_setup(1); /* 77 without a GPU */
  cuda_test_parent_outside_mps();
  daemon_start(&d, NULL);
  path("cuda-produce-buffer", "vk-check-buffer", "cuda-to-vk", 0x51a0, "CUDA buffer -> Vulkan "
       "buffer, checked by a compute shader");
  path("cuda-produce-buffer", "gl-check-buffer", "cuda-to-gl", 0x51a1, "CUDA buffer -> GL "
       "buffer, checked by a GL compute shader");
  path("vk-produce-image", "cuda-check-image", "vk-image-to-cuda", 0x51a2, "Vulkan optimal "
       "image -> CUDA array, checked by a kernel through a surface object");
  path("cuda-produce-linear", "vk-check-linear", "cuda-linear-to-vk", 0x51a3, "CUDA linear "
       "image -> Vulkan rows and image, checked by compute shaders");
  path("vk-produce-buffer", "cuda-check-buffer", "vk-memory-to-cuda", 0x51a4, "registered "
       "Vulkan memory -> CUDA pointer, checked by a kernel");
  daemon_stop(&d);
  return 0;
}

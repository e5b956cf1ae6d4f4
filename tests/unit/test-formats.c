/* SPDX-License-Identifier: MIT */
/* The one table of image formats (proto/formats.c), row by row: its values are the
 * public enum's (gpushm-graphics.h), its names round-trip, and what it says each
 * format is in Vulkan, OpenGL and CUDA is what those APIs' own headers say, where they
 * are installed (vulkan_core.h, glcorearb.h; CUDA through cuda/cuda_api.h, which
 * tests/unit/test-cuda-api checks against the toolkit's cuda.h). */
#include "config.h"
#include "harness.h"
#include "cuda_api.h"
#include "formats.h"
#include "gpushm-graphics.h"

#include <string.h>

#if __has_include(<vulkan/vulkan_core.h>)
#include <vulkan/vulkan_core.h>
#define HAVE_VK_HEADER 1
#define VK(x) x
#else
#define VK(x) 0
#endif
#if __has_include(<GL/glcorearb.h>)
#include <GL/glcorearb.h>
#define HAVE_GL_HEADER 1
#define GL(x) x
#else
#define GL(x) 0
#endif

/* Every gpushm format, as the APIs' headers name its counterpart (0: none there). */
static const struct {
  int format;
  const char *name;
  uint32_t texel_bytes, vk, gl, cuda, channels;
  int depth;
} expected[] = {
  { GPUSHM_FORMAT_R8_UNORM, "r8-unorm", 1, VK(VK_FORMAT_R8_UNORM), GL(GL_R8),
    CU_AD_FORMAT_UNSIGNED_INT8, 1, 0 },
  { GPUSHM_FORMAT_RG8_UNORM, "rg8-unorm", 2, VK(VK_FORMAT_R8G8_UNORM), GL(GL_RG8),
    CU_AD_FORMAT_UNSIGNED_INT8, 2, 0 },
  { GPUSHM_FORMAT_RGBA8_UNORM, "rgba8-unorm", 4, VK(VK_FORMAT_R8G8B8A8_UNORM), GL(GL_RGBA8),
    CU_AD_FORMAT_UNSIGNED_INT8, 4, 0 },
  { GPUSHM_FORMAT_RGBA8_SRGB, "rgba8-srgb", 4, VK(VK_FORMAT_R8G8B8A8_SRGB), GL(GL_SRGB8_ALPHA8),
    CU_AD_FORMAT_UNSIGNED_INT8, 4, 0 },
  { GPUSHM_FORMAT_BGRA8_UNORM, "bgra8-unorm", 4, VK(VK_FORMAT_B8G8R8A8_UNORM), 0,
    CU_AD_FORMAT_UNSIGNED_INT8, 4, 0 },
  { GPUSHM_FORMAT_R16_UNORM, "r16-unorm", 2, VK(VK_FORMAT_R16_UNORM), GL(GL_R16),
    CU_AD_FORMAT_UNSIGNED_INT16, 1, 0 },
  { GPUSHM_FORMAT_RGBA16_UNORM, "rgba16-unorm", 8, VK(VK_FORMAT_R16G16B16A16_UNORM),
    GL(GL_RGBA16), CU_AD_FORMAT_UNSIGNED_INT16, 4, 0 },
  { GPUSHM_FORMAT_R16_SFLOAT, "r16-sfloat", 2, VK(VK_FORMAT_R16_SFLOAT), GL(GL_R16F),
    CU_AD_FORMAT_HALF, 1, 0 },
  { GPUSHM_FORMAT_RG16_SFLOAT, "rg16-sfloat", 4, VK(VK_FORMAT_R16G16_SFLOAT), GL(GL_RG16F),
    CU_AD_FORMAT_HALF, 2, 0 },
  { GPUSHM_FORMAT_RGBA16_SFLOAT, "rgba16-sfloat", 8, VK(VK_FORMAT_R16G16B16A16_SFLOAT),
    GL(GL_RGBA16F), CU_AD_FORMAT_HALF, 4, 0 },
  { GPUSHM_FORMAT_R32_SFLOAT, "r32-sfloat", 4, VK(VK_FORMAT_R32_SFLOAT), GL(GL_R32F),
    CU_AD_FORMAT_FLOAT, 1, 0 },
  { GPUSHM_FORMAT_RG32_SFLOAT, "rg32-sfloat", 8, VK(VK_FORMAT_R32G32_SFLOAT), GL(GL_RG32F),
    CU_AD_FORMAT_FLOAT, 2, 0 },
  { GPUSHM_FORMAT_RGBA32_SFLOAT, "rgba32-sfloat", 16, VK(VK_FORMAT_R32G32B32A32_SFLOAT),
    GL(GL_RGBA32F), CU_AD_FORMAT_FLOAT, 4, 0 },
  { GPUSHM_FORMAT_R32_UINT, "r32-uint", 4, VK(VK_FORMAT_R32_UINT), GL(GL_R32UI),
    CU_AD_FORMAT_UNSIGNED_INT32, 1, 0 },
  { GPUSHM_FORMAT_RGBA32_UINT, "rgba32-uint", 16, VK(VK_FORMAT_R32G32B32A32_UINT),
    GL(GL_RGBA32UI), CU_AD_FORMAT_UNSIGNED_INT32, 4, 0 },
  /* packed 10-bit channels: no CUarray_format holds them */
  { GPUSHM_FORMAT_RGB10A2_UNORM, "rgb10a2-unorm", 4, VK(VK_FORMAT_A2B10G10R10_UNORM_PACK32),
    GL(GL_RGB10_A2), 0, 0, 0 },
  { GPUSHM_FORMAT_D32_SFLOAT, "d32-sfloat", 4, VK(VK_FORMAT_D32_SFLOAT),
    GL(GL_DEPTH_COMPONENT32F), 0, 0, 1 },
};
#define N_EXPECTED (sizeof expected / sizeof expected[0])

int main(void)
{
  unsigned rows = 0;

  CHECK(format_info(GPUSHM_FORMAT_UNDEFINED) == NULL);
  CHECK(format_from_name("no-such-format") == GPUSHM_FORMAT_UNDEFINED);
  CHECK(format_from_name(NULL) == GPUSHM_FORMAT_UNDEFINED);
  for (size_t i = 0; i < N_EXPECTED; i++) {
    const struct format_info *f = format_info((uint32_t)expected[i].format);

    CHECK(expected[i].format == (int)i + 1); /* the enum has no gaps */
    CHECK(f != NULL && strcmp(f->name, expected[i].name) == 0);
    CHECK(format_from_name(f->name) == (uint32_t)expected[i].format);
    CHECK(f->texel_bytes == expected[i].texel_bytes);
    CHECK(f->depth == expected[i].depth);
    CHECK(f->cuda_format == expected[i].cuda && f->cuda_channels == expected[i].channels);
#ifdef HAVE_VK_HEADER
    if (f->vk_format != expected[i].vk) {
      fprintf(stderr, "%s: VkFormat %u in the table, %u in vulkan_core.h\n", f->name,
              f->vk_format, expected[i].vk);
      return 1;
    }
#endif
#ifdef HAVE_GL_HEADER
    if (f->gl_format != expected[i].gl) {
      fprintf(stderr, "%s: GL format 0x%x in the table, 0x%x in glcorearb.h\n", f->name,
              f->gl_format, expected[i].gl);
      return 1;
    }
#endif
    rows++;
  }
  /* nothing in the table past the enum's last value */
  for (uint32_t v = N_EXPECTED + 1; v < 1024; v++)
    CHECK(format_info(v) == NULL);
  test_log("%u formats: names, texel sizes and CUDA array formats as declared; VkFormat %s; "
           "GL internal formats %s", rows,
#ifdef HAVE_VK_HEADER
           "as vulkan_core.h says",
#else
           "not compared (no vulkan_core.h here)",
#endif
#ifdef HAVE_GL_HEADER
           "as glcorearb.h says"
#else
           "not compared (no GL/glcorearb.h here)"
#endif
  );
  return 0;
}

/* SPDX-License-Identifier: MIT */
#include "formats.h"
#include "protocol.h"
#include "gpushm_limits.h"

#include <stdio.h>

#include <stddef.h>
#include <string.h>

/* Vulkan, GL and CUDA values as their headers define them (vulkan_core.h VkFormat,
 * glcorearb.h, cuda.h CUarray_format); tests/unit/test-formats checks them against
 * vulkan_core.h and glcorearb.h where they are installed, and against cuda/cuda_api.h
 * (which tests/unit/test-cuda-api checks against cuda.h). */
#define CU_U8 0x01u
#define CU_U16 0x02u
#define CU_U32 0x03u
#define CU_HALF 0x10u
#define CU_FLOAT 0x20u

static const struct format_info formats[] = {
  /* index = gpushm_format_t */
  [1] = { "r8-unorm", 1, 9, 0x8229, CU_U8, 1, 0 },
  [2] = { "rg8-unorm", 2, 16, 0x822B, CU_U8, 2, 0 },
  [3] = { "rgba8-unorm", 4, 37, 0x8058, CU_U8, 4, 0 },
  [4] = { "rgba8-srgb", 4, 43, 0x8C43, CU_U8, 4, 0 },
  /* GL has no BGRA internal format: a GL program samples RGBA8 with a swizzle */
  [5] = { "bgra8-unorm", 4, 44, 0, CU_U8, 4, 0 },
  [6] = { "r16-unorm", 2, 70, 0x822A, CU_U16, 1, 0 },
  [7] = { "rgba16-unorm", 8, 91, 0x805B, CU_U16, 4, 0 },
  [8] = { "r16-sfloat", 2, 76, 0x822D, CU_HALF, 1, 0 },
  [9] = { "rg16-sfloat", 4, 83, 0x822F, CU_HALF, 2, 0 },
  [10] = { "rgba16-sfloat", 8, 97, 0x881A, CU_HALF, 4, 0 },
  [11] = { "r32-sfloat", 4, 100, 0x822E, CU_FLOAT, 1, 0 },
  [12] = { "rg32-sfloat", 8, 103, 0x8230, CU_FLOAT, 2, 0 },
  [13] = { "rgba32-sfloat", 16, 109, 0x8814, CU_FLOAT, 4, 0 },
  [14] = { "r32-uint", 4, 98, 0x8236, CU_U32, 1, 0 },
  [15] = { "rgba32-uint", 16, 107, 0x8D70, CU_U32, 4, 0 },
  /* packed 10-bit channels: no CUarray_format holds them */
  [16] = { "rgb10a2-unorm", 4, 64, 0x8059, 0, 0, 0 },
  [17] = { "d32-sfloat", 4, 126, 0x8CAC, 0, 0, 1 },
};

const struct format_info *format_info(uint32_t format)
{
  return format < sizeof formats / sizeof formats[0] && formats[format].name ? &formats[format]
                                                                            : NULL;
}

uint32_t format_from_name(const char *name)
{
  for (uint32_t i = 0; name && i < sizeof formats / sizeof formats[0]; i++)
    if (formats[i].name && strcmp(formats[i].name, name) == 0)
      return i;
  return 0;
}

static uint32_t max_levels(uint32_t w, uint32_t h, uint32_t d)
{
  uint32_t m = w > h ? w : h, n = 1;
  if (d > m)
    m = d;
  while (m >>= 1)
    n++;
  return n;
}

int image_check(struct image_params *p, char *why, size_t len)
{
  const struct format_info *f = format_info(p->format);
  uint64_t tight;

  if (!f) {
    snprintf(why, len, "unknown image format %u", p->format);
    return PROTO_E_INVAL;
  }
  if (!p->width || !p->height || !p->depth || !p->mip_levels || !p->array_layers) {
    snprintf(why, len, "image extent %ux%ux%u, %u levels, %u layers: none may be 0",
             p->width, p->height, p->depth, p->mip_levels, p->array_layers);
    return PROTO_E_INVAL;
  }
  if (p->width > GPUSHM_LIMIT_IMAGE_DIM || p->height > GPUSHM_LIMIT_IMAGE_DIM ||
      p->depth > GPUSHM_LIMIT_IMAGE_DEPTH || p->array_layers > GPUSHM_LIMIT_IMAGE_LAYERS) {
    snprintf(why, len, "image %ux%ux%u with %u layers is over the limits (%u wide and high, "
             "%u deep, %u layers)", p->width, p->height, p->depth, p->array_layers,
             GPUSHM_LIMIT_IMAGE_DIM, GPUSHM_LIMIT_IMAGE_DEPTH, GPUSHM_LIMIT_IMAGE_LAYERS);
    return PROTO_E_LIMIT;
  }
  if (p->depth > 1 && p->array_layers > 1) {
    snprintf(why, len, "a 3D image (depth %u) has one layer, not %u", p->depth,
             p->array_layers);
    return PROTO_E_INVAL;
  }
  if (p->mip_levels > max_levels(p->width, p->height, p->depth)) {
    snprintf(why, len, "%u mip levels for %ux%ux%u: at most %u", p->mip_levels, p->width,
             p->height, p->depth, max_levels(p->width, p->height, p->depth));
    return PROTO_E_INVAL;
  }
  if (!p->usage || (p->usage & ~IMAGE_USAGE_ALL)) {
    snprintf(why, len, "image usage 0x%x: name at least one GPUSHM_IMAGE_USAGE_* and no "
             "other bits", p->usage);
    return PROTO_E_INVAL;
  }
  if (f->depth && (p->usage & IMAGE_USAGE_STORAGE)) {
    snprintf(why, len, "%s cannot be a storage image", f->name);
    return PROTO_E_INVAL;
  }
  if (p->tiling == IMAGE_TILING_OPTIMAL) {
    if (p->row_pitch) {
      snprintf(why, len, "an optimal-tiling image has no row pitch (%llu given)",
               (unsigned long long)p->row_pitch);
      return PROTO_E_INVAL;
    }
    return 0;
  }
  if (p->tiling != IMAGE_TILING_LINEAR) {
    snprintf(why, len, "unknown image tiling %u", p->tiling);
    return PROTO_E_INVAL;
  }
  /* What Vulkan guarantees of linear images, so every API can take one. */
  if (p->depth != 1 || p->mip_levels != 1 || p->array_layers != 1 || f->depth) {
    snprintf(why, len, "a linear image is 2D, one level, one layer, not a depth format "
             "(%ux%ux%u, %u levels, %u layers, %s): use optimal tiling", p->width, p->height,
             p->depth, p->mip_levels, p->array_layers, f->name);
    return PROTO_E_INVAL;
  }
  tight = (uint64_t)p->width * f->texel_bytes;
  if (!p->row_pitch)
    p->row_pitch = (tight + GPUSHM_IMAGE_ROW_ALIGN - 1) / GPUSHM_IMAGE_ROW_ALIGN *
                   GPUSHM_IMAGE_ROW_ALIGN;
  if (p->row_pitch < tight || p->row_pitch % f->texel_bytes) {
    snprintf(why, len, "row pitch %llu for %u texels of %u bytes: at least %llu, a multiple "
             "of %u", (unsigned long long)p->row_pitch, p->width, f->texel_bytes,
             (unsigned long long)tight, f->texel_bytes);
    return PROTO_E_INVAL;
  }
  if (p->row_pitch > GPUSHM_LIMIT_IMAGE_ROW_PITCH) {
    snprintf(why, len, "row pitch %llu is over the limit of %u bytes",
             (unsigned long long)p->row_pitch, GPUSHM_LIMIT_IMAGE_ROW_PITCH);
    return PROTO_E_LIMIT;
  }
  return 0;
}

uint64_t image_linear_bytes(const struct image_params *p)
{
  return p->tiling == IMAGE_TILING_LINEAR ? p->row_pitch * p->height : 0;
}

/* SPDX-License-Identifier: MIT */
/* The one table of image formats (formats.c): what each gpushm_format_t is called and
 * what it is in Vulkan, OpenGL and CUDA, by value, so that neither the daemon nor the
 * library needs those APIs' headers. */
#ifndef GPUSHM_FORMATS_H
#define GPUSHM_FORMATS_H

#include <stddef.h>
#include <stdint.h>

struct format_info {
  const char *name;        /* "rgba8-unorm" */
  uint32_t texel_bytes;
  uint32_t vk_format;      /* VkFormat */
  uint32_t gl_format;      /* GL sized internal format; 0: GL has none */
  uint32_t cuda_format;    /* CUarray_format; 0: a CUDA array cannot hold it */
  uint32_t cuda_channels;
  int depth;               /* a depth format: no linear images, no storage */
};

/* The format's row, or NULL for a value that names none. */
const struct format_info *format_info(uint32_t format);
/* The format named so, or 0 (GPUSHM_FORMAT_UNDEFINED). */
uint32_t format_from_name(const char *name);

/* An image's description as the wire carries it (ImageDesc), checked the same way by
 * the library (early, for a clear error) and by the daemon (which trusts no client). */
struct image_params {
  uint32_t format, width, height, depth, mip_levels, array_layers, tiling, usage;
  uint64_t row_pitch;
};
#define IMAGE_TILING_LINEAR 0u
#define IMAGE_TILING_OPTIMAL 1u
#define IMAGE_USAGE_ALL 0x1fu /* GPUSHM_IMAGE_USAGE_* */
#define IMAGE_USAGE_STORAGE 0x2u

/* 0, or GPUSHM_E_INVAL (GPUSHM_E_LIMIT past a GPUSHM_LIMIT_IMAGE_*) with why.  A
 * linear image's row_pitch 0 is set to the default (width × texel bytes rounded up to
 * GPUSHM_IMAGE_ROW_ALIGN). */
int image_check(struct image_params *p, char *why, size_t len);
/* The bytes of a linear image (row_pitch × height); 0 for an optimal one. */
uint64_t image_linear_bytes(const struct image_params *p);

#endif

/* SPDX-License-Identifier: MIT */
/* The header-only build of gpushm-vulkan.h inside test-vulkan, whose other sources link
 * libgpushm-vulkan (GPUSHM_VK_SHARED, set for the whole program): here the functions are
 * this file's own static inline copies, which a program of 0.7 compiles. */
#undef GPUSHM_VK_SHARED
#include "header-only.h"

/* (defined only where the header compiles its functions) */
#ifndef GPUSHM_VK__STATIC
#error "gpushm-vulkan.h was not compiled header-only here"
#endif

int header_only_vk_import_buffer(gpushm_vk_t *vk, gpushm_buffer_t *buf,
                                 VkBufferUsageFlags usage, gpushm_vk_buffer_t *out)
{
  return gpushm_vk_import_buffer(vk, buf, usage, out);
}

void header_only_vk_destroy_buffer(gpushm_vk_t *vk, gpushm_vk_buffer_t *b)
{
  gpushm_vk_destroy_buffer(vk, b);
}

VkImageUsageFlags header_only_vk_image_usage(uint32_t usage)
{
  return gpushm_vk_image_usage(usage);
}

int header_only_vk_mirror_start(gpushm_vk_t *vk, gpushm_timeline_t *done, VkSemaphore semaphore,
                                void **mirror)
{
  return gpushm_vk__start_mirror(vk, done, semaphore, (struct gpushm_vk__mirror **)mirror);
}

void header_only_vk_mirror_stop(void *mirror)
{
  gpushm_vk__stop_mirror((struct gpushm_vk__mirror *)mirror);
}

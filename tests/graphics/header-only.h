/* SPDX-License-Identifier: MIT */
/* gpushm-vulkan.h compiled header-only (static inline, the program's own loader), as
 * 0.7's programs use it, called from test-vulkan beside libgpushm-vulkan's copy of the
 * same functions: both ways of building against the header must keep compiling, and
 * must do the same. */
#ifndef GPUSHM_TEST_HEADER_ONLY_H
#define GPUSHM_TEST_HEADER_ONLY_H

#include <gpushm-vulkan.h>

int header_only_vk_import_buffer(gpushm_vk_t *vk, gpushm_buffer_t *buf,
                                 VkBufferUsageFlags usage, gpushm_vk_buffer_t *out);
void header_only_vk_destroy_buffer(gpushm_vk_t *vk, gpushm_vk_buffer_t *b);
VkImageUsageFlags header_only_vk_image_usage(uint32_t usage);
/* A ring consumer's release mirror (gpushm-vulkan.h's own, not public): started on
 * semaphore for done's fence; stopped. */
int header_only_vk_mirror_start(gpushm_vk_t *vk, gpushm_timeline_t *done, VkSemaphore semaphore,
                                void **mirror);
void header_only_vk_mirror_stop(void *mirror);

#endif

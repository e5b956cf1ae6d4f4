/* SPDX-License-Identifier: MIT */
/* A headless Vulkan device for gpushm's graphics examples and tests: one queue, what
 * gpushm-vulkan.h needs enabled, and the few commands they all use (one-shot command
 * buffers, host-visible staging buffers, layout transitions, copies).  Not part of
 * gpushm's API: a program of your own has its device already. */
#ifndef GPUSHM_EXAMPLES_VK_CONTEXT_H
#define GPUSHM_EXAMPLES_VK_CONTEXT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

#include <gpushm-vulkan.h>

struct vkc {
  VkInstance instance;
  VkPhysicalDevice phys;
  VkPhysicalDeviceProperties props;
  VkDevice device;
  VkQueue queue;
  uint32_t queue_family;
  VkCommandPool pool;
  int has_host_import; /* VK_EXT_external_memory_host enabled */
  int has_timeline;     /* the timelineSemaphore feature enabled */
  int has_semaphore_fd; /* VK_KHR_external_semaphore_fd and timeline semaphores enabled */
  gpushm_vk_t gpushm;  /* for gpushm-vulkan.h */
};

struct vkc_buffer {
  VkBuffer buffer;
  VkDeviceMemory memory;
  void *map;
  VkDeviceSize size;
};

static inline int vkc_has_extension(VkPhysicalDevice phys, const char *name)
{
  uint32_t n = 0;
  VkExtensionProperties *e;
  int found = 0;

  vkEnumerateDeviceExtensionProperties(phys, NULL, &n, NULL);
  if (!(e = calloc(n ? n : 1, sizeof *e)))
    return 0;
  vkEnumerateDeviceExtensionProperties(phys, NULL, &n, e);
  for (uint32_t i = 0; i < n && !found; i++)
    found = strcmp(e[i].extensionName, name) == 0;
  free(e);
  return found;
}

/* Opens the device: the one whose deviceUUID is uuid (NULL: $GPUSHM_VK_DEVICE's index,
 * else the first that exports OPAQUE_FD memory).  0, or -1 with why. */
static inline int vkc_open(struct vkc *c, const uint8_t *uuid, char *why, size_t len)
{
  VkApplicationInfo app = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                            .pApplicationName = "gpushm", .applicationVersion = 1,
                            .apiVersion = VK_API_VERSION_1_2 };
  VkInstanceCreateInfo ici = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               .pApplicationInfo = &app };
  const char *exts[3] = { VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME };
  uint32_t n_exts = 1;
  VkPhysicalDeviceVulkan12Features v12 = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES };
  VkPhysicalDeviceFeatures2 f2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                   .pNext = &v12 };
  float priority = 1.0f;
  VkDeviceQueueCreateInfo qci = { .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                  .queueCount = 1, .pQueuePriorities = &priority };
  VkDeviceCreateInfo dci = { .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                             .queueCreateInfoCount = 1, .pQueueCreateInfos = &qci };
  VkCommandPoolCreateInfo pci = { .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                  .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT };
  VkPhysicalDevice *phys;
  uint32_t n = 0, nq = 0;
  const char *want = getenv("GPUSHM_VK_DEVICE");
  VkResult r;

  memset(c, 0, sizeof *c);
  if ((r = vkCreateInstance(&ici, NULL, &c->instance)) != VK_SUCCESS) {
    snprintf(why, len, "vkCreateInstance: VkResult %d (no Vulkan driver?)", (int)r);
    return -1;
  }
  vkEnumeratePhysicalDevices(c->instance, &n, NULL);
  if (!n || !(phys = calloc(n, sizeof *phys))) {
    snprintf(why, len, "no Vulkan device");
    return -1;
  }
  vkEnumeratePhysicalDevices(c->instance, &n, phys);
  for (uint32_t i = 0; i < n && !c->phys; i++) {
    VkPhysicalDeviceIDProperties id = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES };
    VkPhysicalDeviceProperties2 p2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &id };
    vkGetPhysicalDeviceProperties2(phys[i], &p2);
    if (uuid ? memcmp(id.deviceUUID, uuid, VK_UUID_SIZE) == 0
             : want ? (uint32_t)atoi(want) == i
                    : vkc_has_extension(phys[i], VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME))
      c->phys = phys[i];
  }
  free(phys);
  if (!c->phys) {
    snprintf(why, len, uuid ? "no Vulkan device with the memory's UUID"
                            : "no Vulkan device with VK_KHR_external_memory_fd");
    return -1;
  }
  vkGetPhysicalDeviceProperties(c->phys, &c->props);
  vkGetPhysicalDeviceQueueFamilyProperties(c->phys, &nq, NULL);
  {
    VkQueueFamilyProperties q[16];
    nq = nq > 16 ? 16 : nq;
    vkGetPhysicalDeviceQueueFamilyProperties(c->phys, &nq, q);
    /* $GPUSHM_VK_QUEUE=transfer: a queue of the copy engines alone (where its work is
     * copies and fence writes, it does not switch the GPU's graphics context) */
    const char *kind = getenv("GPUSHM_VK_QUEUE");
    VkQueueFlags want_flags = kind && strcmp(kind, "transfer") == 0
                                ? VK_QUEUE_TRANSFER_BIT : VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT;
    VkQueueFlags refuse = want_flags == VK_QUEUE_TRANSFER_BIT
                            ? VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT : 0;
    for (c->queue_family = 0; c->queue_family < nq; c->queue_family++)
      if ((q[c->queue_family].queueFlags & want_flags) &&
          !(q[c->queue_family].queueFlags & refuse))
        break;
    if (c->queue_family == nq) {
      snprintf(why, len, "no Vulkan queue family of the kind asked for");
      return -1;
    }
  }
  qci.queueFamilyIndex = c->queue_family;
  c->has_host_import = vkc_has_extension(c->phys, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
  if (c->has_host_import)
    exts[n_exts++] = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
  /* timelines' semaphore planes (docs/sync.md#semaphore-planes): where the device has
   * them (NVIDIA; not lavapipe, whose semaphores do not leave the process) */
  vkGetPhysicalDeviceFeatures2(c->phys, &f2);
  c->has_timeline = v12.timelineSemaphore;
  c->has_semaphore_fd = c->has_timeline &&
                        vkc_has_extension(c->phys, VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME);
  memset(&v12, 0, sizeof v12);
  v12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  if (c->has_timeline) {
    v12.timelineSemaphore = VK_TRUE;
    dci.pNext = &v12;
  }
  if (c->has_semaphore_fd)
    exts[n_exts++] = VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME;
  dci.enabledExtensionCount = n_exts;
  dci.ppEnabledExtensionNames = exts;
  if ((r = vkCreateDevice(c->phys, &dci, NULL, &c->device)) != VK_SUCCESS) {
    snprintf(why, len, "vkCreateDevice: VkResult %d", (int)r);
    return -1;
  }
  vkGetDeviceQueue(c->device, c->queue_family, 0, &c->queue);
  pci.queueFamilyIndex = c->queue_family;
  vkCreateCommandPool(c->device, &pci, NULL, &c->pool);
  c->gpushm.instance = c->instance;
  c->gpushm.physical_device = c->phys;
  c->gpushm.device = c->device;
  return 0;
}

static inline void vkc_close(struct vkc *c)
{
  if (c->device) {
    vkDeviceWaitIdle(c->device);
    vkDestroyCommandPool(c->device, c->pool, NULL);
    vkDestroyDevice(c->device, NULL);
  }
  if (c->instance)
    vkDestroyInstance(c->instance, NULL);
  memset(c, 0, sizeof *c);
}

static inline VkCommandBuffer vkc_begin(struct vkc *c)
{
  VkCommandBufferAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                     .commandPool = c->pool,
                                     .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                     .commandBufferCount = 1 };
  VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                  .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT };
  VkCommandBuffer cb;
  vkAllocateCommandBuffers(c->device, &ai, &cb);
  vkBeginCommandBuffer(cb, &bi);
  return cb;
}

/* Ends, submits and waits for cb: 0 or the VkResult. */
static inline int vkc_submit(struct vkc *c, VkCommandBuffer cb)
{
  VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1,
                      .pCommandBuffers = &cb };
  VkResult r;
  vkEndCommandBuffer(cb);
  r = vkQueueSubmit(c->queue, 1, &si, VK_NULL_HANDLE);
  if (r == VK_SUCCESS)
    r = vkQueueWaitIdle(c->queue);
  vkFreeCommandBuffers(c->device, c->pool, 1, &cb);
  return (int)r;
}

/* A host-visible, coherent buffer of size bytes, mapped. */
static inline int vkc_host_buffer(struct vkc *c, VkDeviceSize size, struct vkc_buffer *out)
{
  VkBufferCreateInfo bci = { .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
                             .usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT };
  VkPhysicalDeviceMemoryProperties mp;
  VkMemoryRequirements req;
  VkMemoryAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO };
  const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                     VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;

  memset(out, 0, sizeof *out);
  if (vkCreateBuffer(c->device, &bci, NULL, &out->buffer) != VK_SUCCESS)
    return -1;
  vkGetBufferMemoryRequirements(c->device, out->buffer, &req);
  vkGetPhysicalDeviceMemoryProperties(c->phys, &mp);
  ai.allocationSize = req.size;
  for (ai.memoryTypeIndex = 0; ai.memoryTypeIndex < mp.memoryTypeCount; ai.memoryTypeIndex++)
    if ((req.memoryTypeBits & (1u << ai.memoryTypeIndex)) &&
        (mp.memoryTypes[ai.memoryTypeIndex].propertyFlags & want) == want)
      break;
  if (ai.memoryTypeIndex == mp.memoryTypeCount ||
      vkAllocateMemory(c->device, &ai, NULL, &out->memory) != VK_SUCCESS ||
      vkBindBufferMemory(c->device, out->buffer, out->memory, 0) != VK_SUCCESS ||
      vkMapMemory(c->device, out->memory, 0, size, 0, &out->map) != VK_SUCCESS)
    return -1;
  out->size = size;
  return 0;
}

static inline void vkc_free_buffer(struct vkc *c, struct vkc_buffer *b)
{
  if (b->map)
    vkUnmapMemory(c->device, b->memory);
  vkDestroyBuffer(c->device, b->buffer, NULL);
  vkFreeMemory(c->device, b->memory, NULL);
  memset(b, 0, sizeof *b);
}

static inline void vkc_barrier_image(VkCommandBuffer cb, VkImage image, VkImageLayout from,
                              VkImageLayout to, uint32_t levels, uint32_t layers)
{
  VkImageMemoryBarrier b = { .sType = VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER };
  b.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT;
  b.dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT;
  b.oldLayout = from;
  b.newLayout = to;
  b.srcQueueFamilyIndex = b.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
  b.image = image;
  b.subresourceRange = (VkImageSubresourceRange){ VK_IMAGE_ASPECT_COLOR_BIT, 0, levels, 0, layers };
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                       0, 0, NULL, 0, NULL, 1, &b);
}

/* Copies level 0, layer 0 of image (in layout from, left in GENERAL) into buffer,
 * row_length texels a row (0: tight). */
static inline void vkc_copy_image_to_buffer(VkCommandBuffer cb, VkImage image, VkImageLayout from,
                                     VkExtent3D extent, uint32_t levels, uint32_t layers,
                                     VkBuffer buffer)
{
  VkBufferImageCopy region = { .imageSubresource = { VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1 },
                               .imageExtent = { extent.width, extent.height, 1 } };
  vkc_barrier_image(cb, image, from, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, levels, layers);
  vkCmdCopyImageToBuffer(cb, image, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, buffer, 1, &region);
  vkc_barrier_image(cb, image, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, VK_IMAGE_LAYOUT_GENERAL,
                    levels, layers);
}

/* Copies buffer (row_length texels a row; 0: tight) into level 0, layer 0 of image,
 * which is left in VK_IMAGE_LAYOUT_GENERAL, the layout gpushm images change hands in. */
static inline void vkc_copy_buffer_to_image_at(VkCommandBuffer cb, VkBuffer buffer,
                                               VkDeviceSize offset, uint32_t row_length,
                                               VkImage image, VkImageLayout from,
                                               VkExtent3D extent, uint32_t levels,
                                               uint32_t layers)
{
  VkBufferImageCopy region = { .bufferOffset = offset, .bufferRowLength = row_length,
                               .imageSubresource = { VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1 },
                               .imageExtent = { extent.width, extent.height, 1 } };
  vkc_barrier_image(cb, image, from, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, levels, layers);
  vkCmdCopyBufferToImage(cb, buffer, image, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, 1, &region);
  vkc_barrier_image(cb, image, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, VK_IMAGE_LAYOUT_GENERAL,
                    levels, layers);
}

static inline void vkc_copy_buffer_to_image(VkCommandBuffer cb, VkBuffer buffer, uint32_t row_length,
                                     VkImage image, VkImageLayout from, VkExtent3D extent,
                                     uint32_t levels, uint32_t layers)
{
  vkc_copy_buffer_to_image_at(cb, buffer, 0, row_length, image, from, extent, levels, layers);
}

/* Memory another process (or API) writes changes hands with it: this queue family
 * acquires the range from VK_QUEUE_FAMILY_EXTERNAL before reading it (acquire), and
 * releases it back after (release).  Without the acquire, a read of external memory is
 * a use the validation layers (and drivers that keep caches per queue family) do not
 * know to be ordered after the other side's writes. */
static inline void vkc_buffer_ownership(VkCommandBuffer cb, VkBuffer buffer, VkDeviceSize offset,
                                        VkDeviceSize size, uint32_t family, int acquire)
{
  VkBufferMemoryBarrier b = {
    .sType = VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER,
    .srcAccessMask = acquire ? 0 : VK_ACCESS_TRANSFER_READ_BIT,
    .dstAccessMask = acquire ? VK_ACCESS_TRANSFER_READ_BIT : 0,
    .srcQueueFamilyIndex = acquire ? VK_QUEUE_FAMILY_EXTERNAL : family,
    .dstQueueFamilyIndex = acquire ? family : VK_QUEUE_FAMILY_EXTERNAL,
    .buffer = buffer, .offset = offset, .size = size,
  };
  vkCmdPipelineBarrier(cb,
                       acquire ? VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT : VK_PIPELINE_STAGE_TRANSFER_BIT,
                       acquire ? VK_PIPELINE_STAGE_TRANSFER_BIT
                               : VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT,
                       0, 0, NULL, 1, &b, 0, NULL);
}

#endif

/* SPDX-License-Identifier: MIT */
/*
 * gpushm-vulkan.h — gpushm objects in Vulkan (docs/graphics.md).
 *
 * One source, two ways to use it (the pattern of PipeWire's SPA_API_IMPL):
 *  - linked: define GPUSHM_VK_SHARED (pkg-config gpushm-vulkan does) and link
 *    libgpushm-vulkan, which holds the one compiled copy.  A fix reaches programs with
 *    the library, and the library needs no Vulkan at link time: it uses the loader the
 *    process has already loaded, else loads libvulkan.so.1;
 *  - header-only, as before 0.8: define nothing, and every function is static inline
 *    in the program, which links the Vulkan loader itself (and -pthread where glibc is
 *    older than 2.34: a ring consumer's release mirror is a thread).
 * libgpushm itself depends on no graphics API.  Needs Vulkan 1.1 and, on the
 * VkDevice, VK_KHR_external_memory_fd (gpushm fd memory and registered memory) and
 * VK_EXT_external_memory_host (gpushm host memory).
 *
 *  - gpushm_vk_import_buffer(): a buffer (or a linear image's rows) as a VkBuffer bound
 *    to the imported memory.  cuda-fd memory imports only on the GPU it lives on and in
 *    the driver that made it: checked first (gpushm_vk_check_device()), refused with a
 *    message naming both sides.
 *  - gpushm_vk_import_image(): an image as a VkImage.  Optimal images (registered by a
 *    Vulkan process) are rebuilt exactly as their creator made them; a linear image
 *    comes as a VkBuffer of rows, and as a LINEAR VkImage too where this device lays
 *    such an image out with the same row pitch (else copy: vkCmdCopyBufferToImage
 *    with bufferRowLength = row_length).
 *  - gpushm_vk_create_image() / gpushm_vk_create_buffer(): exportable memory made here
 *    and registered with gpushmd under a name (gpushm_register_memory()).
 *
 * Imported memory changes hands with a queue family ownership transfer: acquire it from
 * VK_QUEUE_FAMILY_EXTERNAL before use, release it back after (docs/graphics.md).  Images
 * change hands in VK_IMAGE_LAYOUT_GENERAL: a producer's release leaves them there; a
 * consumer's acquire barrier names oldLayout old_layout (GENERAL, or UNDEFINED, which
 * discards the contents, for an open that promised GPUSHM_OPEN_WRITE_DISCARD).
 *
 * Every function returns 0 or a negative GPUSHM_E_* code, the reason in vk->error.  The
 * object to import must be open with map_device GPUSHM_DEVICE_NONE (host buffers: any).
 */
#ifndef GPUSHM_VULKAN_H
#define GPUSHM_VULKAN_H

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

#include "gpushm-graphics.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GPUSHM_VK_IMPL is libgpushm-vulkan's own (client/vulkan_helpers.c): the exported
 * copy, its helpers static to it.  The structs below are that library's ABI: they
 * grow no field. */
#if defined(GPUSHM_VK_IMPL)
#define GPUSHM_VK_API GPUSHM_API
#define GPUSHM_VK__STATIC static
#elif defined(GPUSHM_VK_SHARED)
#define GPUSHM_VK_API GPUSHM_API
#else
#define GPUSHM_VK_API static inline
#define GPUSHM_VK__STATIC static inline
#endif

typedef struct gpushm_vk {
  VkInstance instance;
  VkPhysicalDevice physical_device;
  VkDevice device;
  /* NULL: the loader's vkGetInstanceProcAddr (header-only: the one the program links;
   * libgpushm-vulkan: the one the process has loaded, else libvulkan.so.1's) */
  PFN_vkGetInstanceProcAddr get_instance_proc_addr;
  char error[512]; /* why the last call failed */
} gpushm_vk_t;

typedef struct gpushm_vk_buffer {
  VkBuffer buffer;
  VkDeviceMemory memory;
  VkDeviceSize offset; /* where the object starts in memory (bound there) */
  VkDeviceSize size;
} gpushm_vk_buffer_t;

typedef struct gpushm_vk_image {
  VkImage image;       /* VK_NULL_HANDLE: a linear image to copy from buffer */
  VkDeviceMemory memory;
  VkFormat format;
  VkExtent3D extent;
  uint32_t mip_levels, array_layers;
  VkImageLayout old_layout; /* what to transition from (see the top of this file) */
  /* Linear images: their rows as a buffer (row_length texels apart). */
  VkBuffer buffer;
  uint32_t row_length;
} gpushm_vk_image_t;

/* Whether memory described by info can be imported on vk's physical device: the same
 * device (deviceUUID), the same driver (driverUUID, or the NVIDIA driver's version
 * where gpushmd's own memory knows no driverUUID).  Host memory imports anywhere. */
GPUSHM_VK_API int gpushm_vk_check_device(gpushm_vk_t *vk, const gpushm_memory_info_t *info);
/* A VkBuffer of usage over the object's bytes (a linear image: its rows). */
GPUSHM_VK_API int gpushm_vk_import_buffer(gpushm_vk_t *vk, gpushm_buffer_t *buf,
                                          VkBufferUsageFlags usage, gpushm_vk_buffer_t *out);
GPUSHM_VK_API void gpushm_vk_destroy_buffer(gpushm_vk_t *vk, gpushm_vk_buffer_t *b);
/* The image buf is (open with GPUSHM_DEVICE_NONE, or host memory). */
GPUSHM_VK_API int gpushm_vk_import_image(gpushm_vk_t *vk, gpushm_buffer_t *buf,
                                         gpushm_vk_image_t *out);
GPUSHM_VK_API void gpushm_vk_destroy_image(gpushm_vk_t *vk, gpushm_vk_image_t *img);
/* GPUSHM_IMAGE_USAGE_* as VkImageUsageFlags. */
GPUSHM_VK_API VkImageUsageFlags gpushm_vk_image_usage(uint32_t usage);
/* What every importer creates an image of d with (format, extent, levels, layers, usage;
 * pNext next), for a program's own image of the same kind, e.g. to copy into. */
GPUSHM_VK_API VkImageCreateInfo gpushm_vk_image_create_info(const gpushm_image_desc_t *d,
                                                            VkImageTiling tiling,
                                                            const void *next);
/* The memory type for an allocation the requirements allow (allowed: memoryTypeBits):
 * the one named (not GPUSHM_MEMORY_TYPE_ANY), else the first DEVICE_LOCAL one, what
 * cuda-fd memory imports as, else the first allowed. */
GPUSHM_VK_API int gpushm_vk_memory_type(gpushm_vk_t *vk, uint32_t allowed, uint32_t named,
                                        uint32_t *out);
/* Makes an exportable optimal-tiling image of desc here (tiling must be optimal),
 * registers it as name (opts: mode, lifetime, metadata), and gives back the image
 * (bound, in VK_IMAGE_LAYOUT_UNDEFINED) and the registration's handle. */
GPUSHM_VK_API int gpushm_vk_create_image(gpushm_vk_t *vk, gpushm_t *conn, const char *name,
                                         const gpushm_image_desc_t *desc,
                                         const gpushm_create_opts_t *opts,
                                         gpushm_vk_image_t *out, gpushm_buffer_t **buf_out);
/* The same for a buffer of size bytes and usage. */
GPUSHM_VK_API int gpushm_vk_create_buffer(gpushm_vk_t *vk, gpushm_t *conn, const char *name,
                                          VkDeviceSize size, VkBufferUsageFlags usage,
                                          const gpushm_create_opts_t *opts,
                                          gpushm_vk_buffer_t *out, gpushm_buffer_t **buf_out);

/* A timeline on this device's queues (docs/sync.md#semaphore-planes): its semaphore
 * plane imported (minted here and registered, flags GPUSHM_SEMAPHORE_TO_READERS, where
 * the timeline has none yet: the device needs VK_KHR_external_semaphore_fd and the
 * timelineSemaphore feature) and, for a read-write open, its control block's page as
 * a buffer (VK_EXT_external_memory_host) that a signal writes the fence into.
 *   wait for v:  gpushm_timeline_wait_signalled(tl, v, timeout) (a wait for a value
 *                nobody signalled or promised would never end), then submit with
 *                semaphore, v among the waits (VkTimelineSemaphoreSubmitInfo);
 *   signal v:    gpushm_vk_timeline_record_signal() at the end of a command buffer,
 *                submit it with semaphore, v among the signals, then
 *                gpushm_timeline_signal_external(tl, v).
 * The fence write is what CPU waiters, CUDA streams and gpushmd see; the semaphore what
 * Vulkan and GL queues wait on: a submission must do both. */
typedef struct gpushm_vk_timeline {
  VkSemaphore semaphore;
  VkBuffer fence_buffer;       /* VK_NULL_HANDLE for a read-only open: it only waits */
  VkDeviceMemory fence_memory;
  VkDeviceSize fence_offset;
} gpushm_vk_timeline_t;

GPUSHM_VK_API int gpushm_vk_import_timeline(gpushm_vk_t *vk, gpushm_timeline_t *tl,
                                            unsigned flags, gpushm_vk_timeline_t *out);
GPUSHM_VK_API void gpushm_vk_destroy_timeline(gpushm_vk_t *vk, gpushm_vk_timeline_t *t);
/* Records, in cmd (outside a render pass, on a queue that can transfer), the fence
 * write of value, after everything submitted before it on the queue. */
GPUSHM_VK_API int gpushm_vk_timeline_record_signal(gpushm_vk_t *vk, gpushm_vk_timeline_t *t,
                                                   VkCommandBuffer cmd, uint64_t value);

/* A ring consumer on this device's queues (docs/rings.md#vulkan-consumers): for a ring
 * opened with gpushm_ring_open(conn, name, 0, &ring), before its first acquire, a
 * ready semaphore minted here and registered (gpushm_ring_register_semaphore()), which
 * the ring's producers signal for every frame, and a done semaphore minted here and
 * registered as the done timeline's plane (docs/rings.md#done-planes), which the queue
 * signals to each frame it is done with: CUDA producers' streams wait on it, and a thread
 * of this process (GPUSHM_VK_MIRROR_THREAD_NAME) reads it too, to write each release
 * into the done timeline's fence for CPU producers and gpushmd (no write and no barrier
 * on the queue; a CPU reader sees a release 2 ms late at most).  Needs
 * VK_KHR_external_semaphore_fd and the timelineSemaphore feature.  Per frame, no CPU wait
 * in the frame's path while the producer keeps up:
 *   gpushm_ring_acquire_frame_external(ring, 0, timeout_ms, &f);
 *   record the reads of the slot at f.offset; submit, waiting for r.ready to reach
 *   f.frame and signalling r.done = f.frame (VkTimelineSemaphoreSubmitInfo), then
 *   gpushm_ring_release_external(ring, &f).
 * Detach once the queue is done with it, before closing the ring and before destroying
 * the device. */
#define GPUSHM_VK_MIRROR_THREAD_NAME "gpushm-release"
struct gpushm_vk__mirror;
typedef struct gpushm_vk_ring {
  VkSemaphore ready; /* frame f is ready once it reaches f */
  VkSemaphore done;  /* signalled to f once the queue is done with frame f */
  struct gpushm_vk__mirror *mirror;
} gpushm_vk_ring_t;

GPUSHM_VK_API int gpushm_vk_attach_ring(gpushm_vk_t *vk, gpushm_ring_t *ring,
                                        gpushm_vk_ring_t *out);
GPUSHM_VK_API void gpushm_vk_detach_ring(gpushm_vk_t *vk, gpushm_vk_ring_t *r);

#if defined(GPUSHM_VK_IMPL) || !defined(GPUSHM_VK_SHARED)
/* ---- implementation: header-only, or libgpushm-vulkan's ------------------------- */

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
GPUSHM_VK__STATIC int gpushm_vk__fail(gpushm_vk_t *vk, int err, const char *fmt, ...);
GPUSHM_VK__STATIC int gpushm_vk__fail(gpushm_vk_t *vk, int err, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(vk->error, sizeof vk->error, fmt, ap);
  va_end(ap);
  return err;
}

GPUSHM_VK__STATIC int gpushm_vk__result(gpushm_vk_t *vk, VkResult r, const char *what)
{
  int err = r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY
              ? GPUSHM_E_NOMEM
            : r == VK_ERROR_INVALID_EXTERNAL_HANDLE ? GPUSHM_E_INVAL
                                                    : GPUSHM_E_UNSUPPORTED;
  return gpushm_vk__fail(vk, err, "%s failed: VkResult %d", what, (int)r);
}

#ifdef GPUSHM_VK_IMPL
/* The process's loader, found once (client/vulkan_helpers.c); NULL: none. */
static PFN_vkGetInstanceProcAddr gpushm_vk__loader(void);
#endif

GPUSHM_VK__STATIC PFN_vkGetInstanceProcAddr gpushm_vk__gipa(const gpushm_vk_t *vk)
{
  if (vk->get_instance_proc_addr)
    return vk->get_instance_proc_addr;
#ifdef GPUSHM_VK_IMPL
  return gpushm_vk__loader();
#else
  return vkGetInstanceProcAddr;
#endif
}

GPUSHM_VK__STATIC PFN_vkVoidFunction gpushm_vk__instance_fn(gpushm_vk_t *vk, const char *name)
{
  PFN_vkGetInstanceProcAddr gipa = gpushm_vk__gipa(vk);
  return gipa ? gipa(vk->instance, name) : NULL;
}

/* Why an entry point every Vulkan 1.1 instance has is missing. */
GPUSHM_VK__STATIC int gpushm_vk__missing(gpushm_vk_t *vk, const char *name)
{
  if (!gpushm_vk__gipa(vk))
    return gpushm_vk__fail(vk, GPUSHM_E_UNSUPPORTED, "no Vulkan loader in this process, "
                           "nor a libvulkan.so.1 to load: set "
                           "gpushm_vk_t.get_instance_proc_addr");
  return gpushm_vk__fail(vk, GPUSHM_E_UNSUPPORTED, "Vulkan 1.1 is needed (%s)", name);
}

/* gpushm_vk_t has no room to keep entry points (its layout is ABI), so each call looks
 * up by name what it uses: vkGetDeviceProcAddr once (GPUSHM_VK__DEVICE_FNS), then each
 * function once, at the top, never in a loop. */
GPUSHM_VK__STATIC PFN_vkGetDeviceProcAddr gpushm_vk__gdpa(gpushm_vk_t *vk)
{
  return (PFN_vkGetDeviceProcAddr)gpushm_vk__instance_fn(vk, "vkGetDeviceProcAddr");
}

#define GPUSHM_VK__DEVICE_FNS(vk) PFN_vkGetDeviceProcAddr gpushm_vk__gdpa_ = gpushm_vk__gdpa(vk)
/* (after GPUSHM_VK__DEVICE_FNS) */
#define GPUSHM_VK__DEVICE_FN(vk, type, name)                                               \
  type name = (type)(gpushm_vk__gdpa_ ? gpushm_vk__gdpa_((vk)->device, #name) : NULL)
#define GPUSHM_VK__INSTANCE_FN(vk, type, name)                                             \
  type name = (type)gpushm_vk__instance_fn((vk), #name)

GPUSHM_VK_API int gpushm_vk_check_device(gpushm_vk_t *vk, const gpushm_memory_info_t *info)
{
  GPUSHM_VK__INSTANCE_FN(vk, PFN_vkGetPhysicalDeviceProperties2,
                         vkGetPhysicalDeviceProperties2);
  VkPhysicalDeviceDriverProperties driver = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES };
  VkPhysicalDeviceIDProperties id = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES };
  VkPhysicalDeviceProperties2 props = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &id };
  char why[400];

  if (info->handle_type == GPUSHM_EXTERNAL_HOST_POINTER)
    return 0;
  if (!vkGetPhysicalDeviceProperties2)
    return gpushm_vk__missing(vk, "vkGetPhysicalDeviceProperties2");
  vkGetPhysicalDeviceProperties2(vk->physical_device, &props);
  /* driverInfo is Vulkan 1.2's (VK_KHR_driver_properties before) */
  if (props.properties.apiVersion >= VK_API_VERSION_1_2) {
    id.pNext = &driver;
    vkGetPhysicalDeviceProperties2(vk->physical_device, &props);
  }
  if (gpushm_memory_info_match(info, id.deviceUUID, id.driverUUID,
                               driver.driverInfo[0] ? driver.driverInfo : NULL, why,
                               sizeof why) < 0)
    return gpushm_vk__fail(vk, GPUSHM_E_UNSUPPORTED, "%s; this Vulkan device is %s (driver "
                           "%s)", why, props.properties.deviceName,
                           driver.driverInfo[0] ? driver.driverInfo : "unknown");
  return 0;
}

GPUSHM_VK_API int gpushm_vk_memory_type(gpushm_vk_t *vk, uint32_t allowed, uint32_t named,
                                        uint32_t *out)
{
  GPUSHM_VK__INSTANCE_FN(vk, PFN_vkGetPhysicalDeviceMemoryProperties,
                         vkGetPhysicalDeviceMemoryProperties);
  VkPhysicalDeviceMemoryProperties mp;

  if (named != GPUSHM_MEMORY_TYPE_ANY) {
    if (named >= 32 || !(allowed & (1u << named)))
      return gpushm_vk__fail(vk, GPUSHM_E_UNSUPPORTED, "memory type %u is not one this "
                             "import allows (0x%x)", named, allowed);
    *out = named;
    return 0;
  }
  vkGetPhysicalDeviceMemoryProperties(vk->physical_device, &mp);
  for (uint32_t i = 0; i < mp.memoryTypeCount; i++)
    if ((allowed & (1u << i)) &&
        (mp.memoryTypes[i].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)) {
      *out = i;
      return 0;
    }
  for (uint32_t i = 0; i < mp.memoryTypeCount; i++)
    if (allowed & (1u << i)) {
      *out = i;
      return 0;
    }
  return gpushm_vk__fail(vk, GPUSHM_E_UNSUPPORTED, "no memory type for the import (0x%x)",
                         allowed);
}

/* Usage an open may not ask for: what only writes, on a read-only open (Vulkan cannot
 * narrow an OPAQUE_FD to reading, so this stops bugs, not a hostile process; storage
 * usage stays, a shader may only read it). */
#define GPUSHM_VK__BUFFER_WRITES VK_BUFFER_USAGE_TRANSFER_DST_BIT
#define GPUSHM_VK__IMAGE_WRITES                                                            \
  (VK_IMAGE_USAGE_TRANSFER_DST_BIT | VK_IMAGE_USAGE_COLOR_ATTACHMENT_BIT)

/* Allocates memory importing what info describes (the fd given is consumed either way)
 * for an object with those requirements. */
GPUSHM_VK__STATIC int gpushm_vk__import_memory(gpushm_vk_t *vk, const gpushm_memory_info_t *info,
                                               int fd, const VkMemoryRequirements *req,
                                               VkBuffer dedicated_buffer, VkImage dedicated_image,
                                               VkDeviceMemory *out)
{
  GPUSHM_VK__DEVICE_FNS(vk);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkAllocateMemory, vkAllocateMemory);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkGetMemoryHostPointerPropertiesEXT,
                       vkGetMemoryHostPointerPropertiesEXT);
  VkMemoryDedicatedAllocateInfo dedicated = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO,
    .image = dedicated_image, .buffer = dedicated_buffer };
  VkImportMemoryFdInfoKHR import_fd = { .sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_FD_INFO_KHR,
                                        .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT,
                                        .fd = fd };
  VkImportMemoryHostPointerInfoEXT import_host = {
    .sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT,
    .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
    .pHostPointer = info->host_pointer };
  VkMemoryAllocateInfo alloc = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                 .allocationSize = info->allocation_size };
  uint32_t allowed = req->memoryTypeBits;
  VkResult r;
  int ret;

  if (info->flags & GPUSHM_EXTERNAL_READ_ONLY_FD) {
    close(fd);
    return gpushm_vk__fail(vk, GPUSHM_E_UNSUPPORTED, "registered memory (a memfd) opened "
                           "read-only comes open for reading only, which Mesa's drivers "
                           "cannot import: open it read-write");
  }
  if (info->offset % (req->alignment ? req->alignment : 1) ||
      info->offset + req->size > info->allocation_size) {
    if (fd >= 0)
      close(fd);
    return gpushm_vk__fail(vk, GPUSHM_E_UNSUPPORTED, "the object lies at offset %llu of "
                           "%llu bytes; this device wants %llu bytes aligned to %llu",
                           (unsigned long long)info->offset,
                           (unsigned long long)info->allocation_size,
                           (unsigned long long)req->size, (unsigned long long)req->alignment);
  }
  if (info->handle_type == GPUSHM_EXTERNAL_HOST_POINTER) {
    GPUSHM_VK__INSTANCE_FN(vk, PFN_vkGetPhysicalDeviceProperties2,
                           vkGetPhysicalDeviceProperties2);
    VkMemoryHostPointerPropertiesEXT hp = { .sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT };
    VkPhysicalDeviceExternalMemoryHostPropertiesEXT host = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT };
    VkPhysicalDeviceProperties2 props = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                          .pNext = &host };
    if (!vkGetMemoryHostPointerPropertiesEXT)
      return gpushm_vk__fail(vk, GPUSHM_E_UNSUPPORTED, "host memory needs "
                             "VK_EXT_external_memory_host on the device");
    /* gpushm's host memory starts on a page and spans whole pages: enough for every
     * driver seen (4096 on the NVIDIA driver and lavapipe), not for every one */
    if (vkGetPhysicalDeviceProperties2)
      vkGetPhysicalDeviceProperties2(vk->physical_device, &props);
    if (host.minImportedHostPointerAlignment > 1 &&
        ((uintptr_t)info->host_pointer % host.minImportedHostPointerAlignment ||
         info->allocation_size % host.minImportedHostPointerAlignment))
      return gpushm_vk__fail(vk, GPUSHM_E_UNSUPPORTED, "host memory of %llu bytes at %p: this "
                             "device imports host memory aligned to %llu bytes only",
                             (unsigned long long)info->allocation_size, info->host_pointer,
                             (unsigned long long)host.minImportedHostPointerAlignment);
    r = vkGetMemoryHostPointerPropertiesEXT(vk->device,
                                            VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
                                            info->host_pointer, &hp);
    if (r != VK_SUCCESS)
      return gpushm_vk__result(vk, r, "vkGetMemoryHostPointerPropertiesEXT");
    allowed &= hp.memoryTypeBits;
    alloc.pNext = &import_host;
  } else {
    import_fd.pNext = dedicated_buffer || dedicated_image ? &dedicated : NULL;
    alloc.pNext = &import_fd;
  }
  if ((ret = gpushm_vk_memory_type(vk, allowed, info->memory_type_index,
                                   &alloc.memoryTypeIndex)) < 0) {
    if (fd >= 0)
      close(fd);
    return ret;
  }
  r = vkAllocateMemory(vk->device, &alloc, NULL, out);
  if (r != VK_SUCCESS) {
    if (fd >= 0)
      close(fd); /* an import owns its fd on success only */
    return gpushm_vk__result(vk, r, "vkAllocateMemory (import)");
  }
  return 0;
}

GPUSHM_VK__STATIC int gpushm_vk__info(gpushm_vk_t *vk, gpushm_buffer_t *buf, gpushm_memory_info_t *info,
                                      int *fd)
{
  int r;

  memset(info, 0, sizeof *info);
  info->size = sizeof *info;
  *fd = -1;
  if ((r = gpushm_buffer_memory_info(buf, info)) < 0)
    return gpushm_vk__fail(vk, r, "%s", gpushm_last_error_message());
  if ((r = gpushm_vk_check_device(vk, info)) < 0)
    return r;
  if (info->handle_type == GPUSHM_EXTERNAL_HOST_POINTER) {
    if (info->access & GPUSHM_OPEN_READONLY)
      return gpushm_vk__fail(vk, GPUSHM_E_UNSUPPORTED, "host memory opened read-only is "
                             "mapped read-only, which Vulkan cannot import: open it "
                             "read-write");
    return 0;
  }
  {
    gpushm_export_desc_t d = { .size = sizeof d };
    if ((r = gpushm_buffer_export(buf, GPUSHM_EXPORT_OPAQUE_FD, 0, 0, &d)) < 0)
      return gpushm_vk__fail(vk, r, "%s", gpushm_last_error_message());
    *fd = d.fd;
  }
  return 0;
}

GPUSHM_VK_API void gpushm_vk_destroy_buffer(gpushm_vk_t *vk, gpushm_vk_buffer_t *b)
{
  GPUSHM_VK__DEVICE_FNS(vk);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkDestroyBuffer, vkDestroyBuffer);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkFreeMemory, vkFreeMemory);
  if (b->buffer)
    vkDestroyBuffer(vk->device, b->buffer, NULL);
  if (b->memory)
    vkFreeMemory(vk->device, b->memory, NULL);
  memset(b, 0, sizeof *b);
}

GPUSHM_VK_API int gpushm_vk_import_buffer(gpushm_vk_t *vk, gpushm_buffer_t *buf,
                                          VkBufferUsageFlags usage, gpushm_vk_buffer_t *out)
{
  GPUSHM_VK__DEVICE_FNS(vk);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkCreateBuffer, vkCreateBuffer);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkGetBufferMemoryRequirements, vkGetBufferMemoryRequirements);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkBindBufferMemory, vkBindBufferMemory);
  VkExternalMemoryBufferCreateInfo ext = { .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO };
  VkBufferCreateInfo bci = { .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .pNext = &ext };
  gpushm_memory_info_t info;
  VkMemoryRequirements req;
  VkResult r;
  int fd, ret;

  memset(out, 0, sizeof *out);
  if ((ret = gpushm_vk__info(vk, buf, &info, &fd)) < 0)
    return ret;
  if ((info.access & GPUSHM_OPEN_READONLY) && (usage & GPUSHM_VK__BUFFER_WRITES)) {
    if (fd >= 0)
      close(fd);
    return gpushm_vk__fail(vk, GPUSHM_E_PERM, "a read-only open is imported for reading: "
                           "usage 0x%x writes", (unsigned)usage);
  }
  ext.handleTypes = info.handle_type == GPUSHM_EXTERNAL_HOST_POINTER
                      ? VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT
                      : VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
  bci.size = info.data_size;
  bci.usage = usage;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  if ((r = vkCreateBuffer(vk->device, &bci, NULL, &out->buffer)) != VK_SUCCESS) {
    if (fd >= 0)
      close(fd);
    return gpushm_vk__result(vk, r, "vkCreateBuffer");
  }
  vkGetBufferMemoryRequirements(vk->device, out->buffer, &req);
  ret = gpushm_vk__import_memory(vk, &info, fd, &req,
                                 (info.flags & GPUSHM_EXTERNAL_DEDICATED) ? out->buffer : VK_NULL_HANDLE,
                                 VK_NULL_HANDLE, &out->memory);
  if (ret == 0 && (r = vkBindBufferMemory(vk->device, out->buffer, out->memory, info.offset)) != VK_SUCCESS)
    ret = gpushm_vk__result(vk, r, "vkBindBufferMemory");
  if (ret < 0) {
    gpushm_vk_destroy_buffer(vk, out);
    return ret;
  }
  out->offset = info.offset;
  out->size = info.data_size;
  return 0;
}

GPUSHM_VK_API VkImageUsageFlags gpushm_vk_image_usage(uint32_t usage)
{
  return (usage & GPUSHM_IMAGE_USAGE_SAMPLED ? VK_IMAGE_USAGE_SAMPLED_BIT : 0) |
         (usage & GPUSHM_IMAGE_USAGE_STORAGE ? VK_IMAGE_USAGE_STORAGE_BIT : 0) |
         (usage & GPUSHM_IMAGE_USAGE_COLOR_ATTACHMENT ? VK_IMAGE_USAGE_COLOR_ATTACHMENT_BIT : 0) |
         (usage & GPUSHM_IMAGE_USAGE_TRANSFER_SRC ? VK_IMAGE_USAGE_TRANSFER_SRC_BIT : 0) |
         (usage & GPUSHM_IMAGE_USAGE_TRANSFER_DST ? VK_IMAGE_USAGE_TRANSFER_DST_BIT : 0);
}

GPUSHM_VK_API VkImageCreateInfo gpushm_vk_image_create_info(const gpushm_image_desc_t *d,
                                                            VkImageTiling tiling,
                                                            const void *next)
{
  VkImageCreateInfo ici = { .sType = VK_STRUCTURE_TYPE_IMAGE_CREATE_INFO, .pNext = next };
  ici.imageType = d->depth > 1 ? VK_IMAGE_TYPE_3D : VK_IMAGE_TYPE_2D;
  ici.format = (VkFormat)gpushm_format_vk((int)d->format);
  ici.extent.width = d->width;
  ici.extent.height = d->height;
  ici.extent.depth = d->depth;
  ici.mipLevels = d->mip_levels;
  ici.arrayLayers = d->array_layers;
  ici.samples = VK_SAMPLE_COUNT_1_BIT;
  ici.tiling = tiling;
  ici.usage = gpushm_vk_image_usage(d->usage);
  ici.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  ici.initialLayout = VK_IMAGE_LAYOUT_UNDEFINED;
  return ici;
}

GPUSHM_VK_API void gpushm_vk_destroy_image(gpushm_vk_t *vk, gpushm_vk_image_t *img)
{
  GPUSHM_VK__DEVICE_FNS(vk);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkDestroyImage, vkDestroyImage);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkDestroyBuffer, vkDestroyBuffer);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkFreeMemory, vkFreeMemory);
  if (img->image)
    vkDestroyImage(vk->device, img->image, NULL);
  if (img->buffer)
    vkDestroyBuffer(vk->device, img->buffer, NULL);
  if (img->memory)
    vkFreeMemory(vk->device, img->memory, NULL);
  memset(img, 0, sizeof *img);
}

/* A linear image: its rows as a buffer, and as a LINEAR image where this device's
 * layout of one has the same row pitch (aliasing the same memory). */
GPUSHM_VK__STATIC int gpushm_vk__import_linear(gpushm_vk_t *vk, gpushm_buffer_t *buf,
                                               const gpushm_image_desc_t *d, gpushm_vk_image_t *out)
{
  GPUSHM_VK__DEVICE_FNS(vk);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkCreateImage, vkCreateImage);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkDestroyImage, vkDestroyImage);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkGetImageMemoryRequirements, vkGetImageMemoryRequirements);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkGetImageSubresourceLayout, vkGetImageSubresourceLayout);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkBindImageMemory, vkBindImageMemory);
  VkExternalMemoryImageCreateInfo ext = { .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMAGE_CREATE_INFO };
  VkImageSubresource sub = { VK_IMAGE_ASPECT_COLOR_BIT, 0, 0 };
  gpushm_memory_info_t info = { .size = sizeof info };
  gpushm_vk_buffer_t rows;
  VkSubresourceLayout layout;
  VkMemoryRequirements req;
  VkImageCreateInfo ici;
  VkImage image;
  int ret;

  /* rows for copies and for compute shaders (storage buffers), written only by a
   * read-write open */
  ret = gpushm_vk_import_buffer(vk, buf, VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                  VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                  ((gpushm_buffer_memory_info(buf, &info) == 0 &&
                                    !(info.access & GPUSHM_OPEN_READONLY))
                                     ? VK_BUFFER_USAGE_TRANSFER_DST_BIT : 0), &rows);
  if (ret < 0)
    return ret;
  out->buffer = rows.buffer;
  out->memory = rows.memory;
  out->row_length = (uint32_t)(d->row_pitch / gpushm_format_texel_bytes((int)d->format));
  ext.handleTypes = info.handle_type == GPUSHM_EXTERNAL_HOST_POINTER
                      ? VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT
                      : VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
  ici = gpushm_vk_image_create_info(d, VK_IMAGE_TILING_LINEAR, &ext);
  if ((info.access & GPUSHM_OPEN_READONLY))
    ici.usage &= ~(VkImageUsageFlags)GPUSHM_VK__IMAGE_WRITES;
  if (!ici.usage || vkCreateImage(vk->device, &ici, NULL, &image) != VK_SUCCESS)
    return 0; /* no LINEAR image of this kind here: the buffer is the way */
  vkGetImageSubresourceLayout(vk->device, image, &sub, &layout);
  vkGetImageMemoryRequirements(vk->device, image, &req);
  if (layout.offset != 0 || layout.rowPitch != d->row_pitch ||
      (req.alignment && rows.offset % req.alignment) || !(req.memoryTypeBits) ||
      rows.offset + req.size > info.allocation_size ||
      vkBindImageMemory(vk->device, image, out->memory, rows.offset) != VK_SUCCESS) {
    vkDestroyImage(vk->device, image, NULL);
    return 0;
  }
  out->image = image;
  return 0;
}

GPUSHM_VK_API int gpushm_vk_import_image(gpushm_vk_t *vk, gpushm_buffer_t *buf, gpushm_vk_image_t *out)
{
  GPUSHM_VK__DEVICE_FNS(vk);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkCreateImage, vkCreateImage);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkGetImageMemoryRequirements, vkGetImageMemoryRequirements);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkBindImageMemory, vkBindImageMemory);
  VkExternalMemoryImageCreateInfo ext = {
    .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMAGE_CREATE_INFO,
    .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT };
  gpushm_image_desc_t d;
  gpushm_memory_info_t info;
  VkMemoryRequirements req;
  VkImageCreateInfo ici;
  VkResult r;
  int fd, ret;

  memset(out, 0, sizeof *out);
  gpushm_image_desc_init(&d);
  if ((ret = gpushm_buffer_image_desc(buf, &d)) < 0)
    return gpushm_vk__fail(vk, ret, "%s", gpushm_last_error_message());
  out->format = (VkFormat)gpushm_format_vk((int)d.format);
  out->extent.width = d.width;
  out->extent.height = d.height;
  out->extent.depth = d.depth;
  out->mip_levels = d.mip_levels;
  out->array_layers = d.array_layers;
  if ((ret = gpushm_vk__info(vk, buf, &info, &fd)) < 0)
    return ret;
  out->old_layout = (info.access & GPUSHM_OPEN_WRITE_DISCARD) ? VK_IMAGE_LAYOUT_UNDEFINED
                                                              : VK_IMAGE_LAYOUT_GENERAL;
  if (d.tiling == GPUSHM_TILING_LINEAR) {
    if (fd >= 0)
      close(fd); /* gpushm_vk_import_buffer() takes its own */
    if ((ret = gpushm_vk__import_linear(vk, buf, &d, out)) < 0)
      gpushm_vk_destroy_image(vk, out);
    return ret;
  }
  ici = gpushm_vk_image_create_info(&d, VK_IMAGE_TILING_OPTIMAL, &ext);
  if ((info.access & GPUSHM_OPEN_READONLY))
    ici.usage &= ~(VkImageUsageFlags)GPUSHM_VK__IMAGE_WRITES;
  if ((r = vkCreateImage(vk->device, &ici, NULL, &out->image)) != VK_SUCCESS) {
    close(fd);
    return gpushm_vk__result(vk, r, "vkCreateImage");
  }
  vkGetImageMemoryRequirements(vk->device, out->image, &req);
  ret = gpushm_vk__import_memory(vk, &info, fd, &req, VK_NULL_HANDLE,
                                 (info.flags & GPUSHM_EXTERNAL_DEDICATED) ? out->image : VK_NULL_HANDLE,
                                 &out->memory);
  if (ret == 0 && (r = vkBindImageMemory(vk->device, out->image, out->memory, 0)) != VK_SUCCESS)
    ret = gpushm_vk__result(vk, r, "vkBindImageMemory");
  if (ret < 0)
    gpushm_vk_destroy_image(vk, out);
  return ret;
}

/* What registering memory of this device needs to say about it. */
GPUSHM_VK__STATIC int gpushm_vk__describe(gpushm_vk_t *vk, gpushm_external_memory_t *m)
{
  GPUSHM_VK__INSTANCE_FN(vk, PFN_vkGetPhysicalDeviceProperties2,
                         vkGetPhysicalDeviceProperties2);
  VkPhysicalDeviceDriverProperties driver = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES };
  VkPhysicalDeviceIDProperties id = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES };
  VkPhysicalDeviceProperties2 props = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &id };

  if (!vkGetPhysicalDeviceProperties2)
    return gpushm_vk__missing(vk, "vkGetPhysicalDeviceProperties2");
  vkGetPhysicalDeviceProperties2(vk->physical_device, &props);
  if (props.properties.apiVersion >= VK_API_VERSION_1_2) {
    id.pNext = &driver;
    vkGetPhysicalDeviceProperties2(vk->physical_device, &props);
  }
  memcpy(m->device_uuid, id.deviceUUID, sizeof m->device_uuid);
  memcpy(m->driver_uuid, id.driverUUID, sizeof m->driver_uuid);
  snprintf(m->driver_info, sizeof m->driver_info, "%.63s", driver.driverInfo);
  return 0;
}

/* Exportable memory for requirements req (dedicated to image or buffer where the driver
 * prefers it), its fd in *fd. */
GPUSHM_VK__STATIC int gpushm_vk__export_memory(gpushm_vk_t *vk, VkBuffer buffer, VkImage image,
                                               gpushm_external_memory_t *m, VkDeviceMemory *out, int *fd)
{
  GPUSHM_VK__DEVICE_FNS(vk);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkGetBufferMemoryRequirements2, vkGetBufferMemoryRequirements2);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkGetImageMemoryRequirements2, vkGetImageMemoryRequirements2);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkAllocateMemory, vkAllocateMemory);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkGetMemoryFdKHR, vkGetMemoryFdKHR);
  VkMemoryDedicatedRequirements dreq = { .sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_REQUIREMENTS };
  VkMemoryRequirements2 req = { .sType = VK_STRUCTURE_TYPE_MEMORY_REQUIREMENTS_2, .pNext = &dreq };
  VkMemoryDedicatedAllocateInfo dedicated = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO, .image = image, .buffer = buffer };
  VkExportMemoryAllocateInfo export_info = {
    .sType = VK_STRUCTURE_TYPE_EXPORT_MEMORY_ALLOCATE_INFO,
    .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT };
  VkMemoryAllocateInfo alloc = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &export_info };
  VkMemoryGetFdInfoKHR get_fd = { .sType = VK_STRUCTURE_TYPE_MEMORY_GET_FD_INFO_KHR,
                                  .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT };
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkFreeMemory, vkFreeMemory);
  VkResult r;
  int ret;

  if (!vkGetMemoryFdKHR)
    return gpushm_vk__fail(vk, GPUSHM_E_UNSUPPORTED, "VK_KHR_external_memory_fd is not "
                           "enabled on the device");
  if (image) {
    VkImageMemoryRequirementsInfo2 ri = {
      .sType = VK_STRUCTURE_TYPE_IMAGE_MEMORY_REQUIREMENTS_INFO_2, .image = image };
    vkGetImageMemoryRequirements2(vk->device, &ri, &req);
  } else {
    VkBufferMemoryRequirementsInfo2 ri = {
      .sType = VK_STRUCTURE_TYPE_BUFFER_MEMORY_REQUIREMENTS_INFO_2, .buffer = buffer };
    vkGetBufferMemoryRequirements2(vk->device, &ri, &req);
  }
  if (dreq.prefersDedicatedAllocation || dreq.requiresDedicatedAllocation) {
    export_info.pNext = &dedicated;
    m->flags |= GPUSHM_EXTERNAL_DEDICATED;
  }
  alloc.allocationSize = req.memoryRequirements.size;
  if ((ret = gpushm_vk_memory_type(vk, req.memoryRequirements.memoryTypeBits,
                                   GPUSHM_MEMORY_TYPE_ANY, &alloc.memoryTypeIndex)) < 0)
    return ret;
  if ((r = vkAllocateMemory(vk->device, &alloc, NULL, out)) != VK_SUCCESS)
    return gpushm_vk__result(vk, r, "vkAllocateMemory (exportable)");
  get_fd.memory = *out;
  if ((r = vkGetMemoryFdKHR(vk->device, &get_fd, fd)) != VK_SUCCESS) {
    vkFreeMemory(vk->device, *out, NULL);
    *out = VK_NULL_HANDLE;
    return gpushm_vk__result(vk, r, "vkGetMemoryFdKHR");
  }
  m->allocation_size = alloc.allocationSize;
  m->memory_type_index = alloc.memoryTypeIndex;
  return 0;
}

GPUSHM_VK_API int gpushm_vk_create_image(gpushm_vk_t *vk, gpushm_t *conn, const char *name,
                                         const gpushm_image_desc_t *desc,
                                         const gpushm_create_opts_t *opts,
                                         gpushm_vk_image_t *out, gpushm_buffer_t **buf_out)
{
  GPUSHM_VK__DEVICE_FNS(vk);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkCreateImage, vkCreateImage);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkBindImageMemory, vkBindImageMemory);
  VkExternalMemoryImageCreateInfo ext = {
    .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMAGE_CREATE_INFO,
    .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT };
  gpushm_external_memory_t m;
  VkImageCreateInfo ici;
  VkResult r;
  int fd = -1, ret;

  memset(out, 0, sizeof *out);
  *buf_out = NULL;
  if (desc->tiling != GPUSHM_TILING_OPTIMAL || !gpushm_format_vk((int)desc->format))
    return gpushm_vk__fail(vk, GPUSHM_E_INVAL, "gpushm_vk_create_image makes optimal-tiling "
                           "images of a known format (linear ones: gpushm_image_create)");
  gpushm_external_memory_init(&m);
  if ((ret = gpushm_vk__describe(vk, &m)) < 0)
    return ret;
  ici = gpushm_vk_image_create_info(desc, VK_IMAGE_TILING_OPTIMAL, &ext);
  if ((r = vkCreateImage(vk->device, &ici, NULL, &out->image)) != VK_SUCCESS)
    return gpushm_vk__result(vk, r, "vkCreateImage (exportable)");
  ret = gpushm_vk__export_memory(vk, VK_NULL_HANDLE, out->image, &m, &out->memory, &fd);
  if (ret == 0 && (r = vkBindImageMemory(vk->device, out->image, out->memory, 0)) != VK_SUCCESS)
    ret = gpushm_vk__result(vk, r, "vkBindImageMemory");
  if (ret == 0) {
    m.fd = fd;
    m.image = desc;
    if ((ret = gpushm_register_memory(conn, name, &m, opts, buf_out)) < 0)
      gpushm_vk__fail(vk, ret, "%s", gpushm_last_error_message());
  }
  if (fd >= 0)
    close(fd); /* gpushmd keeps its own copy */
  if (ret < 0) {
    gpushm_vk_destroy_image(vk, out);
    return ret;
  }
  out->format = ici.format;
  out->extent = ici.extent;
  out->mip_levels = ici.mipLevels;
  out->array_layers = ici.arrayLayers;
  out->old_layout = VK_IMAGE_LAYOUT_UNDEFINED;
  return 0;
}

GPUSHM_VK_API int gpushm_vk_create_buffer(gpushm_vk_t *vk, gpushm_t *conn, const char *name,
                                          VkDeviceSize size, VkBufferUsageFlags usage,
                                          const gpushm_create_opts_t *opts, gpushm_vk_buffer_t *out,
                                          gpushm_buffer_t **buf_out)
{
  GPUSHM_VK__DEVICE_FNS(vk);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkCreateBuffer, vkCreateBuffer);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkBindBufferMemory, vkBindBufferMemory);
  VkExternalMemoryBufferCreateInfo ext = {
    .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
    .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT };
  VkBufferCreateInfo bci = { .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .pNext = &ext };
  gpushm_external_memory_t m;
  VkResult r;
  int fd = -1, ret;

  memset(out, 0, sizeof *out);
  *buf_out = NULL;
  gpushm_external_memory_init(&m);
  if ((ret = gpushm_vk__describe(vk, &m)) < 0)
    return ret;
  bci.size = size;
  bci.usage = usage;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  if ((r = vkCreateBuffer(vk->device, &bci, NULL, &out->buffer)) != VK_SUCCESS)
    return gpushm_vk__result(vk, r, "vkCreateBuffer (exportable)");
  ret = gpushm_vk__export_memory(vk, out->buffer, VK_NULL_HANDLE, &m, &out->memory, &fd);
  if (ret == 0 && (r = vkBindBufferMemory(vk->device, out->buffer, out->memory, 0)) != VK_SUCCESS)
    ret = gpushm_vk__result(vk, r, "vkBindBufferMemory");
  if (ret == 0) {
    m.fd = fd;
    m.data_size = size;
    if ((ret = gpushm_register_memory(conn, name, &m, opts, buf_out)) < 0)
      gpushm_vk__fail(vk, ret, "%s", gpushm_last_error_message());
  }
  if (fd >= 0)
    close(fd);
  if (ret < 0) {
    gpushm_vk_destroy_buffer(vk, out);
    return ret;
  }
  out->size = size;
  return 0;
}

/* ---- timelines' semaphore planes ---------------------------------------------------- */

GPUSHM_VK_API void gpushm_vk_destroy_timeline(gpushm_vk_t *vk, gpushm_vk_timeline_t *t)
{
  GPUSHM_VK__DEVICE_FNS(vk);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkDestroySemaphore, vkDestroySemaphore);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkDestroyBuffer, vkDestroyBuffer);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkFreeMemory, vkFreeMemory);
  if (t->semaphore)
    vkDestroySemaphore(vk->device, t->semaphore, NULL);
  if (t->fence_buffer)
    vkDestroyBuffer(vk->device, t->fence_buffer, NULL);
  if (t->fence_memory)
    vkFreeMemory(vk->device, t->fence_memory, NULL);
  memset(t, 0, sizeof *t);
}

/* A timeline semaphore at initial, exportable as OPAQUE_FD (export) or to import into. */
GPUSHM_VK__STATIC int gpushm_vk__timeline_semaphore(gpushm_vk_t *vk, uint64_t initial, int export_fd,
                                                    VkSemaphore *out)
{
  GPUSHM_VK__DEVICE_FNS(vk);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkCreateSemaphore, vkCreateSemaphore);
  VkExportSemaphoreCreateInfo exportable = {
    .sType = VK_STRUCTURE_TYPE_EXPORT_SEMAPHORE_CREATE_INFO,
    .handleTypes = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT };
  VkSemaphoreTypeCreateInfo type = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                     .pNext = export_fd ? &exportable : NULL,
                                     .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE,
                                     .initialValue = initial };
  VkSemaphoreCreateInfo sci = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &type };
  VkResult r = vkCreateSemaphore(vk->device, &sci, NULL, out);

  return r == VK_SUCCESS ? 0 : gpushm_vk__result(vk, r, "vkCreateSemaphore (timeline)");
}

/* The timeline's plane: fetched, or minted here and registered; *fd a new fd of it. */
GPUSHM_VK__STATIC int gpushm_vk__plane_fd(gpushm_vk_t *vk, gpushm_timeline_t *tl, unsigned flags,
                                          int *fd)
{
  GPUSHM_VK__DEVICE_FNS(vk);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkGetSemaphoreFdKHR, vkGetSemaphoreFdKHR);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkDestroySemaphore, vkDestroySemaphore);
  VkSemaphoreGetFdInfoKHR get = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_GET_FD_INFO_KHR,
                                  .handleType = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT };
  gpushm_external_memory_t here;
  uint8_t uuid[16];
  VkSemaphore minted;
  VkResult r;
  int ret, minted_fd = -1;

  memset(&here, 0, sizeof here);
  if ((ret = gpushm_vk__describe(vk, &here)) < 0)
    return ret;
  ret = gpushm_timeline_semaphore(tl, -1, NULL, 0, fd, uuid);
  if (ret == GPUSHM_E_NOENT) {
    if (!vkGetSemaphoreFdKHR)
      return gpushm_vk__fail(vk, GPUSHM_E_UNSUPPORTED, "'%s' has no semaphore plane yet, and "
                             "this device cannot mint one: enable VK_KHR_external_semaphore_fd "
                             "(and the timelineSemaphore feature)", gpushm_timeline_name(tl));
    /* minted where the fence stands; gpushmd signals it to the fence once registered */
    if ((ret = gpushm_vk__timeline_semaphore(vk, gpushm_timeline_value(tl), 1, &minted)) < 0)
      return ret;
    get.semaphore = minted;
    if ((r = vkGetSemaphoreFdKHR(vk->device, &get, &minted_fd)) != VK_SUCCESS) {
      vkDestroySemaphore(vk->device, minted, NULL);
      return gpushm_vk__result(vk, r, "vkGetSemaphoreFdKHR");
    }
    ret = gpushm_timeline_semaphore(tl, minted_fd, here.device_uuid, flags, fd, uuid);
    close(minted_fd);
    /* the payload lives on in the fds gpushmd keeps and hands out */
    vkDestroySemaphore(vk->device, minted, NULL);
  }
  if (ret < 0)
    return gpushm_vk__fail(vk, ret, "%s", gpushm_last_error_message());
  if (memcmp(uuid, here.device_uuid, 16) != 0) {
    close(*fd);
    *fd = -1;
    return gpushm_vk__fail(vk, GPUSHM_E_UNSUPPORTED, "'%s''s semaphore lives on another GPU "
                           "than this Vulkan device: wait for it on the CPU "
                           "(gpushm_timeline_wait())", gpushm_timeline_name(tl));
  }
  return 0;
}

/* The timeline's control block page as a buffer a queue writes the fence into
 * (VK_EXT_external_memory_host); 1 for a read-only open, which has none. */
GPUSHM_VK__STATIC int gpushm_vk__fence_page(gpushm_vk_t *vk, gpushm_timeline_t *tl,
                                            gpushm_vk_timeline_t *out)
{
  GPUSHM_VK__DEVICE_FNS(vk);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkCreateBuffer, vkCreateBuffer);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkGetBufferMemoryRequirements, vkGetBufferMemoryRequirements);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkBindBufferMemory, vkBindBufferMemory);
  VkExternalMemoryBufferCreateInfo ext = {
    .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
    .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT };
  VkBufferCreateInfo bci = { .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .pNext = &ext,
                             .size = 4096, .usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE };
  gpushm_memory_info_t page = { .size = sizeof page,
                                .handle_type = GPUSHM_EXTERNAL_HOST_POINTER,
                                .allocation_size = 4096,
                                .memory_type_index = GPUSHM_MEMORY_TYPE_ANY };
  VkMemoryRequirements req;
  size_t fence_offset;
  VkResult r;
  int ret;

  ret = gpushm_timeline_fence_page(tl, &page.host_pointer, &fence_offset);
  if (ret == GPUSHM_E_PERM)
    return 1; /* read-only: it waits, and has no fence to write */
  if (ret < 0)
    return gpushm_vk__fail(vk, ret, "%s", gpushm_last_error_message());
  if ((r = vkCreateBuffer(vk->device, &bci, NULL, &out->fence_buffer)) != VK_SUCCESS)
    return gpushm_vk__result(vk, r, "vkCreateBuffer (the timeline's page)");
  vkGetBufferMemoryRequirements(vk->device, out->fence_buffer, &req);
  if ((ret = gpushm_vk__import_memory(vk, &page, -1, &req, VK_NULL_HANDLE, VK_NULL_HANDLE,
                                      &out->fence_memory)) < 0 ||
      (r = vkBindBufferMemory(vk->device, out->fence_buffer, out->fence_memory, 0)) !=
        VK_SUCCESS)
    return ret < 0 ? ret : gpushm_vk__result(vk, r, "vkBindBufferMemory (the timeline's page)");
  out->fence_offset = fence_offset;
  return 0;
}

/* The timeline's plane (fetched, or minted here and registered) imported as *out. */
GPUSHM_VK__STATIC int gpushm_vk__import_plane(gpushm_vk_t *vk, gpushm_timeline_t *tl,
                                              unsigned flags, VkSemaphore *out)
{
  GPUSHM_VK__DEVICE_FNS(vk);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkImportSemaphoreFdKHR, vkImportSemaphoreFdKHR);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkDestroySemaphore, vkDestroySemaphore);
  VkImportSemaphoreFdInfoKHR import = { .sType = VK_STRUCTURE_TYPE_IMPORT_SEMAPHORE_FD_INFO_KHR,
                                        .handleType = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT };
  VkResult r;
  int fd = -1, ret;

  *out = VK_NULL_HANDLE;
  if (!vkImportSemaphoreFdKHR)
    return gpushm_vk__fail(vk, GPUSHM_E_UNSUPPORTED, "a timeline's semaphore imports through "
                           "VK_KHR_external_semaphore_fd: enable it on the device");
  if ((ret = gpushm_vk__plane_fd(vk, tl, flags, &fd)) < 0)
    return ret;
  if ((ret = gpushm_vk__timeline_semaphore(vk, 0, 0, out)) < 0) {
    close(fd);
    return ret;
  }
  import.semaphore = *out;
  import.fd = fd;
  if ((r = vkImportSemaphoreFdKHR(vk->device, &import)) != VK_SUCCESS) {
    close(fd); /* an import owns its fd on success only */
    vkDestroySemaphore(vk->device, *out, NULL);
    *out = VK_NULL_HANDLE;
    return gpushm_vk__result(vk, r, "vkImportSemaphoreFdKHR");
  }
  return 0;
}

GPUSHM_VK_API int gpushm_vk_import_timeline(gpushm_vk_t *vk, gpushm_timeline_t *tl,
                                            unsigned flags, gpushm_vk_timeline_t *out)
{
  int ret;

  memset(out, 0, sizeof *out);
  if ((ret = gpushm_vk__import_plane(vk, tl, flags, &out->semaphore)) < 0)
    return ret;
  /* a signaller writes the fence too: read-write opens import the control block's page */
  if ((ret = gpushm_vk__fence_page(vk, tl, out)) < 0) {
    gpushm_vk_destroy_timeline(vk, out);
    return ret;
  }
  return 0;
}

/* The done plane's mirror: the queue signals the plane, and this thread writes what it
 * reached into the done timeline's fence, which CPU producers and gpushmd read (a write
 * from the queue needed two barriers: 3.5 % of a 1080p ring's frames/s on the H200).
 * It reads the semaphore's value and sleeps rather than wait in vkWaitSemaphores, which
 * on NVIDIA's driver spins (a whole core, idle or not, on an H200 with driver 580): every
 * 100 us while releases come, backing off to every 2 ms, which bounds how late a CPU
 * reader sees a release (CUDA producers wait on the plane itself). */
#define GPUSHM_VK__MIRROR_FIRST_US 100
#define GPUSHM_VK__MIRROR_LAST_US 2000
struct gpushm_vk__mirror {
  VkDevice device;
  PFN_vkGetSemaphoreCounterValue value;
  VkSemaphore semaphore;
  uint64_t *fence; /* in the done timeline's control block, mapped here */
  pthread_t thread;
  int stop; /* __atomic */
};

/* Raises the fence to v, never lowers it (gpushmd raises it past every frame at a detach). */
GPUSHM_VK__STATIC void gpushm_vk__raise(uint64_t *fence, uint64_t v)
{
  uint64_t was = __atomic_load_n(fence, __ATOMIC_ACQUIRE);

  while (was < v && !__atomic_compare_exchange_n(fence, &was, v, 1, __ATOMIC_RELEASE,
                                                 __ATOMIC_ACQUIRE))
    ;
}

GPUSHM_VK__STATIC void *gpushm_vk__mirror_run(void *arg)
{
  struct gpushm_vk__mirror *m = (struct gpushm_vk__mirror *)arg;
  /* from the semaphore's own values: the fence may stand far beyond them (gpushmd's
   * raise at a detach) */
  uint64_t reached = 0, v;
  long sleep_us = GPUSHM_VK__MIRROR_FIRST_US;

  /* what top -H and the tests see: GPUSHM_VK_MIRROR_THREAD_NAME */
  (void)prctl(PR_SET_NAME, GPUSHM_VK_MIRROR_THREAD_NAME, 0, 0, 0);
  for (;;) {
    int stopping = __atomic_load_n(&m->stop, __ATOMIC_ACQUIRE);
    struct timeval nap = { 0, 0 };

    /* a lost device: CPU readers see no more releases, as if this process died */
    if (m->value(m->device, m->semaphore, &v) != VK_SUCCESS)
      break;
    if (v > reached) {
      gpushm_vk__raise(m->fence, reached = v);
      sleep_us = GPUSHM_VK__MIRROR_FIRST_US;
    } else if ((sleep_us *= 2) > GPUSHM_VK__MIRROR_LAST_US) {
      sleep_us = GPUSHM_VK__MIRROR_LAST_US;
    }
    if (stopping)
      break;
    nap.tv_usec = sleep_us; /* select(): nanosleep() is not declared under -std=c11 */
    (void)select(0, NULL, NULL, NULL, &nap);
  }
  return NULL;
}

GPUSHM_VK__STATIC int gpushm_vk__start_mirror(gpushm_vk_t *vk, gpushm_timeline_t *done,
                                              VkSemaphore semaphore,
                                              struct gpushm_vk__mirror **out)
{
  GPUSHM_VK__DEVICE_FNS(vk);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkGetSemaphoreCounterValue, vkGetSemaphoreCounterValue);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkGetSemaphoreCounterValueKHR, vkGetSemaphoreCounterValueKHR);
  struct gpushm_vk__mirror *m;
  void *page;
  size_t at;
  int ret;

  *out = NULL;
  if ((ret = gpushm_timeline_fence_page(done, &page, &at)) < 0)
    return gpushm_vk__fail(vk, ret, "%s", gpushm_last_error_message());
  if (!(m = (struct gpushm_vk__mirror *)calloc(1, sizeof *m)))
    return gpushm_vk__fail(vk, GPUSHM_E_NOMEM, "out of memory");
  m->device = vk->device;
  /* core in Vulkan 1.2, VK_KHR_timeline_semaphore's before */
  m->value = vkGetSemaphoreCounterValue ? vkGetSemaphoreCounterValue
                                        : vkGetSemaphoreCounterValueKHR;
  m->semaphore = semaphore;
  m->fence = (uint64_t *)((char *)page + at);
  if (!m->value) {
    free(m);
    return gpushm_vk__fail(vk, GPUSHM_E_UNSUPPORTED, "reading a timeline semaphore needs "
                           "Vulkan 1.2 or VK_KHR_timeline_semaphore");
  }
  if ((ret = pthread_create(&m->thread, NULL, gpushm_vk__mirror_run, m)) != 0) {
    free(m);
    return gpushm_vk__fail(vk, GPUSHM_E_NOMEM, "pthread_create: %s", strerror(ret));
  }
  *out = m;
  return 0;
}

/* Its last look at the plane writes the last release. */
GPUSHM_VK__STATIC void gpushm_vk__stop_mirror(struct gpushm_vk__mirror *m)
{
  if (!m)
    return;
  __atomic_store_n(&m->stop, 1, __ATOMIC_RELEASE);
  pthread_join(m->thread, NULL);
  free(m);
}

GPUSHM_VK_API int gpushm_vk_attach_ring(gpushm_vk_t *vk, gpushm_ring_t *ring,
                                        gpushm_vk_ring_t *out)
{
  GPUSHM_VK__DEVICE_FNS(vk);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkGetSemaphoreFdKHR, vkGetSemaphoreFdKHR);
  VkSemaphoreGetFdInfoKHR get = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_GET_FD_INFO_KHR,
                                  .handleType = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT };
  gpushm_timeline_t *done = gpushm_ring_done_timeline(ring);
  gpushm_external_memory_t here;
  VkResult r;
  int fd = -1, ret;

  memset(out, 0, sizeof *out);
  memset(&here, 0, sizeof here);
  if (!vkGetSemaphoreFdKHR)
    return gpushm_vk__fail(vk, GPUSHM_E_UNSUPPORTED, "a ring consumer's semaphore is minted "
                           "here and exported: enable VK_KHR_external_semaphore_fd (and the "
                           "timelineSemaphore feature) on the device");
  if (!done)
    return gpushm_vk__fail(vk, GPUSHM_E_INVAL, "'%s' is not open as a consumer here "
                           "(gpushm_ring_open(conn, name, 0, &ring))", gpushm_ring_name(ring));
  if ((ret = gpushm_vk__describe(vk, &here)) < 0)
    return ret;
  /* at the frame last reached: at or below every frame the consumer will wait for */
  if ((ret = gpushm_vk__timeline_semaphore(vk, gpushm_ring_presented(ring), 1, &out->ready)) < 0)
    return ret;
  /* Everything that can fail before the ready plane's registration, which cannot be
   * taken back (a consumer registers once).  The done plane's can (a second import
   * finds it), and it goes with the done timeline. */
  ret = gpushm_vk__import_plane(vk, done, GPUSHM_SEMAPHORE_TO_READERS, &out->done);
  if (ret == 0)
    ret = gpushm_vk__start_mirror(vk, done, out->done, &out->mirror);
  get.semaphore = out->ready;
  if (ret == 0 && (r = vkGetSemaphoreFdKHR(vk->device, &get, &fd)) != VK_SUCCESS)
    ret = gpushm_vk__result(vk, r, "vkGetSemaphoreFdKHR");
  if (ret == 0) {
    ret = gpushm_ring_register_semaphore(ring, fd, here.device_uuid);
    close(fd);
    if (ret < 0)
      ret = gpushm_vk__fail(vk, ret, "%s", gpushm_last_error_message());
  }
  if (ret < 0)
    gpushm_vk_detach_ring(vk, out);
  return ret;
}

GPUSHM_VK_API void gpushm_vk_detach_ring(gpushm_vk_t *vk, gpushm_vk_ring_t *r)
{
  GPUSHM_VK__DEVICE_FNS(vk);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkDestroySemaphore, vkDestroySemaphore);

  gpushm_vk__stop_mirror(r->mirror);
  if (r->ready)
    vkDestroySemaphore(vk->device, r->ready, NULL);
  if (r->done)
    vkDestroySemaphore(vk->device, r->done, NULL);
  memset(r, 0, sizeof *r);
}

GPUSHM_VK_API int gpushm_vk_timeline_record_signal(gpushm_vk_t *vk, gpushm_vk_timeline_t *t,
                                                   VkCommandBuffer cmd, uint64_t value)
{
  GPUSHM_VK__DEVICE_FNS(vk);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkCmdPipelineBarrier, vkCmdPipelineBarrier);
  GPUSHM_VK__DEVICE_FN(vk, PFN_vkCmdUpdateBuffer, vkCmdUpdateBuffer);
  /* everything before it in submission order, then the write, then the host's view */
  VkMemoryBarrier before = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                             .srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT,
                             .dstAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT };
  VkBufferMemoryBarrier after = { .sType = VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER,
                                  .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                                  .dstAccessMask = VK_ACCESS_HOST_READ_BIT,
                                  .srcQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
                                  .dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
                                  .buffer = t->fence_buffer, .offset = t->fence_offset,
                                  .size = 8 };

  if (!t->fence_buffer)
    return gpushm_vk__fail(vk, GPUSHM_E_PERM, "the timeline is open read-only here: "
                           "signalling is a write, open it read-write");
  if (value == 0)
    return gpushm_vk__fail(vk, GPUSHM_E_INVAL, "signal of value 0: values start at 1");
  vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0,
                       1, &before, 0, NULL, 0, NULL);
  vkCmdUpdateBuffer(cmd, t->fence_buffer, t->fence_offset, sizeof value, &value);
  vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 0,
                       NULL, 1, &after, 0, NULL);
  return 0;
}

#undef GPUSHM_VK__DEVICE_FN
#undef GPUSHM_VK__INSTANCE_FN
#undef GPUSHM_VK__DEVICE_FNS
#endif /* GPUSHM_VK_IMPL || !GPUSHM_VK_SHARED */

#ifdef __cplusplus
}
#endif
#endif /* GPUSHM_VULKAN_H */

/* SPDX-License-Identifier: MIT */
/* A headless Vulkan consumer of frame-producer's frame ring: imports the ring's memory
 * once (device memory, as one buffer; host memory opened read-only is copied in through
 * a staging buffer, as Vulkan imports only writable host pages), takes frames in turn,
 * copies each frame's slot into an image of its own device (acquiring the slot from
 * VK_QUEUE_FAMILY_EXTERNAL first, releasing it back after), reads it back, checks it,
 * writes a PNG and releases the frame to the producer.
 *   usage: frame-vk-consumer DIR [FRAME...]   (default frames 10 30 50; where one has
 *   gone by, a later one) */
#include "frame-consumer.h"
#include "vk-context.h"

static int fail(const char *what, int r)
{
  fprintf(stderr, "frame-vk-consumer: %s: %s: %s\n", what, gpushm_strerror(r),
          gpushm_last_error_message());
  return 1;
}

int main(int argc, char **argv)
{
  static const unsigned defaults[] = { 10, 30, 50 };
  const char *dir = argc > 1 ? argv[1] : ".";
  gpushm_memory_info_t info = { .size = sizeof info };
  gpushm_image_desc_t desc;
  gpushm_vk_buffer_t rows = { 0 };
  gpushm_ring_t *ring;
  gpushm_buffer_t *memory;
  struct vkc_buffer out, staging = { 0 };
  VkBuffer rows_buffer;
  uint32_t row_length;
  gpushm_t *conn;
  struct vkc c;
  VkImage own;
  VkDeviceMemory own_memory;
  char why[256];
  unsigned last = 0;
  int kept = 0, wanted = argc > 2 ? argc - 2 : 3, r;

  if ((r = consumer_args("frame-vk-consumer", argc, argv)) >= 0)
    return r;
  if ((r = gpushm_connect(NULL, "frame-vk-consumer", &conn)) < 0)
    return fail("connect", r);
  if (consumer_open(conn, &ring) < 0)
    return 1;
  memory = gpushm_ring_buffer(ring);
  if ((r = gpushm_buffer_image_desc(memory, &desc)) < 0)
    return fail("image layout", r);
  if ((r = gpushm_buffer_memory_info(memory, &info)) < 0)
    return fail("memory info", r);
  /* the Vulkan device the memory lives on (any, for host memory) */
  if (vkc_open(&c, info.handle_type == GPUSHM_EXTERNAL_OPAQUE_FD ? info.device_uuid : NULL, why,
               sizeof why) < 0) {
    fprintf(stderr, "frame-vk-consumer: %s\n", why);
    return 1;
  }
  row_length = (uint32_t)(desc.row_pitch / 4);
  if (info.handle_type == GPUSHM_EXTERNAL_OPAQUE_FD) {
    /* every slot at once: frame f's rows start f.offset bytes in */
    if (gpushm_vk_import_buffer(&c.gpushm, memory, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, &rows) < 0) {
      fprintf(stderr, "frame-vk-consumer: import: %s\n", c.gpushm.error);
      return 1;
    }
    rows_buffer = rows.buffer;
  } else {
    if (vkc_host_buffer(&c, desc.row_pitch * desc.height, &staging) < 0) {
      fprintf(stderr, "frame-vk-consumer: no host-visible staging buffer\n");
      return 1;
    }
    rows_buffer = staging.buffer;
  }
  {
    VkImageCreateInfo ici = gpushm_vk_image_create_info(&desc, VK_IMAGE_TILING_OPTIMAL, NULL);
    VkMemoryAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO };
    VkMemoryRequirements req;
    ici.usage = VK_IMAGE_USAGE_TRANSFER_DST_BIT | VK_IMAGE_USAGE_TRANSFER_SRC_BIT;
    if (vkCreateImage(c.device, &ici, NULL, &own) != VK_SUCCESS) {
      fprintf(stderr, "frame-vk-consumer: vkCreateImage failed\n");
      return 1;
    }
    vkGetImageMemoryRequirements(c.device, own, &req);
    ai.allocationSize = req.size;
    if (gpushm_vk_memory_type(&c.gpushm, req.memoryTypeBits, GPUSHM_MEMORY_TYPE_ANY,
                              &ai.memoryTypeIndex) < 0) {
      fprintf(stderr, "frame-vk-consumer: %s\n", c.gpushm.error);
      return 1;
    }
    if (vkAllocateMemory(c.device, &ai, NULL, &own_memory) != VK_SUCCESS ||
        vkBindImageMemory(c.device, own, own_memory, 0) != VK_SUCCESS ||
        vkc_host_buffer(&c, FRAME_WIDTH * FRAME_HEIGHT * 4, &out) < 0) {
      fprintf(stderr, "frame-vk-consumer: no memory for its own image and read-back\n");
      return 1;
    }
  }
  printf("frame-vk-consumer: %s on %s; frames from %s memory\n", FRAME_RING, c.props.deviceName,
         info.handle_type == GPUSHM_EXTERNAL_OPAQUE_FD ? "device" : "host");
  for (int i = 0; i < wanted; i++) {
    unsigned want = argc > 2 ? (unsigned)atoi(argv[i + 2]) : defaults[i], got;
    VkDeviceSize offset = 0;
    gpushm_ring_frame_t f;
    double took;
    VkCommandBuffer cb;
    /* A consumer that started late finds later frames than it asked for: it keeps the
     * next one it has not kept instead of the same one twice. */
    if (want <= last)
      want = last + 1;
    if ((r = consumer_next(ring, want, &f)) < 0) {
      fprintf(stderr, "frame-vk-consumer: frame %u: %s: %s\n", want, gpushm_strerror(r),
              gpushm_last_error_message());
      return 1;
    }
    took = consumer_now();
    if (staging.map)
      memcpy(staging.map, gpushm_ring_slot_ptr(ring, f.slot), desc.row_pitch * desc.height);
    else
      offset = f.offset;
    cb = vkc_begin(&c);
    if (!staging.map)
      vkc_buffer_ownership(cb, rows_buffer, offset, gpushm_ring_slot_size(ring), c.queue_family, 1);
    vkc_copy_buffer_to_image_at(cb, rows_buffer, offset, row_length, own,
                                VK_IMAGE_LAYOUT_UNDEFINED,
                                (VkExtent3D){ desc.width, desc.height, 1 }, 1, 1);
    if (!staging.map)
      vkc_buffer_ownership(cb, rows_buffer, offset, gpushm_ring_slot_size(ring), c.queue_family, 0);
    vkc_copy_image_to_buffer(cb, own, VK_IMAGE_LAYOUT_GENERAL,
                             (VkExtent3D){ desc.width, desc.height, 1 }, 1, 1, out.buffer);
    if ((r = vkc_submit(&c, cb)) != 0) {
      fprintf(stderr, "frame-vk-consumer: vkQueueSubmit: VkResult %d\n", r);
      return 1;
    }
    /* the submit is done (vkc_submit waits): the slot is the producer's again */
    if ((r = gpushm_ring_release(ring, &f)) < 0)
      return fail("release", r);
    /* a slot held this long keeps the producer waiting: said, to tell a slow read from
     * a slow producer */
    if ((took = consumer_now() - took) > 1.0)
      fprintf(stderr, "frame-vk-consumer: frame %u held %.1f s\n", (unsigned)f.frame, took);
    if ((r = consumer_keep(dir, "vk", out.map, (unsigned)f.frame, &got)) <= 0) {
      fprintf(stderr, "frame-vk-consumer: frame %u: %s\n", (unsigned)f.frame,
              r < 0 ? "cannot write it" : "not what the producer rendered");
      return 1;
    }
    kept++;
    last = got;
  }
  printf("frame-vk-consumer: %d frames, each identical to what the producer rendered\n", kept);
  vkDestroyImage(c.device, own, NULL);
  vkFreeMemory(c.device, own_memory, NULL);
  vkc_free_buffer(&c, &out);
  if (staging.map)
    vkc_free_buffer(&c, &staging);
  else
    gpushm_vk_destroy_buffer(&c.gpushm, &rows);
  vkc_close(&c);
  if ((r = gpushm_ring_close(ring)) < 0)
    return fail("close ring", r);
  gpushm_disconnect(conn);
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* A producer of frames for graphics consumers: a frame ring (docs/rings.md) of linear
 * RGBA8 images in device memory (cuda-fd: what a CUDA renderer or decoder writes),
 * animated frame after frame.  Each frame goes into a slot no consumer holds any more,
 * and is presented once written; consumers (frame-vk-consumer, frame-gl-consumer) of any
 * uid that may read the ring take frames in turn and hand them back through the ring.
 * Without a GPU the images live in host memory and the CPU writes them.
 *   usage: frame-producer [FRAMES [FPS]]   (defaults 60, 30) */
#include <gpushm-graphics.h>

#include "../devmem.h"
#include "frames.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int fail(const char *what, int r)
{
  fprintf(stderr, "frame-producer: %s: %s: %s\n", what, gpushm_strerror(r),
          gpushm_last_error_message());
  return 1;
}

/* why NULL: --help, on stdout; else what was wrong, on stderr. */
static int usage(const char *why)
{
  fprintf(why ? stderr : stdout, "%s%susage: frame-producer [FRAMES [FPS]]\n"
          "  Presents FRAMES frames (default 60) at FPS a second (default 30) in the frame\n"
          "  ring '%s' (%u slots of %ux%u RGBA8: device memory where gpushmd has cuda-fd,\n"
          "  else host memory).  Run frame-vk-consumer or frame-gl-consumer beside it\n"
          "  (examples/README.md); it waits for every consumer attached to let go of a slot.\n"
          "  Success ends with 'frame-producer: FRAMES frames presented', exit 0.\n",
          why ? why : "", why ? "\n" : "", FRAME_RING, FRAME_SLOTS, FRAME_WIDTH, FRAME_HEIGHT);
  return why ? 2 : 0;
}

int main(int argc, char **argv)
{
  unsigned frames = 60, fps = 30;
  gpushm_create_opts_t opts;
  gpushm_image_desc_t desc;
  gpushm_ring_t *ring;
  gpushm_buffer_t *memory;
  gpushm_t *conn;
  uint8_t *rows;
  int r;

  for (int i = 1; i < argc; i++) {
    char *end;
    unsigned long v = strtoul(argv[i], &end, 10);
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
      return usage(NULL);
    if (argv[i][0] == '-')
      return usage("frame-producer: unknown option");
    if (i > 2 || !*argv[i] || *end || v == 0 || v > 1000000)
      return usage("frame-producer: FRAMES and FPS are numbers from 1");
    *(i == 1 ? &frames : &fps) = (unsigned)v;
  }
  if ((r = gpushm_connect(NULL, "frame-producer", &conn)) < 0)
    return fail("connect", r);
  gpushm_image_desc_init(&desc);
  desc.width = FRAME_WIDTH;
  desc.height = FRAME_HEIGHT;
  desc.usage |= GPUSHM_IMAGE_USAGE_STORAGE;
  gpushm_create_opts_init(&opts);
  opts.backend = (gpushm_daemon_backends(conn) & (1u << GPUSHM_BACKEND_CUDA_FD))
                   ? GPUSHM_BACKEND_CUDA_FD : GPUSHM_BACKEND_HOST;
  opts.mode = 0644; /* consumers need read access alone: they hand frames back through
                     * done timelines of their own */
  opts.lifetime = GPUSHM_LIFETIME_SESSION; /* gone with this producer */
  if ((r = gpushm_ring_create_images(conn, FRAME_RING, FRAME_SLOTS, &desc, &opts, &ring)) < 0)
    return fail("create ring", r);
  memory = gpushm_ring_buffer(ring);
  if ((r = gpushm_buffer_image_desc(memory, &desc)) < 0)
    return fail("image layout", r);
  if (devmem_attach(memory) < 0 || !(rows = calloc(desc.height, desc.row_pitch))) {
    fprintf(stderr, "frame-producer: cannot write the images\n");
    return 1;
  }
  printf("frame-producer: %s, %u slots of %ux%u RGBA8 in %s, row pitch %llu; %u frames at "
         "%u/s\n", FRAME_RING, FRAME_SLOTS, desc.width, desc.height, devmem_where(memory),
         (unsigned long long)desc.row_pitch, frames, fps);
  fflush(stdout);
  for (unsigned f = 1; f <= frames; f++) {
    struct timespec pause = { fps > 1 ? 0 : 1, fps > 1 ? (long)(1000000000L / fps) : 0 };
    gpushm_ring_frame_t slot;
    double start = now(), acquired;
    /* a slot every consumer let go of: none reads it while it is written */
    if ((r = gpushm_ring_acquire_slot(ring, 30000, &slot)) < 0)
      return fail("acquire slot", r);
    acquired = now();
    frame_render(rows, desc.row_pitch, (unsigned)slot.frame);
    if (devmem_write(memory, slot.offset, rows, desc.row_pitch * desc.height) < 0) {
      fprintf(stderr, "frame-producer: frame %u not written\n", f);
      return 1;
    }
    /* A consumer's frame that does not come: here is where the producer was. */
    if (now() - start > 1.0)
      fprintf(stderr, "frame-producer: frame %llu: %.1f s waiting for its slot, %.1f s "
              "writing it\n", (unsigned long long)slot.frame, acquired - start, now() - acquired);
    /* written, and landed (devmem_write waits for the copy): the frame is ready */
    if ((r = gpushm_ring_present(ring, &slot)) < 0)
      return fail("present", r);
    nanosleep(&pause, NULL);
  }
  printf("frame-producer: %u frames presented\n", frames);
  free(rows);
  if ((r = gpushm_ring_close(ring)) < 0)
    return fail("close ring", r);
  gpushm_disconnect(conn);
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* A producer of frames for graphics consumers: a linear RGBA8 image in device memory
 * (cuda-fd: what a CUDA renderer or decoder writes), animated frame after frame, and a
 * small sync buffer whose release sequence counts the frames published.  Consumers
 * (frame-vk-consumer, frame-gl-consumer) acquire frame numbers and sample the image.
 * Without a GPU the image lives in host memory and the CPU writes it.
 *   usage: frame-producer [FRAMES [FPS]]   (defaults 60, 30) */
#include <gpushm-graphics.h>

#include "../devmem.h"
#include "frames.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int fail(const char *what, int r)
{
  fprintf(stderr, "frame-producer: %s: %s: %s\n", what, gpushm_strerror(r),
          gpushm_last_error_message());
  return 1;
}

int main(int argc, char **argv)
{
  unsigned frames = argc > 1 ? (unsigned)atoi(argv[1]) : 60, fps = argc > 2 ? (unsigned)atoi(argv[2]) : 30;
  gpushm_create_opts_t opts, seq_opts;
  gpushm_image_desc_t desc;
  gpushm_buffer_t *image, *seq;
  gpushm_t *conn;
  uint8_t *rows;
  int r;

  if ((r = gpushm_connect(NULL, "frame-producer", &conn)) < 0)
    return fail("connect", r);
  gpushm_image_desc_init(&desc);
  desc.width = FRAME_WIDTH;
  desc.height = FRAME_HEIGHT;
  desc.usage |= GPUSHM_IMAGE_USAGE_STORAGE;
  gpushm_create_opts_init(&opts);
  opts.backend = (gpushm_daemon_backends(conn) & (1u << GPUSHM_BACKEND_CUDA_FD))
                   ? GPUSHM_BACKEND_CUDA_FD : GPUSHM_BACKEND_HOST;
  opts.mode = 0644;
  opts.lifetime = GPUSHM_LIFETIME_SESSION; /* gone with this producer */
  if ((r = gpushm_image_create(conn, FRAME_IMAGE, &desc, &opts, &image)) < 0)
    return fail("create image", r);
  if ((r = gpushm_buffer_image_desc(image, &desc)) < 0)
    return fail("image layout", r);
  gpushm_create_opts_init(&seq_opts);
  seq_opts.backend = GPUSHM_BACKEND_HOST;
  seq_opts.mode = 0644;
  seq_opts.lifetime = GPUSHM_LIFETIME_SESSION;
  seq_opts.flags = GPUSHM_CREATE_SYNC;
  if ((r = gpushm_buffer_create(conn, FRAME_SEQ, 8, &seq_opts, &seq)) < 0)
    return fail("create sequence", r);
  if (devmem_attach(image) < 0 || !(rows = calloc(desc.height, desc.row_pitch))) {
    fprintf(stderr, "frame-producer: cannot write the image\n");
    return 1;
  }
  printf("frame-producer: %s, %ux%u RGBA8 in %s, row pitch %llu; %u frames at %u/s\n",
         FRAME_IMAGE, desc.width, desc.height, devmem_where(image),
         (unsigned long long)desc.row_pitch, frames, fps);
  fflush(stdout);
  for (unsigned f = 1; f <= frames; f++) {
    struct timespec pause = { fps > 1 ? 0 : 1, fps > 1 ? (long)(1000000000L / fps) : 0 };
    uint64_t published;
    frame_render(rows, desc.row_pitch, f);
    /* the frame, then its number: a consumer that acquires f finds frame f written */
    if (devmem_write(image, 0, rows, desc.row_pitch * desc.height) < 0) {
      fprintf(stderr, "frame-producer: frame %u not written\n", f);
      return 1;
    }
    if ((r = gpushm_buffer_release(seq, NULL, &published)) < 0)
      return fail("release", r);
    nanosleep(&pause, NULL);
  }
  printf("frame-producer: %u frames published\n", frames);
  free(rows);
  if ((r = gpushm_buffer_close(seq)) < 0)
    return fail("close sequence", r);
  if ((r = gpushm_buffer_close(image)) < 0)
    return fail("close image", r);
  gpushm_disconnect(conn);
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* A headless OpenGL (EGL) consumer of frame-producer's frame ring: device memory is
 * imported once (every slot's rows as one buffer object, each frame uploaded into a
 * texture from its slot's offset), host memory is copied in (GL imports none); a shader
 * samples each frame's texture into one of this program's own (gl-sampler.h), which is
 * read back, checked and written as a PNG, and the frame released to the producer.
 *   usage: frame-gl-consumer DIR [FRAME...]   (default frames 10 30 50; where one has
 *   gone by, a later one) */
#include <gpushm-gl.h>

#include "egl-context.h"
#include "frame-consumer.h"
#include "gl-sampler.h"

static int fail(const char *what, int r)
{
  fprintf(stderr, "frame-gl-consumer: %s: %s: %s\n", what, gpushm_strerror(r),
          gpushm_last_error_message());
  return 1;
}

int main(int argc, char **argv)
{
  static const unsigned defaults[] = { 10, 30, 50 };
  static uint8_t rgba[FRAME_WIDTH * FRAME_HEIGHT * 4];
  const char *dir = argc > 1 ? argv[1] : ".";
  void (*get_texture)(GLuint, GLint, GLenum, GLenum, GLsizei, void *);
  gpushm_memory_info_t info = { .size = sizeof info };
  gpushm_image_desc_t desc;
  gpushm_ring_t *ring;
  gpushm_buffer_t *image;
  GLuint rows = 0, memory = 0, texture;
  GLenum format;
  gpushm_t *conn;
  struct eglc e;
  gpushm_gl_t gl;
  struct gl_sampler sampler;
  char why[256] = "";
  unsigned last = 0;
  int kept = 0, wanted = argc > 2 ? argc - 2 : 3, r;

  if ((r = consumer_args("frame-gl-consumer", argc, argv)) >= 0)
    return r;
  if ((r = gpushm_connect(NULL, "frame-gl-consumer", &conn)) < 0)
    return fail("connect", r);
  if (consumer_open(conn, &ring) < 0)
    return 1;
  image = gpushm_ring_buffer(ring); /* every slot's memory, each slot an image of desc */
  if ((r = gpushm_buffer_image_desc(image, &desc)) < 0)
    return fail("image layout", r);
  if ((r = gpushm_buffer_memory_info(image, &info)) < 0)
    return fail("memory info", r);
  if (eglc_open(&e, why, sizeof why) < 0) {
    fprintf(stderr, "frame-gl-consumer: %s\n", why);
    return 1;
  }
  if (gpushm_gl_init(&gl, eglc_proc) < 0) {
    fprintf(stderr, "frame-gl-consumer: %s\n", gl.error);
    return 1;
  }
  if (!(format = gpushm_format_gl((int)desc.format))) {
    fprintf(stderr, "frame-gl-consumer: image format %u has no GL format\n", (unsigned)desc.format);
    return 1;
  }
  if (!(*(void **)&get_texture = eglc_proc("glGetTextureImage"))) {
    fprintf(stderr, "frame-gl-consumer: no glGetTextureImage (GL 4.5)\n");
    return 1;
  }
  if (info.handle_type == GPUSHM_EXTERNAL_OPAQUE_FD &&
      gpushm_gl_import_buffer(&gl, image, 0, &rows, &memory) < 0) {
    fprintf(stderr, "frame-gl-consumer: import: %s\n", gl.error);
    return 1;
  }
  gl.CreateTextures(GL_TEXTURE_2D, 1, &texture);
  gl.TextureStorage2D(texture, 1, format, (GLsizei)desc.width, (GLsizei)desc.height);
  if (gl_sampler_open(&sampler, &gl, eglc_proc, format, (GLsizei)desc.width,
                      (GLsizei)desc.height, why, sizeof why) < 0) {
    fprintf(stderr, "frame-gl-consumer: %s\n", why);
    return 1;
  }
  printf("frame-gl-consumer: %s on %s; frames from %s memory\n", FRAME_RING,
         gl.GetString(GL_RENDERER), rows ? "device" : "host (copied in)");
  for (int i = 0; i < wanted; i++) {
    unsigned want = argc > 2 ? (unsigned)atoi(argv[i + 2]) : defaults[i], got;
    gpushm_ring_frame_t f;
    double took;
    GLenum error;
    /* A consumer that started late finds later frames than it asked for: it keeps the
     * next one it has not kept instead of the same one twice. */
    if (want <= last)
      want = last + 1;
    if ((r = consumer_next(ring, want, &f)) < 0) {
      fprintf(stderr, "frame-gl-consumer: frame %u: %s: %s\n", want, gpushm_strerror(r),
              gpushm_last_error_message());
      return 1;
    }
    took = consumer_now();
    /* the slot's rows: from the imported buffer object at its offset, or from host memory */
    if (rows)
      gl.BindBuffer(GPUSHM_GL_PIXEL_UNPACK_BUFFER, rows);
    gl.PixelStorei(GPUSHM_GL_UNPACK_ROW_LENGTH, (GLint)(desc.row_pitch / 4));
    gl.TextureSubImage2D(texture, 0, 0, 0, (GLsizei)desc.width, (GLsizei)desc.height, GL_RGBA,
                         GL_UNSIGNED_BYTE,
                         rows ? (const void *)(uintptr_t)f.offset : gpushm_ring_slot_ptr(ring, f.slot));
    gl.PixelStorei(GPUSHM_GL_UNPACK_ROW_LENGTH, 0);
    if (rows)
      gl.BindBuffer(GPUSHM_GL_PIXEL_UNPACK_BUFFER, 0);
    gl_sampler_draw(&sampler, &gl, texture);
    /* read back: GL is done with the slot, which is the producer's again */
    get_texture(sampler.target, 0, GL_RGBA, GL_UNSIGNED_BYTE, sizeof rgba, rgba);
    if ((error = gl.GetError()) != GL_NO_ERROR) {
      fprintf(stderr, "frame-gl-consumer: frame %u: GL error 0x%x\n", want, error);
      return 1;
    }
    if ((r = gpushm_ring_release(ring, &f)) < 0)
      return fail("release", r);
    /* a slot held this long keeps the producer waiting: said, to tell a slow read from
     * a slow producer */
    if ((took = consumer_now() - took) > 1.0)
      fprintf(stderr, "frame-gl-consumer: frame %u held %.1f s\n", (unsigned)f.frame, took);
    if ((r = consumer_keep(dir, "gl", rgba, (unsigned)f.frame, &got)) <= 0) {
      fprintf(stderr, "frame-gl-consumer: frame %u: %s\n", (unsigned)f.frame,
              r < 0 ? "cannot write it" : "not what the producer rendered");
      return 1;
    }
    kept++;
    last = got;
  }
  printf("frame-gl-consumer: %d frames, each identical to what the producer rendered\n", kept);
  gl_sampler_close(&sampler, &gl);
  gl.DeleteTextures(1, &texture);
  if (rows) {
    gl.DeleteBuffers(1, &rows);
    gl.DeleteMemoryObjectsEXT(1, &memory);
  }
  eglc_close(&e);
  if ((r = gpushm_ring_close(ring)) < 0)
    return fail("close ring", r);
  gpushm_disconnect(conn);
  return 0;
}

/* SPDX-License-Identifier: MIT */
/* gpushm objects in OpenGL (gpushm-gl.h): a buffer and an optimal image a Vulkan
 * process exported and registered, imported by a headless GL process of another uid
 * (uid 65534 where root runs this) as a buffer object and a texture, read back (a
 * lavapipe memfd opened read-only comes read-only, which llvmpipe cannot import: refused
 * naming the cure, then opened read-write); memory of another device refused naming
 * both.  CI: lavapipe → llvmpipe; the GPU host: the
 * NVIDIA driver both sides. */
#define _GNU_SOURCE
#include "config.h"
#include "harness.h"
#include "vk-context.h"
#include "gl-verify.h"
#include "kept-read-only.h"
#include "header-only-gl.h"

#include <stddef.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define W 64
#define H 32
#define BUFFER_BYTES (64u * 1024u)

static const char *socket_path;

static uint32_t word(uint32_t i, uint32_t seed)
{
  return seed ^ (i * 2654435761u);
}

static void registrar(void)
{
  struct vkc c;
  struct vkc_buffer staging;
  gpushm_vk_buffer_t vb;
  gpushm_vk_image_t vi;
  gpushm_image_desc_t d;
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b, *img;
  gpushm_t *conn;
  VkCommandBuffer cb;
  VkBufferCopy whole = { 0, 0, BUFFER_BYTES };
  char why[256];

  if (vkc_open(&c, NULL, why, sizeof why) < 0) {
    fprintf(stderr, "vulkan: %s\n", why);
    exit(1);
  }
  CHECK_OK(gpushm_connect(socket_path, "gl-registrar", &conn));
  CHECK(vkc_host_buffer(&c, BUFFER_BYTES, &staging) == 0);
  gpushm_create_opts_init(&opts);
  opts.mode = 0666; /* read-write for a reader of lavapipe's memfds (kept-read-only.h) */
  if (gpushm_vk_create_buffer(&c.gpushm, conn, "for-gl", BUFFER_BYTES,
                              VK_BUFFER_USAGE_TRANSFER_DST_BIT, &opts, &vb, &b) < 0 ||
      (gpushm_image_desc_init(&d), d.width = W, d.height = H, d.tiling = GPUSHM_TILING_OPTIMAL,
       gpushm_vk_create_image(&c.gpushm, conn, "tex-for-gl", &d, &opts, &vi, &img) < 0)) {
    fprintf(stderr, "export: %s\n", c.gpushm.error);
    exit(1);
  }
  for (uint32_t i = 0; i < BUFFER_BYTES / 4; i++)
    ((uint32_t *)staging.map)[i] = word(i, 0x91000000u);
  cb = vkc_begin(&c);
  vkCmdCopyBuffer(cb, staging.buffer, vb.buffer, 1, &whole);
  CHECK(vkc_submit(&c, cb) == 0);
  for (uint32_t i = 0; i < W * H; i++)
    ((uint32_t *)staging.map)[i] = word(i, 0x7e000000u);
  cb = vkc_begin(&c);
  vkc_copy_buffer_to_image(cb, staging.buffer, 0, vi.image, VK_IMAGE_LAYOUT_UNDEFINED,
                           vi.extent, 1, 1);
  CHECK(vkc_submit(&c, cb) == 0);
  vkc_free_buffer(&c, &staging);
  gpushm_vk_destroy_buffer(&c.gpushm, &vb);
  gpushm_vk_destroy_image(&c.gpushm, &vi);
  vkc_close(&c);
  gpushm_disconnect(conn);
}

/* Read-only where the memory imports so (NVIDIA's); a memfd kept read-only is refused
 * by the helper, naming the cure, and opened read-write. */
static gpushm_buffer_t *open_for_graphics(gpushm_gl_t *gl, gpushm_t *conn, const char *name,
                                          bool texture)
{
  gpushm_buffer_t *b = open_unmapped(conn, name, GPUSHM_OPEN_READONLY);
  GLuint object = 0, memory = 0;

  if (!kept_read_only(b))
    return b;
  CHECK_ERR(texture ? gpushm_gl_import_texture(gl, b, &object, &memory)
                    : gpushm_gl_import_buffer(gl, b, 0, &object, &memory),
            GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(gl->error, "open it read-write") && object == 0 && memory == 0);
  CHECK_OK(gpushm_buffer_close(b));
  return open_unmapped(conn, name, 0);
}

static void consumer(void)
{
  void (*get_buffer)(GLuint, GLintptr, GLsizeiptr, void *);
  void (*get_texture)(GLuint, GLint, GLenum, GLenum, GLsizei, void *);
  struct eglc e;
  gpushm_gl_t gl;
  gpushm_buffer_t *b, *img;
  gpushm_t *conn;
  GLuint buffer, texture, memory, tex_memory;
  uint32_t *got = malloc(BUFFER_BYTES);
  char why[256];
  /* llvmpipe (Mesa 22.3) refuses buffer storage over a whole imported memory object,
   * and takes it over all but its last page: read all but that page there */
  uint64_t size;

  if (eglc_open(&e, why, sizeof why) < 0) {
    fprintf(stderr, "egl: %s\n", why);
    exit(1);
  }
  if (gpushm_gl_init(&gl, eglc_proc) < 0) {
    fprintf(stderr, "gl: %s\n", gl.error);
    exit(1);
  }
  fprintf(stderr, "# GL: %s, %s\n", gl.GetString(GL_RENDERER), gl.GetString(GL_VERSION));
  size = strstr((const char *)gl.GetString(GL_RENDERER), "llvmpipe") ? BUFFER_BYTES - 4096
                                                                      : BUFFER_BYTES;
  *(void **)&get_buffer = eglc_proc("glGetNamedBufferSubData");
  *(void **)&get_texture = eglc_proc("glGetTextureImage");
  CHECK(got && get_buffer && get_texture);
  CHECK_OK(gpushm_connect(socket_path, "gl-consumer", &conn));
  b = open_for_graphics(&gl, conn, "for-gl", false);
  if (gpushm_gl_import_buffer(&gl, b, size, &buffer, &memory) < 0) {
    fprintf(stderr, "import buffer: %s\n", gl.error);
    exit(1);
  }
  memset(got, 0, BUFFER_BYTES);
  get_buffer(buffer, 0, (GLsizeiptr)size, got);
  CHECK(gl.GetError() == GL_NO_ERROR);
  for (uint32_t i = 0; i < size / 4; i++)
    if (got[i] != word(i, 0x91000000u)) {
      fprintf(stderr, "word %u = 0x%08x, want 0x%08x\n", i, got[i], word(i, 0x91000000u));
      exit(1);
    }
  /* the same by a GL compute shader, which a wrong pattern fails */
  CHECK(glv_words(&gl, buffer, (uint32_t)(size / 4), 0x91000000u) == 0);
  CHECK(glv_words(&gl, buffer, (uint32_t)(size / 4), 0x91000001u) == (long)(size / 4));
  img = open_for_graphics(&gl, conn, "tex-for-gl", true);
  if (gpushm_gl_import_texture(&gl, img, &texture, &tex_memory) < 0) {
    fprintf(stderr, "import texture: %s\n", gl.error);
    exit(1);
  }
  memset(got, 0, W * H * 4);
  get_texture(texture, 0, GL_RGBA, GL_UNSIGNED_BYTE, W * H * 4, got);
  CHECK(gl.GetError() == GL_NO_ERROR);
  for (uint32_t i = 0; i < W * H; i++)
    if (got[i] != word(i, 0x7e000000u)) {
      fprintf(stderr, "texel %u = 0x%08x, want 0x%08x\n", i, got[i], word(i, 0x7e000000u));
      exit(1);
    }
  gl.DeleteBuffers(1, &buffer);
  gl.DeleteTextures(1, &texture);
  gl.DeleteMemoryObjectsEXT(1, &memory);
  gl.DeleteMemoryObjectsEXT(1, &tex_memory);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_buffer_close(img));
  gpushm_disconnect(conn);
  eglc_close(&e);
  free(got);
}

static void mismatch(void)
{
  gpushm_external_memory_t m;
  gpushm_buffer_t *reg, *b;
  gpushm_t *conn;
  struct eglc e;
  gpushm_gl_t gl;
  GLuint buffer, memory;
  char why[256];
  int fd = memfd_create("elsewhere", MFD_CLOEXEC | MFD_ALLOW_SEALING);

  CHECK(fd >= 0 && ftruncate(fd, 1 << 16) == 0);
  CHECK_OK(gpushm_connect(socket_path, "gl-mismatch", &conn));
  gpushm_external_memory_init(&m);
  m.fd = fd;
  m.allocation_size = 1 << 16;
  memset(m.device_uuid, 0x77, 16);
  CHECK_OK(gpushm_register_memory(conn, "gl-elsewhere", &m, NULL, &reg));
  close(fd);
  CHECK(eglc_open(&e, why, sizeof why) == 0 && gpushm_gl_init(&gl, eglc_proc) == 0);
  b = open_unmapped(conn, "gl-elsewhere", GPUSHM_OPEN_READONLY);
  CHECK_ERR(gpushm_gl_import_buffer(&gl, b, 0, &buffer, &memory), GPUSHM_E_UNSUPPORTED);
  fprintf(stderr, "# %s\n", gl.error);
  CHECK(strstr(gl.error, "77777777-7777") && strstr(gl.error, (const char *)gl.GetString(GL_RENDERER)));
  {
    /* Given no get_proc, libgpushm-gl finds this process's eglGetProcAddress: the same
     * entry points.  The header-only copy, which links no EGL, asks for one; given it,
     * it loads the same and refuses in the same words. */
    gpushm_gl_t found, header_only;
    CHECK(gpushm_gl_init(&found, NULL) == 0);
    CHECK(memcmp(&found, &gl, offsetof(gpushm_gl_t, error)) == 0);
    CHECK_ERR(header_only_gl_init(&header_only, NULL), GPUSHM_E_INVAL);
    CHECK(header_only_gl_init(&header_only, eglc_proc) == 0);
    CHECK(memcmp(&header_only, &gl, offsetof(gpushm_gl_t, error)) == 0);
    CHECK_ERR(header_only_gl_import_buffer(&header_only, b, 0, &buffer, &memory),
              GPUSHM_E_UNSUPPORTED);
    CHECK(strcmp(header_only.error, gl.error) == 0);
  }
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_buffer_close(reg));
  eglc_close(&e);
  gpushm_disconnect(conn);
}

/* A timeline's plane in GL: refused, saying why, where GL lacks the extensions (llvmpipe)
 * and where the timeline has no plane (a GL that has them); the header-only build asks
 * for a get_proc and says the same. */
static void timeline_refused(void)
{
  gpushm_gl_timeline_t t, t2;
  gpushm_timeline_t *tl;
  gpushm_t *conn;
  struct eglc e;
  gpushm_gl_t gl, header_only;
  char why[256];
  bool has;

  CHECK_OK(gpushm_connect(socket_path, "gl-timeline", &conn));
  CHECK_OK(gpushm_timeline_create(conn, "gl-timeline", NULL, &tl));
  CHECK(eglc_open(&e, why, sizeof why) == 0 && gpushm_gl_init(&gl, eglc_proc) == 0);
  {
    const GLubyte *(*get_stringi)(GLenum, GLuint);
    void (*get_integerv)(GLenum, GLint *);
    GLint n = 0;
    bool fd = false, timeline = false;

    *(void **)&get_stringi = eglc_proc("glGetStringi");
    *(void **)&get_integerv = eglc_proc("glGetIntegerv");
    get_integerv(0x821D /* GL_NUM_EXTENSIONS */, &n);
    for (GLint i = 0; i < n; i++) {
      const char *x = (const char *)get_stringi(GL_EXTENSIONS, (GLuint)i);
      fd |= strcmp(x, "GL_EXT_semaphore_fd") == 0;
      timeline |= strcmp(x, "GL_NV_timeline_semaphore") == 0;
    }
    has = fd && timeline;
  }
  memset(&t, 0xff, sizeof t);
  if (has) {
    CHECK_ERR(gpushm_gl_import_timeline(&gl, NULL, tl, &t), GPUSHM_E_NOENT);
    CHECK(strstr(gl.error, "has no semaphore plane"));
  } else {
    CHECK_ERR(gpushm_gl_import_timeline(&gl, NULL, tl, &t), GPUSHM_E_UNSUPPORTED);
    CHECK(strstr(gl.error, "GL_NV_timeline_semaphore") &&
          strstr(gl.error, (const char *)gl.GetString(GL_RENDERER)));
  }
  fprintf(stderr, "# %s\n", gl.error);
  CHECK(t.semaphore == 0);
  gpushm_gl_destroy_timeline(&t); /* nothing to delete: harmless */
  CHECK(header_only_gl_init(&header_only, eglc_proc) == 0);
  CHECK_ERR(header_only_gl_import_timeline(&header_only, NULL, tl, &t2), GPUSHM_E_INVAL);
  CHECK_ERR(header_only_gl_import_timeline(&header_only, eglc_proc, tl, &t2),
            has ? GPUSHM_E_NOENT : GPUSHM_E_UNSUPPORTED);
  CHECK(strcmp(header_only.error, gl.error) == 0);
  CHECK(gpushm_gl_timeline_wait(&gl, &t, 1, 0, NULL, 0, NULL, NULL) == GPUSHM_E_INVAL);
  CHECK_OK(gpushm_timeline_close_unlink(tl));
  eglc_close(&e);
  gpushm_disconnect(conn);
}

static int run(void (*fn)(void), bool as_nobody)
{
  pid_t pid = as_nobody && geteuid() == 0 ? fork_as(65534, 65534) : fork();
  int status;

  CHECK(pid >= 0);
  if (pid == 0) {
    fn();
    _exit(0);
  }
  CHECK(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void probe(void)
{
  struct vkc c;
  struct eglc e;
  gpushm_gl_t gl;
  char why[256];

  if (vkc_open(&c, NULL, why, sizeof why) < 0) {
    fprintf(stderr, "SKIP: Vulkan, to export from: %s\n", why);
    _exit(TEST_SKIP);
  }
  vkc_close(&c);
  if (eglc_open(&e, why, sizeof why) < 0) {
    fprintf(stderr, "SKIP: %s\n", why);
    _exit(TEST_SKIP);
  }
  if (gpushm_gl_init(&gl, eglc_proc) < 0) {
    fprintf(stderr, "SKIP: %s\n", gl.error);
    _exit(TEST_SKIP);
  }
  eglc_close(&e);
}

int main(void)
{
  struct test_daemon d = { 0 };
  int r;

  if ((r = run(probe, false)) != 0)
    return r;
  daemon_start(&d, NULL);
  socket_path = d.socket;
  CHECK(run(registrar, false) == 0);
  CHECK(run(consumer, true) == 0);
  test_log("GL: a buffer and an optimal image registered by a Vulkan process, imported "
           "by GL%s as a buffer object and a texture", geteuid() == 0 ? " as uid 65534" : "");
  CHECK(run(mismatch, false) == 0);
  test_log("GL: memory of another device refused, naming both; entry points found without "
           "a get_proc; the header-only build loads and refuses as libgpushm-gl does");
  CHECK(run(timeline_refused, false) == 0);
  test_log("GL: a timeline's semaphore refused where GL lacks GL_EXT_semaphore_fd and "
           "GL_NV_timeline_semaphore, or the timeline has no plane, in both builds");
  daemon_stop(&d);
  return 0;
}

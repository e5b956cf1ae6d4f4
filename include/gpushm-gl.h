/* SPDX-License-Identifier: MIT */
/*
 * gpushm-gl.h — gpushm objects in OpenGL (docs/graphics.md).
 *
 * One source, two ways to use it, as gpushm-vulkan.h: linked (define GPUSHM_GL_SHARED,
 * as pkg-config gpushm-gl does, and link libgpushm-gl, the one compiled copy), or
 * header-only as before 0.8 (define nothing: static inline in the program).  Either
 * way the program's GL is used: a current GL 4.5 context (EGL headless works:
 * EGL_PLATFORM_DEVICE_EXT or surfaceless) with GL_EXT_memory_object_fd.  Entry points
 * come from the get_proc the program gives (eglGetProcAddress, glXGetProcAddress);
 * libgpushm-gl, given none, uses eglGetProcAddress of the libEGL the process has
 * loaded, else of libEGL.so.1, which it loads (it links no GL or EGL).
 *
 *  - gpushm_gl_import_buffer(): gpushm fd memory (cuda-fd, registered) as a GL buffer
 *    object over a memory object.  Host memory has no GL import: copy it in
 *    (glBufferSubData from gpushm_buffer_ptr()).
 *  - gpushm_gl_import_texture(): an optimal-tiling image (registered by a Vulkan
 *    process) as a texture over its memory.  A linear image's rows are a buffer:
 *    import it and upload (gpushm_gl_upload_linear(): GL_PIXEL_UNPACK_BUFFER with
 *    GL_UNPACK_ROW_LENGTH).
 *
 * The device is checked first: GL_DEVICE_UUID_EXT against where the memory lives, and
 * the driver (GL_DRIVER_UUID_EXT, or the NVIDIA version in GL_VERSION).  Functions
 * return 0 or a negative GPUSHM_E_* code, the reason in gl->error.  Import objects open
 * with map_device GPUSHM_DEVICE_NONE.
 */
#ifndef GPUSHM_GL_H
#define GPUSHM_GL_H

#include <GL/gl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gpushm-graphics.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GPUSHM_GL_IMPL is libgpushm-gl's own (client/gl_helpers.c): the exported copy, its
 * helpers static to it.  gpushm_gl_t is that library's ABI: it grows no field. */
#if defined(GPUSHM_GL_IMPL)
#define GPUSHM_GL_API GPUSHM_API
#define GPUSHM_GL__STATIC static
#elif defined(GPUSHM_GL_SHARED)
#define GPUSHM_GL_API GPUSHM_API
#else
#define GPUSHM_GL_API static inline
#define GPUSHM_GL__STATIC static inline
#endif

/* GL_EXT_memory_object(_fd) and the GL 4.5 calls used, by value: the program's GL
 * headers may predate them. */
#define GPUSHM_GL_TEXTURE_TILING_EXT 0x9580
#define GPUSHM_GL_DEDICATED_MEMORY_OBJECT_EXT 0x9581
#define GPUSHM_GL_OPTIMAL_TILING_EXT 0x9584
#define GPUSHM_GL_HANDLE_TYPE_OPAQUE_FD_EXT 0x9586
#define GPUSHM_GL_NUM_DEVICE_UUIDS_EXT 0x9596
#define GPUSHM_GL_DEVICE_UUID_EXT 0x9597
#define GPUSHM_GL_DRIVER_UUID_EXT 0x9598
#define GPUSHM_GL_PIXEL_UNPACK_BUFFER 0x88EC
#define GPUSHM_GL_UNPACK_ROW_LENGTH 0x0CF2
#define GPUSHM_GL_TEXTURE_2D_ARRAY 0x8C1A
#define GPUSHM_GL_TEXTURE_3D 0x806F

typedef struct gpushm_gl {
  void (*CreateMemoryObjectsEXT)(GLsizei, GLuint *);
  void (*DeleteMemoryObjectsEXT)(GLsizei, const GLuint *);
  void (*MemoryObjectParameterivEXT)(GLuint, GLenum, const GLint *);
  void (*ImportMemoryFdEXT)(GLuint, GLuint64, GLenum, GLint);
  void (*NamedBufferStorageMemEXT)(GLuint, GLsizeiptr, GLuint, GLuint64);
  void (*TextureStorageMem2DEXT)(GLuint, GLsizei, GLenum, GLsizei, GLsizei, GLuint, GLuint64);
  void (*TextureStorageMem3DEXT)(GLuint, GLsizei, GLenum, GLsizei, GLsizei, GLsizei, GLuint,
                                 GLuint64);
  void (*GetUnsignedBytevEXT)(GLenum, GLubyte *);
  void (*GetUnsignedBytei_vEXT)(GLenum, GLuint, GLubyte *);
  void (*CreateBuffers)(GLsizei, GLuint *);
  void (*DeleteBuffers)(GLsizei, const GLuint *);
  void (*CreateTextures)(GLenum, GLsizei, GLuint *);
  void (*DeleteTextures)(GLsizei, const GLuint *);
  void (*TextureParameteri)(GLuint, GLenum, GLint);
  void (*TextureStorage2D)(GLuint, GLsizei, GLenum, GLsizei, GLsizei);
  void (*TextureSubImage2D)(GLuint, GLint, GLint, GLint, GLsizei, GLsizei, GLenum, GLenum,
                            const void *);
  void (*BindBuffer)(GLenum, GLuint);
  void (*PixelStorei)(GLenum, GLint);
  void (*InvalidateBufferData)(GLuint);
  void (*InvalidateTexImage)(GLuint, GLint);
  GLenum (*GetError)(void);
  const GLubyte *(*GetString)(GLenum);
  char error[512]; /* why the last call failed */
} gpushm_gl_t;

/* Loads the entry points from the current context's implementation through get_proc
 * (NULL: header-only, GPUSHM_E_INVAL; libgpushm-gl: eglGetProcAddress, see above). */
GPUSHM_GL_API int gpushm_gl_init(gpushm_gl_t *gl, void *(*get_proc)(const char *name));
/* Whether memory info describes imports into this context's device and driver. */
GPUSHM_GL_API int gpushm_gl_check_device(gpushm_gl_t *gl, const gpushm_memory_info_t *info);
/* A GL buffer over the object's bytes (size bytes from its start: 0 for all of them). */
GPUSHM_GL_API int gpushm_gl_import_buffer(gpushm_gl_t *gl, gpushm_buffer_t *buf, uint64_t size,
                                          GLuint *buffer, GLuint *memory);
/* An optimal image as a texture (GL_TEXTURE_2D, _2D_ARRAY for layers, _3D for depth). */
GPUSHM_GL_API int gpushm_gl_import_texture(gpushm_gl_t *gl, gpushm_buffer_t *buf,
                                           GLuint *texture, GLuint *memory);
/* Copies a linear image's rows (rows: its imported buffer) into texture, which the caller
 * made with room for the image (glTextureStorage2D of its format, one level). */
GPUSHM_GL_API int gpushm_gl_upload_linear(gpushm_gl_t *gl, gpushm_buffer_t *buf, GLuint rows,
                                          GLuint texture);

/* A timeline's semaphore plane in GL, for waits on the GPU (docs/sync.md#semaphore-planes):
 * GL_EXT_semaphore_fd with GL_NV_timeline_semaphore (the NVIDIA driver has both; Mesa's
 * llvmpipe neither).  GL can neither mint nor export a semaphore: the plane comes from a
 * process with a Vulkan device (gpushm_vk_import_timeline()), and a read-only open gets
 * it where its registrar gave it to readers.  get_proc as gpushm_gl_init()'s.
 *   wait for v: gpushm_timeline_wait_signalled(tl, v, timeout) (a value nobody signalled
 *               or promised would never come), then gpushm_gl_timeline_wait(): the GL
 *               commands issued after it run once the timeline reaches v (or its
 *               signaller is lost: gpushm_timeline_value_lost() says so).
 *   signal v:   GL's queue cannot write the fence that CPUs and CUDA streams read:
 *               glFenceSync after the work, glClientWaitSync, gpushm_timeline_signal()
 *               (which signals the plane too).
 * Destroy it before closing the timeline. */
typedef struct gpushm_gl_timeline {
  GLuint semaphore;
  void (*SemaphoreParameterui64vEXT)(GLuint, GLenum, const GLuint64 *);
  void (*WaitSemaphoreEXT)(GLuint, GLuint, const GLuint *, GLuint, const GLuint *,
                           const GLenum *);
  void (*DeleteSemaphoresEXT)(GLsizei, const GLuint *);
} gpushm_gl_timeline_t;

GPUSHM_GL_API int gpushm_gl_import_timeline(gpushm_gl_t *gl, void *(*get_proc)(const char *name),
                                            gpushm_timeline_t *tl, gpushm_gl_timeline_t *out);
/* The GL commands issued after this wait for t's timeline to reach value; buffers and
 * textures (with their layouts, GL_LAYOUT_*_EXT) are glWaitSemaphoreEXT's: objects of
 * imported memory the wait makes the other API's writes visible in. */
GPUSHM_GL_API int gpushm_gl_timeline_wait(gpushm_gl_t *gl, gpushm_gl_timeline_t *t,
                                          uint64_t value, GLuint n_buffers,
                                          const GLuint *buffers, GLuint n_textures,
                                          const GLuint *textures, const GLenum *layouts);
GPUSHM_GL_API void gpushm_gl_destroy_timeline(gpushm_gl_timeline_t *t);

#if defined(GPUSHM_GL_IMPL) || !defined(GPUSHM_GL_SHARED)
/* ---- implementation: header-only, or libgpushm-gl's ----------------------------- */

#ifdef GPUSHM_GL_IMPL
/* eglGetProcAddress of the process's EGL, found once (client/gl_helpers.c); NULL: none. */
static void *(*gpushm_gl__egl_get_proc(void))(const char *name);
#endif

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
GPUSHM_GL__STATIC int gpushm_gl__fail(gpushm_gl_t *gl, int err, const char *fmt, ...);
GPUSHM_GL__STATIC int gpushm_gl__fail(gpushm_gl_t *gl, int err, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(gl->error, sizeof gl->error, fmt, ap);
  va_end(ap);
  return err;
}

GPUSHM_GL_API int gpushm_gl_init(gpushm_gl_t *gl, void *(*get_proc)(const char *name))
{
  memset(gl, 0, sizeof *gl);
#ifdef GPUSHM_GL_IMPL
  if (!get_proc && !(get_proc = gpushm_gl__egl_get_proc()))
    return gpushm_gl__fail(gl, GPUSHM_E_UNSUPPORTED, "no get_proc given, and no EGL in this "
                           "process nor a libEGL.so.1 to load");
#else
  if (!get_proc)
    return gpushm_gl__fail(gl, GPUSHM_E_INVAL, "gpushm_gl_init needs get_proc "
                           "(eglGetProcAddress, glXGetProcAddress)");
#endif
#define GPUSHM_GL__LOAD(field, name)                                                       \
  do {                                                                                     \
    void *p_ = get_proc(name);                                                             \
    memcpy(&gl->field, &p_, sizeof p_);                                                    \
    if (!p_)                                                                               \
      return gpushm_gl__fail(gl, GPUSHM_E_UNSUPPORTED, "no %s in this GL (it needs "       \
                             "GL_EXT_memory_object_fd and GL 4.5)", name);                \
  } while (0)
  GPUSHM_GL__LOAD(CreateMemoryObjectsEXT, "glCreateMemoryObjectsEXT");
  GPUSHM_GL__LOAD(DeleteMemoryObjectsEXT, "glDeleteMemoryObjectsEXT");
  GPUSHM_GL__LOAD(MemoryObjectParameterivEXT, "glMemoryObjectParameterivEXT");
  GPUSHM_GL__LOAD(ImportMemoryFdEXT, "glImportMemoryFdEXT");
  GPUSHM_GL__LOAD(NamedBufferStorageMemEXT, "glNamedBufferStorageMemEXT");
  GPUSHM_GL__LOAD(TextureStorageMem2DEXT, "glTextureStorageMem2DEXT");
  GPUSHM_GL__LOAD(TextureStorageMem3DEXT, "glTextureStorageMem3DEXT");
  GPUSHM_GL__LOAD(GetUnsignedBytevEXT, "glGetUnsignedBytevEXT");
  GPUSHM_GL__LOAD(GetUnsignedBytei_vEXT, "glGetUnsignedBytei_vEXT");
  GPUSHM_GL__LOAD(CreateBuffers, "glCreateBuffers");
  GPUSHM_GL__LOAD(DeleteBuffers, "glDeleteBuffers");
  GPUSHM_GL__LOAD(CreateTextures, "glCreateTextures");
  GPUSHM_GL__LOAD(DeleteTextures, "glDeleteTextures");
  GPUSHM_GL__LOAD(TextureParameteri, "glTextureParameteri");
  GPUSHM_GL__LOAD(TextureStorage2D, "glTextureStorage2D");
  GPUSHM_GL__LOAD(TextureSubImage2D, "glTextureSubImage2D");
  GPUSHM_GL__LOAD(BindBuffer, "glBindBuffer");
  GPUSHM_GL__LOAD(PixelStorei, "glPixelStorei");
  GPUSHM_GL__LOAD(InvalidateBufferData, "glInvalidateBufferData");
  GPUSHM_GL__LOAD(InvalidateTexImage, "glInvalidateTexImage");
  GPUSHM_GL__LOAD(GetError, "glGetError");
  GPUSHM_GL__LOAD(GetString, "glGetString");
#undef GPUSHM_GL__LOAD
  return 0;
}

GPUSHM_GL_API int gpushm_gl_check_device(gpushm_gl_t *gl, const gpushm_memory_info_t *info)
{
  GLubyte device[16] = { 0 }, driver[16] = { 0 };
  const char *renderer, *version;
  char why[400];

  if (info->handle_type != GPUSHM_EXTERNAL_OPAQUE_FD)
    return gpushm_gl__fail(gl, GPUSHM_E_UNSUPPORTED, "GL imports no host memory: copy it "
                           "in (glBufferSubData from gpushm_buffer_ptr())");
  gl->GetUnsignedBytei_vEXT(GPUSHM_GL_DEVICE_UUID_EXT, 0, device);
  gl->GetUnsignedBytevEXT(GPUSHM_GL_DRIVER_UUID_EXT, driver);
  renderer = (const char *)gl->GetString(GL_RENDERER);
  version = (const char *)gl->GetString(GL_VERSION);
  if (gpushm_memory_info_match(info, device, driver, version, why, sizeof why) < 0)
    return gpushm_gl__fail(gl, GPUSHM_E_UNSUPPORTED, "%s; this GL context is %s (%s)", why,
                           renderer ? renderer : "?", version ? version : "?");
  return 0;
}

/* The object's memory as a GL memory object (its fd given to GL). */
GPUSHM_GL__STATIC int gpushm_gl__memory(gpushm_gl_t *gl, gpushm_buffer_t *buf,
                                        gpushm_memory_info_t *info, GLuint *memory)
{
  GLint dedicated = GL_TRUE;
  GLenum e;
  int fd, r;

  memset(info, 0, sizeof *info);
  info->size = sizeof *info;
  *memory = 0;
  if ((r = gpushm_buffer_memory_info(buf, info)) < 0)
    return gpushm_gl__fail(gl, r, "%s", gpushm_last_error_message());
  if ((r = gpushm_gl_check_device(gl, info)) < 0)
    return r;
  if (info->flags & GPUSHM_EXTERNAL_READ_ONLY_FD)
    return gpushm_gl__fail(gl, GPUSHM_E_UNSUPPORTED, "registered memory (a memfd) opened "
                           "read-only comes open for reading only, which Mesa's drivers "
                           "cannot import: open it read-write");
  {
    gpushm_export_desc_t d = { .size = sizeof d };
    if ((r = gpushm_buffer_export(buf, GPUSHM_EXPORT_OPAQUE_FD, 0, 0, &d)) < 0)
      return gpushm_gl__fail(gl, r, "%s", gpushm_last_error_message());
    fd = d.fd;
  }
  gl->GetError();
  gl->CreateMemoryObjectsEXT(1, memory);
  if (info->flags & GPUSHM_EXTERNAL_DEDICATED)
    gl->MemoryObjectParameterivEXT(*memory, GPUSHM_GL_DEDICATED_MEMORY_OBJECT_EXT, &dedicated);
  gl->ImportMemoryFdEXT(*memory, info->allocation_size, GPUSHM_GL_HANDLE_TYPE_OPAQUE_FD_EXT, fd);
  if ((e = gl->GetError()) != GL_NO_ERROR) {
    close(fd); /* GL owns the fd only once the import succeeded */
    gl->DeleteMemoryObjectsEXT(1, memory);
    *memory = 0;
    return gpushm_gl__fail(gl, GPUSHM_E_UNSUPPORTED, "glImportMemoryFdEXT: GL error 0x%x", e);
  }
  return 0;
}

GPUSHM_GL_API int gpushm_gl_import_buffer(gpushm_gl_t *gl, gpushm_buffer_t *buf, uint64_t size,
                                          GLuint *buffer, GLuint *memory)
{
  gpushm_memory_info_t info;
  GLenum e;
  int r;

  *buffer = 0;
  if ((r = gpushm_gl__memory(gl, buf, &info, memory)) < 0)
    return r;
  if (!size)
    size = info.data_size;
  gl->CreateBuffers(1, buffer);
  gl->NamedBufferStorageMemEXT(*buffer, (GLsizeiptr)size, *memory, info.offset);
  if (info.access & GPUSHM_OPEN_WRITE_DISCARD)
    gl->InvalidateBufferData(*buffer);
  if ((e = gl->GetError()) != GL_NO_ERROR) {
    gl->DeleteBuffers(1, buffer);
    gl->DeleteMemoryObjectsEXT(1, memory);
    *buffer = *memory = 0;
    return gpushm_gl__fail(gl, GPUSHM_E_UNSUPPORTED, "glNamedBufferStorageMemEXT of %llu bytes "
                           "at %llu: GL error 0x%x", (unsigned long long)size,
                           (unsigned long long)info.offset, e);
  }
  return 0;
}

GPUSHM_GL_API int gpushm_gl_import_texture(gpushm_gl_t *gl, gpushm_buffer_t *buf,
                                           GLuint *texture, GLuint *memory)
{
  gpushm_memory_info_t info;
  gpushm_image_desc_t d;
  GLenum target, e, format;
  int r;

  *texture = *memory = 0;
  gpushm_image_desc_init(&d);
  if ((r = gpushm_buffer_image_desc(buf, &d)) < 0)
    return gpushm_gl__fail(gl, r, "%s", gpushm_last_error_message());
  if (d.tiling != GPUSHM_TILING_OPTIMAL)
    return gpushm_gl__fail(gl, GPUSHM_E_UNSUPPORTED, "a linear image's rows are a buffer: "
                           "gpushm_gl_import_buffer() and gpushm_gl_upload_linear()");
  if (!(format = gpushm_format_gl((int)d.format)))
    return gpushm_gl__fail(gl, GPUSHM_E_UNSUPPORTED, "GL has no internal format for %s",
                           gpushm_format_name((int)d.format));
  if ((r = gpushm_gl__memory(gl, buf, &info, memory)) < 0)
    return r;
  target = d.depth > 1 ? GPUSHM_GL_TEXTURE_3D
           : d.array_layers > 1 ? GPUSHM_GL_TEXTURE_2D_ARRAY : GL_TEXTURE_2D;
  gl->CreateTextures(target, 1, texture);
  gl->TextureParameteri(*texture, GPUSHM_GL_TEXTURE_TILING_EXT, GPUSHM_GL_OPTIMAL_TILING_EXT);
  if (target == GL_TEXTURE_2D)
    gl->TextureStorageMem2DEXT(*texture, (GLsizei)d.mip_levels, format, (GLsizei)d.width,
                               (GLsizei)d.height, *memory, 0);
  else
    gl->TextureStorageMem3DEXT(*texture, (GLsizei)d.mip_levels, format, (GLsizei)d.width,
                               (GLsizei)d.height,
                               (GLsizei)(d.depth > 1 ? d.depth : d.array_layers), *memory, 0);
  if (info.access & GPUSHM_OPEN_WRITE_DISCARD)
    for (uint32_t level = 0; level < d.mip_levels; level++)
      gl->InvalidateTexImage(*texture, (GLint)level);
  if ((e = gl->GetError()) != GL_NO_ERROR) {
    gl->DeleteTextures(1, texture);
    gl->DeleteMemoryObjectsEXT(1, memory);
    *texture = *memory = 0;
    return gpushm_gl__fail(gl, GPUSHM_E_UNSUPPORTED, "glTextureStorageMem*DEXT: GL error 0x%x",
                           e);
  }
  return 0;
}

/* The client format and type that upload a format's texels as they lie in memory. */
GPUSHM_GL__STATIC int gpushm_gl__pixel(int format, GLenum *base, GLenum *type)
{
  switch (format) {
  case GPUSHM_FORMAT_R8_UNORM: *base = GL_RED; *type = GL_UNSIGNED_BYTE; return 0;
  case GPUSHM_FORMAT_RG8_UNORM: *base = 0x8227 /* GL_RG */; *type = GL_UNSIGNED_BYTE; return 0;
  case GPUSHM_FORMAT_RGBA8_UNORM:
  case GPUSHM_FORMAT_RGBA8_SRGB: *base = GL_RGBA; *type = GL_UNSIGNED_BYTE; return 0;
  case GPUSHM_FORMAT_R16_UNORM: *base = GL_RED; *type = GL_UNSIGNED_SHORT; return 0;
  case GPUSHM_FORMAT_RGBA16_UNORM: *base = GL_RGBA; *type = GL_UNSIGNED_SHORT; return 0;
  case GPUSHM_FORMAT_R16_SFLOAT: *base = GL_RED; *type = 0x140B /* GL_HALF_FLOAT */; return 0;
  case GPUSHM_FORMAT_RG16_SFLOAT: *base = 0x8227; *type = 0x140B; return 0;
  case GPUSHM_FORMAT_RGBA16_SFLOAT: *base = GL_RGBA; *type = 0x140B; return 0;
  case GPUSHM_FORMAT_R32_SFLOAT: *base = GL_RED; *type = GL_FLOAT; return 0;
  case GPUSHM_FORMAT_RG32_SFLOAT: *base = 0x8227; *type = GL_FLOAT; return 0;
  case GPUSHM_FORMAT_RGBA32_SFLOAT: *base = GL_RGBA; *type = GL_FLOAT; return 0;
  case GPUSHM_FORMAT_R32_UINT: *base = 0x8D94 /* GL_RED_INTEGER */; *type = GL_UNSIGNED_INT; return 0;
  case GPUSHM_FORMAT_RGBA32_UINT: *base = 0x8D99 /* GL_RGBA_INTEGER */; *type = GL_UNSIGNED_INT; return 0;
  case GPUSHM_FORMAT_RGB10A2_UNORM: *base = GL_RGBA; *type = 0x8368 /* _2_10_10_10_REV */; return 0;
  default: return -1;
  }
}

GPUSHM_GL_API int gpushm_gl_upload_linear(gpushm_gl_t *gl, gpushm_buffer_t *buf, GLuint rows,
                                          GLuint texture)
{
  gpushm_image_desc_t d;
  GLenum base, type, e;
  int r;

  gpushm_image_desc_init(&d);
  if ((r = gpushm_buffer_image_desc(buf, &d)) < 0)
    return gpushm_gl__fail(gl, r, "%s", gpushm_last_error_message());
  if (d.tiling != GPUSHM_TILING_LINEAR || gpushm_gl__pixel((int)d.format, &base, &type) < 0)
    return gpushm_gl__fail(gl, GPUSHM_E_UNSUPPORTED, "not a linear image GL can upload");
  gl->BindBuffer(GPUSHM_GL_PIXEL_UNPACK_BUFFER, rows);
  gl->PixelStorei(GPUSHM_GL_UNPACK_ROW_LENGTH,
                  (GLint)(d.row_pitch / gpushm_format_texel_bytes((int)d.format)));
  gl->TextureSubImage2D(texture, 0, 0, 0, (GLsizei)d.width, (GLsizei)d.height, base, type, 0);
  gl->PixelStorei(GPUSHM_GL_UNPACK_ROW_LENGTH, 0);
  gl->BindBuffer(GPUSHM_GL_PIXEL_UNPACK_BUFFER, 0);
  if ((e = gl->GetError()) != GL_NO_ERROR)
    return gpushm_gl__fail(gl, GPUSHM_E_UNSUPPORTED, "uploading the rows: GL error 0x%x", e);
  return 0;
}

/* GL_EXT_semaphore(_fd) and GL_NV_timeline_semaphore, by value (as above) */
#define GPUSHM_GL_TIMELINE_SEMAPHORE_VALUE_NV 0x9595
#define GPUSHM_GL_SEMAPHORE_TYPE_NV 0x95B3
#define GPUSHM_GL_SEMAPHORE_TYPE_TIMELINE_NV 0x95B5

/* Whether the current context lists extension name (entry points alone do not say:
 * Mesa hands out dispatch stubs for every name). */
GPUSHM_GL__STATIC int gpushm_gl__has_extension(void *(*get_proc)(const char *name),
                                               const char *name)
{
  void (*get_integerv)(GLenum, GLint *);
  const GLubyte *(*get_stringi)(GLenum, GLuint);
  void *p1 = get_proc("glGetIntegerv"), *p2 = get_proc("glGetStringi");
  GLint n = 0;

  if (!p1 || !p2)
    return 0;
  memcpy(&get_integerv, &p1, sizeof p1);
  memcpy(&get_stringi, &p2, sizeof p2);
  get_integerv(0x821D /* GL_NUM_EXTENSIONS */, &n);
  for (GLint i = 0; i < n; i++) {
    const char *e = (const char *)get_stringi(GL_EXTENSIONS, (GLuint)i);
    if (e && strcmp(e, name) == 0)
      return 1;
  }
  return 0;
}

GPUSHM_GL_API int gpushm_gl_import_timeline(gpushm_gl_t *gl, void *(*get_proc)(const char *name),
                                            gpushm_timeline_t *tl, gpushm_gl_timeline_t *out)
{
  void (*create)(GLsizei, GLuint *) = NULL;
  void (*set_type)(GLuint, GLenum, const GLint *) = NULL;
  void (*import_fd)(GLuint, GLenum, GLint) = NULL;
  const GLint timeline = GPUSHM_GL_SEMAPHORE_TYPE_TIMELINE_NV;
  GLubyte device[16] = { 0 };
  uint8_t uuid[16];
  GLenum e;
  int fd, r;

  memset(out, 0, sizeof *out);
#ifdef GPUSHM_GL_IMPL
  if (!get_proc && !(get_proc = gpushm_gl__egl_get_proc()))
    return gpushm_gl__fail(gl, GPUSHM_E_UNSUPPORTED, "no get_proc given, and no EGL in this "
                           "process nor a libEGL.so.1 to load");
#else
  if (!get_proc)
    return gpushm_gl__fail(gl, GPUSHM_E_INVAL, "gpushm_gl_import_timeline needs get_proc");
#endif
  if (!gpushm_gl__has_extension(get_proc, "GL_EXT_semaphore_fd") ||
      !gpushm_gl__has_extension(get_proc, "GL_NV_timeline_semaphore"))
    return gpushm_gl__fail(gl, GPUSHM_E_UNSUPPORTED, "this GL (%s) lacks GL_EXT_semaphore_fd "
                           "or GL_NV_timeline_semaphore, which a timeline's semaphore needs: "
                           "wait on the CPU (gpushm_timeline_wait()), then issue the GL work",
                           (const char *)gl->GetString(GL_RENDERER));
#define GPUSHM_GL__LOAD_TO(var, name)                                                      \
  do {                                                                                     \
    void *p_ = get_proc(name);                                                             \
    memcpy(&(var), &p_, sizeof p_);                                                        \
    if (!p_)                                                                               \
      return gpushm_gl__fail(gl, GPUSHM_E_UNSUPPORTED, "no %s in this GL (a timeline's "   \
                             "semaphore needs GL_EXT_semaphore_fd and "                   \
                             "GL_NV_timeline_semaphore)", name);                           \
  } while (0)
  GPUSHM_GL__LOAD_TO(create, "glCreateSemaphoresNV");
  GPUSHM_GL__LOAD_TO(set_type, "glSemaphoreParameterivNV");
  GPUSHM_GL__LOAD_TO(import_fd, "glImportSemaphoreFdEXT");
  GPUSHM_GL__LOAD_TO(out->SemaphoreParameterui64vEXT, "glSemaphoreParameterui64vEXT");
  GPUSHM_GL__LOAD_TO(out->WaitSemaphoreEXT, "glWaitSemaphoreEXT");
  GPUSHM_GL__LOAD_TO(out->DeleteSemaphoresEXT, "glDeleteSemaphoresEXT");
#undef GPUSHM_GL__LOAD_TO
  if ((r = gpushm_timeline_semaphore(tl, -1, NULL, 0, &fd, uuid)) < 0)
    return gpushm_gl__fail(gl, r, "%s", gpushm_last_error_message());
  gl->GetUnsignedBytei_vEXT(GPUSHM_GL_DEVICE_UUID_EXT, 0, device);
  if (memcmp(device, uuid, 16) != 0) {
    close(fd);
    return gpushm_gl__fail(gl, GPUSHM_E_UNSUPPORTED, "'%s''s semaphore lives on another GPU "
                           "than this GL context's: wait for it on the CPU "
                           "(gpushm_timeline_wait())", gpushm_timeline_name(tl));
  }
  gl->GetError();
  create(1, &out->semaphore);
  set_type(out->semaphore, GPUSHM_GL_SEMAPHORE_TYPE_NV, &timeline);
  import_fd(out->semaphore, GPUSHM_GL_HANDLE_TYPE_OPAQUE_FD_EXT, fd);
  if ((e = gl->GetError()) != GL_NO_ERROR) {
    close(fd); /* GL owns the fd only once the import succeeded */
    gpushm_gl_destroy_timeline(out);
    return gpushm_gl__fail(gl, GPUSHM_E_UNSUPPORTED, "importing '%s''s semaphore "
                           "(glImportSemaphoreFdEXT as a timeline): GL error 0x%x",
                           gpushm_timeline_name(tl), e);
  }
  return 0;
}

GPUSHM_GL_API int gpushm_gl_timeline_wait(gpushm_gl_t *gl, gpushm_gl_timeline_t *t,
                                          uint64_t value, GLuint n_buffers,
                                          const GLuint *buffers, GLuint n_textures,
                                          const GLuint *textures, const GLenum *layouts)
{
  const GLuint64 v = value;
  GLenum e;

  if (!t->semaphore)
    return gpushm_gl__fail(gl, GPUSHM_E_INVAL, "no semaphore imported");
  if (value == 0)
    return gpushm_gl__fail(gl, GPUSHM_E_INVAL, "wait for value 0: values start at 1");
  gl->GetError();
  /* the value a timeline wait waits for is the semaphore's parameter when it is issued */
  t->SemaphoreParameterui64vEXT(t->semaphore, GPUSHM_GL_TIMELINE_SEMAPHORE_VALUE_NV, &v);
  t->WaitSemaphoreEXT(t->semaphore, n_buffers, buffers, n_textures, textures, layouts);
  if ((e = gl->GetError()) != GL_NO_ERROR)
    return gpushm_gl__fail(gl, GPUSHM_E_UNSUPPORTED, "glWaitSemaphoreEXT for %llu: GL error "
                           "0x%x", (unsigned long long)value, e);
  return 0;
}

GPUSHM_GL_API void gpushm_gl_destroy_timeline(gpushm_gl_timeline_t *t)
{
  if (t->semaphore && t->DeleteSemaphoresEXT)
    t->DeleteSemaphoresEXT(1, &t->semaphore);
  t->semaphore = 0;
}

#endif /* GPUSHM_GL_IMPL || !GPUSHM_GL_SHARED */

#ifdef __cplusplus
}
#endif
#endif /* GPUSHM_GL_H */

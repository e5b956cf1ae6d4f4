/* SPDX-License-Identifier: MIT */
/* The header-only build of gpushm-gl.h inside test-gl, whose other sources link
 * libgpushm-gl (GPUSHM_GL_SHARED, set for the whole program). */
#undef GPUSHM_GL_SHARED
#include "header-only-gl.h"

/* (defined only where the header compiles its functions) */
#ifndef GPUSHM_GL__STATIC
#error "gpushm-gl.h was not compiled header-only here"
#endif

int header_only_gl_init(gpushm_gl_t *gl, void *(*get_proc)(const char *name))
{
  return gpushm_gl_init(gl, get_proc);
}

int header_only_gl_import_buffer(gpushm_gl_t *gl, gpushm_buffer_t *buf, uint64_t size,
                                 GLuint *buffer, GLuint *memory)
{
  return gpushm_gl_import_buffer(gl, buf, size, buffer, memory);
}

int header_only_gl_import_timeline(gpushm_gl_t *gl, void *(*get_proc)(const char *name),
                                   gpushm_timeline_t *tl, gpushm_gl_timeline_t *out)
{
  return gpushm_gl_import_timeline(gl, get_proc, tl, out);
}

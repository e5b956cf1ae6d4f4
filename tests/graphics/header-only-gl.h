/* SPDX-License-Identifier: MIT */
/* gpushm-gl.h compiled header-only, as 0.7's programs use it, called from test-gl beside
 * libgpushm-gl's copy of the same functions (header-only.h says why). */
#ifndef GPUSHM_TEST_HEADER_ONLY_GL_H
#define GPUSHM_TEST_HEADER_ONLY_GL_H

#include <gpushm-gl.h>

int header_only_gl_init(gpushm_gl_t *gl, void *(*get_proc)(const char *name));
int header_only_gl_import_buffer(gpushm_gl_t *gl, gpushm_buffer_t *buf, uint64_t size,
                                 GLuint *buffer, GLuint *memory);
int header_only_gl_import_timeline(gpushm_gl_t *gl, void *(*get_proc)(const char *name),
                                   gpushm_timeline_t *tl, gpushm_gl_timeline_t *out);

#endif

/* SPDX-License-Identifier: MIT */
/* libgpushm-gl: the one compiled copy of include/gpushm-gl.h (GPUSHM_GL_IMPL), which
 * programs built with GPUSHM_GL_SHARED link.  It links neither GL nor EGL: every GL call
 * goes through the entry points gpushm_gl_init() loads, and a caller that gives no
 * get_proc gets eglGetProcAddress of the EGL the process has, found at run time as
 * gpushmctl doctor finds it (ctl/doctor-graphics.c). */
#define _GNU_SOURCE
#define GPUSHM_GL_IMPL
#include <dlfcn.h>
#include <pthread.h>

#include "gpushm-gl.h"

typedef void *(*get_proc_fn)(const char *name);

static get_proc_fn egl_get_proc;
static pthread_once_t egl_once = PTHREAD_ONCE_INIT;

static void find_egl(void)
{
  void *lib;

  /* The program's EGL, or the system's, kept loaded for the life of the process (the
   * entry points it hands out stay in use). */
  *(void **)&egl_get_proc = dlsym(RTLD_DEFAULT, "eglGetProcAddress");
  if (!egl_get_proc && (lib = dlopen("libEGL.so.1", RTLD_NOW | RTLD_LOCAL)))
    *(void **)&egl_get_proc = dlsym(lib, "eglGetProcAddress");
}

static get_proc_fn gpushm_gl__egl_get_proc(void)
{
  pthread_once(&egl_once, find_egl);
  return egl_get_proc;
}

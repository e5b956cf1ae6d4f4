/* SPDX-License-Identifier: MIT */
/* A headless OpenGL 4.5 context through EGL, for gpushm's graphics examples and tests:
 * the EGL device platform (NVIDIA's way without a display) where there is one, else
 * Mesa's surfaceless platform; no window, no config (EGL_KHR_no_config_context).  Not
 * part of gpushm's API. */
#ifndef GPUSHM_EXAMPLES_EGL_CONTEXT_H
#define GPUSHM_EXAMPLES_EGL_CONTEXT_H

#include <EGL/egl.h>
#include <EGL/eglext.h>
#include <stdio.h>
#include <string.h>

struct eglc {
  EGLDisplay display;
  EGLContext context;
};

static inline void *eglc_proc(const char *name)
{
  return (void *)eglGetProcAddress(name);
}

static inline EGLDisplay eglc_display(void)
{
  PFNEGLQUERYDEVICESEXTPROC query_devices =
    (PFNEGLQUERYDEVICESEXTPROC)eglGetProcAddress("eglQueryDevicesEXT");
  PFNEGLGETPLATFORMDISPLAYEXTPROC platform_display =
    (PFNEGLGETPLATFORMDISPLAYEXTPROC)eglGetProcAddress("eglGetPlatformDisplayEXT");
  EGLDeviceEXT devices[8];
  EGLint n = 0;

  if (!platform_display)
    return EGL_NO_DISPLAY;
  if (query_devices && query_devices(8, devices, &n) && n > 0) {
    for (EGLint i = 0; i < n; i++) {
      EGLDisplay d = platform_display(EGL_PLATFORM_DEVICE_EXT, devices[i], NULL);
      if (d != EGL_NO_DISPLAY && eglInitialize(d, NULL, NULL)) {
        /* a software device comes last on hosts with a GPU: take the first that works */
        return d;
      }
    }
  }
  {
    EGLDisplay d = platform_display(EGL_PLATFORM_SURFACELESS_MESA, EGL_DEFAULT_DISPLAY, NULL);
    if (d != EGL_NO_DISPLAY && eglInitialize(d, NULL, NULL))
      return d;
  }
  return EGL_NO_DISPLAY;
}

/* 0, or -1 with why. */
static inline int eglc_open(struct eglc *c, char *why, size_t len)
{
  static const EGLint attrs[] = { EGL_CONTEXT_MAJOR_VERSION, 4, EGL_CONTEXT_MINOR_VERSION, 5,
                                  EGL_CONTEXT_OPENGL_PROFILE_MASK,
                                  EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT, EGL_NONE };

  memset(c, 0, sizeof *c);
  if ((c->display = eglc_display()) == EGL_NO_DISPLAY) {
    snprintf(why, len, "no EGL display (device or surfaceless platform)");
    return -1;
  }
  if (!eglBindAPI(EGL_OPENGL_API)) {
    snprintf(why, len, "eglBindAPI(EGL_OPENGL_API) failed: 0x%x", eglGetError());
    return -1;
  }
  c->context = eglCreateContext(c->display, EGL_NO_CONFIG_KHR, EGL_NO_CONTEXT, attrs);
  if (c->context == EGL_NO_CONTEXT ||
      !eglMakeCurrent(c->display, EGL_NO_SURFACE, EGL_NO_SURFACE, c->context)) {
    snprintf(why, len, "no GL 4.5 core context without a surface: EGL error 0x%x",
             eglGetError());
    return -1;
  }
  return 0;
}

static inline void eglc_close(struct eglc *c)
{
  if (c->display != EGL_NO_DISPLAY) {
    eglMakeCurrent(c->display, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
    if (c->context != EGL_NO_CONTEXT)
      eglDestroyContext(c->display, c->context);
    eglTerminate(c->display);
  }
  memset(c, 0, sizeof *c);
}

#endif

/* SPDX-License-Identifier: MIT */
/* libgpushm-vulkan: the one compiled copy of include/gpushm-vulkan.h (GPUSHM_VK_IMPL),
 * which programs built with GPUSHM_VK_SHARED link.  It links no Vulkan loader: the
 * program has one already (it made the VkDevice it passes in), found here at run time,
 * as gpushmctl doctor finds it (ctl/doctor-graphics.c). */
#define _GNU_SOURCE
/* A direct call into the loader would add a DT_NEEDED on libvulkan.so.1: every entry
 * point is looked up instead, and the prototypes' absence makes sure of it. */
#define VK_NO_PROTOTYPES
#define GPUSHM_VK_IMPL
#include <dlfcn.h>
#include <pthread.h>

#include "gpushm-vulkan.h"

static PFN_vkGetInstanceProcAddr loader_gipa;
static pthread_once_t loader_once = PTHREAD_ONCE_INIT;

static void find_loader(void)
{
  void *lib;

  /* The loader the program linked, or loaded globally; else the system's, kept loaded
   * for the life of the process (the program's Vulkan objects outlive any one call). */
  *(void **)&loader_gipa = dlsym(RTLD_DEFAULT, "vkGetInstanceProcAddr");
  if (!loader_gipa && (lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL)))
    *(void **)&loader_gipa = dlsym(lib, "vkGetInstanceProcAddr");
}

static PFN_vkGetInstanceProcAddr gpushm_vk__loader(void)
{
  pthread_once(&loader_once, find_loader);
  return loader_gipa;
}

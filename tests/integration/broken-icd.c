/* SPDX-License-Identifier: MIT */
/* A Vulkan "driver" that misbehaves as it is loaded, for gpushmctl doctor's test: the
 * loader dlopens it from the ICD file the test names in VK_DRIVER_FILES, and it crashes
 * (GPUSHM_TEST_ICD=crash) or hangs (=hang) there, as a broken driver may, or flushes
 * every stdio stream of the process (=flush), as NVIDIA's does. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void misbehave(void)
{
  const char *how = getenv("GPUSHM_TEST_ICD");

  if (how && strcmp(how, "crash") == 0)
    raise(SIGSEGV);
  if (how && strcmp(how, "flush") == 0)
    fflush(NULL);
  while (how && strcmp(how, "hang") == 0)
    pause();
}

/* What the loader looks up first; never reached. */
void *vk_icdGetInstanceProcAddr(void *instance, const char *name);
void *vk_icdGetInstanceProcAddr(void *instance, const char *name)
{
  (void)instance;
  (void)name;
  return NULL;
}

/* SPDX-License-Identifier: MIT */
/* gpushmctl doctor's graphics rows: which Vulkan and GL (EGL) drivers of this host can
 * import gpushm memory, found by loading them at run time as a graphics program would
 * (gpushmctl links neither) and comparing their devices' UUIDs with the CUDA devices'. */
#include "config.h"
#include "doctor-graphics.h"
#include "gpushm-graphics.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpushm_limits.h"

#if defined(HAVE_VULKAN_HEADERS) || defined(HAVE_EGL_HEADERS)
static int cuda_match(const uint8_t (*cuda)[16], size_t n_cuda, const uint8_t uuid[16])
{
  for (size_t i = 0; i < n_cuda; i++)
    if (memcmp(cuda[i], uuid, 16) == 0)
      return (int)i;
  return -1;
}
#endif

#ifdef HAVE_VULKAN_HEADERS
#include <vulkan/vulkan.h>

static int has_extension(PFN_vkEnumerateDeviceExtensionProperties enumerate, VkPhysicalDevice p,
                         const char *name)
{
  VkExtensionProperties e[512];
  uint32_t n = 512;
  enumerate(p, NULL, &n, e);
  for (uint32_t i = 0; i < n; i++)
    if (strcmp(e[i].extensionName, name) == 0)
      return 1;
  return 0;
}

static void probe_vulkan(const uint8_t (*cuda)[16], size_t n_cuda, struct graphics_finding *out)
{
  void *lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  PFN_vkGetInstanceProcAddr gipa;
  PFN_vkCreateInstance create;
  PFN_vkEnumeratePhysicalDevices enumerate_devices;
  PFN_vkGetPhysicalDeviceProperties2 properties;
  PFN_vkEnumerateDeviceExtensionProperties extensions;
  PFN_vkDestroyInstance destroy;
  VkApplicationInfo app = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                            .pApplicationName = "gpushmctl doctor", .apiVersion = VK_API_VERSION_1_1 };
  VkInstanceCreateInfo ici = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app };
  VkPhysicalDevice devices[16];
  VkInstance instance;
  uint32_t n = 16;
  size_t len = 0, importers = 0;
  VkResult r;

  if (!lib) {
    out->status = GRAPHICS_NA;
    snprintf(out->detail, sizeof out->detail, "no Vulkan loader (libvulkan.so.1): Vulkan "
             "programs cannot run here");
    return;
  }
  *(void **)&gipa = dlsym(lib, "vkGetInstanceProcAddr");
  create = gipa ? (PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance") : NULL;
  if (!create || (r = create(&ici, NULL, &instance)) != VK_SUCCESS) {
    out->status = GRAPHICS_NA;
    snprintf(out->detail, sizeof out->detail, "the Vulkan loader finds no driver (no ICD file, "
             "or none loads): vkCreateInstance %d", create ? (int)r : -1);
    dlclose(lib);
    return;
  }
  enumerate_devices = (PFN_vkEnumeratePhysicalDevices)gipa(instance, "vkEnumeratePhysicalDevices");
  properties = (PFN_vkGetPhysicalDeviceProperties2)gipa(instance, "vkGetPhysicalDeviceProperties2");
  extensions = (PFN_vkEnumerateDeviceExtensionProperties)gipa(instance,
                                                              "vkEnumerateDeviceExtensionProperties");
  destroy = (PFN_vkDestroyInstance)gipa(instance, "vkDestroyInstance");
  enumerate_devices(instance, &n, devices);
  for (uint32_t i = 0; i < n && len < sizeof out->detail - 160; i++) {
    VkPhysicalDeviceIDProperties id = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES };
    VkPhysicalDeviceProperties2 p = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &id };
    int fd = has_extension(extensions, devices[i], "VK_KHR_external_memory_fd");
    int host = has_extension(extensions, devices[i], "VK_EXT_external_memory_host");
    int match;
    char uuid[40];
    properties(devices[i], &p);
    gpushm_uuid_text(id.deviceUUID, uuid);
    match = cuda_match(cuda, n_cuda, id.deviceUUID);
    importers += fd && match >= 0;
    len += (size_t)snprintf(out->detail + len, sizeof out->detail - len, "%s%s (%s): %s%s%s",
                            i ? "; " : "", p.properties.deviceName, uuid,
                            match >= 0 ? (fd ? "imports cuda-fd memory of this CUDA device"
                                             : "the CUDA device, but no VK_KHR_external_memory_fd")
                                       : fd ? "no CUDA device: registered memory only" : "no fd import",
                            host ? ", host memory" : "", "");
  }
  destroy(instance, NULL);
  dlclose(lib);
  if (!n) {
    out->status = GRAPHICS_NA;
    snprintf(out->detail, sizeof out->detail, "the Vulkan loader finds no device");
    return;
  }
  out->status = n_cuda && !importers ? GRAPHICS_FAIL : GRAPHICS_OK;
  if (n_cuda && !importers)
    snprintf(out->detail + len, sizeof out->detail - len, "; no Vulkan device here is a CUDA "
             "device: cuda-fd memory imports nowhere (an ICD missing?)");
}
#else
static void probe_vulkan(const uint8_t (*cuda)[16], size_t n_cuda, struct graphics_finding *out)
{
  (void)cuda;
  (void)n_cuda;
  out->status = GRAPHICS_NA;
  snprintf(out->detail, sizeof out->detail, "this gpushmctl was built without Vulkan headers");
}
#endif

#ifdef HAVE_EGL_HEADERS
#include <EGL/egl.h>
#include <EGL/eglext.h>

#define GL_EXTENSIONS_ 0x1F03
#define GL_NUM_EXTENSIONS_ 0x821D
#define GL_RENDERER_ 0x1F01
#define GL_DEVICE_UUID_EXT_ 0x9597

static void probe_gl(const uint8_t (*cuda)[16], size_t n_cuda, struct graphics_finding *out)
{
  static const EGLint attrs[] = { EGL_CONTEXT_MAJOR_VERSION, 4, EGL_CONTEXT_MINOR_VERSION, 5,
                                  EGL_CONTEXT_OPENGL_PROFILE_MASK,
                                  EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT, EGL_NONE };
  void *lib = dlopen("libEGL.so.1", RTLD_NOW | RTLD_LOCAL);
  void *(*get_proc)(const char *);
  EGLBoolean (*initialize)(EGLDisplay, EGLint *, EGLint *), (*bind)(EGLenum);
  EGLBoolean (*make_current)(EGLDisplay, EGLSurface, EGLSurface, EGLContext);
  EGLBoolean (*terminate)(EGLDisplay);
  EGLContext (*create_context)(EGLDisplay, EGLConfig, EGLContext, const EGLint *);
  PFNEGLQUERYDEVICESEXTPROC query_devices;
  PFNEGLGETPLATFORMDISPLAYEXTPROC platform_display;
  const unsigned char *(*get_string)(unsigned), *(*get_stringi)(unsigned, unsigned);
  void (*get_integer)(unsigned, int *), (*get_uuid)(unsigned, unsigned, unsigned char *);
  EGLDeviceEXT devices[8];
  EGLDisplay display = EGL_NO_DISPLAY;
  EGLint n = 0;
  int count = 0, fd = 0, match;
  unsigned char uuid[16] = { 0 };
  char text[40];

  out->status = GRAPHICS_NA;
  if (!lib) {
    snprintf(out->detail, sizeof out->detail, "no EGL (libEGL.so.1): GL programs cannot run "
             "headless here");
    return;
  }
  *(void **)&get_proc = dlsym(lib, "eglGetProcAddress");
  *(void **)&initialize = dlsym(lib, "eglInitialize");
  *(void **)&bind = dlsym(lib, "eglBindAPI");
  *(void **)&make_current = dlsym(lib, "eglMakeCurrent");
  *(void **)&terminate = dlsym(lib, "eglTerminate");
  *(void **)&create_context = dlsym(lib, "eglCreateContext");
  query_devices = get_proc ? (PFNEGLQUERYDEVICESEXTPROC)get_proc("eglQueryDevicesEXT") : NULL;
  platform_display = get_proc ? (PFNEGLGETPLATFORMDISPLAYEXTPROC)get_proc("eglGetPlatformDisplayEXT") : NULL;
  if (platform_display && query_devices && query_devices(8, devices, &n) && n > 0)
    display = platform_display(EGL_PLATFORM_DEVICE_EXT, devices[0], NULL);
  if (display == EGL_NO_DISPLAY && platform_display)
    display = platform_display(EGL_PLATFORM_SURFACELESS_MESA, EGL_DEFAULT_DISPLAY, NULL);
  if (display == EGL_NO_DISPLAY || !initialize(display, NULL, NULL) || !bind(EGL_OPENGL_API) ||
      !make_current(display, EGL_NO_SURFACE, EGL_NO_SURFACE,
                    create_context(display, EGL_NO_CONFIG_KHR, EGL_NO_CONTEXT, attrs))) {
    snprintf(out->detail, sizeof out->detail, "EGL has no headless GL 4.5 context here (no "
             "vendor library, or no device)");
    dlclose(lib);
    return;
  }
  *(void **)&get_string = get_proc("glGetString");
  *(void **)&get_stringi = get_proc("glGetStringi");
  *(void **)&get_integer = get_proc("glGetIntegerv");
  *(void **)&get_uuid = get_proc("glGetUnsignedBytei_vEXT");
  if (get_integer && get_stringi) {
    get_integer(GL_NUM_EXTENSIONS_, &count);
    for (int i = 0; i < count && !fd; i++)
      fd = strcmp((const char *)get_stringi(GL_EXTENSIONS_, (unsigned)i), "GL_EXT_memory_object_fd") == 0;
  }
  if (fd && get_uuid)
    get_uuid(GL_DEVICE_UUID_EXT_, 0, uuid);
  gpushm_uuid_text(uuid, text);
  match = cuda_match(cuda, n_cuda, uuid);
  out->status = !fd ? GRAPHICS_FAIL : n_cuda && match < 0 ? GRAPHICS_FAIL : GRAPHICS_OK;
  snprintf(out->detail, sizeof out->detail, "%s (%s): %s",
           get_string ? (const char *)get_string(GL_RENDERER_) : "?", text,
           !fd ? "no GL_EXT_memory_object_fd: GL imports no gpushm memory"
           : match >= 0 ? "imports cuda-fd memory of this CUDA device"
           : n_cuda ? "not a CUDA device here: cuda-fd memory does not import into it"
                    : "imports registered memory of this device");
  make_current(display, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
  terminate(display);
  dlclose(lib);
}
#else
static void probe_gl(const uint8_t (*cuda)[16], size_t n_cuda, struct graphics_finding *out)
{
  (void)cuda;
  (void)n_cuda;
  out->status = GRAPHICS_NA;
  snprintf(out->detail, sizeof out->detail, "this gpushmctl was built without EGL headers");
}
#endif

static void unanswered(struct graphics_finding *f, const char *why)
{
  f->status = GRAPHICS_FAIL;
  snprintf(f->detail, sizeof f->detail, "%s", why);
}

/* The drivers are probed in a child process: a broken ICD that crashes or hangs costs
 * that child, not gpushmctl, and what the drivers allocate and never free (Mesa's, once
 * the loader has unloaded it) dies with the child instead of failing leak checks. */
void doctor_graphics(const uint8_t (*cuda)[16], size_t n_cuda, struct graphics_finding *vulkan,
                     struct graphics_finding *gl)
{
  const char *env = getenv("GPUSHM_DOCTOR_GRAPHICS_TIMEOUT_MS");
  int timeout_ms = env && atoi(env) > 0 ? atoi(env) : GPUSHM_DOCTOR_GRAPHICS_TIMEOUT_MS;
  struct graphics_finding found[2];
  struct pollfd p;
  char why[160];
  size_t got = 0;
  int fds[2], status;
  pid_t pid;

  /* The child inherits stdio's unwritten buffers: NVIDIA's driver flushes them as it
   * loads, which printed the report so far twice when stdout was a file. */
  fflush(NULL);
  if (pipe2(fds, O_CLOEXEC) < 0 || (pid = fork()) < 0) {
    snprintf(why, sizeof why, "cannot start the probe: %s", strerror(errno));
    unanswered(vulkan, why);
    unanswered(gl, why);
    return;
  }
  if (pid == 0) {
    close(fds[0]);
    probe_vulkan(cuda, n_cuda, &found[0]);
    probe_gl(cuda, n_cuda, &found[1]);
    _exit(write(fds[1], found, sizeof found) == (ssize_t)sizeof found ? 0 : 1);
  }
  close(fds[1]);
  p = (struct pollfd){ .fd = fds[0], .events = POLLIN };
  while (got < sizeof found && poll(&p, 1, timeout_ms) > 0) {
    ssize_t n = read(fds[0], (char *)found + got, sizeof found - got);
    if (n <= 0)
      break;
    got += (size_t)n;
  }
  close(fds[0]);
  if (got < sizeof found)
    kill(pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (got == sizeof found) {
    *vulkan = found[0];
    *gl = found[1];
    return;
  }
  if (WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL)
    snprintf(why, sizeof why, "the graphics drivers' probe crashed (signal %d): a graphics "
             "program here would too", WTERMSIG(status));
  else if (WIFEXITED(status)) /* a sanitizer's handler turns a crash into an exit */
    snprintf(why, sizeof why, "the graphics drivers' probe crashed (exit status %d): a "
             "graphics program here would too", WEXITSTATUS(status));
  else
    snprintf(why, sizeof why, "the graphics drivers did not answer within %d ms "
             "(GPUSHM_DOCTOR_GRAPHICS_TIMEOUT_MS)", timeout_ms);
  unanswered(vulkan, why);
  unanswered(gl, why);
}

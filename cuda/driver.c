/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "protocol.h"
#include "driver.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const fn_names[CUDA_FN_COUNT] = {
#define CUDA_FN_NAME_(name, version, params) #name,
  CUDA_DRIVER_FUNCS(CUDA_FN_NAME_)
#undef CUDA_FN_NAME_
};

static const struct {
  const char *name;
  CUresult code;
} error_names[] = {
  { "INVALID_VALUE", CUDA_ERROR_INVALID_VALUE },
  { "OUT_OF_MEMORY", CUDA_ERROR_OUT_OF_MEMORY },
  { "NOT_INITIALIZED", CUDA_ERROR_NOT_INITIALIZED },
  { "NO_DEVICE", CUDA_ERROR_NO_DEVICE },
  { "INVALID_DEVICE", CUDA_ERROR_INVALID_DEVICE },
  { "INVALID_CONTEXT", CUDA_ERROR_INVALID_CONTEXT },
  { "MAP_FAILED", CUDA_ERROR_MAP_FAILED },
  { "INVALID_HANDLE", CUDA_ERROR_INVALID_HANDLE },
  { "ILLEGAL_ADDRESS", CUDA_ERROR_ILLEGAL_ADDRESS },
  { "LAUNCH_FAILED", CUDA_ERROR_LAUNCH_FAILED },
  { "UNKNOWN", CUDA_ERROR_UNKNOWN },
};

int cuda_driver_load(struct cuda_driver *drv, char *err, size_t errlen)
{
  /* secure_getenv: a setuid or setgid program linking the library must not load a
   * caller's "libcuda" (the same for what tests use to break and watch it). */
  const char *path = secure_getenv("GPUSHM_CUDA_LIBRARY");
  PFN_cuGetProcAddress_v12000 get_proc;
  const char *faults = secure_getenv("GPUSHM_CUDA_FAULTS");
  const char *trace;
  void **slots[CUDA_FN_COUNT] = {
#define CUDA_FN_SLOT_(name, version, params) (void **)&drv->name,
    CUDA_DRIVER_FUNCS(CUDA_FN_SLOT_)
#undef CUDA_FN_SLOT_
  };
  static const int versions[CUDA_FN_COUNT] = {
#define CUDA_FN_VERSION_(name, version, params) version,
    CUDA_DRIVER_FUNCS(CUDA_FN_VERSION_)
#undef CUDA_FN_VERSION_
  };

  memset(drv, 0, sizeof *drv);
  if (!path || !*path)
    path = "libcuda.so.1";
  /* Never unmapped: libcuda keeps threads and exit handlers that outlive dlclose. */
  drv->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!drv->lib) {
    snprintf(err, errlen, "no CUDA driver (%s)", dlerror());
    return PROTO_E_UNSUPPORTED;
  }
  /* cuGetProcAddress_v2 (CUDA 12.0+) hands out the entry point of the exact ABI
   * version asked for, so each pointer matches the typedef it is stored as. */
  get_proc = (PFN_cuGetProcAddress_v12000)dlsym(drv->lib, "cuGetProcAddress_v2");
  if (!get_proc) {
    snprintf(err, errlen, "CUDA driver %s is older than 12.0 (no cuGetProcAddress_v2)", path);
    cuda_driver_unload(drv);
    return PROTO_E_UNSUPPORTED;
  }
  for (int i = 0; i < CUDA_FN_COUNT; i++) {
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = get_proc(fn_names[i], slots[i], versions[i], CU_GET_PROC_ADDRESS_DEFAULT, &found);
    if (r != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS || !*slots[i]) {
      snprintf(err, errlen, "CUDA driver %s lacks %s (version %d)", path, fn_names[i], versions[i]);
      cuda_driver_unload(drv);
      return PROTO_E_UNSUPPORTED;
    }
  }
  if (drv->cuDriverGetVersion(&drv->driver_version) != CUDA_SUCCESS)
    drv->driver_version = 0;
  trace = secure_getenv("GPUSHM_CUDA_TRACE");
  drv->trace = trace && strcmp(trace, "1") == 0;
  if (faults && cuda_driver_set_faults(drv, faults, err, errlen) < 0) {
    cuda_driver_unload(drv);
    return PROTO_E_UNSUPPORTED;
  }
  return 0;
}

void cuda_driver_unload(struct cuda_driver *drv)
{
  if (drv->lib)
    dlclose(drv->lib);
  memset(drv, 0, sizeof *drv);
}

static int parse_error(const char *text, size_t len, CUresult *out)
{
  char buf[64];
  char *end;
  unsigned long v;

  if (len == 0 || len >= sizeof buf)
    return PROTO_E_INVAL;
  memcpy(buf, text, len);
  buf[len] = '\0';
  v = strtoul(buf, &end, 10);
  if (*end == '\0' && v > 0) {
    *out = (CUresult)v;
    return 0;
  }
  if (strncmp(buf, "CUDA_ERROR_", 11) == 0)
    memmove(buf, buf + 11, strlen(buf + 11) + 1);
  for (size_t i = 0; i < sizeof error_names / sizeof error_names[0]; i++) {
    if (strcmp(buf, error_names[i].name) == 0) {
      *out = error_names[i].code;
      return 0;
    }
  }
  return PROTO_E_INVAL;
}

int cuda_driver_set_faults(struct cuda_driver *drv, const char *spec, char *err, size_t errlen)
{
  const char *p = spec;

  while (*p) {
    const char *eq = strchr(p, '='), *end = p + strcspn(p, ","), *at;
    size_t name_len;
    CUresult code;
    int fn = -1;
    unsigned long from = 1;

    if (!eq || eq > end)
      goto bad;
    name_len = (size_t)(eq - p);
    for (int i = 0; i < CUDA_FN_COUNT; i++)
      if (strlen(fn_names[i]) == name_len && strncmp(fn_names[i], p, name_len) == 0)
        fn = i;
    at = memchr(eq, '@', (size_t)(end - eq));
    if (fn < 0 || parse_error(eq + 1, (size_t)((at ? at : end) - eq - 1), &code) < 0)
      goto bad;
    if (at) {
      char *num_end;
      from = strtoul(at + 1, &num_end, 10);
      if (num_end != end || from == 0)
        goto bad;
    }
    drv->faults[fn] = (struct cuda_fault){ .error = code, .fail_from = from };
    p = *end ? end + 1 : end;
  }
  return 0;
bad:
  snprintf(err, errlen, "bad GPUSHM_CUDA_FAULTS entry near '%s' (want NAME=ERROR[@N])", p);
  return PROTO_E_INVAL;
}

CUresult cuda_fault_hit(struct cuda_fault *fault)
{
  unsigned long n;

  if (!fault->error)
    return CUDA_SUCCESS;
  n = __atomic_add_fetch(&fault->calls, 1, __ATOMIC_RELAXED);
  return n >= fault->fail_from ? fault->error : CUDA_SUCCESS;
}

void cuda_trace(const struct cuda_driver *drv, enum cuda_fn fn, CUresult r)
{
  const char *name = NULL;

  if (r != CUDA_SUCCESS && drv->cuGetErrorName)
    drv->cuGetErrorName(r, &name);
  /* one write per line, so lines of several processes sharing stderr stay whole */
  fprintf(stderr, "cuda[%d]: %s -> %s\n", (int)getpid(), fn_names[fn],
          r == CUDA_SUCCESS ? "ok" : name ? name : "error");
}

const char *cuda_error_text(const struct cuda_driver *drv, CUresult r, char *buf, size_t len)
{
  const char *name = NULL, *text = NULL;

  if (drv->cuGetErrorName)
    drv->cuGetErrorName(r, &name);
  if (drv->cuGetErrorString)
    drv->cuGetErrorString(r, &text);
  if (name)
    snprintf(buf, len, "%s (%s)", name, text ? text : "no description");
  else
    snprintf(buf, len, "CUDA error %d", (int)r);
  return buf;
}

bool cuda_error_is_sticky(CUresult r)
{
  switch (r) {
  case CUDA_ERROR_ILLEGAL_ADDRESS:
  case CUDA_ERROR_HARDWARE_STACK_ERROR:
  case CUDA_ERROR_ILLEGAL_INSTRUCTION:
  case CUDA_ERROR_MISALIGNED_ADDRESS:
  case CUDA_ERROR_INVALID_ADDRESS_SPACE:
  case CUDA_ERROR_INVALID_PC:
  case CUDA_ERROR_LAUNCH_FAILED:
  case CUDA_ERROR_ECC_UNCORRECTABLE:
  case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    return true;
  default:
    return false;
  }
}

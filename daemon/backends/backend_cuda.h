/* SPDX-License-Identifier: MIT */
/* The daemon's CUDA side: driver, devices, retained primary contexts. */
#ifndef GPUSHMD_BACKEND_CUDA_H
#define GPUSHMD_BACKEND_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cuda_device_info {
  int ordinal;
  char name[256];
  uint8_t uuid[16];
  uint64_t total_memory;
  uint64_t free_memory; /* 0 unless the daemon holds a context on it */
  bool in_use;
};

/* Loads the driver and enumerates devices.  Never fails the daemon: without a driver
 * or a device the CUDA backends report why they are unavailable. */
void backend_cuda_init(void);
void backend_cuda_shutdown(void);
/* Called on a sticky CUDA error: the process must not go on serving. */
void backend_cuda_set_fatal_hook(void (*hook)(void *ctx, const char *why), void *ctx);
int backend_cuda_device_count(void);
/* Fills info for device i, querying free memory where a context is held. */
int backend_cuda_device_info(int i, struct cuda_device_info *info);
const char *backend_cuda_unavailable_reason(void);
/* Whether cuda-fd buffers can be made on device 0 (after backend_cuda_init), else why
 * not in why (may be NULL). */
bool backend_cuda_fd_usable(const char **why);
/* Retaining a device's primary context takes 100-350 ms: the daemon does it on a worker
 * thread, never on its event loop.  ready: retained, requests on it are quick. */
bool backend_cuda_device_ready(int i);
/* Retains device i's primary context; for a worker thread, one at a time per device.
 * Returns the CUresult. */
int backend_cuda_warm(int i);
/* Back on the loop: 0, or a PROTO_E_* with err (a sticky error stops the daemon). */
int backend_cuda_warm_result(int i, int cu_result, char *err, size_t errlen);
/* Device i's UUID (16 bytes), or NULL; no driver call. */
const uint8_t *backend_cuda_device_uuid(int i);
/* The ordinal of the device with that UUID; -1 where gpushmd has none. */
int backend_cuda_device_of_uuid(const uint8_t uuid[16]);
/* Timelines' semaphore planes (kind_timeline.c): fd, a Vulkan timeline semaphore exported
 * as OPAQUE_FD, imported on the device of that UUID (the caller's fd stays open; CUDA
 * keeps a dup), which the driver refuses for anything else; *device and *sem receive
 * where and what.  0 or a PROTO_E_* with err. */
int backend_cuda_semaphore_import(int fd, const uint8_t uuid[16], int *device, void **sem,
                                  char *err, size_t errlen);
/* Signals value through the import, on gpushmd's stream of that device, without
 * waiting for it: a repair never blocks the loop on a GPU. */
int backend_cuda_semaphore_signal(int device, void *sem, uint64_t value, char *err,
                                  size_t errlen);
void backend_cuda_semaphore_release(int device, void *sem);
/* The NVIDIA kernel driver's version ("580.159.04"), "" where there is none. */
const char *backend_cuda_driver_version(void);

#endif

/* SPDX-License-Identifier: MIT */
/* The library's CUDA side (cuda.c): importing, mapping and ordering device memory
 * and events; the driver is loaded only when a process needs it. */
#ifndef GPUSHM_CLIENT_DEVICE_H
#define GPUSHM_CLIENT_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpushm-graphics.h"

/* CUDA (client/cuda.c).  A device buffer lives on its home device and is mapped for
 * its map device, whose kernels and streams use the pointer: by default the calling
 * thread's current context's device, else home; map_request >= 0 names it
 * (GPUSHM_MAP_DEVICE).  Devices are this process's ordinals. */
struct client_devices {
  int home, map;
};
/* The device of the calling thread's current context; -1 when none is current or
 * CUDA was never needed by this process (the driver is not loaded for this). */
int client_cuda_current_device(void);
/* Until undone (with what it returns): client_cuda_current_device() answers device, as
 * the thread that started a pipelined open would have (-2: the driver again). */
int client_cuda_assume_current(int device);
/* Legacy IPC: maps a daemon-exported handle of the device with that UUID (or ordinal,
 * when no UUID is given), and unmaps it. */
int client_cuda_import_ipc(const uint8_t *handle, size_t handle_len, const uint8_t *uuid,
                           size_t uuid_len, int ordinal, int map_request, void **ptr,
                           struct client_devices *devices);
int client_cuda_close_ipc(void *ptr, int map_device);
/* cuda-fd: imports the fd (the caller still closes it), maps size bytes for the map
 * device read-only or read-write; *handle receives the imported allocation handle. */
int client_cuda_import_fd(int fd, uint64_t size, bool read_only, const uint8_t *uuid,
                          size_t uuid_len, int ordinal, int map_request, void **ptr,
                          uint64_t *handle, struct client_devices *devices);
int client_cuda_close_fd(void *ptr, uint64_t size, uint64_t handle, int map_device);
/* The pieces of the above, for segments (one import, a mapping per map device):
 * resolve where a buffer lives and is to be mapped; import an fd; map an imported
 * allocation for a device; unmap it; release the import. */
int client_cuda_resolve(const uint8_t *uuid, size_t uuid_len, int ordinal, int map_request,
                        struct client_devices *devices);
int client_cuda_fd_import(int fd, int device, uint64_t *handle);
int client_cuda_fd_map(uint64_t handle, uint64_t size, bool read_only, int map_device, void **ptr);
int client_cuda_fd_unmap(void *ptr, uint64_t size, int map_device);
int client_cuda_fd_release(uint64_t handle);
/* A dma-buf fd for [dptr, dptr + size) of memory mapped for device (page-aligned, the
 * caller checked); GPUSHM_E_UNSUPPORTED where the device has no dma-buf support. */
int client_cuda_export_dmabuf(void *dptr, uint64_t size, int device, int *fd_out);
/* Registered memory (graphics.c, buffer.c): imported on its own device (the UUID's; a
 * map device elsewhere is GPUSHM_E_UNSUPPORTED), then mapped as a buffer (*ptr) or as an
 * image's mipmapped array, whose levels are CUarrays; destroy takes back all of it. */
int client_cuda_import_external(int fd, uint64_t allocation_size, bool dedicated,
                                const uint8_t uuid[16], int map_request, void **ext_out,
                                struct client_devices *devices);
int client_cuda_external_buffer(void *ext, uint64_t size, int device, void **ptr);
int client_cuda_external_mipmap(void *ext, const gpushm_image_desc_t *image, uint32_t cu_format,
                                uint32_t channels, int device, void **mipmap);
int client_cuda_mipmap_level(void *mipmap, uint32_t level, int device, void **array);
int client_cuda_external_destroy(void *ext, void *ptr, void *mipmap, int device);
/* Zeroes len bytes of device memory (a carved slot the daemon said to clear), through the
 * library's own stream on map_device, and waits for it. */
int client_cuda_clear(void *dptr, uint64_t len, int map_device);
/* Events live on their own device (*event_device), where they are recorded; a stream of
 * any device may wait on them (client_cuda_wait opens them there as needed). */
int client_cuda_import_event(const uint8_t *handle, size_t handle_len, const uint8_t *uuid,
                             size_t uuid_len, int ordinal, void **event, int *event_device);
int client_cuda_destroy_event(void *event);
/* A caller's stream, resolved once per call: its context and device (NULL: the
 * legacy default stream of map_device's primary context). */
struct client_stream {
  void *stream;
  void *ctx; /* CUcontext */
  int device;
};
int client_cuda_stream(void *stream, int map_device, struct client_stream *out);
/* Fences of cuda-fd sync buffers (8 bytes of device memory at fence_dptr, in the
 * mapping for map_device).  support: 0 when the device's streams can write and wait
 * on them, 1 (why says what is missing: the caller falls back to the CPU) or a
 * GPUSHM_E_*.  read/store: by the CPU, through the library's own stream, never
 * waiting for the caller's. */
int client_cuda_fence_support(int local_device, char *why, size_t why_len);
int client_cuda_fence_read(uint64_t fence_dptr, uint64_t *value, int map_device);
int client_cuda_fence_store(uint64_t fence_dptr, uint64_t value, int map_device);
int client_cuda_fence_write(uint64_t fence_dptr, uint64_t value, const struct client_stream *s);
int client_cuda_fence_wait(uint64_t fence_dptr, uint64_t value, const struct client_stream *s);
int client_cuda_stream_sync(const struct client_stream *s);
/* A copy of len bytes between any two addresses CUDA knows in this process (device
 * memory of any of its devices, host memory), queued on s. */
int client_cuda_copy(void *dst, const void *src, uint64_t len, const struct client_stream *s);
/* What a host waits for before unmapping memory that work it queued reads: an event
 * recorded on the stream after that work (client_cuda_mark(), again after more work on
 * the same stream), waited for and destroyed by client_cuda_mark_wait(). */
struct client_cuda_mark {
  void *stream, *ctx, *event;
};
int client_cuda_mark(struct client_cuda_mark *m, const struct client_stream *s);
int client_cuda_mark_wait(struct client_cuda_mark *m);
/* A timeline's control block page mapped for the GPUs of this process (read-only for a
 * read-only open): 0 with *dptr, the page's device address, 1 where the device cannot
 * (why says so: the caller falls back to the CPU), or a GPUSHM_E_*.  Unregistered with
 * device, the one s was on. */
int client_cuda_host_register(void *p, size_t len, bool read_only, const struct client_stream *s,
                              uint64_t *dptr, char *why, size_t why_len);
int client_cuda_host_unregister(void *p, int device);
/* client_cuda_stream() for an object mapped for no device (a timeline): the driver
 * loaded first, and NULL the legacy default stream of the current context's device,
 * else of device 0. */
int client_cuda_stream_any(void *stream, struct client_stream *out);
/* A timeline's semaphore plane (timeline_plane.c): fd (a timeline semaphore, which
 * stays the caller's) imported on the device of uuid, *device its ordinal here; signalled
 * to value behind s's work (s NULL: now, waited for). */
int client_cuda_semaphore_import(int fd, const uint8_t uuid[16], int *device, void **sem);
int client_cuda_semaphore_signal(void *sem, int device, uint64_t value,
                                 const struct client_stream *s);
/* s's work after it waits until sem reaches value. */
int client_cuda_semaphore_wait(void *sem, uint64_t value, const struct client_stream *s);
/* Lets an import go once every signal of it this process queued is done (the driver's
 * rule for destroying an imported semaphore): the work of device's primary context and of
 * the n_ctxs contexts in ctxs (the application's own, whose streams signalled it), waited
 * for; then last (0: none) is signalled, waited for, as this process's final value of it. */
int client_cuda_semaphore_retire(void *sem, int device, void *const ctxs[], unsigned n_ctxs,
                                 uint64_t last);
/* Waits for ctx's work (a context destroyed meanwhile has none left). */
int client_cuda_context_synchronize(void *ctx);
int client_cuda_record(void *event, const struct client_stream *s);
int client_cuda_wait(void *event, const struct client_stream *s);

#endif

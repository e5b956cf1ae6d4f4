/* SPDX-License-Identifier: MIT */
/*
 * gpushm-graphics.h — images, memory exported by a graphics API, and what a Vulkan or
 * OpenGL process needs to import a gpushm object (docs/graphics.md).
 *
 * Part of libgpushm, which gains no dependency for it: Vulkan and GL are reached by
 * the helpers gpushm-vulkan.h and gpushm-gl.h (libgpushm-vulkan and libgpushm-gl, or
 * compiled into the program header-only), with that program's Vulkan or GL.
 *
 * Objects:
 *  - a buffer of any backend: cuda-fd memory imports into Vulkan and GL (the same GPU
 *    and driver); host memory into Vulkan (VK_EXT_external_memory_host);
 *  - an image (GPUSHM_KIND_IMAGE): a format, an extent, levels, layers, a tiling and
 *    usage.  gpushmd allocates linear images (rows row_pitch bytes apart, cuda-fd or
 *    host memory: what CUDA kernels write); optimal-tiling images are allocated by a
 *    Vulkan process (gpushm_vk_create_image()) and registered, since their layout is
 *    the device's own (docs/graphics.md says why gpushmd holds no Vulkan device);
 *  - registered memory (GPUSHM_BACKEND_EXTERNAL): memory a process exported from
 *    Vulkan as an OPAQUE_FD and gave gpushmd under a name.  It is kept, owned, moded,
 *    charged and released as any buffer; the registrar may exit.
 *
 * Same conventions as gpushm.h (sized option structs, GPUSHM_E_* returns, details in
 * gpushm_last_error_message()).  Everything here needs a daemon that offers
 * GPUSHM_FEATURE_GRAPHICS, else GPUSHM_E_UNSUPPORTED.
 */
#ifndef GPUSHM_GRAPHICS_H
#define GPUSHM_GRAPHICS_H

#include "gpushm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Formats: each is one VkFormat, one GL sized internal format where GL has it, and one
 * CUarray_format × channels where a CUDA array can hold it (gpushm_format_*()). */
typedef enum gpushm_format {
  GPUSHM_FORMAT_UNDEFINED = 0,
  GPUSHM_FORMAT_R8_UNORM = 1,
  GPUSHM_FORMAT_RG8_UNORM = 2,
  GPUSHM_FORMAT_RGBA8_UNORM = 3,
  GPUSHM_FORMAT_RGBA8_SRGB = 4,
  GPUSHM_FORMAT_BGRA8_UNORM = 5,   /* no GL internal format */
  GPUSHM_FORMAT_R16_UNORM = 6,
  GPUSHM_FORMAT_RGBA16_UNORM = 7,
  GPUSHM_FORMAT_R16_SFLOAT = 8,
  GPUSHM_FORMAT_RG16_SFLOAT = 9,
  GPUSHM_FORMAT_RGBA16_SFLOAT = 10,
  GPUSHM_FORMAT_R32_SFLOAT = 11,
  GPUSHM_FORMAT_RG32_SFLOAT = 12,
  GPUSHM_FORMAT_RGBA32_SFLOAT = 13,
  GPUSHM_FORMAT_R32_UINT = 14,
  GPUSHM_FORMAT_RGBA32_UINT = 15,
  GPUSHM_FORMAT_RGB10A2_UNORM = 16, /* no CUDA array format */
  GPUSHM_FORMAT_D32_SFLOAT = 17     /* depth: optimal tiling only, no CUDA array format */
} gpushm_format_t;

/* "rgba8-unorm" and back; NULL / 0 for what is not a format. */
GPUSHM_API const char *gpushm_format_name(int format);
GPUSHM_API int gpushm_format_from_name(const char *name);
/* Bytes per texel; 0 for what is not a format. */
GPUSHM_API uint32_t gpushm_format_texel_bytes(int format);
/* Its VkFormat and GL internal format (0: none). */
GPUSHM_API uint32_t gpushm_format_vk(int format);
GPUSHM_API uint32_t gpushm_format_gl(int format);
/* Its CUarray_format and channel count: 0, or GPUSHM_E_UNSUPPORTED for a format no
 * CUDA array can hold (packed, depth). */
GPUSHM_API int gpushm_format_cuda(int format, uint32_t *cu_array_format, uint32_t *channels);

#define GPUSHM_TILING_LINEAR 0u
#define GPUSHM_TILING_OPTIMAL 1u

/* What an image will be used for (every importer creates it with these). */
#define GPUSHM_IMAGE_USAGE_SAMPLED 0x1u
#define GPUSHM_IMAGE_USAGE_STORAGE 0x2u
#define GPUSHM_IMAGE_USAGE_COLOR_ATTACHMENT 0x4u
#define GPUSHM_IMAGE_USAGE_TRANSFER_SRC 0x8u
#define GPUSHM_IMAGE_USAGE_TRANSFER_DST 0x10u

/* An image.  Limits: extents up to 16384 (depth 2048), 2048 layers, a full mip chain;
 * a 3D image (depth > 1) has one layer.  Linear images are 2D, one level, one layer,
 * not depth (what every Vulkan device can do with them); row_pitch 0 asks for the
 * default, width × texel bytes rounded up to 256. */
typedef struct gpushm_image_desc {
  uint32_t size;        /* sizeof(gpushm_image_desc_t) when initialised */
  uint32_t format;      /* gpushm_format_t */
  uint32_t width, height, depth;
  uint32_t mip_levels, array_layers;
  uint32_t tiling;      /* GPUSHM_TILING_* */
  uint32_t usage;       /* GPUSHM_IMAGE_USAGE_* */
  uint32_t reserved;    /* 0 */
  uint64_t row_pitch;   /* linear: bytes from one row to the next */
  /* New fields go here, zero meaning what this version does. */
} gpushm_image_desc_t;
#define GPUSHM_IMAGE_DESC_SIZE_V1 48u

/* Defaults: RGBA8, 1×1×1, one level, one layer, linear, sampled and transfer usage. */
GPUSHM_API void gpushm_image_desc_init(gpushm_image_desc_t *desc);
/* Creates a linear image (gpushmd allocates it: opts->backend cuda-fd for GPU work,
 * host for CPU producers; GPUSHM_BACKEND_DEFAULT as for buffers) and opens it
 * read-write.  Its size is the image's (row_pitch × height).  Optimal tiling is
 * GPUSHM_E_UNSUPPORTED here: a Vulkan process makes those (gpushm_vk_create_image()).
 * opts: as gpushm_buffer_create(), but GPUSHM_CREATE_SYNC and cuda-ipc (legacy IPC
 * memory imports into no graphics API) are GPUSHM_E_INVAL. */
GPUSHM_API int gpushm_image_create(gpushm_t *conn, const char *name,
                                   const gpushm_image_desc_t *desc,
                                   const gpushm_create_opts_t *opts, gpushm_buffer_t **out);
/* A frame ring (gpushm.h, docs/rings.md) whose every slot is a linear image of desc:
 * slots of its bytes, a slot starting every gpushm_ring_slot_stride() bytes, the
 * description that of gpushm_ring_buffer() (gpushm_buffer_image_desc()).  Host,
 * cuda-fd or cuda-fabric memory.  0.8. */
GPUSHM_API int gpushm_ring_create_images(gpushm_t *conn, const char *name, uint32_t slots,
                                         const gpushm_image_desc_t *desc,
                                         const gpushm_create_opts_t *opts, gpushm_ring_t **out);
/* An image's description (row_pitch set); GPUSHM_E_INVAL for what is not an image. */
GPUSHM_API int gpushm_buffer_image_desc(const gpushm_buffer_t *buf, gpushm_image_desc_t *out);

/* CUDA views of an image opened for a device.  Optimal images (registered): the
 * CUmipmappedArray the driver maps (cuExternalMemoryGetMappedMipmappedArray) and the
 * CUarray of one level (layered where the image has layers; a layer is a surface or
 * texture object's coordinate).  They belong to the handle and live until its last
 * close.  Linear images have no CUDA array: they are memory with a row pitch
 * (gpushm_buffer_ptr()), which is what kernels write: GPUSHM_E_UNSUPPORTED, saying so. */
GPUSHM_API int gpushm_image_cuda_mipmapped_array(gpushm_buffer_t *buf, void **mipmapped_array);
GPUSHM_API int gpushm_image_cuda_array(gpushm_buffer_t *buf, uint32_t level, void **array);

/* Registering memory a process exported (Vulkan: vkGetMemoryFdKHR with
 * VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT).  gpushmd checks the fd before it keeps
 * it: NVIDIA memory by importing it into CUDA on the device of device_uuid at
 * allocation_size (a fd that is not such memory, or is smaller, is refused); a memfd
 * (Mesa's lavapipe exports those) by its size.  Anything else is refused. */
#define GPUSHM_EXTERNAL_OPAQUE_FD 1u
#define GPUSHM_EXTERNAL_HOST_POINTER 2u /* gpushm_memory_info_t only: host buffers */
#define GPUSHM_EXTERNAL_DEDICATED 0x1u  /* a dedicated allocation (of the image or buffer) */
/* gpushm_memory_info_t only: the fd is open for reading only, which the kernel keeps (a
 * read-only open of a registered memfd).  Mesa's drivers import only memfds they can map
 * read-write: their readers open read-write. */
#define GPUSHM_EXTERNAL_READ_ONLY_FD 0x2u
#define GPUSHM_MEMORY_TYPE_ANY 0xffffffffu

typedef struct gpushm_external_memory {
  uint32_t size;              /* sizeof(gpushm_external_memory_t) when initialised */
  uint32_t handle_type;       /* GPUSHM_EXTERNAL_OPAQUE_FD */
  int32_t fd;                 /* stays the caller's: the library sends a copy */
  uint32_t flags;             /* GPUSHM_EXTERNAL_DEDICATED */
  uint64_t allocation_size;   /* VkMemoryAllocateInfo.allocationSize */
  uint64_t data_size;         /* a buffer's bytes (0: allocation_size); images: 0 */
  uint32_t memory_type_index; /* VkMemoryAllocateInfo.memoryTypeIndex */
  uint8_t device_uuid[16];    /* VkPhysicalDeviceIDProperties.deviceUUID */
  uint8_t driver_uuid[16];    /* VkPhysicalDeviceIDProperties.driverUUID */
  char driver_info[64];       /* VkPhysicalDeviceDriverProperties.driverInfo */
  const gpushm_image_desc_t *image; /* NULL: a buffer */
  /* New fields go here, zero meaning what this version does. */
} gpushm_external_memory_t;
#define GPUSHM_EXTERNAL_MEMORY_SIZE_V1 144u

GPUSHM_API void gpushm_external_memory_init(gpushm_external_memory_t *mem);
/* Registers mem under name; opts: mode, lifetime and metadata as for a create (NULL:
 * defaults; backend and device must be defaults, flags none but
 * GPUSHM_CREATE_STRICT_MODE, which refuses a mode giving read-only access: readers of
 * NVIDIA memory get what maps read-write, docs/security.md; a memfd's get a read-only
 * reopen, and gpushmd makes its file mode 0400).  *out is an open of it that
 * maps nothing (the registrar has the memory).  The memory counts against the
 * caller's uid (allocation_size) as a buffer's would. */
GPUSHM_API int gpushm_register_memory(gpushm_t *conn, const char *name,
                                      const gpushm_external_memory_t *mem,
                                      const gpushm_create_opts_t *opts, gpushm_buffer_t **out);

/* What an importer needs, of a buffer or image opened with map_device
 * GPUSHM_DEVICE_NONE (gpushm_open_opts_t): no CUDA mapping, the memory's fd kept. */
typedef struct gpushm_memory_info {
  uint32_t size;              /* sizeof(gpushm_memory_info_t), set by the caller */
  uint32_t handle_type;       /* GPUSHM_EXTERNAL_OPAQUE_FD or _HOST_POINTER */
  uint64_t allocation_size;   /* the fd's allocation (import it whole) */
  uint64_t offset;            /* where the object starts in it (carved buffers) */
  uint64_t data_size;         /* the object's bytes */
  uint32_t memory_type_index; /* GPUSHM_MEMORY_TYPE_ANY: the first DEVICE_LOCAL type the
                               * import allows (cuda-fd memory, as measured on H100) */
  uint32_t flags;             /* GPUSHM_EXTERNAL_DEDICATED, _READ_ONLY_FD */
  uint8_t device_uuid[16];    /* zero for host memory */
  uint8_t driver_uuid[16];    /* zero where unknown (gpushmd's cuda-fd memory) */
  char driver_info[64];       /* the NVIDIA driver's version (cuda-fd), or the
                               * registrar's driverInfo; "" where unknown */
  void *host_pointer;         /* HOST_POINTER: the mapping (page-aligned) */
  uint32_t access;            /* GPUSHM_OPEN_READONLY / GPUSHM_OPEN_WRITE_DISCARD */
  uint32_t reserved;
} gpushm_memory_info_t;

GPUSHM_API int gpushm_buffer_memory_info(const gpushm_buffer_t *buf, gpushm_memory_info_t *out);
/* A new fd for the memory (an import consumes the fd it is given), of an open with
 * GPUSHM_DEVICE_NONE; GPUSHM_E_INVAL for other opens and host memory. */
GPUSHM_API int gpushm_buffer_memory_fd(gpushm_buffer_t *buf, int *fd_out);

/* A device or driver UUID as Vulkan tools print it (8-4-4-4-12 hex digits, and a NUL:
 * GPUSHM_UUID_TEXT_SIZE bytes): what the helpers' refusals and gpushmctl doctor name.
 * Returns out.  Since 0.8. */
#define GPUSHM_UUID_TEXT_SIZE 37
GPUSHM_API const char *gpushm_uuid_text(const uint8_t uuid[16], char out[GPUSHM_UUID_TEXT_SIZE]);

/* Whether memory info describes can be imported by a device of these identities: its
 * deviceUUID; its driverUUID (NULL or zero: unknown); text its driver says of itself
 * (Vulkan's driverInfo, GL_VERSION; NULL: none), which must contain the NVIDIA driver
 * version gpushmd's own memory names where it knows no driverUUID.  Host memory imports
 * anywhere.  0, or GPUSHM_E_UNSUPPORTED with why saying which differs, naming both
 * sides (the helpers add their API's names for the device).  Since 0.8. */
GPUSHM_API int gpushm_memory_info_match(const gpushm_memory_info_t *info,
                                        const uint8_t device_uuid[16],
                                        const uint8_t driver_uuid[16], const char *driver_text,
                                        char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif /* GPUSHM_GRAPHICS_H */

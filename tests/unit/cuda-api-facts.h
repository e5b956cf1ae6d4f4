/* SPDX-License-Identifier: MIT */
/* What cuda/cuda_api.h declares, as facts the compiler can state: every structure's
 * size and fields' offsets, every constant's value.  test-cuda-api.c states them from
 * gpushm's header, cuda-api-toolkit.c from the toolkit's cuda.h, and the test compares
 * the two lists: a declaration written wrong from the reference is caught where a
 * toolkit is installed.  A name added to cuda_api.h belongs here too. */
#ifndef GPUSHM_CUDA_API_FACTS_H
#define GPUSHM_CUDA_API_FACTS_H

#include <stddef.h>

struct cuda_api_fact {
  const char *what;
  long long value;
};

#define CUDA_API_SIZE(T) { "sizeof(" #T ")", (long long)sizeof(T) },
#define CUDA_API_FIELD(T, f) { "offsetof(" #T ", " #f ")", (long long)offsetof(T, f) },
#define CUDA_API_CONST(c) { #c, (long long)(c) },

#define CUDA_API_FACTS                                                          \
  CUDA_API_SIZE(CUresult)                                                       \
  CUDA_API_SIZE(cuuint64_t)                                                     \
  CUDA_API_SIZE(CUdevice)                                                       \
  CUDA_API_SIZE(CUdeviceptr)                                                    \
  CUDA_API_SIZE(CUmemGenericAllocationHandle)                                   \
  CUDA_API_SIZE(CUcontext)                                                      \
  CUDA_API_SIZE(CUdevice_attribute)                                             \
  CUDA_API_SIZE(CUuuid)                                                         \
  CUDA_API_SIZE(CUipcMemHandle)                                                 \
  CUDA_API_SIZE(CUipcEventHandle)                                               \
  CUDA_API_SIZE(CUmemFabricHandle)                                              \
  CUDA_API_SIZE(CUmemLocation)                                                  \
  CUDA_API_FIELD(CUmemLocation, type)                                           \
  CUDA_API_FIELD(CUmemLocation, id)                                             \
  CUDA_API_SIZE(CUmemAllocationProp)                                            \
  CUDA_API_FIELD(CUmemAllocationProp, type)                                     \
  CUDA_API_FIELD(CUmemAllocationProp, requestedHandleTypes)                     \
  CUDA_API_FIELD(CUmemAllocationProp, location)                                 \
  CUDA_API_FIELD(CUmemAllocationProp, win32HandleMetaData)                      \
  CUDA_API_FIELD(CUmemAllocationProp, allocFlags)                               \
  CUDA_API_FIELD(CUmemAllocationProp, allocFlags.gpuDirectRDMACapable)          \
  CUDA_API_FIELD(CUmemAllocationProp, allocFlags.usage)                         \
  CUDA_API_SIZE(CUmemAccessDesc)                                                \
  CUDA_API_FIELD(CUmemAccessDesc, location)                                     \
  CUDA_API_FIELD(CUmemAccessDesc, flags)                                        \
  CUDA_API_SIZE(CUDA_EXTERNAL_MEMORY_HANDLE_DESC)                               \
  CUDA_API_FIELD(CUDA_EXTERNAL_MEMORY_HANDLE_DESC, type)                        \
  CUDA_API_FIELD(CUDA_EXTERNAL_MEMORY_HANDLE_DESC, handle.fd)                   \
  CUDA_API_FIELD(CUDA_EXTERNAL_MEMORY_HANDLE_DESC, size)                        \
  CUDA_API_FIELD(CUDA_EXTERNAL_MEMORY_HANDLE_DESC, flags)                       \
  CUDA_API_SIZE(CUDA_EXTERNAL_MEMORY_BUFFER_DESC)                               \
  CUDA_API_FIELD(CUDA_EXTERNAL_MEMORY_BUFFER_DESC, offset)                      \
  CUDA_API_FIELD(CUDA_EXTERNAL_MEMORY_BUFFER_DESC, size)                        \
  CUDA_API_FIELD(CUDA_EXTERNAL_MEMORY_BUFFER_DESC, flags)                       \
  CUDA_API_SIZE(CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC)                            \
  CUDA_API_FIELD(CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC, type)                     \
  CUDA_API_FIELD(CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC, handle.fd)                \
  CUDA_API_FIELD(CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC, flags)                    \
  CUDA_API_SIZE(CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS)                          \
  CUDA_API_FIELD(CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS, params.fence.value)     \
  CUDA_API_FIELD(CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS, flags)                  \
  CUDA_API_SIZE(CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS)                            \
  CUDA_API_FIELD(CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS, params.fence.value)       \
  CUDA_API_FIELD(CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS, flags)                    \
  CUDA_API_CONST(CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD)       \
  CUDA_API_CONST(CUDA_SUCCESS)                                                  \
  CUDA_API_CONST(CUDA_ERROR_INVALID_VALUE)                                      \
  CUDA_API_CONST(CUDA_ERROR_OUT_OF_MEMORY)                                      \
  CUDA_API_CONST(CUDA_ERROR_NOT_INITIALIZED)                                    \
  CUDA_API_CONST(CUDA_ERROR_NO_DEVICE)                                          \
  CUDA_API_CONST(CUDA_ERROR_INVALID_DEVICE)                                     \
  CUDA_API_CONST(CUDA_ERROR_INVALID_CONTEXT)                                    \
  CUDA_API_CONST(CUDA_ERROR_MAP_FAILED)                                         \
  CUDA_API_CONST(CUDA_ERROR_ECC_UNCORRECTABLE)                                  \
  CUDA_API_CONST(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED)                            \
  CUDA_API_CONST(CUDA_ERROR_INVALID_HANDLE)                                     \
  CUDA_API_CONST(CUDA_ERROR_NOT_FOUND)                                          \
  CUDA_API_CONST(CUDA_ERROR_NOT_READY)                                          \
  CUDA_API_CONST(CUDA_ERROR_ILLEGAL_ADDRESS)                                    \
  CUDA_API_CONST(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)                        \
  CUDA_API_CONST(CUDA_ERROR_CONTEXT_IS_DESTROYED)                               \
  CUDA_API_CONST(CUDA_ERROR_HARDWARE_STACK_ERROR)                               \
  CUDA_API_CONST(CUDA_ERROR_ILLEGAL_INSTRUCTION)                                \
  CUDA_API_CONST(CUDA_ERROR_MISALIGNED_ADDRESS)                                 \
  CUDA_API_CONST(CUDA_ERROR_INVALID_ADDRESS_SPACE)                              \
  CUDA_API_CONST(CUDA_ERROR_INVALID_PC)                                         \
  CUDA_API_CONST(CUDA_ERROR_LAUNCH_FAILED)                                      \
  CUDA_API_CONST(CUDA_ERROR_NOT_PERMITTED)                                      \
  CUDA_API_CONST(CUDA_ERROR_NOT_SUPPORTED)                                      \
  CUDA_API_CONST(CUDA_ERROR_UNKNOWN)                                            \
  CUDA_API_CONST(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)       \
  CUDA_API_CONST(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) \
  CUDA_API_CONST(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS)             \
  CUDA_API_CONST(CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED)         \
  CUDA_API_CONST(CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR)             \
  CUDA_API_CONST(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)                         \
  CUDA_API_CONST(CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED)                       \
  CUDA_API_CONST(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED)              \
  CUDA_API_CONST(CU_DEVICE_ATTRIBUTE_MPS_ENABLED)                               \
  CUDA_API_CONST(CU_GET_PROC_ADDRESS_DEFAULT)                                   \
  CUDA_API_CONST(CU_GET_PROC_ADDRESS_SUCCESS)                                   \
  CUDA_API_CONST(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)                          \
  CUDA_API_CONST(CU_IPC_HANDLE_SIZE)                                            \
  CUDA_API_CONST(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)                            \
  CUDA_API_CONST(CU_EVENT_DISABLE_TIMING)                                       \
  CUDA_API_CONST(CU_EVENT_INTERPROCESS)                                         \
  CUDA_API_CONST(CU_STREAM_NON_BLOCKING)                                        \
  CUDA_API_CONST(CU_STREAM_WAIT_VALUE_GEQ)                                      \
  CUDA_API_CONST(CU_STREAM_WRITE_VALUE_DEFAULT)                                 \
  CUDA_API_CONST(CU_MEMHOSTREGISTER_PORTABLE)                                   \
  CUDA_API_CONST(CU_MEMHOSTREGISTER_DEVICEMAP)                                  \
  CUDA_API_CONST(CU_MEMHOSTREGISTER_READ_ONLY)                                  \
  CUDA_API_CONST(CU_MEM_ALLOCATION_TYPE_PINNED)                                 \
  CUDA_API_CONST(CU_MEM_HANDLE_TYPE_NONE)                                       \
  CUDA_API_CONST(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)                      \
  CUDA_API_CONST(CU_MEM_HANDLE_TYPE_FABRIC)                                     \
  CUDA_API_CONST(CU_MEM_LOCATION_TYPE_DEVICE)                                   \
  CUDA_API_CONST(CU_MEM_ACCESS_FLAGS_PROT_NONE)                                 \
  CUDA_API_CONST(CU_MEM_ACCESS_FLAGS_PROT_READ)                                 \
  CUDA_API_CONST(CU_MEM_ACCESS_FLAGS_PROT_READWRITE)                            \
  CUDA_API_CONST(CU_MEM_ALLOC_GRANULARITY_MINIMUM)                              \
  CUDA_API_CONST(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)                           \
  CUDA_API_CONST(CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD)                       \
  CUDA_API_CONST(CUDA_EXTERNAL_MEMORY_DEDICATED)                                \
  CUDA_API_CONST(CU_AD_FORMAT_UNSIGNED_INT8)                                    \
  CUDA_API_CONST(CU_AD_FORMAT_UNSIGNED_INT16)                                   \
  CUDA_API_CONST(CU_AD_FORMAT_UNSIGNED_INT32)                                   \
  CUDA_API_CONST(CU_AD_FORMAT_HALF)                                             \
  CUDA_API_CONST(CU_AD_FORMAT_FLOAT)                                            \
  CUDA_API_CONST(CUDA_ARRAY3D_LAYERED)                                          \
  CUDA_API_CONST(CUDA_ARRAY3D_SURFACE_LDST)                                     \
  CUDA_API_CONST(CUDA_ARRAY3D_COLOR_ATTACHMENT)                                 \
  CUDA_API_SIZE(CUarray)                                                        \
  CUDA_API_SIZE(CUmipmappedArray)                                               \
  CUDA_API_SIZE(CUarray_format)                                                 \
  CUDA_API_SIZE(CUDA_ARRAY3D_DESCRIPTOR)                                        \
  CUDA_API_FIELD(CUDA_ARRAY3D_DESCRIPTOR, Depth)                                \
  CUDA_API_FIELD(CUDA_ARRAY3D_DESCRIPTOR, Format)                               \
  CUDA_API_FIELD(CUDA_ARRAY3D_DESCRIPTOR, NumChannels)                          \
  CUDA_API_FIELD(CUDA_ARRAY3D_DESCRIPTOR, Flags)                                \
  CUDA_API_SIZE(CUDA_EXTERNAL_MEMORY_MIPMAPPED_ARRAY_DESC)                      \
  CUDA_API_FIELD(CUDA_EXTERNAL_MEMORY_MIPMAPPED_ARRAY_DESC, arrayDesc)          \
  CUDA_API_FIELD(CUDA_EXTERNAL_MEMORY_MIPMAPPED_ARRAY_DESC, numLevels)          \
  CUDA_API_SIZE(CUsurfObject)                                                   \
  CUDA_API_CONST(CU_RESOURCE_TYPE_ARRAY)                                        \
  CUDA_API_SIZE(CUDA_RESOURCE_DESC)                                             \
  CUDA_API_FIELD(CUDA_RESOURCE_DESC, res)                                       \
  CUDA_API_FIELD(CUDA_RESOURCE_DESC, res.array.hArray)                          \
  CUDA_API_FIELD(CUDA_RESOURCE_DESC, flags)

/* The toolkit's list (cuda-api-toolkit.c, built only where cuda.h is installed). */
extern const struct cuda_api_fact cuda_api_toolkit_facts[];
extern const size_t cuda_api_toolkit_fact_count;

#endif

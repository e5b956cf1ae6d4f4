/* SPDX-License-Identifier: MIT */
/* Images, registered memory and what graphics importers need (gpushm-graphics.h): the
 * requests are buffer.c's (an image is created, registered memory adopted, as any
 * buffer), the format table proto/formats.c's.  No graphics API is touched here. */
#include "config.h"
#include "graphics.h"
#include "error.h"
#include "conn.h"
#include "device.h"
#include "segment.h"
#include "buffer.h"
#include "formats.h"
#include "gpushm-graphics.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

_Static_assert(sizeof(gpushm_image_desc_t) == GPUSHM_IMAGE_DESC_SIZE_V1,
               "the first published layout");
_Static_assert(sizeof(gpushm_external_memory_t) == GPUSHM_EXTERNAL_MEMORY_SIZE_V1,
               "the first published layout");
_Static_assert(GPUSHM_TILING_OPTIMAL == IMAGE_TILING_OPTIMAL &&
               GPUSHM_TILING_LINEAR == IMAGE_TILING_LINEAR, "one spelling of tiling");

const char *gpushm_format_name(int format)
{
  const struct format_info *f = format >= 0 ? format_info((uint32_t)format) : NULL;
  return f ? f->name : NULL;
}

int gpushm_format_from_name(const char *name)
{
  return (int)format_from_name(name);
}

uint32_t gpushm_format_texel_bytes(int format)
{
  const struct format_info *f = format >= 0 ? format_info((uint32_t)format) : NULL;
  return f ? f->texel_bytes : 0;
}

uint32_t gpushm_format_vk(int format)
{
  const struct format_info *f = format >= 0 ? format_info((uint32_t)format) : NULL;
  return f ? f->vk_format : 0;
}

uint32_t gpushm_format_gl(int format)
{
  const struct format_info *f = format >= 0 ? format_info((uint32_t)format) : NULL;
  return f ? f->gl_format : 0;
}

int gpushm_format_cuda(int format, uint32_t *cu_array_format, uint32_t *channels)
{
  const struct format_info *f = format >= 0 ? format_info((uint32_t)format) : NULL;

  client_clear_error();
  if (!f)
    return client_error(GPUSHM_E_INVAL, "%d is not a gpushm format", format);
  if (!f->cuda_format)
    return client_error(GPUSHM_E_UNSUPPORTED, "no CUDA array format holds %s", f->name);
  if (cu_array_format)
    *cu_array_format = f->cuda_format;
  if (channels)
    *channels = f->cuda_channels;
  return 0;
}

void gpushm_image_desc_init(gpushm_image_desc_t *desc)
{
  memset(desc, 0, sizeof *desc);
  desc->size = sizeof *desc;
  desc->format = GPUSHM_FORMAT_RGBA8_UNORM;
  desc->width = desc->height = desc->depth = 1;
  desc->mip_levels = desc->array_layers = 1;
  desc->tiling = GPUSHM_TILING_LINEAR;
  desc->usage = GPUSHM_IMAGE_USAGE_SAMPLED | GPUSHM_IMAGE_USAGE_TRANSFER_SRC |
                GPUSHM_IMAGE_USAGE_TRANSFER_DST;
}

/* A caller's description, copied (sized struct), checked as the daemon will, in the
 * wire's spelling. */
static int read_image_desc(const gpushm_image_desc_t *user, Gpushm__ImageDesc *wire)
{
  gpushm_image_desc_t d;
  struct image_params p;
  char why[256];
  int r;

  if (!user)
    return client_error(GPUSHM_E_INVAL, "an image needs a description");
  gpushm_image_desc_init(&d);
  if ((r = client_copy_opts(&d, sizeof d, user, GPUSHM_IMAGE_DESC_SIZE_V1,
                            "gpushm_image_desc_t")) < 0)
    return r;
  if (d.reserved)
    return client_error(GPUSHM_E_INVAL, "gpushm_image_desc_t.reserved must be 0");
  p = (struct image_params){ d.format, d.width, d.height, d.depth, d.mip_levels,
                             d.array_layers, d.tiling, d.usage, d.row_pitch };
  if ((r = image_check(&p, why, sizeof why)) < 0)
    return client_error(r, "%s", why);
  gpushm__image_desc__init(wire);
  wire->format = p.format;
  wire->width = p.width;
  wire->height = p.height;
  wire->depth = p.depth;
  wire->mip_levels = p.mip_levels;
  wire->array_layers = p.array_layers;
  wire->tiling = (Gpushm__ImageTiling)p.tiling;
  wire->usage = p.usage;
  wire->row_pitch = p.row_pitch;
  return 0;
}

int client_image_desc_wire(const gpushm_image_desc_t *desc, Gpushm__ImageDesc *wire)
{
  int r = read_image_desc(desc, wire);

  if (r == 0 && wire->tiling == GPUSHM_TILING_OPTIMAL)
    return client_error(GPUSHM_E_UNSUPPORTED, "gpushmd allocates linear images; an optimal-"
                        "tiling image is allocated by a Vulkan process and registered "
                        "(gpushm_vk_create_image(), gpushm-vulkan.h)");
  return r;
}

int gpushm_image_create(gpushm_t *conn, const char *name, const gpushm_image_desc_t *desc,
                        const gpushm_create_opts_t *opts, gpushm_buffer_t **out)
{
  Gpushm__ImageDesc wire;
  int r;

  client_clear_error();
  if (!conn || !out)
    return client_error(GPUSHM_E_INVAL, "conn and out must not be NULL");
  *out = NULL;
  if ((r = read_image_desc(desc, &wire)) < 0)
    return r;
  if (wire.tiling == GPUSHM_TILING_OPTIMAL)
    return client_error(GPUSHM_E_UNSUPPORTED, "gpushmd allocates linear images; an optimal-"
                        "tiling image is allocated by a Vulkan process and registered "
                        "(gpushm_vk_create_image(), gpushm-vulkan.h)");
  if (opts && opts->size >= GPUSHM_CREATE_OPTS_SIZE_V1 &&
      opts->backend == GPUSHM_BACKEND_CUDA_IPC)
    return client_error(GPUSHM_E_INVAL, "cuda-ipc memory imports into no graphics API: an "
                        "image lives in host, cuda-fd or cuda-fabric memory");
  return client_create_image(conn, name, &wire, opts, out);
}

int gpushm_buffer_image_desc(const gpushm_buffer_t *buf, gpushm_image_desc_t *out)
{
  client_clear_error();
  if (!buf || !out)
    return client_error(GPUSHM_E_INVAL, "buf and out must not be NULL");
  if (!buf->map->is_image)
    return client_error(GPUSHM_E_INVAL, "'%s' is not an image", buf->map->name);
  *out = buf->map->image;
  return 0;
}

int gpushm_image_cuda_mipmapped_array(gpushm_buffer_t *buf, void **mipmapped_array)
{
  const struct client_mapping *m;

  client_clear_error();
  if (!buf || !mipmapped_array)
    return client_error(GPUSHM_E_INVAL, "buf and mipmapped_array must not be NULL");
  m = buf->map;
  if (!m->is_image)
    return client_error(GPUSHM_E_INVAL, "'%s' is not an image", m->name);
  if (m->image.tiling == GPUSHM_TILING_LINEAR)
    return client_error(GPUSHM_E_UNSUPPORTED, "'%s' is a linear image: memory with a row "
                        "pitch of %llu (gpushm_buffer_ptr()), no CUDA array", m->name,
                        (unsigned long long)m->image.row_pitch);
  if (!m->cuda_mipmap)
    return client_error(GPUSHM_E_INVAL, "'%s' was not opened for a CUDA device", m->name);
  *mipmapped_array = m->cuda_mipmap;
  return 0;
}

int gpushm_image_cuda_array(gpushm_buffer_t *buf, uint32_t level, void **array)
{
  void *mipmap;
  int r;

  if (!array)
    return client_error(GPUSHM_E_INVAL, "array must not be NULL");
  if ((r = gpushm_image_cuda_mipmapped_array(buf, &mipmap)) < 0)
    return r;
  if (level >= buf->map->image.mip_levels)
    return client_error(GPUSHM_E_INVAL, "'%s' has %u levels, not %u", buf->map->name,
                        buf->map->image.mip_levels, level + 1);
  /* The driver keeps a level's array with the mipmapped array: nothing to free. */
  return client_cuda_mipmap_level(mipmap, level, buf->map->device, array);
}

void gpushm_external_memory_init(gpushm_external_memory_t *mem)
{
  memset(mem, 0, sizeof *mem);
  mem->size = sizeof *mem;
  mem->handle_type = GPUSHM_EXTERNAL_OPAQUE_FD;
  mem->fd = -1;
}

int gpushm_register_memory(gpushm_t *conn, const char *name, const gpushm_external_memory_t *user,
                           const gpushm_create_opts_t *user_opts, gpushm_buffer_t **out)
{
  Gpushm__Request req = GPUSHM__REQUEST__INIT;
  Gpushm__RegisterRequest body = GPUSHM__REGISTER_REQUEST__INIT;
  Gpushm__ExternalMemory memory = GPUSHM__EXTERNAL_MEMORY__INIT;
  Gpushm__ImageDesc image;
  gpushm_external_memory_t mem;
  gpushm_create_opts_t opts;
  int r;

  client_clear_error();
  if (!conn || !out || !user)
    return client_error(GPUSHM_E_INVAL, "conn, mem and out must not be NULL");
  *out = NULL;
  if (!wire_name_valid(name))
    return client_error(GPUSHM_E_NAME, "invalid name");
  if (!(conn->features & GPUSHM_FEATURE_GRAPHICS))
    return client_error(GPUSHM_E_UNSUPPORTED, "gpushmd %s keeps no registered memory "
                        "(GPUSHM_FEATURE_GRAPHICS)", conn->daemon_version);
  gpushm_external_memory_init(&mem);
  if ((r = client_copy_opts(&mem, sizeof mem, user, GPUSHM_EXTERNAL_MEMORY_SIZE_V1,
                            "gpushm_external_memory_t")) < 0)
    return r;
  gpushm_create_opts_init(&opts);
  if (user_opts && (r = client_copy_opts(&opts, sizeof opts, user_opts,
                                         GPUSHM_CREATE_OPTS_SIZE_V1, "gpushm_create_opts_t")) < 0)
    return r;
  if (opts.backend || (opts.flags & ~GPUSHM_CREATE_STRICT_MODE) || opts.open)
    return client_error(GPUSHM_E_INVAL, "registered memory has its own backend, and takes no "
                        "create flags (but GPUSHM_CREATE_STRICT_MODE) or open options");
  /* An older daemon would drop the field and keep the mode it cannot keep. */
  if ((opts.flags & GPUSHM_CREATE_STRICT_MODE) && !(conn->features & GPUSHM_FEATURE_STRICT_MODE))
    return client_error(GPUSHM_E_UNSUPPORTED, "gpushmd %s cannot be asked to refuse modes its "
                        "backends do not keep (GPUSHM_FEATURE_STRICT_MODE)", conn->daemon_version);
  if (mem.handle_type != GPUSHM_EXTERNAL_OPAQUE_FD || mem.fd < 0 ||
      (mem.flags & ~GPUSHM_EXTERNAL_DEDICATED))
    return client_error(GPUSHM_E_INVAL, "register an OPAQUE_FD (handle_type %u, fd %d, flags "
                        "0x%x)", mem.handle_type, mem.fd, mem.flags);
  if (memchr(mem.driver_info, '\0', sizeof mem.driver_info) == NULL)
    return client_error(GPUSHM_E_INVAL, "driver_info is not a terminated string");
  if (mem.image) {
    if ((r = read_image_desc(mem.image, &image)) < 0)
      return r;
    body.image = &image;
  }
  if (opts.metadata_size > GPUSHM_METADATA_MAX || (opts.metadata_size && !opts.metadata))
    return client_error(GPUSHM_E_INVAL, "metadata: %u bytes at most %u, and not NULL",
                        opts.metadata_size, GPUSHM_METADATA_MAX);
  memory.allocation_size = mem.allocation_size;
  memory.memory_type_index = mem.memory_type_index;
  memory.dedicated = (mem.flags & GPUSHM_EXTERNAL_DEDICATED) != 0;
  memory.device_uuid.data = mem.device_uuid;
  memory.device_uuid.len = sizeof mem.device_uuid;
  memory.driver_uuid.data = mem.driver_uuid;
  memory.driver_uuid.len = sizeof mem.driver_uuid;
  memory.driver_info = mem.driver_info;
  body.name = (char *)name;
  body.size = mem.image ? mem.allocation_size
              : mem.data_size ? mem.data_size : mem.allocation_size;
  body.mode = opts.mode;
  body.lifetime = (Gpushm__Lifetime)opts.lifetime;
  body.strict_mode = (opts.flags & GPUSHM_CREATE_STRICT_MODE) != 0;
  body.memory = &memory;
  body.metadata.data = (uint8_t *)opts.metadata;
  body.metadata.len = opts.metadata_size;
  req.body_case = GPUSHM__REQUEST__BODY_REGISTER_MEMORY;
  req.register_memory = &body;
  return client_register(conn, &req, mem.fd, out);
}

int gpushm_buffer_memory_info(const gpushm_buffer_t *buf, gpushm_memory_info_t *out)
{
  const struct client_mapping *m;
  uint32_t size;

  client_clear_error();
  if (!buf || !out)
    return client_error(GPUSHM_E_INVAL, "buf and out must not be NULL");
  if (out->size < offsetof(gpushm_memory_info_t, reserved))
    return client_error(GPUSHM_E_INVAL, "gpushm_memory_info_t.size %u: set it to sizeof",
                        out->size);
  size = out->size < sizeof *out ? out->size : (uint32_t)sizeof *out;
  m = buf->map;
  if (m->kind == GPUSHM_KIND_EVENT)
    return client_error(GPUSHM_E_INVAL, "'%s' is an event", m->name);
  gpushm_memory_info_t info = { .size = size, .memory_type_index = GPUSHM_MEMORY_TYPE_ANY };
  info.access = (m->read_only ? GPUSHM_OPEN_READONLY : 0) |
                (buf->write_discard ? GPUSHM_OPEN_WRITE_DISCARD : 0);
  info.data_size = m->size;
  if (m->backend == GPUSHM_BACKEND_HOST) {
    /* Vulkan imports host pointers whole pages at a time (VK_EXT_external_memory_host) */
    long page = sysconf(_SC_PAGESIZE);
    info.handle_type = GPUSHM_EXTERNAL_HOST_POINTER;
    if (m->segment) {
      info.host_pointer = client_segment_host(m->segment);
      info.offset = (uint64_t)((char *)m->ptr - (char *)info.host_pointer);
      info.allocation_size = client_segment_size(m->segment);
    } else {
      info.host_pointer = m->ptr;
      info.allocation_size = (m->size + (uint64_t)page - 1) / (uint64_t)page * (uint64_t)page;
    }
  } else if (m->device == GPUSHM_DEVICE_NONE) {
    info.handle_type = GPUSHM_EXTERNAL_OPAQUE_FD;
    memcpy(info.device_uuid, m->device_uuid, sizeof info.device_uuid);
    if (m->backend == GPUSHM_BACKEND_EXTERNAL) {
      info.allocation_size = m->ext_allocation_size;
      info.memory_type_index = m->ext_memory_type_index;
      info.flags = m->ext_dedicated ? GPUSHM_EXTERNAL_DEDICATED : 0;
      if (m->memory_fd >= 0 && (fcntl(m->memory_fd, F_GETFL) & O_ACCMODE) == O_RDONLY)
        info.flags |= GPUSHM_EXTERNAL_READ_ONLY_FD;
      memcpy(info.driver_uuid, m->ext_driver_uuid, sizeof info.driver_uuid);
      snprintf(info.driver_info, sizeof info.driver_info, "%s", m->ext_driver_info);
    } else {
      info.allocation_size = m->segment ? client_segment_size(m->segment) : m->allocated;
      info.offset = m->segment ? (uint64_t)m->slot_offset : 0;
      snprintf(info.driver_info, sizeof info.driver_info, "%s", buf->conn->driver_version);
    }
  } else {
    return client_error(GPUSHM_E_INVAL, "'%s' is mapped for CUDA: open it with map_device "
                        "GPUSHM_DEVICE_NONE for a graphics API", m->name);
  }
  memcpy(out, &info, size);
  return 0;
}

int gpushm_buffer_memory_fd(gpushm_buffer_t *buf, int *fd_out)
{
  gpushm_export_desc_t d = { .size = sizeof d };
  int r;

  client_clear_error();
  if (!buf || !fd_out)
    return client_error(GPUSHM_E_INVAL, "buf and fd_out must not be NULL");
  if ((r = gpushm_buffer_export(buf, GPUSHM_EXPORT_OPAQUE_FD, 0, 0, &d)) < 0)
    return r == GPUSHM_E_UNSUPPORTED ? GPUSHM_E_INVAL : r; /* as it always said */
  *fd_out = d.fd;
  return 0;
}

_Static_assert(GPUSHM_UUID_TEXT_SIZE == WIRE_UUID_HEX_LEN, "one UUID text, one size");

const char *gpushm_uuid_text(const uint8_t u[16], char out[GPUSHM_UUID_TEXT_SIZE])
{
  wire_uuid_hex(u, out);
  return out;
}

static bool all_zero(const uint8_t u[16])
{
  static const uint8_t zero[16];
  return memcmp(u, zero, 16) == 0;
}

int gpushm_memory_info_match(const gpushm_memory_info_t *info, const uint8_t device_uuid[16],
                             const uint8_t driver_uuid[16], const char *driver_text, char *why,
                             size_t why_len)
{
  char want[GPUSHM_UUID_TEXT_SIZE], have[GPUSHM_UUID_TEXT_SIZE];
  char scratch[8];

  client_clear_error();
  if (!why || !why_len) {
    why = scratch;
    why_len = sizeof scratch;
  }
  why[0] = '\0';
  if (!info || !device_uuid)
    return client_error(GPUSHM_E_INVAL, "info and device_uuid must not be NULL");
  if (info->handle_type == GPUSHM_EXTERNAL_HOST_POINTER)
    return 0;
  if (!all_zero(info->device_uuid) && memcmp(info->device_uuid, device_uuid, 16) != 0) {
    snprintf(why, why_len, "the memory lives on device %s (driver %s), not on %s: memory "
             "imports only on its own device", gpushm_uuid_text(info->device_uuid, want),
             info->driver_info[0] ? info->driver_info : "unknown",
             gpushm_uuid_text(device_uuid, have));
    return client_error(GPUSHM_E_UNSUPPORTED, "%s", why);
  }
  if (!all_zero(info->driver_uuid)) {
    if (driver_uuid && !all_zero(driver_uuid) && memcmp(info->driver_uuid, driver_uuid, 16) != 0) {
      snprintf(why, why_len, "the memory was made by driver %s (%s), not by %s (%s): memory "
               "imports only into the driver that made it",
               gpushm_uuid_text(info->driver_uuid, want), info->driver_info,
               gpushm_uuid_text(driver_uuid, have), driver_text ? driver_text : "?");
      return client_error(GPUSHM_E_UNSUPPORTED, "%s", why);
    }
  } else if (info->driver_info[0] && driver_text && driver_text[0] &&
             !strstr(driver_text, info->driver_info)) {
    snprintf(why, why_len, "the memory belongs to NVIDIA driver %s, not to %s: memory imports "
             "only into the driver that made it", info->driver_info, driver_text);
    return client_error(GPUSHM_E_UNSUPPORTED, "%s", why);
  }
  return 0;
}


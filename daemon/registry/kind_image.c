/* SPDX-License-Identifier: MIT */
/* Images gpushmd allocates: linear ones (rows row_pitch bytes apart, what CUDA kernels
 * write and every graphics API can import), each an allocation of its own (GL and
 * Vulkan import whole allocations, and a texture at an offset in a shared one is where
 * drivers disagree: docs/graphics.md).  Their memory is a whole buffer's (kind_buffer.c);
 * optimal-tiling images come from a Vulkan process, registered (kind_external.c). */
#include "config.h"
#include "registry/kind_buffer.h"
#include "registry/backends.h"
#include "protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int image_kind_check(const struct registry *reg, const struct reg_create_args *args,
                            const struct reg_policy *policy, const struct backend **be,
                            char *err, size_t errlen)
{
  struct image_params p = *args->image;
  int r;

  if (args->sync || args->open_existing) {
    snprintf(err, errlen, "an image is made once, without sync of its own: no %s",
             args->sync ? "sync" : "open-existing");
    return PROTO_E_INVAL;
  }
  if ((r = image_check(&p, err, errlen)) < 0)
    return r;
  if (p.tiling != IMAGE_TILING_LINEAR) {
    snprintf(err, errlen, "unsupported: gpushmd allocates linear images; an optimal-tiling "
             "image is allocated by a Vulkan process and registered (gpushm_vk_create_image)");
    return PROTO_E_UNSUPPORTED;
  }
  if (args->size != image_linear_bytes(&p) || p.row_pitch != args->image->row_pitch) {
    snprintf(err, errlen, "image size %llu is not its rows' (%llu × %u)",
             (unsigned long long)args->size, (unsigned long long)p.row_pitch, p.height);
    return PROTO_E_INVAL;
  }
  if ((r = reg_resolve_backend(reg, args->backend, policy, be, err, errlen)) < 0)
    return r;
  if ((*be)->kind == PROTO_BACKEND_CUDA_IPC) {
    snprintf(err, errlen, "unsupported: cuda-ipc memory imports into no graphics API; an "
             "image lives in host, cuda-fd or cuda-fabric memory");
    return PROTO_E_UNSUPPORTED;
  }
  return 0;
}

static void image_estimate(const struct registry *reg, const struct reg_create_args *args,
                           const struct backend *be, struct quota_cost *cost)
{
  reg_kind_buffer.estimate(reg, args, be, cost);
}

struct reg_image {
  struct reg_buffer buf; /* first: the buffer kind's ops work on it */
  struct image_params image;
};

static int image_alloc(struct registry *reg, struct reg_object *obj,
                       const struct reg_create_args *args, const struct backend *be,
                       const struct reg_client *client, char *err, size_t errlen)
{
  ((struct reg_image *)obj)->image = *args->image;
  return reg_kind_buffer.alloc(reg, obj, args, be, client, err, errlen);
}

static int image_export(struct registry *reg, struct reg_object *obj, struct reg_client *client,
                        const struct reg_policy *policy, bool read_only,
                        struct reg_export *out, char *err, size_t errlen)
{
  return reg_kind_buffer.export(reg, obj, client, policy, read_only, out, err, errlen);
}

static void image_release(struct registry *reg, struct reg_object *obj)
{
  reg_kind_buffer.release(reg, obj);
}

static void image_describe(const struct reg_object *obj, struct reg_description *out)
{
  reg_kind_buffer.describe(obj, out);
  out->kind = "image";
  out->image = &((const struct reg_image *)obj)->image;
}

/* No persistence: an image does not come back after a restart (docs/graphics.md). */
const struct reg_kind_ops reg_kind_image = {
  .name = "image",
  .kind = REG_BUFFER,
  .object_size = sizeof(struct reg_image),
  .check = image_kind_check,
  .estimate = image_estimate,
  .alloc = image_alloc,
  .export = image_export,
  .release = image_release,
  .describe = image_describe,
};

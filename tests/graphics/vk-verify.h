/* SPDX-License-Identifier: MIT */
/* The Vulkan consumer's check, on the GPU: compute shaders (verify-words.comp,
 * verify-image.comp, compiled to SPIR-V at build time) count what differs from the
 * test pattern (tests/gpu/kernels.cu's pattern_word) in a buffer or an RGBA8 image. */
#ifndef GPUSHM_TEST_VK_VERIFY_H
#define GPUSHM_TEST_VK_VERIFY_H

#include "vk-context.h"
#include "verify-image.spv.h"
#include "verify-words.spv.h"

struct vkv_params_words {
  uint32_t n, seed, row_length, width;
};

struct vkv_params_image {
  uint32_t width, height, seed;
};

/* Runs a compute shader with binding 0 (a storage buffer, or a storage image given by
 * view) and binding 1 (the error counter), push constants params; the count, or -1. */
static inline long vkv_run(struct vkc *c, const uint32_t *spv, size_t spv_bytes, VkBuffer data,
                           VkDeviceSize offset, VkDeviceSize range, VkImageView view,
                           const void *params, uint32_t params_bytes, uint32_t groups_x,
                           uint32_t groups_y)
{
  VkDescriptorSetLayoutBinding bindings[2] = {
    { 0, view ? VK_DESCRIPTOR_TYPE_STORAGE_IMAGE : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1,
      VK_SHADER_STAGE_COMPUTE_BIT, NULL },
    { 1, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL },
  };
  VkDescriptorSetLayoutCreateInfo dli = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = 2, .pBindings = bindings };
  VkPushConstantRange push = { VK_SHADER_STAGE_COMPUTE_BIT, 0, params_bytes };
  VkShaderModuleCreateInfo smi = { .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                   .codeSize = spv_bytes, .pCode = spv };
  VkDescriptorPoolSize sizes[2] = { { VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 2 },
                                    { VK_DESCRIPTOR_TYPE_STORAGE_IMAGE, 1 } };
  VkDescriptorPoolCreateInfo dpi = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                     .maxSets = 1, .poolSizeCount = 2, .pPoolSizes = sizes };
  VkDescriptorSetLayout dsl;
  VkPipelineLayout layout;
  VkShaderModule module;
  VkPipeline pipeline;
  VkDescriptorPool pool;
  VkDescriptorSet set;
  struct vkc_buffer result;
  VkCommandBuffer cb;
  long errors = -1;

  if (vkc_host_buffer(c, 4, &result) < 0)
    return -1;
  *(uint32_t *)result.map = 0;
  vkCreateDescriptorSetLayout(c->device, &dli, NULL, &dsl);
  {
    VkPipelineLayoutCreateInfo pli = { .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                       .setLayoutCount = 1, .pSetLayouts = &dsl,
                                       .pushConstantRangeCount = 1, .pPushConstantRanges = &push };
    vkCreatePipelineLayout(c->device, &pli, NULL, &layout);
  }
  vkCreateShaderModule(c->device, &smi, NULL, &module);
  {
    VkComputePipelineCreateInfo cpi = { .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                                        .stage = { .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                                                   .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                                                   .module = module, .pName = "main" },
                                        .layout = layout };
    if (vkCreateComputePipelines(c->device, VK_NULL_HANDLE, 1, &cpi, NULL, &pipeline) != VK_SUCCESS)
      goto out;
  }
  vkCreateDescriptorPool(c->device, &dpi, NULL, &pool);
  {
    VkDescriptorSetAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                       .descriptorPool = pool, .descriptorSetCount = 1,
                                       .pSetLayouts = &dsl };
    VkDescriptorBufferInfo data_info = { data, offset, range };
    VkDescriptorImageInfo image_info = { VK_NULL_HANDLE, view, VK_IMAGE_LAYOUT_GENERAL };
    VkDescriptorBufferInfo result_info = { result.buffer, 0, 4 };
    VkWriteDescriptorSet writes[2] = {
      { .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstBinding = 0, .descriptorCount = 1,
        .descriptorType = bindings[0].descriptorType, .pImageInfo = &image_info,
        .pBufferInfo = &data_info },
      { .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstBinding = 1, .descriptorCount = 1,
        .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = &result_info },
    };
    vkAllocateDescriptorSets(c->device, &ai, &set);
    writes[0].dstSet = writes[1].dstSet = set;
    vkUpdateDescriptorSets(c->device, 2, writes, 0, NULL);
  }
  cb = vkc_begin(c);
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
  vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &set, 0, NULL);
  vkCmdPushConstants(cb, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, params_bytes, params);
  vkCmdDispatch(cb, groups_x, groups_y, 1);
  {
    VkMemoryBarrier b = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_HOST_READ_BIT };
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0,
                         1, &b, 0, NULL, 0, NULL);
  }
  if (vkc_submit(c, cb) == 0)
    errors = *(volatile uint32_t *)result.map;
  vkDestroyDescriptorPool(c->device, pool, NULL);
  vkDestroyPipeline(c->device, pipeline, NULL);
out:
  vkDestroyShaderModule(c->device, module, NULL);
  vkDestroyPipelineLayout(c->device, layout, NULL);
  vkDestroyDescriptorSetLayout(c->device, dsl, NULL);
  vkc_free_buffer(c, &result);
  return errors;
}

/* n words of the pattern seed at data+offset (rows of width words, row_length apart;
 * row_length 0: packed): how many differ, -1 if the check could not run. */
static inline long vkv_words(struct vkc *c, VkBuffer data, VkDeviceSize offset, VkDeviceSize range,
                             uint32_t n, uint32_t seed, uint32_t row_length, uint32_t width)
{
  struct vkv_params_words p = { n, seed, row_length, width ? width : 1 };
  return vkv_run(c, verify_words_spv, sizeof verify_words_spv, data, offset, range,
                 VK_NULL_HANDLE, &p, sizeof p, (n + 255) / 256, 1);
}

/* An RGBA8 image in VK_IMAGE_LAYOUT_GENERAL with STORAGE usage: texels that differ. */
static inline long vkv_image(struct vkc *c, VkImage image, VkFormat format, uint32_t width,
                             uint32_t height, uint32_t seed)
{
  VkImageViewCreateInfo vi = { .sType = VK_STRUCTURE_TYPE_IMAGE_VIEW_CREATE_INFO, .image = image,
                               .viewType = VK_IMAGE_VIEW_TYPE_2D, .format = format,
                               .subresourceRange = { VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1 } };
  struct vkv_params_image p = { width, height, seed };
  VkImageView view;
  long errors;

  if (vkCreateImageView(c->device, &vi, NULL, &view) != VK_SUCCESS)
    return -1;
  errors = vkv_run(c, verify_image_spv, sizeof verify_image_spv, VK_NULL_HANDLE, 0, 0, view, &p,
                   sizeof p, (width + 15) / 16, (height + 15) / 16);
  vkDestroyImageView(c->device, view, NULL);
  return errors;
}

/* A linear image's rows (an import of it, vi) copied into an optimal RGBA8 image of this
 * device and checked there as an image: texels that differ, -1 if it could not run. */
static inline long vkv_linear_as_image(struct vkc *c, const gpushm_vk_image_t *vi,
                                       const gpushm_image_desc_t *desc, uint32_t seed)
{
  VkImageCreateInfo ici = gpushm_vk_image_create_info(desc, VK_IMAGE_TILING_OPTIMAL, NULL);
  VkMemoryAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO };
  VkMemoryRequirements req;
  VkDeviceMemory memory;
  VkCommandBuffer cb;
  VkImage own;
  long errors = -1;

  ici.usage = VK_IMAGE_USAGE_STORAGE_BIT | VK_IMAGE_USAGE_TRANSFER_DST_BIT;
  if (vkCreateImage(c->device, &ici, NULL, &own) != VK_SUCCESS)
    return -1;
  vkGetImageMemoryRequirements(c->device, own, &req);
  ai.allocationSize = req.size;
  if (gpushm_vk_memory_type(&c->gpushm, req.memoryTypeBits, GPUSHM_MEMORY_TYPE_ANY,
                            &ai.memoryTypeIndex) == 0 &&
      vkAllocateMemory(c->device, &ai, NULL, &memory) == VK_SUCCESS) {
    if (vkBindImageMemory(c->device, own, memory, 0) == VK_SUCCESS) {
      cb = vkc_begin(c);
      vkc_copy_buffer_to_image(cb, vi->buffer, vi->row_length, own, VK_IMAGE_LAYOUT_UNDEFINED,
                               vi->extent, 1, 1);
      if (vkc_submit(c, cb) == 0)
        errors = vkv_image(c, own, ici.format, desc->width, desc->height, seed);
    }
    vkFreeMemory(c->device, memory, NULL);
  }
  vkDestroyImage(c->device, own, NULL);
  return errors;
}

#endif

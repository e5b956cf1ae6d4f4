/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "offer.h"
#include "backends/backend.h"
#include "backends/event.h"
#include "registry/registry.h"

void offer_backends(struct registry *reg)
{
  registry_add_backend(reg, &backend_host);
  registry_add_backend(reg, &backend_cuda_ipc);
  registry_add_backend(reg, &backend_cuda_fd);
  registry_add_backend(reg, &backend_cuda_fabric);
  registry_set_events(reg, &event_cuda_ipc);
}

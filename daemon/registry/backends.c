/* SPDX-License-Identifier: MIT */
/* The backends the composition root offers the registry, and which of them a create
 * or an open may use.  Apart from registry.c so that the kinds, which registry.c
 * calls, call this and not back into registry.c. */
#include "config.h"
#include "registry/backends.h"
#include "registry/state.h"
#include "protocol.h"

#include <stdio.h>
#include <unistd.h>

void registry_add_backend(struct registry *reg, const struct backend *be)
{
  if (be->kind >= 1 && be->kind < GPUSHM_BACKEND_COUNT)
    reg->backends[be->kind] = be;
}

void registry_set_auto_backend(struct registry *reg, int backend)
{
  reg->auto_backend = backend;
}

const struct backend *registry_backend(const struct registry *reg, int kind)
{
  return kind >= 1 && kind < GPUSHM_BACKEND_COUNT ? reg->backends[kind] : NULL;
}

bool registry_backend_allowed(const struct registry *reg, const struct backend *be)
{
  return be->kind != PROTO_BACKEND_CUDA_IPC || reg->limits.allow_legacy_ipc;
}

int reg_legacy_ipc_check(const struct registry *reg, const struct backend *be, char *err,
                         size_t errlen)
{
  if (registry_backend_allowed(reg, be))
    return 0;
  snprintf(err, errlen, "unsupported: cuda-ipc is off on this gpushmd (allow-legacy-ipc): its "
           "handles are bearer tokens any local process can forge; use cuda-fd");
  return PROTO_E_UNSUPPORTED;
}

int reg_resolve_backend(const struct registry *reg, int backend, const struct reg_policy *policy,
                        const struct backend **be, char *err, size_t errlen)
{
  const char *why;

  if (!backend)
    backend = registry_default_backend(reg, policy);
  if (backend < 1 || backend >= GPUSHM_BACKEND_COUNT) {
    /* A newer client may know backends this daemon does not. */
    snprintf(err, errlen, "unknown backend %d (this daemon knows 1-%d)", backend,
             GPUSHM_BACKEND_COUNT - 1);
    return PROTO_E_UNSUPPORTED;
  }
  if (!(*be = reg->backends[backend])) {
    snprintf(err, errlen, "unsupported: this gpushmd does not offer backend %d", backend);
    return PROTO_E_UNSUPPORTED;
  }
  if ((*be)->unavailable && (why = (*be)->unavailable(*be))) {
    snprintf(err, errlen, "unsupported: %s backend unavailable: %s", (*be)->name, why);
    return PROTO_E_UNSUPPORTED;
  }
  return reg_legacy_ipc_check(reg, *be, err, errlen);
}

int registry_default_backend(const struct registry *reg, const struct reg_policy *policy)
{
  if (policy && policy->default_host_only)
    return PROTO_BACKEND_HOST;
  switch (reg->limits.default_backend) {
  case 0:
    return PROTO_BACKEND_HOST;
  case REG_DEFAULT_BACKEND_AUTO:
    return reg->auto_backend;
  default:
    return reg->limits.default_backend;
  }
}

void registry_export_close_fds(struct reg_export *e)
{
  while (e->n_fds)
    close(e->fds[--e->n_fds]);
}

/* SPDX-License-Identifier: MIT */
/* Which backends the registry offers and which one a create means (backends.c): what the
 * composition root sets up, and what the registry and its kinds ask. */
#ifndef GPUSHMD_REGISTRY_BACKENDS_H
#define GPUSHMD_REGISTRY_BACKENDS_H

#include "registry/types.h"

struct registry;

/* The composition root's choices: which backends clients may use, what "auto" means. */
void registry_add_backend(struct registry *reg, const struct backend *be);
void registry_set_auto_backend(struct registry *reg, int backend);

/* The backend of that kind clients may be offered (NULL: none), and whether creates and
 * opens may use it now (allow-legacy-ipc). */
const struct backend *registry_backend(const struct registry *reg, int kind);
bool registry_backend_allowed(const struct registry *reg, const struct backend *be);
/* The backend PROTO_BACKEND_DEFAULT means now for a library with that policy (NULL:
 * any recent one); never 0 nor auto. */
int registry_default_backend(const struct registry *reg, const struct reg_policy *policy);
/* The backend a create means: its own, or the default for that policy; checked to be
 * known, offered, available and allowed (allow-legacy-ipc). */
int reg_resolve_backend(const struct registry *reg, int backend, const struct reg_policy *policy,
                        const struct backend **be, char *err, size_t errlen);
/* Legacy IPC is for one trust domain: 0, or PROTO_E_UNSUPPORTED where it is off. */
int reg_legacy_ipc_check(const struct registry *reg, const struct backend *be, char *err,
                         size_t errlen);

/* Closes the export's fds (those not sent). */
void registry_export_close_fds(struct reg_export *e);

#endif

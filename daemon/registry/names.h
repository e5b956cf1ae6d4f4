/* SPDX-License-Identifier: MIT */
/* The registry's two indexes of its objects: by name (a hash table of the linked ones)
 * and by id (an array kept in ascending id order: ids only grow, so a create appends;
 * an object adopted after a restart is inserted where its old id belongs).  Knows of an
 * object only its reg_key. */
#ifndef GPUSHMD_REGISTRY_NAMES_H
#define GPUSHMD_REGISTRY_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpushm_limits.h"

/* What the indexes know of an object: the first member of struct reg_object. */
struct reg_key {
  uint64_t id;
  bool linked; /* in the name table */
  struct reg_key *name_next; /* hash chain, while linked */
  char name[GPUSHM_LIMIT_NAME_LEN + 1];
};

struct names {
  struct reg_key **by_id;
  size_t n, cap;
  struct reg_key **buckets;
  size_t n_buckets;
  uint32_t n_linked;
};

int names_init(struct names *ix);
void names_destroy(struct names *ix);
/* Room for one more object in both indexes; PROTO_E_NOMEM if there is none.  The adds
 * below cannot fail after it. */
int names_reserve(struct names *ix);
struct reg_key *names_lookup(const struct names *ix, const char *name);
/* Links key->name (which no linked key has) and clears it again. */
void names_link(struct names *ix, struct reg_key *key);
void names_unlink(struct names *ix, struct reg_key *key);
/* Adds key to the id index at its place; removes it. */
void ids_add(struct names *ix, struct reg_key *key);
void ids_remove(struct names *ix, const struct reg_key *key);
struct reg_key *ids_find(const struct names *ix, uint64_t id);
/* Index of the first key whose id is greater than after_id (n if none). */
size_t ids_index_after(const struct names *ix, uint64_t after_id);

#endif

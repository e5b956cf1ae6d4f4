/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "registry/names.h"
#include "protocol.h"

#include <stdlib.h>
#include <string.h>

/* FNV-1a: names are short and the table is private, so no need for a keyed hash. */
static size_t name_hash(const char *name)
{
  uint64_t h = 1469598103934665603ull;
  for (; *name; name++)
    h = (h ^ (unsigned char)*name) * 1099511628211ull;
  return (size_t)h;
}

static struct reg_key **name_slot(const struct names *ix, const char *name)
{
  struct reg_key **slot = &ix->buckets[name_hash(name) % ix->n_buckets];
  while (*slot && strcmp((*slot)->name, name) != 0)
    slot = &(*slot)->name_next;
  return slot;
}

int names_init(struct names *ix)
{
  memset(ix, 0, sizeof *ix);
  ix->n_buckets = 64;
  ix->buckets = calloc(ix->n_buckets, sizeof *ix->buckets);
  return ix->buckets ? 0 : PROTO_E_NOMEM;
}

void names_destroy(struct names *ix)
{
  free(ix->by_id);
  free(ix->buckets);
  memset(ix, 0, sizeof *ix);
}

static int buckets_grow(struct names *ix)
{
  size_t n = ix->n_buckets * 2;
  struct reg_key **table = calloc(n, sizeof *table);

  if (!table)
    return PROTO_E_NOMEM;
  for (size_t i = 0; i < ix->n_buckets; i++) {
    for (struct reg_key *k = ix->buckets[i], *next; k; k = next) {
      size_t h = name_hash(k->name) % n;
      next = k->name_next;
      k->name_next = table[h];
      table[h] = k;
    }
  }
  free(ix->buckets);
  ix->buckets = table;
  ix->n_buckets = n;
  return 0;
}

int names_reserve(struct names *ix)
{
  if (ix->n == ix->cap) {
    size_t cap = ix->cap ? ix->cap * 2 : 64;
    struct reg_key **grown = realloc(ix->by_id, cap * sizeof *grown);
    if (!grown)
      return PROTO_E_NOMEM;
    ix->by_id = grown;
    ix->cap = cap;
  }
  if (ix->n_linked + 1 > ix->n_buckets && buckets_grow(ix) < 0)
    return PROTO_E_NOMEM;
  return 0;
}

struct reg_key *names_lookup(const struct names *ix, const char *name)
{
  return *name_slot(ix, name);
}

void names_link(struct names *ix, struct reg_key *key)
{
  struct reg_key **slot = name_slot(ix, key->name);

  key->name_next = NULL;
  *slot = key;
  key->linked = true;
  ix->n_linked++;
}

void names_unlink(struct names *ix, struct reg_key *key)
{
  struct reg_key **slot = name_slot(ix, key->name);

  *slot = key->name_next;
  key->name_next = NULL;
  key->linked = false;
  ix->n_linked--;
}

size_t ids_index_after(const struct names *ix, uint64_t after_id)
{
  size_t lo = 0, hi = ix->n;

  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (ix->by_id[mid]->id <= after_id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

void ids_add(struct names *ix, struct reg_key *key)
{
  size_t at = ids_index_after(ix, key->id);

  memmove(&ix->by_id[at + 1], &ix->by_id[at], (ix->n - at) * sizeof *ix->by_id);
  ix->by_id[at] = key;
  ix->n++;
}

void ids_remove(struct names *ix, const struct reg_key *key)
{
  size_t i = ids_index_after(ix, key->id - 1);

  memmove(&ix->by_id[i], &ix->by_id[i + 1], (ix->n - i - 1) * sizeof *ix->by_id);
  ix->n--;
}

struct reg_key *ids_find(const struct names *ix, uint64_t id)
{
  size_t i = ids_index_after(ix, id - 1);
  return i < ix->n && ix->by_id[i]->id == id ? ix->by_id[i] : NULL;
}

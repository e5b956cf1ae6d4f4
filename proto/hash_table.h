/* SPDX-License-Identifier: MIT */
/* A chained hash table that grows (shared: the library's handles, the daemon's holdings):
 * entries carry a link (intrusive), the caller hashes.
 * Lookups walk a chain of about one entry on average, however many entries there are.
 * Inserting never fails: a table that cannot grow (out of memory) keeps working, its
 * chains longer.  A zeroed struct is an empty table. */
#ifndef GPUSHM_HASH_TABLE_H
#define GPUSHM_HASH_TABLE_H

#include <stddef.h>
#include <stdint.h>

struct hash_link {
  struct hash_link *next;
  uint64_t hash; /* kept: growing moves entries without asking the caller */
};

struct hash_table {
  struct hash_link **buckets; /* NULL: the one bucket below */
  struct hash_link *first;
  size_t n_buckets;            /* a power of two; 0 with the one bucket */
  size_t count;
};

/* The chain an entry of that hash is on (NULL: empty); walk it with ->next. */
static inline struct hash_link *hash_table_chain(const struct hash_table *t, uint64_t hash)
{
  return t->buckets ? t->buckets[hash & (t->n_buckets - 1)] : t->first;
}

void hash_table_insert(struct hash_table *t, struct hash_link *link, uint64_t hash);
void hash_table_remove(struct hash_table *t, struct hash_link *link);
/* Frees the buckets (the entries are the caller's) and empties the table. */
void hash_table_free(struct hash_table *t);

/* FNV-1a of a NUL-terminated string, and a 64-bit mix of two words. */
uint64_t hash_table_hash_string(const char *s);
uint64_t hash_table_hash_ids(uint64_t a, uint64_t b);

#endif

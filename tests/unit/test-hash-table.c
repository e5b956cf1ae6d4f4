/* SPDX-License-Identifier: MIT */
/* The growable chained table (proto/hash_table.c) that holds the library's handles and
 * the daemon's holdings: everything inserted is found, nothing removed is, and chains
 * stay short as it grows (the reason it exists: fixed buckets made an open walk ~400
 * entries with 100,000 handles); a degenerate hash still works. */
#include "config.h"
#include "harness.h"
#include "hash_table.h"

#include <stdlib.h>

#define N 100000u

struct item {
  struct hash_link link;
  uint64_t key;
};

static struct item *find(const struct hash_table *t, uint64_t key, uint64_t hash, size_t *walked)
{
  *walked = 0;
  for (struct hash_link *l = hash_table_chain(t, hash); l; l = l->next) {
    struct item *it = (struct item *)l;
    (*walked)++;
    if (it->key == key)
      return it;
  }
  return NULL;
}

int main(void)
{
  static struct item items[N];
  struct hash_table t = { 0 }, same = { 0 };
  size_t walked, longest = 0;

  /* empty: nothing found, no buckets yet */
  CHECK(hash_table_chain(&t, 42) == NULL && t.count == 0);
  for (uint64_t i = 0; i < N; i++) {
    items[i].key = i;
    hash_table_insert(&t, &items[i].link, hash_table_hash_ids(7, i));
  }
  CHECK(t.count == N && t.n_buckets >= N / 2);
  for (uint64_t i = 0; i < N; i++) {
    CHECK(find(&t, i, hash_table_hash_ids(7, i), &walked) == &items[i]);
    longest = walked > longest ? walked : longest;
  }
  /* a good hash over buckets at least half the entries: no long chain */
  CHECK(longest <= 16);
  for (uint64_t i = 0; i < N; i += 2)
    hash_table_remove(&t, &items[i].link);
  CHECK(t.count == N / 2);
  for (uint64_t i = 0; i < N; i++)
    CHECK((find(&t, i, hash_table_hash_ids(7, i), &walked) != NULL) == (i % 2 == 1));
  for (uint64_t i = 1; i < N; i += 2)
    hash_table_remove(&t, &items[i].link);
  CHECK(t.count == 0);
  hash_table_free(&t);
  CHECK(t.buckets == NULL && hash_table_chain(&t, 1) == NULL);

  /* every entry on one hash: one long chain, still right */
  for (uint64_t i = 0; i < 1000; i++)
    hash_table_insert(&same, &items[i].link, 99);
  for (uint64_t i = 0; i < 1000; i++)
    CHECK(find(&same, i, 99, &walked) == &items[i]);
  for (uint64_t i = 0; i < 1000; i++)
    hash_table_remove(&same, &items[i].link);
  CHECK(same.count == 0 && find(&same, 3, 99, &walked) == NULL);
  hash_table_free(&same);

  /* strings: equal strings hash equal, a changed byte does not (FNV-1a) */
  CHECK(hash_table_hash_string("many-000001") == hash_table_hash_string("many-000001"));
  CHECK(hash_table_hash_string("many-000001") != hash_table_hash_string("many-000002"));
  test_log("%u entries: found, removed, longest chain %zu; one hash for 1000: right", N,
           longest);
  return 0;
}

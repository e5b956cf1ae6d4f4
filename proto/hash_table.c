/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "hash_table.h"

#include <stdlib.h>

#define FIRST_BUCKETS 64u

static struct hash_link **head_of(struct hash_table *t, uint64_t hash)
{
  return t->buckets ? &t->buckets[hash & (t->n_buckets - 1)] : &t->first;
}

/* Doubles the buckets (the first time, makes 64); stays as it is if it cannot. */
static void grow(struct hash_table *t)
{
  size_t n = t->buckets ? t->n_buckets * 2 : FIRST_BUCKETS;
  struct hash_link **b = calloc(n, sizeof *b);
  struct hash_link **old = t->buckets ? t->buckets : &t->first;
  size_t n_old = t->buckets ? t->n_buckets : 1;

  if (!b)
    return;
  for (size_t i = 0; i < n_old; i++)
    for (struct hash_link *l = old[i], *next; l; l = next) {
      next = l->next;
      l->next = b[l->hash & (n - 1)];
      b[l->hash & (n - 1)] = l;
    }
  if (t->buckets)
    free(t->buckets);
  t->first = NULL;
  t->buckets = b;
  t->n_buckets = n;
}

void hash_table_insert(struct hash_table *t, struct hash_link *link, uint64_t hash)
{
  struct hash_link **head;

  if (t->count >= (t->buckets ? t->n_buckets : 4u))
    grow(t);
  link->hash = hash;
  head = head_of(t, hash);
  link->next = *head;
  *head = link;
  t->count++;
}

void hash_table_remove(struct hash_table *t, struct hash_link *link)
{
  struct hash_link **p = head_of(t, link->hash);

  while (*p != link)
    p = &(*p)->next;
  *p = link->next;
  t->count--;
}

void hash_table_free(struct hash_table *t)
{
  free(t->buckets);
  t->buckets = NULL;
  t->first = NULL;
  t->n_buckets = t->count = 0;
}

uint64_t hash_table_hash_string(const char *s)
{
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

uint64_t hash_table_hash_ids(uint64_t a, uint64_t b)
{
  uint64_t h = (a ^ (b * 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 31);
}

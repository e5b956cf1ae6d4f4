/* Shared by the demo producer and consumer: a small header in front of the payload
 * carries the hand-shake, the payload carries a pattern each side checks. */
#ifndef GPUSHM_EXAMPLE_PATTERN_H
#define GPUSHM_EXAMPLE_PATTERN_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

enum demo_state { DEMO_EMPTY = 0, DEMO_PRODUCED = 1, DEMO_CONSUMED = 2 };

struct demo_header {
  uint32_t state; /* accessed with __atomic builtins */
  uint32_t pad;
  uint64_t words;
};

static inline uint64_t demo_word(uint64_t seed, uint64_t i)
{
  uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
  x ^= x >> 31;
  return x * 0xbf58476d1ce4e5b9ull;
}

static inline void demo_fill(uint64_t *w, uint64_t n, uint64_t seed)
{
  for (uint64_t i = 0; i < n; i++)
    w[i] = demo_word(seed, i);
}

/* Returns the index of the first wrong word, or n if all are right. */
static inline uint64_t demo_verify(const uint64_t *w, uint64_t n, uint64_t seed)
{
  for (uint64_t i = 0; i < n; i++)
    if (w[i] != demo_word(seed, i))
      return i;
  return n;
}

static inline int demo_wait_state(struct demo_header *h, uint32_t state, int timeout_s)
{
  struct timespec pause = { 0, 1000000 };
  for (long i = 0; i < timeout_s * 1000L; i++) {
    if (__atomic_load_n(&h->state, __ATOMIC_ACQUIRE) == state)
      return 0;
    nanosleep(&pause, NULL);
  }
  return -1;
}

#endif

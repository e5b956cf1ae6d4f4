/* SPDX-License-Identifier: MIT */
/* Shared by the demo producer and consumer.  The payload (GPU or host memory) carries
 * a pattern each side checks; a small host buffer NAME.state carries the hand-shake. */
#ifndef GPUSHM_EXAMPLE_PATTERN_H
#define GPUSHM_EXAMPLE_PATTERN_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "devmem.h"

enum demo_state { DEMO_EMPTY = 0, DEMO_PRODUCED = 1, DEMO_CONSUMED = 2 };

struct demo_header {
  uint32_t state; /* accessed with __atomic builtins */
  uint32_t pad;
  uint64_t words;
};

#define DEMO_CHUNK_WORDS (1u << 20)

static inline uint64_t demo_word(uint64_t seed, uint64_t i)
{
  uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
  x ^= x >> 31;
  return x * 0xbf58476d1ce4e5b9ull;
}

/* Writes the pattern through a host staging chunk. */
static inline int demo_fill(gpushm_buffer_t *buf, uint64_t words, uint64_t seed)
{
  static uint64_t chunk[DEMO_CHUNK_WORDS];
  for (uint64_t at = 0; at < words; at += DEMO_CHUNK_WORDS) {
    uint64_t n = words - at < DEMO_CHUNK_WORDS ? words - at : DEMO_CHUNK_WORDS;
    for (uint64_t i = 0; i < n; i++)
      chunk[i] = demo_word(seed, at + i);
    if (devmem_write(buf, at * 8, chunk, n * 8) < 0)
      return -1;
  }
  return 0;
}

/* Returns the index of the first wrong word, words if all are right, -1 on error. */
static inline int64_t demo_verify(gpushm_buffer_t *buf, uint64_t words, uint64_t seed)
{
  static uint64_t chunk[DEMO_CHUNK_WORDS];
  for (uint64_t at = 0; at < words; at += DEMO_CHUNK_WORDS) {
    uint64_t n = words - at < DEMO_CHUNK_WORDS ? words - at : DEMO_CHUNK_WORDS;
    if (devmem_read(buf, at * 8, chunk, n * 8) < 0)
      return -1;
    for (uint64_t i = 0; i < n; i++)
      if (chunk[i] != demo_word(seed, at + i))
        return (int64_t)(at + i);
  }
  return (int64_t)words;
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

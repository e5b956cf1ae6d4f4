/* SPDX-License-Identifier: MIT */
/* Intrusive doubly linked list. */
#ifndef GPUSHMD_LIST_H
#define GPUSHMD_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct list {
  struct list *prev, *next;
};

#define list_entry(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

static inline void list_init(struct list *l)
{
  l->prev = l->next = l;
}

static inline bool list_empty(const struct list *l)
{
  return l->next == l;
}

static inline void list_add_tail(struct list *head, struct list *item)
{
  item->prev = head->prev;
  item->next = head;
  head->prev->next = item;
  head->prev = item;
}

static inline void list_del(struct list *item)
{
  item->prev->next = item->next;
  item->next->prev = item->prev;
  list_init(item);
}

#endif

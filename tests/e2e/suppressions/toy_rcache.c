/* The toy registration cache (toy_rcache.h): a fixed table of MRs. */
#include "toy_rcache.h"

#include <stdint.h>
#include <stdlib.h>

enum { kToyRcacheSlots = 16 };

struct toy_rcache {
  struct ibv_pd *pd;
  struct ibv_mr *mr[kToyRcacheSlots];
};

struct toy_rcache *toy_rcache_create(struct ibv_pd *pd) {
  struct toy_rcache *c = calloc(1, sizeof *c);
  if (c) c->pd = pd;
  return c;
}

static struct ibv_mr *toy_rcache_lookup(struct toy_rcache *c, void *addr, size_t len) {
  uintptr_t a = (uintptr_t)addr;
  for (int i = 0; i < kToyRcacheSlots; ++i) {
    struct ibv_mr *mr = c->mr[i];
    if (mr && a >= (uintptr_t)mr->addr && a + len <= (uintptr_t)mr->addr + mr->length) return mr;
  }
  return NULL;
}

struct ibv_mr *toy_rcache_get(struct toy_rcache *c, void *addr, size_t len) {
  struct ibv_mr *mr = toy_rcache_lookup(c, addr, len);
  if (mr) return mr;
  for (int i = 0; i < kToyRcacheSlots; ++i) {
    if (c->mr[i]) continue;
    c->mr[i] = ibv_reg_mr(c->pd, addr, len, IBV_ACCESS_LOCAL_WRITE);
    return c->mr[i];
  }
  return NULL;
}

void toy_rcache_destroy(struct toy_rcache *c) {
  for (int i = 0; i < kToyRcacheSlots; ++i)
    if (c->mr[i]) ibv_dereg_mr(c->mr[i]);
  free(c);
}

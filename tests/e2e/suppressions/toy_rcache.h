/* A toy registration cache, as UCX's and Open MPI's are: toy_rcache_get
 * registers a buffer on first use and keeps the MR for the next call; the
 * cache deregisters only when it is flushed, after the application may
 * have freed the buffer (the lazy deregistration rdmasan reports as
 * free-registered at the application's free).  Built as its own shared
 * library, libtoy_rcache.so, so that its frames are a library's. */
#ifndef RDMASAN_E2E_TOY_RCACHE_H
#define RDMASAN_E2E_TOY_RCACHE_H

#include <stddef.h>

#include <infiniband/verbs.h>

struct toy_rcache;

struct toy_rcache *toy_rcache_create(struct ibv_pd *pd);
/* The MR covering [addr, addr + len), registered now if the cache has
 * none; NULL if registration fails. */
struct ibv_mr *toy_rcache_get(struct toy_rcache *c, void *addr, size_t len);
/* Deregisters every cached MR and frees the cache. */
void toy_rcache_destroy(struct toy_rcache *c);

#endif /* RDMASAN_E2E_TOY_RCACHE_H */

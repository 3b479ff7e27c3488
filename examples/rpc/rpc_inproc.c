/* rpc_inproc.c: see rpc_inproc.h. */
#include "rpc_inproc.h"

#include <stdlib.h>

struct rpc_inproc {
  struct client *c;
  struct server *s;
  bool in_server; /* the server's own waits do not recurse into it */
  bool failed;
};

static void server_step(void *arg) {
  struct rpc_inproc *p = arg;
  if (p->in_server || p->failed) return;
  p->in_server = true;
  if (rpc_inproc_server_step(p->s) < 0) p->failed = true;
  p->in_server = false;
}

struct rpc_inproc *rpc_inproc_open(enum rpc_mode mode, const char *devname) {
  struct rpc_inproc *p = calloc(1, sizeof(*p));
  if (!p) return NULL;
  p->s = rpc_inproc_server_open(devname);
  p->c = p->s ? rpc_inproc_client_open(mode, devname) : NULL;
  if (!p->c) goto fail;
  struct rpc_conn_info ci, si;
  rpc_inproc_client_info(p->c, &ci);
  rpc_inproc_server_info(p->s, &si);
  /* Server to RTR first (as over TCP: the client sends only after 'R'). */
  if (rpc_inproc_server_connect(p->s, &ci) || rpc_inproc_client_connect(p->c, &si)) goto fail;
  return p;
fail:
  rpc_inproc_close(p);
  return NULL;
}

int rpc_inproc_run(struct rpc_inproc *p, uint32_t n) {
  if (p->failed || n == 0) return -1;
  rpc_idle_hook = server_step;
  rpc_idle_arg = p;
  int rc = rpc_inproc_client_run(p->c, n);
  if (rc == 0 && !p->failed) rc = rpc_inproc_server_finish(p->s);
  rpc_idle_hook = NULL;
  rpc_idle_arg = NULL;
  if (rc || p->failed) p->failed = true;
  return p->failed ? -1 : 0;
}

void rpc_inproc_close(struct rpc_inproc *p) {
  if (!p) return;
  rpc_inproc_client_close(p->c);
  rpc_inproc_server_close(p->s);
  free(p);
}

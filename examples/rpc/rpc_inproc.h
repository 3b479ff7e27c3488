/* rpc_inproc.h: the RPC client and server of this folder in one process and
 * one thread, connected on one device (softnic with softnic_fabric=inproc
 * under rdmasan), for in-process fuzzing (fuzz/rpc_fuzzer.cc).
 *
 * The code that runs is rpc_client.c's and rpc_server.c's own (compiled
 * again without their main: rpc_inproc_client.c, rpc_inproc_server.c),
 * planted bugs included; only the plumbing differs: no TCP (the connection
 * info is handed over in memory), and whenever one side would wait after
 * an empty poll (rpc_backoff), the server takes a step instead
 * (rpc_idle_hook).  The verbs objects live as long as the pair; each
 * rpc_inproc_run() starts the RPC numbering and both sides' SQE books from
 * zero, so every run issues the same work requests.
 *
 * May not: be used from two threads, or run again after a failed run (the
 * books are then wrong: close the pair). */
#ifndef RDMASAN_EXAMPLES_RPC_INPROC_H
#define RDMASAN_EXAMPLES_RPC_INPROC_H

#include <infiniband/verbs.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "rpc_common.h" /* C declarations, also for C++ callers */

struct rpc_inproc;

/* Opens device `devname` (NULL: the first) twice, sets up both sides in
 * `mode` and connects them; NULL (after a message) on failure. */
struct rpc_inproc *rpc_inproc_open(enum rpc_mode mode, const char *devname);
/* `n` RPCs (n >= 1), then both send queues retired: 0, or -1 after the
 * example's own failure message. */
int rpc_inproc_run(struct rpc_inproc *p, uint32_t n);
void rpc_inproc_close(struct rpc_inproc *p);

/* The halves (rpc_inproc_client.c, rpc_inproc_server.c). */
struct client;
struct server;
struct client *rpc_inproc_client_open(enum rpc_mode mode, const char *devname);
void rpc_inproc_client_info(struct client *c, struct rpc_conn_info *out);
int rpc_inproc_client_connect(struct client *c, const struct rpc_conn_info *remote);
int rpc_inproc_client_run(struct client *c, uint32_t n);
void rpc_inproc_client_close(struct client *c);
struct server *rpc_inproc_server_open(const char *devname);
void rpc_inproc_server_info(struct server *s, struct rpc_conn_info *out);
int rpc_inproc_server_connect(struct server *s, const struct rpc_conn_info *remote);
int rpc_inproc_server_step(struct server *s);
int rpc_inproc_server_finish(struct server *s);
void rpc_inproc_server_close(struct server *s);

#ifdef __cplusplus
}
#endif

#endif

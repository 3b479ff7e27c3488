/* blk_common.h: what the block-storage client and server share.
 *
 * A storage-style ULP in the shape of NFS/RDMA, iSER and NVMe-oF: the
 * client owns the data buffers and grants the server access to one I/O's
 * buffer at a time through a type-2 memory window, bound just before the
 * request goes out and invalidated before the buffer is used again.
 *   BLK_READ  (client reads the device): the window grants REMOTE_WRITE, the
 *             server RDMA-WRITEs the blocks into it, then replies;
 *   BLK_WRITE (client writes the device): the window grants REMOTE_READ, the
 *             server RDMA-READs the blocks, then replies.
 * Invalidation, in the register -> bind -> invalidate -> reuse order
 * (docs/checks.md#invalidate-in-flight): by default the server answers
 * with SEND_WITH_INV naming the window's rkey, and the client's receive completion carries
 * IBV_WC_WITH_INV and the invalidated rkey; with --inv local the client
 * posts a signaled LOCAL_INV itself and reuses the buffer only once that
 * completion is polled.  Each bind gives the window a new key
 * (ibv_inc_rkey), so a stale rkey the server may still hold never reaches
 * the new I/O's memory.  The data MR itself grants no remote access at
 * all; only a bound window does, and only for one I/O.
 *
 * The planted bugs (--mode) are single marked deviations on the client
 * ("BUG(<mode>)" in blk_client.c).  SQ credits, connection and TCP
 * plumbing come from examples/rpc (rpc_common.h). */
#ifndef RDMASAN_EXAMPLES_BLK_COMMON_H
#define RDMASAN_EXAMPLES_BLK_COMMON_H

#include <stdint.h>

#include "../rpc/rpc_common.h"

#define BLK_SLOTS 4        /* I/Os the client may have outstanding at once */
#define BLK_IO_MAX 8192    /* largest I/O; one buffer per slot */
#define BLK_DEV_SIZE 65536 /* the server's in-memory device */
#define BLK_RECVS (BLK_SLOTS + 2)
#define BLK_SQ_DEPTH 16

#define BLK_REQ_MAGIC 0x424c4b51u /* "BLKQ" */
#define BLK_REP_MAGIC 0x424c4b52u /* "BLKR" */

enum blk_op { BLK_READ = 1, BLK_WRITE = 2 };
#define BLK_F_SERVER_INV 1u /* answer with SEND_WITH_INV of `rkey` */
#define BLK_F_LAST 2u       /* the client's last request */

struct blk_req {
  uint32_t magic;
  uint32_t id;
  uint16_t slot;
  uint16_t op; /* enum blk_op */
  uint32_t flags;
  uint32_t len;    /* bytes, <= BLK_IO_MAX */
  uint32_t offset; /* into the device */
  uint64_t addr;   /* the client's buffer, as the window maps it */
  uint32_t rkey;   /* the window's key for this I/O */
  uint32_t pad;
  uint64_t sum; /* BLK_WRITE: hash of the data the server must read */
};

struct blk_rep {
  uint32_t magic;
  uint32_t id;
  uint16_t slot;
  uint16_t status; /* 0 ok, else BLK_ST_* */
  uint32_t pad;
  uint64_t sum; /* BLK_READ: hash of the data written into the buffer */
};

enum { BLK_ST_OK = 0, BLK_ST_BAD_REQUEST = 1, BLK_ST_RDMA_FAILED = 2, BLK_ST_BAD_DATA = 3 };

enum blk_mode {
  BLK_CORRECT,
  BLK_RKEY_NOT_BUMPED,
  BLK_INVALIDATE_IN_FLIGHT,
  BLK_DESTROY_IN_USE,
  BLK_FREE_REGISTERED,
  BLK_MODE_COUNT
};
extern const char *const blk_mode_names[BLK_MODE_COUNT];
int blk_parse_mode(const char *s); /* -1 if unknown */

/* I/O number `id`: its operation, length and device offset. */
enum blk_op blk_io_op(uint32_t id);
uint32_t blk_io_len(uint32_t id);
uint32_t blk_io_offset(uint32_t id);

#endif

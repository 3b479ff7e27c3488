/* blk_common.c: the I/O pattern both sides agree on, and the modes. */
#include "blk_common.h"

#include <string.h>

const char *const blk_mode_names[BLK_MODE_COUNT] = {
    [BLK_CORRECT] = "correct",
    [BLK_RKEY_NOT_BUMPED] = "rkey-not-bumped",
    [BLK_INVALIDATE_IN_FLIGHT] = "invalidate-in-flight",
    [BLK_DESTROY_IN_USE] = "destroy-in-use",
    [BLK_FREE_REGISTERED] = "free-registered",
};

int blk_parse_mode(const char *s) {
  for (int m = 0; m < BLK_MODE_COUNT; m++)
    if (strcmp(s, blk_mode_names[m]) == 0) return m;
  return -1;
}

/* Writes first (so reads find data), then reads and writes alternating. */
enum blk_op blk_io_op(uint32_t id) { return id < BLK_SLOTS || id % 2 == 0 ? BLK_WRITE : BLK_READ; }

uint32_t blk_io_len(uint32_t id) { return 512u * (1u + (id * 7u) % (BLK_IO_MAX / 512u)); }

uint32_t blk_io_offset(uint32_t id) { return (id * 4096u) % (BLK_DEV_SIZE - BLK_IO_MAX); }

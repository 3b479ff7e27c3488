// softnic device memory: ibv_alloc_dm / ibv_free_dm, ibv_memcpy_to_dm /
// ibv_memcpy_from_dm, ibv_reg_dm_mr, ibv_import_dm / ibv_unimport_dm.
//
// A NIC's device memory (MEMIC) is a small on-chip pool the host reaches
// with 4-byte accesses and the NIC through zero-based MRs.  softnic's is a
// private anonymous mapping of the allocating process: its MRs are ordinary
// entries of the fabric's MR table whose range is that mapping and whose
// iova is 0, so local SGEs, remote keys and other processes' accesses
// (process_vm_readv/writev into the owner) all go through the data path's
// usual validation (access.h).  The pool is max_dm_size bytes per process
// (a NIC's is per device; softnic keeps no device-wide count, so the
// fabric layout is unchanged).  Errors as mlx5 and the kernel give them:
// alloc: comp_mask EINVAL, length 0 or above max_dm_size EINVAL, the pool
// used up ENOMEM; memcpy: beyond the allocation EFAULT, offset or length
// not a multiple of 4 EINVAL; reg_dm_mr: without IBV_ACCESS_ZERO_BASED or
// beyond the allocation or with an access a DM MR cannot have EINVAL;
// free_dm with MRs on it EBUSY.
//
// A handle (dm->handle) names the allocation within the process; import
// gives another struct on the same memory to a context of the same
// command file (an imported context), unimport drops that struct only.
//
// May not: hand out memory that is not its own mapping, touch the
// application's memory beyond the host range of a copy, or keep the fabric
// lock while copying.
#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <new>

#include "absl/container/flat_hash_map.h"
#include "softnic/internal.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic {
namespace {

// One allocation, shared by the struct ibv_alloc_dm returned and any
// imported ones; unmapped when the last of them goes.
struct DmBlock {
  uint8_t* buf = nullptr;
  size_t length = 0;  // as allocated (rounded up to 4)
  size_t map_len = 0;
  uint32_t handle = 0;
  FileId file;  // the command file of the allocating context
  bool freed = false;
  ~DmBlock() {
    if (buf) munmap(buf, map_len);
  }
};

struct SnDm {
  ibv_dm dm;
  std::shared_ptr<DmBlock> block;
};

SnDm* Dm(ibv_dm* d) { return reinterpret_cast<SnDm*>(d); }

struct DmTable {
  std::mutex mu;
  absl::flat_hash_map<uint32_t, std::shared_ptr<DmBlock>> live;
  uint32_t next_handle = 1;
  uint64_t used = 0;  // bytes of the pool allocated
};
DmTable& Table() {
  static DmTable* t = new DmTable();
  return *t;
}

// 0 if [offset, offset + length) may be copied to or from the block.
int CheckCopy(const DmBlock& b, uint64_t offset, size_t length) {
  if (b.freed) return EINVAL;
  if (offset > b.length || length > b.length - offset) return EFAULT;
  if ((offset & 3) || (length & 3)) return EINVAL;
  return 0;
}

int MemcpyToDm(ibv_dm* dm, uint64_t dm_offset, const void* host_addr, size_t length) {
  DmBlock& b = *Dm(dm)->block;
  if (int e = CheckCopy(b, dm_offset, length)) return e;
  if (length) memcpy(b.buf + dm_offset, host_addr, length);
  return 0;
}

int MemcpyFromDm(void* host_addr, ibv_dm* dm, uint64_t dm_offset, size_t length) {
  DmBlock& b = *Dm(dm)->block;
  if (int e = CheckCopy(b, dm_offset, length)) return e;
  if (length) memcpy(host_addr, b.buf + dm_offset, length);
  return 0;
}

SnDm* NewDmStruct(ibv_context* ctx, std::shared_ptr<DmBlock> block) {
  auto* d = new (std::nothrow) SnDm();
  if (!d) return nullptr;
  d->dm.context = ctx;
  d->dm.memcpy_to_dm = MemcpyToDm;
  d->dm.memcpy_from_dm = MemcpyFromDm;
  d->dm.comp_mask = 0;
  d->dm.handle = block->handle;
  d->block = std::move(block);
  return d;
}

// Whether a live MR of this process lies in the block (a zero-length one
// at its end included).
bool HasMrs(Process* p, const DmBlock& b) {
  const uint64_t lo = reinterpret_cast<uint64_t>(b.buf), hi = lo + b.length;
  for (const LocalMr& m : p->own_mrs)
    if (m.key.load(std::memory_order_acquire) && m.addr >= lo && m.addr <= hi) return true;
  return false;
}

}  // namespace

FileId FileOf(int fd) {
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) return {};
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

ibv_dm* AllocDm(ibv_context* ctx, ibv_alloc_dm_attr* attr) {
  if (!attr || attr->comp_mask || attr->length == 0 || attr->length > kMaxDmSize ||
      attr->log_align_req > kDmMaxLogAlign) {
    errno = EINVAL;
    return nullptr;
  }
  const size_t length = (attr->length + 3) & ~size_t{3};
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto block = std::make_shared<DmBlock>();
  block->length = length;
  block->map_len = (length + page - 1) / page * page;
  block->file = FileOf(ctx->cmd_fd);
  DmTable& t = Table();
  std::lock_guard<std::mutex> g(t.mu);
  if (t.used + length > kMaxDmSize) {
    errno = ENOMEM;
    return nullptr;
  }
  void* m = mmap(nullptr, block->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    errno = ENOMEM;
    return nullptr;
  }
  block->buf = static_cast<uint8_t*>(m);
  block->handle = t.next_handle++;
  if (t.next_handle == 0) t.next_handle = 1;
  SnDm* d = NewDmStruct(ctx, block);
  if (!d) {
    errno = ENOMEM;
    return nullptr;
  }
  t.live[block->handle] = block;
  t.used += length;
  return &d->dm;
}

int FreeDm(ibv_dm* dm) {
  Process* p = GetProcess();
  if (!p) return EINVAL;
  SnDm* d = Dm(dm);
  DmTable& t = Table();
  {
    std::lock_guard<std::mutex> g(t.mu);
    DmBlock& b = *d->block;
    if (!b.freed) {
      if (HasMrs(p, b)) return EBUSY;
      b.freed = true;
      t.live.erase(b.handle);
      t.used -= b.length;
    }
  }
  delete d;
  return 0;
}

ibv_mr* RegDmMr(ibv_pd* pd, ibv_dm* dm, uint64_t dm_offset, size_t length, unsigned access) {
  constexpr unsigned kDmAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED;
  if (!pd || !dm || !(access & IBV_ACCESS_ZERO_BASED) || (access & ~kDmAccess) ||
      ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
       !(access & IBV_ACCESS_LOCAL_WRITE))) {
    errno = EINVAL;
    return nullptr;
  }
  std::shared_ptr<DmBlock> b = Dm(dm)->block;
  {
    std::lock_guard<std::mutex> g(Table().mu);
    if (b->freed || dm_offset > b->length || length > b->length - dm_offset) {
      errno = EINVAL;
      return nullptr;
    }
  }
  return RegRange(pd, reinterpret_cast<uint64_t>(b->buf) + dm_offset, length, 0,
                  access & ~static_cast<unsigned>(IBV_ACCESS_ZERO_BASED), /*addr=*/nullptr);
}

ibv_dm* ImportDm(ibv_context* ctx, uint32_t handle) {
  DmTable& t = Table();
  std::shared_ptr<DmBlock> block;
  {
    std::lock_guard<std::mutex> g(t.mu);
    auto it = t.live.find(handle);
    if (it == t.live.end() || !(it->second->file == FileOf(ctx->cmd_fd))) {
      errno = EINVAL;
      return nullptr;
    }
    block = it->second;
  }
  SnDm* d = NewDmStruct(ctx, std::move(block));
  if (!d) {
    errno = ENOMEM;
    return nullptr;
  }
  return &d->dm;
}

void UnimportDm(ibv_dm* dm) { delete Dm(dm); }

}  // namespace rdmasan::softnic

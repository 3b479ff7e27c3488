// softnic object import: ibv_import_device, ibv_import_pd / ibv_unimport_pd,
// ibv_import_mr / ibv_unimport_mr (ibv_import_dm is dm.cc's).
//
// A kernel device shares a context's objects with whoever holds its
// command fd: ibv_import_device on that fd (or a dup of it) gives a new
// context on the same file, and objects are imported by their handles.
// softnic's command fd is a memfd of its own per context (device.cc), so a
// file identity (device, inode) names the context it came from, in this
// process only.  Import gives a new struct on the same object: a PD with
// the same id (so MRs and QPs match it exactly as the original), an MR with
// the same slot and keys (addr NULL, as the kernel's query gives it);
// unimport frees that struct and leaves the object; dealloc / dereg
// through either destroys the object, as with the kernel.  A handle of
// another command file, or of no live object of this process, is EINVAL.
//
// May not: import what the importing context's command file does not own,
// or trust a handle before looking it up in this process's own records.
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mutex>
#include <new>

#include "absl/container/flat_hash_map.h"
#include "softnic/internal.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic {
namespace {

// The PDs of this process by handle (PD id) and its MRs by handle (slot),
// as allocated and registered.
struct PdTable {
  std::mutex mu;
  absl::flat_hash_map<uint32_t, ibv_pd*> by_id;
  absl::flat_hash_map<uint32_t, ibv_mr*> mrs;
};
PdTable& Pds() {
  static PdTable* t = new PdTable();
  return *t;
}

}  // namespace

void NotePd(ibv_pd* pd) {
  std::lock_guard<std::mutex> g(Pds().mu);
  Pds().by_id[PdId(pd)] = pd;
}

void ForgetPd(ibv_pd* pd) {
  std::lock_guard<std::mutex> g(Pds().mu);
  Pds().by_id.erase(PdId(pd));
}

void NoteMr(ibv_mr* mr) {
  std::lock_guard<std::mutex> g(Pds().mu);
  Pds().mrs[mr->handle] = mr;
}

void ForgetMr(ibv_mr* mr) {
  std::lock_guard<std::mutex> g(Pds().mu);
  Pds().mrs.erase(mr->handle);
}

bool IsContextFd(int fd) {
  // A softnic command file is a memfd: a regular file (a device's is a
  // character device, and needs no fabric to tell).
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  const FileId f = FileOf(fd);
  if (!f.ino) return false;
  Process* p = GetProcess();
  if (!p) return false;
  std::lock_guard<std::mutex> g(p->mu);
  for (SnContext* c : p->ctxs)
    if (c && FileOf(c->vctx.context.cmd_fd) == f) return true;
  return false;
}

ibv_context* ImportDevice(int cmd_fd) {
  if (!IsContextFd(cmd_fd)) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_context* ctx = OpenDevice(Device());
  if (!ctx) return nullptr;
  // The imported context works on the file it was given (and closes it).
  close(ctx->cmd_fd);
  ctx->cmd_fd = cmd_fd;
  return ctx;
}

ibv_pd* ImportPd(ibv_context* ctx, uint32_t handle, ibv_pd** original) {
  ibv_pd* orig = nullptr;
  {
    std::lock_guard<std::mutex> g(Pds().mu);
    auto it = Pds().by_id.find(handle);
    if (it != Pds().by_id.end()) orig = it->second;
  }
  if (!orig || !(FileOf(orig->context->cmd_fd) == FileOf(ctx->cmd_fd))) {
    errno = EINVAL;
    return nullptr;
  }
  auto* pd = new (std::nothrow) SnPd();
  if (!pd) {
    errno = ENOMEM;
    return nullptr;
  }
  pd->pd.context = ctx;
  pd->pd.handle = handle;
  pd->id = PdId(orig);
  if (original) *original = orig;
  return &pd->pd;
}

void UnimportPd(ibv_pd* pd) { delete reinterpret_cast<SnPd*>(pd); }

ibv_mr* ImportMr(ibv_pd* pd, uint32_t handle, ibv_mr** original) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  ibv_mr* orig = nullptr;
  {
    std::lock_guard<std::mutex> g(Pds().mu);
    auto it = Pds().mrs.find(handle);
    if (it != Pds().mrs.end()) orig = it->second;
  }
  if (!orig || handle >= kMaxMrs || !(FileOf(orig->context->cmd_fd) == FileOf(pd->context->cmd_fd))) {
    errno = EINVAL;
    return nullptr;
  }
  // This process's own record of the MR, never the fabric's entry alone.
  const LocalMr& own = p->own_mrs[handle];
  const uint32_t key = own.key.load(std::memory_order_acquire);
  if (!key) {
    errno = EINVAL;
    return nullptr;
  }
  auto* mr = new (std::nothrow) SnMr();
  if (!mr) {
    errno = ENOMEM;
    return nullptr;
  }
  mr->slot = handle;
  mr->mr.context = pd->context;
  mr->mr.pd = pd;
  mr->mr.addr = nullptr;
  mr->mr.length = own.length;
  mr->mr.handle = handle;
  mr->mr.lkey = key;
  mr->mr.rkey = key;
  if (original) *original = orig;
  return &mr->mr;
}

void UnimportMr(ibv_mr* mr) { delete reinterpret_cast<SnMr*>(mr); }

}  // namespace rdmasan::softnic

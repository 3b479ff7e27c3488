#include "softnic/fabric.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "core/report.h"
#include "core/spin_lock.h"
#include "softnic/leftovers.h"
#include "softnic/owned.h"
#include "softnic/user_dir.h"

namespace rdmasan::softnic {
namespace {

constexpr uint64_t kPage = 4096;

struct FreeBlock {
  uint64_t size;  // bytes, including this header
  uint64_t next;  // offset of next free block (sorted by offset), 0 = end
};

// Each allocation is preceded by a 64-byte header that keeps its size.
struct UsedHeader {
  uint64_t size;
  uint64_t magic;
};
constexpr uint64_t kUsedMagic = 0x6b6f6c4275736564ull;
constexpr uint64_t kHdrBytes = 64;

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string SanitizeName(const std::string& in) {
  std::string out;
  for (char c : in)
    out += (isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  if (out.empty()) out = "default";
  if (out.size() > 64) out.resize(64);
  return out;
}

void InitHeader(ShmHeader* h, uint64_t total) {
  // The segment is fresh (zeroed): the lock is free; construct the heap.
  h->heap_base = RoundUp(sizeof(ShmHeader), kPage);
  h->heap_size = total - h->heap_base;
  h->free_head = h->heap_base;
  auto* fb = reinterpret_cast<FreeBlock*>(reinterpret_cast<uint8_t*>(h) + h->heap_base);
  fb->size = h->heap_size;
  fb->next = 0;
  h->next_pd = 1;
  h->version = kFabricVersion;
  h->magic = kFabricMagic;
  reinterpret_cast<std::atomic<uint32_t>*>(&h->initialized)->store(2, std::memory_order_release);
}

}  // namespace

uint64_t ProcStartTime(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  // Fields after the last ')' (comm may hold spaces); starttime is field 22.
  char* p = strrchr(buf, ')');
  if (!p) return 0;
  p += 2;  // at field 3
  for (int field = 3; field < 22 && *p; ++p)
    if (*p == ' ') ++field;
  return strtoull(p, nullptr, 10);
}

namespace {

uint64_t HeaderBytes() { return RoundUp(sizeof(ShmHeader), kPage); }

// errno values of MapFabricFile that mean "this name is not a private
// file of ours".
bool NotOurs(int e) { return e == EPERM || e == EACCES || e == ELOOP || e == EISDIR; }

// Reserves the backing store of [off, off + len) of the fabric file, so
// that touching those pages can never raise SIGBUS on a full tmpfs.
// Returns 0 or an errno.
int Reserve(int fd, uint64_t off, uint64_t len) {
  if (fd < 0) return 0;  // inproc: anonymous memory
  int e;
  do {
    e = posix_fallocate(fd, static_cast<off_t>(off), static_cast<off_t>(len));
  } while (e == EINTR);
  return e;
}

// Opens (creating if needed) and maps the fabric file at `path`, waiting
// for its first user to initialize it.  Returns the header and the open fd,
// or nullptr with errno set and nothing left open or mapped: EPERM, EACCES
// ELOOP or EISDIR when the path is not this user's private file (NotOurs), ENOMEM
// when the file system has no room for the tables.
ShmHeader* MapFabricFile(const std::string& path, uint64_t total, int* fd_out) {
  for (int attempt = 0;; ++attempt) {
    // O_NOFOLLOW: never a planted symlink; O_NONBLOCK: never stuck on a
    // planted FIFO.
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
    if (fd < 0) return nullptr;
    // Ownership first: someone else's file could hold a lock forever.
    struct stat st;
    if (fstat(fd, &st) != 0 || !IsPrivate(st, S_IFREG)) {
      close(fd);
      errno = EPERM;
      return nullptr;
    }
    // Shared lock for life; the last process to detach takes it
    // exclusively (non-blocking) to remove the file.
    if (flock(fd, LOCK_SH) != 0 || fstat(fd, &st) != 0) {
      close(fd);
      return nullptr;
    }
    if (st.st_nlink == 0 && attempt < 16) {  // lost a race with the last detacher
      close(fd);
      continue;
    }
    if (static_cast<uint64_t>(st.st_size) != total && ftruncate(fd, total) != 0) {
      close(fd);
      return nullptr;
    }
    // The tables and the heap's first free block are touched at once.
    if (int e = Reserve(fd, 0, HeaderBytes() + kPage)) {
      core::Diag(absl::StrCat("softnic: no room for the fabric's tables (", (HeaderBytes() + kPage) >> 10,
                              " KiB) in ", path, ": ", strerror(e),
                              "; free space there or set RDMASAN_SOFTNIC_DIR to another tmpfs"));
      close(fd);
      errno = ENOMEM;
      return nullptr;
    }
    void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED) {
      close(fd);
      return nullptr;
    }
    auto* hdr = static_cast<ShmHeader*>(p);
    // First one in initializes (0 -> 1 -> 2); the others wait for 2.
    auto* state = reinterpret_cast<std::atomic<uint32_t>*>(&hdr->initialized);
    uint32_t expected = 0;
    if (state->compare_exchange_strong(expected, 1)) {
      InitHeader(hdr, total);
    } else {
      for (int spin = 0; state->load() != 2 && spin < 20000; ++spin) usleep(100);
    }
    if (state->load() != 2 || hdr->magic != kFabricMagic || hdr->version != kFabricVersion) {
      core::Diag(absl::StrCat("softnic fabric ", path,
                              " is unusable (another layout or a crashed initializer); "
                              "remove it or pick another softnic_fabric"));
      munmap(p, total);
      close(fd);
      errno = EPROTO;
      return nullptr;
    }
    *fd_out = fd;
    return hdr;
  }
}

}  // namespace

// The user directory is this user's alone (user_dir.h), so whatever holds
// the fabric's name there is this user's own doing: said, not worked
// around.
ShmHeader* Fabric::MapNamed(uint64_t total) {
  if (!UserPrivateDir(&dir_)) {
    errno = EPERM;
    return nullptr;
  }
  path_ = absl::StrCat(dir_, "/", kFabricFilePrefix, name_);
  ShmHeader* h = MapFabricFile(path_, total, &fd_);
  if (!h && NotOurs(errno)) {
    const int e = errno;
    core::Diag(absl::StrCat("softnic: fabric file ", path_, " is not this user's private file (",
                            WhyNotOurs(path_, S_IFREG), "); remove it"));
    errno = e;
  }
  return h;
}

Fabric* Fabric::Attach(const std::string& name) {
  Owned<Fabric> f(new (std::nothrow) Fabric());  // the constructor is private
  if (!f) {
    errno = ENOMEM;
    return nullptr;
  }
  f->name_ = SanitizeName(name);
  f->inproc_ = (name == "inproc");
  if (f->inproc_) {
    static std::atomic<uint32_t> counter{0};
    f->name_ = absl::StrCat("inproc-", getpid(), "-", counter.fetch_add(1));
  }
  const uint64_t total = HeaderBytes() + kHeapBytes;
  f->map_size_ = total;
  if (f->inproc_) {
    void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return nullptr;
    }
    f->hdr_ = static_cast<ShmHeader*>(p);
    InitHeader(f->hdr_, total);
  } else {
    f->hdr_ = f->MapNamed(total);
    if (!f->hdr_) {
      return nullptr;
    }
  }
  f->base_ = reinterpret_cast<uint8_t*>(f->hdr_);
  if (!f->inproc_) {
    f->leftover_handle_ = RememberFabricFile(f->fd_, f->path_);
    CleanUpAtTermination();
    SweepLeftovers(f->dir_);  // ours is held (LOCK_SH): it stays
  }
  // No PR_SET_PTRACER here: AllowPeerOf sets it when a QP of ours first
  // faces another process.

  f->owner_pid_ = getpid();
  f->owner_start_ = ProcStartTime(f->owner_pid_);
  uint32_t slot = kNone;
  {
    FabricLock lock(f.get());
    f->ReapDeadLocked();
    for (uint32_t i = 0; i < kMaxProcs && slot == kNone; ++i)
      if (!f->hdr_->procs[i].in_use) slot = i;
    if (slot != kNone) {
      ShmProc& pr = f->hdr_->procs[slot];
      pr.in_use = 1;
      pr.pid = f->owner_pid_;
      pr.start_time = f->owner_start_;
      f->self_ = slot;
    }
  }
  if (slot == kNone) {
    errno = EMFILE;
    return nullptr;  // f goes, and its lock on the file with it
  }
  return f.release();  // the process's now
}

namespace {

// The process `pid` (which took the lock when it had start time `start`,
// 0: unknown) is gone: no such process, a zombie, or the pid reused.
bool HolderGone(pid_t pid, uint64_t start) {
  if (pid <= 0) return true;  // not a pid: a word forged in shared memory
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;  // cannot tell: alive
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  const char* p = strrchr(buf, ')');
  if (!p || p[1] != ' ') return false;
  if (p[2] == 'Z' || p[2] == 'X') return true;  // dead, not yet reaped
  return start != 0 && ProcStartTime(pid) != start;
}

uint64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

long FutexWait(std::atomic<uint32_t>* word, uint32_t val, long ns) {
  timespec ts{0, ns};
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, val, &ts, nullptr, 0);
}

}  // namespace

// One atomic instruction each way when nobody waits (a robust pthread
// mutex took ten times the instructions: its robust list).  A waiter spins
// a while (critical sections are short: one WR's copy at most; a wake-up
// costs a scheduler round trip on a busy machine), then sleeps on the word
// with kLockWaiters set; the holder wakes one at Unlock.  A waiter that
// sees one holder for kStaleNs checks that it still runs, and takes the
// lock over from a dead one: every critical section leaves the tables
// consistent at each store that matters (as a robust mutex's EOWNERDEAD).
void Fabric::Lock() {
  std::atomic<uint32_t>& w = hdr_->lock.word;
  const uint32_t me = static_cast<uint32_t>(owner_pid_);
  uint32_t c = 0;
  if (__builtin_expect(w.compare_exchange_strong(c, me, std::memory_order_acquire), 1)) {
    hdr_->lock.holder_start = owner_start_;
    return;
  }
  for (int spins = 0; spins < 4000; ++spins) {
    core::SpinWait(spins);
    c = w.load(std::memory_order_relaxed);
    if (c == 0 && w.compare_exchange_weak(c, me, std::memory_order_acquire)) {
      hdr_->lock.holder_start = owner_start_;
      return;
    }
  }
  constexpr long kSleepNs = 20 * 1000 * 1000;
  constexpr uint64_t kStaleNs = 100 * 1000 * 1000;  // one holder this long: is it still there?
  uint32_t seen = 0;
  uint64_t seen_since = 0;
  for (;;) {
    c = w.load(std::memory_order_relaxed);
    if (c == 0) {
      // Taken with kLockWaiters: others may sleep (their bit went with the
      // holder that woke this one).
      if (w.compare_exchange_weak(c, me | kLockWaiters, std::memory_order_acquire)) break;
      continue;
    }
    if (!(c & kLockWaiters) && !w.compare_exchange_weak(c, c | kLockWaiters, std::memory_order_relaxed))
      continue;
    const uint32_t holder = c & ~kLockWaiters;
    const uint64_t now = MonoNs();
    if (holder != seen) {
      seen = holder;
      seen_since = now;
    } else if (now - seen_since >= kStaleNs && holder != me) {
      seen_since = now;  // alive: asked again after as long
      if (HolderGone(static_cast<pid_t>(holder), hdr_->lock.holder_start)) {
        c |= kLockWaiters;
        if (w.compare_exchange_strong(c, me | kLockWaiters, std::memory_order_acquire)) break;  // recovered
        continue;
      }
    }
    FutexWait(&w, c | kLockWaiters, kSleepNs);
  }
  hdr_->lock.holder_start = owner_start_;
}

void Fabric::Unlock() {
  if (__builtin_expect(hdr_->lock.word.exchange(0, std::memory_order_release) & kLockWaiters, 0))
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&hdr_->lock.word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

bool Fabric::HeapBlock(uint64_t off, uint64_t size) const {
  return off % kPage == 0 && size >= kPage && size % kPage == 0 && InHeap(off, size);
}

namespace {

// The free block at `off` of a free list read from shared memory, or
// nullptr if it is not a block of the heap.
FreeBlock* FreeBlockAt(const Fabric& f, uint64_t off) {
  if (off % kPage != 0 || !f.InHeap(off, kPage)) return nullptr;
  auto* fb = f.At<FreeBlock>(off);
  return f.HeapBlock(off, fb->size) ? fb : nullptr;
}

}  // namespace

uint64_t Fabric::Alloc(uint64_t bytes) {
  if (bytes > kHeapBytes) {
    errno = ENOMEM;
    return 0;
  }
  uint64_t need = RoundUp(bytes + kHdrBytes, kPage);
  uint64_t prev = 0, cur = hdr_->free_head;
  // The free list lives in shared memory: a block outside the heap, or a
  // list longer than the heap has pages (a cycle), ends the search.
  for (uint64_t steps = 0; cur && steps < kHeapBytes / kPage; ++steps) {
    FreeBlock* fb = FreeBlockAt(*this, cur);
    if (!fb) break;
    if (fb->size >= need) {
      uint64_t rest = fb->size - need;
      // The block's pages and, when it splits, the next free block's
      // header: backed before the first touch, or no allocation at all.
      if (Reserve(fd_, cur, need + (rest >= kPage ? kPage : 0)) != 0) {
        errno = ENOMEM;
        return 0;
      }
      uint64_t next = fb->next;
      if (rest >= kPage) {
        uint64_t split = cur + need;
        auto* nb = At<FreeBlock>(split);
        nb->size = rest;
        nb->next = next;
        next = split;
      } else {
        need = fb->size;
      }
      if (prev)
        At<FreeBlock>(prev)->next = next;
      else
        hdr_->free_head = next;
      auto* uh = At<UsedHeader>(cur);
      uh->size = need;
      uh->magic = kUsedMagic;
      memset(base_ + cur + kHdrBytes, 0, need - kHdrBytes);
      return cur + kHdrBytes;
    }
    prev = cur;
    cur = fb->next;
  }
  errno = ENOMEM;
  return 0;
}

void Fabric::Free(uint64_t off) {
  if (off < kHdrBytes || !InHeap(off - kHdrBytes, kPage)) return;  // an offset read from shared memory
  uint64_t blk = off - kHdrBytes;
  auto* uh = At<UsedHeader>(blk);
  uint64_t size = uh->size;
  if (uh->magic != kUsedMagic || !HeapBlock(blk, size)) return;  // never corrupt the heap on a bad free
  uh->magic = 0;
  // Give the pages back to the system; the block header page stays.
  if (size > kPage) madvise(base_ + blk + kPage, size - kPage, MADV_REMOVE);
  // Insert sorted, coalescing with neighbours.
  uint64_t prev = 0, cur = hdr_->free_head;
  for (uint64_t steps = 0; cur && cur < blk; ++steps) {
    if (steps >= kHeapBytes / kPage || !FreeBlockAt(*this, cur)) return;  // a forged list: leak the block
    prev = cur;
    cur = At<FreeBlock>(cur)->next;
  }
  if (cur && !FreeBlockAt(*this, cur)) return;
  auto* nb = At<FreeBlock>(blk);
  nb->size = size;
  nb->next = cur;
  if (cur && blk + size == cur) {
    nb->size += At<FreeBlock>(cur)->size;
    nb->next = At<FreeBlock>(cur)->next;
  }
  if (prev) {
    auto* pb = At<FreeBlock>(prev);
    if (prev + pb->size == blk) {
      pb->size += nb->size;
      pb->next = nb->next;
    } else {
      pb->next = blk;
    }
  } else {
    hdr_->free_head = blk;
  }
}

bool Fabric::InHeap(uint64_t off, uint64_t len) const {
  // The bounds are this process's own (heap_base lives in shared memory).
  return off >= HeaderBytes() && off <= map_size_ && len <= map_size_ - off;
}

uint8_t* Fabric::RqRing(uint64_t ring_off, uint32_t nslots, uint32_t stride, uint32_t max_sge) const {
  if (nslots == 0 || nslots > kMaxQpWr || (nslots & (nslots - 1)) != 0 || max_sge == 0 || max_sge > kMaxSge ||
      stride != RqStride(max_sge) || !InHeap(ring_off, uint64_t(nslots) * stride))
    return nullptr;
  return At<uint8_t>(ring_off);
}

ShmRecvWqe* Fabric::RqEntry(const ShmRq& rq, uint64_t index) const {
  const uint32_t nslots = rq.nslots, stride = rq.stride;
  uint8_t* ring = RqRing(rq.ring_off, nslots, stride, rq.max_sge);
  return ring ? reinterpret_cast<ShmRecvWqe*>(ring + (index & (nslots - 1)) * stride) : nullptr;
}

ShmCqe* Fabric::CqEntry(const ShmCq& cq, uint64_t index) const {
  const uint64_t ring = cq.ring_off;
  const uint32_t nslots = cq.nslots;
  if (nslots < 2 || nslots > kMaxCqe + 1 || (nslots & (nslots - 1)) != 0 || cq.cqe >= nslots ||
      !InHeap(ring, uint64_t(nslots) * sizeof(ShmCqe)) || ring % alignof(ShmCqe) != 0)
    return nullptr;
  return At<ShmCqe>(ring) + (index & (nslots - 1));
}

pid_t Fabric::PeerPid(uint32_t proc) const {
  if (proc >= kMaxProcs || proc == self_ || !hdr_->procs[proc].in_use) return 0;
  // A forged slot naming this process would turn a "peer" copy into one
  // that bypasses this process's own MR records.
  const pid_t pid = hdr_->procs[proc].pid;
  return pid > 0 && pid != owner_pid_ ? pid : 0;
}

void Fabric::AllowPeerOf(const ShmQp& q) {
  long want;
  if (q.type == IBV_QPT_UD || q.type == IBV_QPT_RAW_PACKET || q.type == kQptWq) {
    want = -1;  // anyone may send to it
  } else {
    const uint32_t dest = q.dest_qpn;
    const ShmQp& d = hdr_->qps[dest % kMaxQps];
    if (!d.in_use || d.qpn != dest) return;  // no such QP: nobody to let in
    const pid_t pid = PeerPid(d.proc);
    if (pid == 0 || pid == owner_pid_) return;
    want = ptracer_ == 0 || ptracer_ == pid ? pid : -1;
  }
  if (want == ptracer_ || ptracer_ == -1) return;
  // EINVAL: no Yama in this kernel, nothing to open.
  if (prctl(PR_SET_PTRACER, want == -1 ? PR_SET_PTRACER_ANY : static_cast<unsigned long>(want), 0, 0, 0) ==
          0 ||
      errno == EINVAL)
    ptracer_ = want;
}

bool Fabric::ProcAlive(uint32_t proc) const {
  if (proc >= kMaxProcs) return false;
  const ShmProc& p = hdr_->procs[proc];
  if (!p.in_use) return false;
  if (inproc_ || p.pid == getpid()) return true;
  if (kill(p.pid, 0) != 0 && errno == ESRCH) return false;
  uint64_t st = ProcStartTime(p.pid);
  return st == 0 || st == p.start_time;
}

void Fabric::ReleaseProcLocked(uint32_t proc) {
  ShmHeader* h = hdr_;
  for (auto& q : h->qps)
    if (q.in_use && q.proc == proc) {
      Free(q.rq.ring_off);
      q.in_use = 0;
      q.qpn = 0;
    }
  for (auto& c : h->cqs)
    if (c.in_use && c.proc == proc) {
      Free(c.ring_off);
      c.in_use = 0;
    }
  for (auto& s : h->srqs)
    if (s.in_use && s.proc == proc) {
      Free(s.rq.ring_off);
      if (s.tags_off) Free(s.tags_off);
      s.tags_off = 0;
      s.in_use = 0;
    }
  for (auto& m : h->mrs)
    if (m.in_use && m.proc == proc) m.in_use = 0, m.key = 0;
  for (auto& w : h->mws)
    if (w.in_use && w.proc == proc) w.in_use = 0, w.state = kMwFree;
  for (auto& c : h->channels)
    if (c.in_use && c.proc == proc) c.in_use = 0;
  for (auto& x : h->xrcds)
    if (x.in_use && x.proc == proc) x.in_use = 0, x.refs = 0;
  for (auto& c : h->ctxs)
    if (c.in_use && c.proc == proc) c.in_use = 0;
  for (auto& m : h->mcasts)
    if (m.in_use && m.proc == proc) m.in_use = 0;
  for (auto& f : h->flows)
    if (f.in_use && f.proc == proc) f.in_use = 0;
  for (auto& r : h->rss)
    if (r.in_use && r.proc == proc) r.in_use = 0;
  h->procs[proc].in_use = 0;
}

void Fabric::ReapDeadLocked() {
  for (uint32_t i = 0; i < kMaxProcs; ++i)
    if (hdr_->procs[i].in_use && !ProcAlive(i)) ReleaseProcLocked(i);
}

void Fabric::Detach() {
  if (detached_ || getpid() != owner_pid_) return;
  detached_ = true;
  // The last process out removes the file, and no process reads its
  // tables again (one that opened it meanwhile finds it unlinked and opens
  // afresh), so the last one leaves its slot and objects as they are:
  // releasing them walks every table, all 4.5 MB of them faulted in at
  // each exit (a third of softnic's cost in a campaign's short runs).
  // The exclusive lock says who is last, as in RemoveFileIfLast; one that
  // does not get it has given up its shared lock (flock(2): a conversion
  // drops the old lock first) and releases its objects as before.
  if (fd_ < 0 || flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    Lock();
    ReleaseProcLocked(self_);
    Unlock();
  }
  RemoveFileIfLast();
  if (!inproc_) SweepStaleFabrics(dir_);
}

void Fabric::RemoveFileIfLast() {
  if (fd_ < 0 || getpid() != owner_pid_) return;
  // Every user holds LOCK_SH on the file for life, and the kernel drops it
  // when a process ends however it ends (SIGKILL included), so the lock,
  // not the procs table, says who is left.  Convert ours to LOCK_EX (the
  // shared lock goes first, flock(2); Detach may hold the exclusive one
  // already): of processes leaving together, the last one to try gets it.
  // An attacher that opened the file meanwhile waits for LOCK_SH, finds it
  // unlinked (st_nlink == 0) and opens afresh.
  struct stat mine, named;
  if (flock(fd_, LOCK_EX | LOCK_NB) == 0 && fstat(fd_, &mine) == 0 && lstat(path_.c_str(), &named) == 0 &&
      mine.st_dev == named.st_dev && mine.st_ino == named.st_ino)
    unlink(path_.c_str());
  ForgetFabricFile(leftover_handle_);
  leftover_handle_ = -1;
  close(fd_);
  fd_ = -1;
}

Fabric::~Fabric() {
  ForgetFabricFile(leftover_handle_);
  if (hdr_) munmap(hdr_, map_size_);
  if (fd_ >= 0) close(fd_);
}

std::string Fabric::ChannelAddr(uint32_t slot, uint32_t gen) const {
  return absl::StrCat("rdmasan-", getuid(), "-", name_, "-ch-", slot, "-", gen);
}

std::string Fabric::AsyncAddr(uint32_t slot, uint32_t gen) const {
  return absl::StrCat("rdmasan-", getuid(), "-", name_, "-as-", slot, "-", gen);
}

}  // namespace rdmasan::softnic

#include "softnic/fabric.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "core/report.h"
#include "core/spin_lock.h"

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
  // The segment is fresh (zeroed); construct the lock and the heap.
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&h->lock, &a);
  pthread_mutexattr_destroy(&a);
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

// Opens (creating if needed) and maps the fabric file at `path`, waiting
// for its first user to initialize it.  Returns the header and the open fd,
// or nullptr with errno set and nothing left open or mapped.
ShmHeader* MapFabricFile(const std::string& path, uint64_t total, int* fd_out) {
  for (int attempt = 0;; ++attempt) {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return nullptr;
    // Shared lock for life; the last process to detach takes it
    // exclusively (non-blocking) to remove the file.
    struct stat st;
    if (flock(fd, LOCK_SH) != 0 || fstat(fd, &st) != 0) {
      close(fd);
      return nullptr;
    }
    if (st.st_nlink == 0 && attempt < 16) {  // lost a race with the last detacher
      close(fd);
      continue;
    }
    if (st.st_uid != getuid() || (st.st_mode & 077) != 0) {
      close(fd);
      errno = EPERM;
      return nullptr;
    }
    if (static_cast<uint64_t>(st.st_size) != total && ftruncate(fd, total) != 0) {
      close(fd);
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

Fabric* Fabric::Attach(const std::string& name) {
  auto* f = new (std::nothrow) Fabric();
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
  const uint64_t total = RoundUp(sizeof(ShmHeader), kPage) + kHeapBytes;
  f->map_size_ = total;
  if (f->inproc_) {
    void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      delete f;
      return nullptr;
    }
    f->hdr_ = static_cast<ShmHeader*>(p);
    InitHeader(f->hdr_, total);
  } else {
    f->path_ = absl::StrCat("/dev/shm/rdmasan-", getuid(), "-", f->name_);
    f->hdr_ = MapFabricFile(f->path_, total, &f->fd_);
    if (!f->hdr_) {
      int e = errno;
      delete f;
      errno = e;
      return nullptr;
    }
  }
  f->base_ = reinterpret_cast<uint8_t*>(f->hdr_);
  // Peers move payload into our memory with process_vm_writev.
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);

  FabricLock lock(f);
  f->ReapDeadLocked();
  uint32_t slot = kNone;
  for (uint32_t i = 0; i < kMaxProcs; ++i) {
    if (!f->hdr_->procs[i].in_use) {
      slot = i;
      break;
    }
  }
  if (slot == kNone) {
    errno = EMFILE;
    return nullptr;
  }
  ShmProc& pr = f->hdr_->procs[slot];
  pr.in_use = 1;
  pr.pid = getpid();
  pr.start_time = ProcStartTime(getpid());
  f->self_ = slot;
  return f;
}

void Fabric::Lock() {
  // Critical sections are short (one WR's copy at most); spin a while
  // before sleeping in the kernel, where a wake-up costs a scheduler round
  // trip on a busy machine.  The spin stays bounded: a trylock loop alone
  // would retry forever on a lock that a dead peer left unrecoverable.
  for (int spins = 0; spins < 4000; ++spins) {
    int rc = pthread_mutex_trylock(&hdr_->lock);
    if (rc == 0) return;
    if (rc == EOWNERDEAD) {
      pthread_mutex_consistent(&hdr_->lock);
      return;
    }
    core::SpinWait(spins);
  }
  int rc = pthread_mutex_lock(&hdr_->lock);
  if (rc == EOWNERDEAD) {
    // A process died inside a critical section.  Every critical section
    // leaves the tables consistent at each store that matters; recover.
    pthread_mutex_consistent(&hdr_->lock);
  }
}

void Fabric::Unlock() { pthread_mutex_unlock(&hdr_->lock); }

uint64_t Fabric::Alloc(uint64_t bytes) {
  uint64_t need = RoundUp(bytes + kHdrBytes, kPage);
  uint64_t prev = 0, cur = hdr_->free_head;
  while (cur) {
    auto* fb = At<FreeBlock>(cur);
    if (fb->size >= need) {
      uint64_t rest = fb->size - need;
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
  return 0;
}

void Fabric::Free(uint64_t off) {
  if (!off) return;
  uint64_t blk = off - kHdrBytes;
  auto* uh = At<UsedHeader>(blk);
  if (uh->magic != kUsedMagic) return;  // never corrupt the heap on a bad free
  uint64_t size = uh->size;
  uh->magic = 0;
  // Give the pages back to the system; the block header page stays.
  if (size > kPage) madvise(base_ + blk + kPage, size - kPage, MADV_REMOVE);
  // Insert sorted, coalescing with neighbours.
  uint64_t prev = 0, cur = hdr_->free_head;
  while (cur && cur < blk) {
    prev = cur;
    cur = At<FreeBlock>(cur)->next;
  }
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
      s.in_use = 0;
    }
  for (auto& m : h->mrs)
    if (m.in_use && m.proc == proc) m.in_use = 0, m.key = 0;
  for (auto& c : h->channels)
    if (c.in_use && c.proc == proc) c.in_use = 0;
  for (auto& c : h->ctxs)
    if (c.in_use && c.proc == proc) c.in_use = 0;
  h->procs[proc].in_use = 0;
}

void Fabric::ReapDeadLocked() {
  for (uint32_t i = 0; i < kMaxProcs; ++i)
    if (hdr_->procs[i].in_use && !ProcAlive(i)) ReleaseProcLocked(i);
}

void Fabric::Detach() {
  Lock();
  ReleaseProcLocked(self_);
  bool others = false;
  for (auto& p : hdr_->procs) others |= p.in_use != 0;
  Unlock();
  if (fd_ >= 0) {
    // Remove the file only if nobody else holds it (they keep LOCK_SH).
    if (!others && flock(fd_, LOCK_EX | LOCK_NB) == 0) unlink(path_.c_str());
    close(fd_);
    fd_ = -1;
  }
}

Fabric::~Fabric() {
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

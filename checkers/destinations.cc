// checkers/destinations: the index of outstanding destinations, and the
// books' updates of it (State's AddSendDests, AddRecvDest, DropQpDests).
// See destinations.h.
//
// May not: look at anything but Events and the books, or report.
#include "checkers/destinations.h"

#include <infiniband/verbs.h>

#include <algorithm>

#include "checkers/state.h"

namespace rdmasan::checkers {

bool SgeRange(const MrState* mr, const core::Sge& g, bool is_inline, uint64_t* lo, uint64_t* hi) {
  if (g.length == 0) return false;
  if (is_inline) {
    *lo = g.addr;
  } else {
    // Device memory's SGEs are offsets into the device, not the program's
    // memory: nothing the program's other buffers could overlap.
    if (!mr || IsDeviceMemory(*mr)) return false;
    *lo = mr->addr + (g.addr - mr->iova);
  }
  *hi = *lo + g.length;
  return *hi > *lo;
}

void DestIndex::Add(const Dest& d) {
  std::lock_guard<core::SpinLock> l(mu_);
  if (!map_.emplace(std::make_pair(d.lo, d.key), d).second) return;  // the same SGE twice
  los_[d.key].push_back(d.lo);
  max_len_ = std::max(max_len_, d.hi - d.lo);
  n_.store(n_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (d.local_write) n_local_.store(n_local_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void DestIndex::Remove(uint64_t key) {
  std::lock_guard<core::SpinLock> l(mu_);
  auto k = los_.find(key);
  if (k == los_.end()) return;
  for (uint64_t lo : k->second) {
    auto it = map_.find({lo, key});
    if (it == map_.end()) continue;
    n_.store(n_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    if (it->second.local_write)
      n_local_.store(n_local_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    map_.erase(it);
  }
  los_.erase(k);
  if (map_.empty()) max_len_ = 0;
}

void State::AddSendDests(const core::Event& e, ObjId qp, QpState& q, size_t accepted) {
  const size_t first = q.sq.size() - accepted;
  for (size_t i = 0; i < accepted; ++i) {
    const core::SendWr& w = e.send_wrs[i];
    OutstandingWr& o = q.sq[first + i];
    o.dest_key = 0;
    if (w.send_flags & IBV_SEND_FENCE) ++q.fence_epoch;
    uint64_t lo, hi;
    if (WritesLocal(w.opcode)) {
      const uint64_t key = dests_.NewKey();
      for (const core::Sge& g : o.sges) {
        if (!SgeRange(MrStateByLkey(g.lkey), g, false, &lo, &hi)) continue;
        dests_.Add(Dest{lo, hi, key, qp, false, true, w.opcode, q.fence_epoch, g.lkey, w.wr_id, e.stack});
        o.dest_key = key;
      }
    } else if (o.hashed && dests_.AnyLocalWrite()) {
      // Bytes an outstanding READ or atomic still writes change between
      // this WR's post and its completion by the NIC's hand, not the
      // program's: their payload hash proves nothing.  Fenced (the READ's
      // result gathered as the program meant: buffer-modified-in-flight's
      // false alarm) or not (unfenced-read-use reports it at the post, the
      // cause, rather than the changed bytes at the retirement), the SGE is
      // not hashed again.
      bool hashed = false;
      for (core::Sge& g : o.sges) {
        Dest d;
        if (g.hash && SgeRange(MrStateByLkey(g.lkey), g, o.is_inline, &lo, &hi) &&
            dests_.FindOverlap(
                lo, hi, [](const Dest& x) { return x.local_write; }, &d))
          g.hash = 0;
        hashed |= g.hash != 0;
      }
      o.hashed = hashed;
    }
  }
}

void State::AddRecvDest(const core::RecvWr& w, ObjId queue, bool srq, StackId stack, OutstandingWr* o) {
  o->dest_key = 0;
  uint64_t lo, hi;
  for (const core::Sge& g : w.sges) {
    if (!SgeRange(MrStateByLkey(g.lkey), g, false, &lo, &hi)) continue;
    if (!o->dest_key) o->dest_key = dests_.NewKey();
    dests_.Add(Dest{lo, hi, o->dest_key, queue, srq, false, 0, 0, g.lkey, w.wr_id, stack});
  }
}

void State::DropQpDests(const QpState& q) {
  for (const auto& w : q.sq) DropDests(w);
  for (const auto& w : q.rq) DropDests(w);
}

}  // namespace rdmasan::checkers

// softnic/placement: a message placed in chunks, in a decided order, over
// several progress steps (placement.h has the rule it follows and the
// choices).
//
// May not: touch memory outside the segments its callers validated,
// allocate, or decide anything but through ChaosDecide.
#include "softnic/placement.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <numeric>

#include "softnic/exec_order.h"

namespace rdmasan::softnic::exec {
namespace {

// The segments of bytes [off, off + n) of the message `in` describes.
uint32_t Slice(const Seg* in, uint32_t nin, uint64_t off, uint64_t n, Seg* out) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < nin && n; ++i) {
    if (off >= in[i].len) {
      off -= in[i].len;
      continue;
    }
    const uint64_t take = std::min<uint64_t>(in[i].len - off, n);
    out[k++] = {in[i].va + off, static_cast<uint32_t>(take), in[i].key};
    off = 0;
    n -= take;
  }
  return k;
}

// The chunk placed at position `pos` of the order.
uint32_t ChunkAt(const PlaceState& s, uint32_t pos) {
  switch (s.order) {
    case 1:
      return pos == 0 ? s.chunks - 1 : pos - 1;
    case 2:
      return s.chunks - 1 - pos;
    default:
      return static_cast<uint32_t>((uint64_t(s.stride) * pos + s.offset) % s.chunks);
  }
}

}  // namespace

bool PlacementWaitsSlow(Exec& x, SnQp* qp) {
  x.place = &qp->place;
  return qp->place.index == qp->sq_exec && NowNs() < qp->place.due_ns;
}

namespace {

// kGather: whether the executing WR's source is read late (outcome 1) or
// twice (2), placed in two steps (PlaceStep).
bool GathersLate(Exec& x, const SendWqe& w, uint64_t len, uint64_t recv_id) {
  if (!ChaosOn(ChaosPoint::kGather) || !len || (w.flags & IBV_SEND_INLINE)) return false;
  switch (w.opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      break;
    default:
      return false;  // a READ's source is the responder's (kFence), an atomic's is in the WQE
  }
  char what[128];
  snprintf(what, sizeof(what),
           "gather wr_id 0x%" PRIx64 " of QP 0x%x, %" PRIu64
           " B (1: its source read at a later step, 2: placed, then again from its source as it is then)",
           w.wr_id, x.qp->shm->qpn, len);
  const uint64_t plan = ChaosDecide(ChaosPoint::kGather, x.qp->ordinal, w.wr_id, 3, what, x.qp->shm->qpn);
  if (plan == 0) return false;
  PlaceState& s = *x.place;
  s = PlaceState{};
  s.index = x.qp->sq_exec;
  s.len = len;
  s.recv_id = recv_id;
  s.gather = static_cast<uint32_t>(plan);
  s.chunk = static_cast<uint32_t>(std::min<uint64_t>(len, ~0u));
  s.chunks = 1;
  s.steps = 2;
  return true;
}

}  // namespace

bool PlacesInChunks(Exec& x, const SendWqe& w, uint64_t len, uint64_t recv_id, bool eligible) {
  PlaceState& s = *x.place;
  const uint64_t index = x.qp->sq_exec;
  if (s.index == index) {
    if (s.recv_id != recv_id) {
      s.recv_id = recv_id;  // the responder lost the first receive WQE (a reset): from the start
      s.step = 0;
    }
    return true;
  }
  const uint32_t type = x.qp->shm->type;
  if (!eligible || (type != IBV_QPT_RC && type != IBV_QPT_UC) || w.opcode == IBV_WR_SEND_WITH_INV)
    return false;
  if (!ChaosOn(ChaosPoint::kPlace) || len < 2 * kPlaceChunk) return GathersLate(x, w, len, recv_id);
  uint64_t chunk = kPlaceChunk;
  while ((len + chunk - 1) / chunk > kPlaceMaxChunks) chunk *= 2;
  const uint32_t chunks = static_cast<uint32_t>((len + chunk - 1) / chunk);
  const uint32_t obj = x.qp->ordinal;
  char what[128];
  snprintf(what, sizeof(what),
           "place wr_id 0x%" PRIx64 " of QP 0x%x: %u chunks of %" PRIu64
           " B (1: last first, 2: reversed, 3: shuffled)",
           w.wr_id, x.qp->shm->qpn, chunks, chunk);
  const uint64_t order = ChaosDecide(ChaosPoint::kPlace, obj, w.wr_id, 4, what, x.qp->shm->qpn);
  if (order == 0) return GathersLate(x, w, len, recv_id);
  s = PlaceState{};
  s.index = index;
  s.len = len;
  s.recv_id = recv_id;
  s.order = static_cast<uint32_t>(order);
  s.chunk = static_cast<uint32_t>(chunk);
  s.chunks = chunks;
  s.steps = std::min(chunks, kPlaceSteps);
  if (order == 3) {
    // An affine permutation of the chunks: any stride coprime with their
    // number, any start.
    uint32_t stride = 2 + static_cast<uint32_t>(ChaosDecide(ChaosPoint::kPlace, obj, w.wr_id, chunks,
                                                            "place: shuffle stride", x.qp->shm->qpn));
    while (std::gcd(stride, chunks) != 1) ++stride;
    s.stride = stride;
    s.offset = static_cast<uint32_t>(
        ChaosDecide(ChaosPoint::kPlace, obj, w.wr_id, chunks, "place: shuffle start", x.qp->shm->qpn));
  }
  return true;
}

int PlaceStep(Exec& x, pid_t dst_pid, const Seg* dst, uint32_t nd, pid_t src_pid, const Seg* src, uint32_t ns,
              bool* more) {
  PlaceState& s = *x.place;
  *more = false;
  if (s.gather) {
    // A late gather copies nothing at its first step; a twice-read one
    // places the whole message at both, from the source as it is then.
    if (s.gather == 2 || s.step > 0) {
      if (int e = Move(x.self, dst_pid, dst, nd, src_pid, src, ns)) {
        s.index = kNoPlacement;  // the WR completes in error
        return e;
      }
    }
  } else {
    const uint32_t from = s.step * s.chunks / s.steps, to = (s.step + 1) * s.chunks / s.steps;
    Seg d[kMaxSge + 2], r[kMaxSge + 2];
    for (uint32_t pos = from; pos < to; ++pos) {
      const uint64_t off = uint64_t(ChunkAt(s, pos)) * s.chunk;
      const uint64_t n = std::min<uint64_t>(s.chunk, s.len - off);
      const uint32_t k = Slice(dst, nd, off, n, d), m = Slice(src, ns, off, n, r);
      if (int e = Move(x.self, dst_pid, d, k, src_pid, r, m)) {
        s.index = kNoPlacement;  // the WR completes in error
        return e;
      }
    }
  }
  *more = ++s.step < s.steps;
  if (*more) {
    s.due_ns = NowNs() + kPlaceStepNs;
    WakeDriver(x.p);  // the next step comes even if the program makes no call
  } else
    s.index = kNoPlacement;
  return 0;
}

}  // namespace rdmasan::softnic::exec

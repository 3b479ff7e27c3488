// The builders of tests/unit/checkers*_test.cc: hand-built core::Event
// sequences fed to a checkers::Engine (no verbs calls, no softnic), with
// object and stack ids chosen by the test, and small setups (a QP in RTS
// with an MR, an SRQ shared by two QPs, memory windows).
#ifndef RDMASAN_TESTS_UNIT_CHECKERS_FIXTURE_H_
#define RDMASAN_TESTS_UNIT_CHECKERS_FIXTURE_H_

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <string>
#include <vector>

#include "checkers/engine.h"
#include "checkers/state.h"
#include "core/checks.h"
#include "core/event.h"
#include "core/report.h"

namespace rdmasan::checkers_testing {

using checkers::Engine;
using core::CheckId;
using core::Completion;
using core::Event;
using core::EventKind;
using core::Finding;
using core::ObjId;
using core::QpCaps;
using core::RecvWr;
using core::SendWr;
using core::Sge;
using core::StackId;

using Ids = std::vector<std::string>;

inline Ids Names(const std::vector<Finding>& fs) {
  Ids out;
  for (const auto& f : fs) out.push_back(core::CheckName(f.check));
  return out;
}

// ------------------------------------------------------------- builders --

inline Sge Sg(uint64_t addr, uint32_t length, uint32_t lkey) { return Sge{addr, length, lkey, 0}; }

inline SendWr Wr(uint64_t wr_id, bool signaled, std::vector<Sge> sges = {}, uint32_t opcode = IBV_WR_SEND,
                 uint32_t extra_flags = 0) {
  SendWr w;
  w.wr_id = wr_id;
  w.opcode = opcode;
  w.send_flags = (signaled ? IBV_SEND_SIGNALED : 0) | extra_flags;
  w.num_sge = static_cast<int32_t>(sges.size());
  for (const auto& g : sges) w.sges.push_back(g);
  return w;
}

// `n` WRs with wr_ids first.., signaled where (index+1) % every == 0 (every 0:
// none), and the last one signaled if `last_signaled`.
inline std::vector<SendWr> Chain(uint64_t first, int n, int every, bool last_signaled) {
  std::vector<SendWr> v;
  for (int i = 0; i < n; ++i) {
    bool sig = (every > 0 && (i + 1) % every == 0) || (last_signaled && i == n - 1);
    v.push_back(Wr(first + i, sig));
  }
  return v;
}

inline RecvWr Rwr(uint64_t wr_id, std::vector<Sge> sges = {}) {
  RecvWr w;
  w.wr_id = wr_id;
  w.num_sge = static_cast<int32_t>(sges.size());
  for (const auto& g : sges) w.sges.push_back(g);
  return w;
}

inline Completion Wc(uint32_t qpn, uint64_t wr_id, uint32_t status = IBV_WC_SUCCESS,
                     uint32_t opcode = IBV_WC_SEND) {
  Completion c;
  c.wr_id = wr_id;
  c.status = status;
  c.opcode = opcode;
  c.qp_num = qpn;
  return c;
}

inline QpCaps Caps(uint32_t send, uint32_t recv = 16, uint32_t send_sge = 4, uint32_t recv_sge = 4,
                   uint32_t inl = 64) {
  QpCaps c;
  c.max_send_wr = send;
  c.max_recv_wr = recv;
  c.max_send_sge = send_sge;
  c.max_recv_sge = recv_sge;
  c.max_inline_data = inl;
  return c;
}

inline constexpr uint32_t kAllAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// Feeds events to an Engine as they are built, and keeps them (for the
// determinism test) with every finding.  Each verb helper returns the
// check names of the findings that event raised, in check order.
class Fx {
 public:
  // Every check but overlapping-destinations (off by default), which most
  // tests' receives, all into one buffer as the pingpongs post them, would
  // raise; a test of it passes a set with it.
  static core::CheckSet AllButOverlap() {
    core::CheckSet c = core::CheckSet::All();
    c.Set(CheckId::kOverlappingDestinations, false);
    return c;
  }
  Fx() : Fx(AllButOverlap()) {}
  explicit Fx(const core::CheckSet& checks) : eng(false, checks) {}
  Engine eng;
  std::vector<Event> log;
  std::vector<Finding> last;

  Ids Feed(Event e) {
    e.seq = ++seq_;
    e.tid = 1;
    if (!e.stack) e.stack = next_stack_++;
    log.push_back(e);
    last = eng.OnEvent(e);
    return Names(last);
  }
  StackId last_stack() const { return log.back().stack; }
  // The next objects get ids from `id` on (ids are any nonzero numbers).
  void NumberFrom(ObjId id) { next_id_ = id; }
  const checkers::QpState& Qp(ObjId qp) const {
    const checkers::QpState* q = eng.state().Qp(qp);
    EXPECT_NE(q, nullptr);
    static const checkers::QpState kMissing;
    return q ? *q : kMissing;
  }
  size_t SqSize(ObjId qp) const { return Qp(qp).sq.size(); }
  static uint32_t Qpn(ObjId qp) { return static_cast<uint32_t>(0x1000 + qp); }

  // Creation helpers expect no findings (ADD_FAILURE otherwise) and return the id.
  ObjId Created(Event e) {
    e.obj = next_id_++;
    Ids got = Feed(e);
    EXPECT_TRUE(got.empty()) << "creating a " << core::EventKindName(e.kind) << " raised " << got.size();
    return e.obj;
  }
  ObjId AllocPd() {
    Event e;
    e.kind = EventKind::kAllocPd;
    return Created(e);
  }
  ObjId RegMr(ObjId pd, uint64_t addr, uint64_t len, uint32_t lkey, uint32_t access = kAllAccess) {
    Event e;
    e.kind = EventKind::kRegMr;
    e.parent = pd;
    e.addr = e.iova = addr;
    e.length = len;
    e.lkey = lkey;
    e.rkey = lkey + 0x10000;
    e.access = access;
    return Created(e);
  }
  ObjId CreateChannel() {
    Event e;
    e.kind = EventKind::kCreateCompChannel;
    return Created(e);
  }
  ObjId CreateCq(int32_t cqe, ObjId channel = 0) {
    Event e;
    e.kind = EventKind::kCreateCq;
    e.cqe = cqe;
    e.channel = channel;
    return Created(e);
  }
  ObjId CreateSrq(ObjId pd, uint32_t max_wr) {
    Event e;
    e.kind = EventKind::kCreateSrq;
    e.parent = pd;
    e.caps.max_recv_wr = max_wr;
    e.caps.max_recv_sge = 4;
    return Created(e);
  }
  // Findings of create_qp (cq-overrun may be raised there) land in `created`.
  ObjId CreateQp(ObjId pd, ObjId scq, ObjId rcq, QpCaps caps, bool sig_all = false, ObjId srq = 0,
                 uint32_t type = IBV_QPT_RC, Ids* created = nullptr) {
    Event e;
    e.kind = EventKind::kCreateQp;
    e.obj = next_id_++;
    e.parent = pd;
    e.send_cq = scq;
    e.recv_cq = rcq;
    e.srq = srq;
    e.qp_type = type;
    e.qp_num = Qpn(e.obj);
    e.sq_sig_all = sig_all;
    e.caps = caps;
    Ids got = Feed(e);
    if (created)
      *created = got;
    else
      EXPECT_TRUE(got.empty()) << "create_qp raised " << got.size();
    return e.obj;
  }
  Ids ModifyQp(ObjId qp, uint32_t state) {
    Event e;
    e.kind = EventKind::kModifyQp;
    e.obj = qp;
    e.attr_mask = IBV_QP_STATE;
    e.qp_state = state;
    return Feed(e);
  }
  void ToRts(ObjId qp) {
    for (uint32_t s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) EXPECT_TRUE(ModifyQp(qp, s).empty());
  }
  ObjId CreateAh(ObjId pd) {
    Event e;
    e.kind = EventKind::kCreateAh;
    e.parent = pd;
    return Created(e);
  }

  Ids PostSend(ObjId qp, std::vector<SendWr> wrs, StackId stack = 0, int32_t ret = 0,
               uint32_t bad_index = UINT32_MAX) {
    Event e;
    e.kind = EventKind::kPostSend;
    e.obj = qp;
    e.stack = stack;
    e.ret = ret;
    e.err = ret;
    e.bad_index = bad_index;
    for (auto& w : wrs) e.send_wrs.push_back(std::move(w));
    return Feed(e);
  }
  Ids PostRecv(ObjId qp, std::vector<RecvWr> wrs, StackId stack = 0) {
    Event e;
    e.kind = EventKind::kPostRecv;
    e.obj = qp;
    e.stack = stack;
    for (auto& w : wrs) e.recv_wrs.push_back(std::move(w));
    return Feed(e);
  }
  Ids PostSrqRecv(ObjId srq, std::vector<RecvWr> wrs, StackId stack = 0) {
    Event e;
    e.kind = EventKind::kPostSrqRecv;
    e.obj = srq;
    e.stack = stack;
    for (auto& w : wrs) e.recv_wrs.push_back(std::move(w));
    return Feed(e);
  }
  Ids Poll(ObjId cq, std::vector<Completion> wcs, uint32_t asked = 16) {
    Event e;
    e.kind = EventKind::kPollCq;
    e.obj = cq;
    e.count = asked;
    e.ret = static_cast<int32_t>(wcs.size());
    for (auto& c : wcs) e.wcs.push_back(c);
    return Feed(e);
  }
  Ids ReqNotify(ObjId cq) { return Simple(EventKind::kReqNotifyCq, cq); }
  Ids Wait(ObjId channel) { return Simple(EventKind::kWaitCqEvent, channel); }
  Ids GetEvent(ObjId cq, ObjId channel) {
    Event e;
    e.kind = EventKind::kGetCqEvent;
    e.obj = cq;
    e.channel = channel;
    return Feed(e);
  }
  Ids Ack(ObjId cq, uint32_t n) {
    Event e;
    e.kind = EventKind::kAckCqEvents;
    e.obj = cq;
    e.count = n;
    return Feed(e);
  }
  Ids DeregMr(ObjId mr) { return Simple(EventKind::kDeregMr, mr); }
  Ids DestroyCq(ObjId cq) { return Simple(EventKind::kDestroyCq, cq); }
  Ids DestroyQp(ObjId qp) { return Simple(EventKind::kDestroyQp, qp); }
  Ids DestroySrq(ObjId srq) { return Simple(EventKind::kDestroySrq, srq); }
  Ids DestroyAh(ObjId ah) { return Simple(EventKind::kDestroyAh, ah); }
  Ids DeallocPd(ObjId pd) { return Simple(EventKind::kDeallocPd, pd); }
  Ids Fork() { return Simple(EventKind::kFork, 0); }
  Ids ForkInit() { return Simple(EventKind::kForkInit, 0); }
  Ids AsyncQpEvent(ObjId qp, uint32_t state) {
    Event e;
    e.kind = EventKind::kAsyncEvent;
    e.obj = qp;
    e.qp_state = state;
    return Feed(e);
  }
  Ids Simple(EventKind k, ObjId obj) {
    Event e;
    e.kind = k;
    e.obj = obj;
    return Feed(e);
  }

 private:
  uint64_t seq_ = 0;
  ObjId next_id_ = 1;
  StackId next_stack_ = 100;
};

inline const Ids kNone = {};

// The wr_ids of an SRQ's outstanding receives, oldest first.
inline std::vector<uint64_t> SrqWrIds(const Fx& f, ObjId srq) {
  std::vector<uint64_t> v;
  for (const auto& w : f.eng.state().Srq(srq)->rq) v.push_back(w.wr_id);
  return v;
}

// A PD with one all-access MR [0x10000, +0x10000) lkey 0x11, one CQ, one RC
// QP in RTS on it (send and receive), with the given send depth.
struct Basic {
  Fx f;
  ObjId pd, mr, cq, qp;
  uint32_t qpn;
  explicit Basic(uint32_t max_send_wr = 8, bool sig_all = false, int32_t cqe = 256) {
    pd = f.AllocPd();
    mr = f.RegMr(pd, 0x10000, 0x10000, 0x11);
    cq = f.CreateCq(cqe);
    qp = f.CreateQp(pd, cq, cq, Caps(max_send_wr), sig_all);
    qpn = Fx::Qpn(qp);
    f.ToRts(qp);
  }
  Sge sg(uint64_t off = 0, uint32_t len = 64) const { return Sg(0x10000 + off, len, 0x11); }
};

struct SrqSetup {
  Fx f;
  ObjId pd, cq, srq, a, b;
  SrqSetup() {
    pd = f.AllocPd();
    f.RegMr(pd, 0x10000, 0x10000, 0x11);
    cq = f.CreateCq(4);
    srq = f.CreateSrq(pd, 16);
    a = f.CreateQp(pd, cq, cq, Caps(8, 0), false, srq);
    b = f.CreateQp(pd, cq, cq, Caps(8, 0), false, srq);
    f.ToRts(a);
    f.ToRts(b);
  }
  RecvWr R(uint64_t id) { return Rwr(id, {Sg(0x10000 + 64 * id, 64, 0x11)}); }
};

inline Ids FreeRange(Fx& f, uint64_t addr, uint64_t len) {
  Event e;
  e.kind = EventKind::kFreeRange;
  e.addr = addr;
  e.length = len;
  return f.Feed(e);
}

struct Windows : Basic {
  Windows() : Basic(16) {}
  ObjId AllocMw(uint32_t rkey, uint32_t type = IBV_MW_TYPE_2, ObjId in_pd = 0) {
    Event e;
    e.kind = EventKind::kAllocMw;
    e.parent = in_pd ? in_pd : pd;
    e.rkey = rkey;
    e.count = type;
    return f.Created(e);
  }
  static SendWr Bind(uint64_t wr_id, ObjId mw, ObjId mr, uint32_t rkey, uint64_t addr = 0x10100,
                     uint64_t len = 0x100, bool signaled = true) {
    SendWr w = Wr(wr_id, signaled, {}, IBV_WR_BIND_MW);
    w.rkey = rkey;
    w.bind = {mw, mr, addr, len, IBV_ACCESS_REMOTE_WRITE};
    return w;
  }
  static SendWr LocalInv(uint64_t wr_id, uint32_t rkey, bool signaled = true) {
    SendWr w = Wr(wr_id, signaled, {}, IBV_WR_LOCAL_INV);
    w.imm_data = rkey;
    return w;
  }
  Ids RemoteInv(uint32_t rkey) {
    Event e;
    e.kind = EventKind::kRemoteInv;
    e.obj = cq;
    e.qp_num = qpn;
    e.rkey = rkey;
    return f.Feed(e);
  }
  Ids BindMwVerb(ObjId mw, uint32_t new_rkey, uint64_t wr_id) {  // type 1: ibv_bind_mw
    Event e;
    e.kind = EventKind::kBindMw;
    e.obj = qp;
    e.bad_index = UINT32_MAX;
    e.send_wrs.push_back(Bind(wr_id, mw, mr, new_rkey));
    return f.Feed(e);
  }
  Ids DeallocMw(ObjId mw) { return f.Simple(EventKind::kDeallocMw, mw); }
};

}  // namespace rdmasan::checkers_testing

#endif  // RDMASAN_TESTS_UNIT_CHECKERS_FIXTURE_H_

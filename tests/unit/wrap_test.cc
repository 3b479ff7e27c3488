// The data-path wrapping of real provider contexts, driven over a stub
// context built here (no RDMA hardware exists to test it on): the inline
// verbs must go through the shim's wrappers and chain to the provider's ops
// with arguments and results untouched.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstring>
#include <vector>

#include "core/report.h"
#include "interpose/destroyed.h"
#include "interpose/faults.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"

namespace rdmasan::interpose {
namespace {

struct StubCalls {
  int post_send = 0, post_recv = 0, poll_cq = 0, notify = 0, query_port = 0;
  ibv_send_wr* last_wr = nullptr;
} g_stub;

int StubPostSend(ibv_qp*, ibv_send_wr* wr, ibv_send_wr** bad) {
  ++g_stub.post_send;
  g_stub.last_wr = wr;
  *bad = wr->next;  // a provider that rejects the second WR
  return wr->next ? ENOMEM : 0;
}
int StubPostRecv(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**) { return ++g_stub.post_recv, 0; }
int StubPollCq(ibv_cq*, int n, ibv_wc* wc) {
  ++g_stub.poll_cq;
  if (n < 1) return 0;
  std::memset(wc, 0, sizeof(*wc));
  wc->wr_id = 0x1234;
  return 1;
}
int StubNotify(ibv_cq*, int solicited) { return ++g_stub.notify, solicited ? 0 : 0; }
int StubQueryPort(ibv_context*, uint8_t, ibv_port_attr* a, size_t) {
  ++g_stub.query_port;
  std::memset(a, 0, sizeof(*a));
  a->state = IBV_PORT_ARMED;
  return 0;
}

TEST(WrapRealContext, DataPathGoesThroughShimAndChains) {
  verbs_context v{};
  v.sz = sizeof(v);
  v.query_port = StubQueryPort;
  ibv_context& ctx = v.context;
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  ctx.ops.post_send = StubPostSend;
  ctx.ops.post_recv = StubPostRecv;
  ctx.ops.poll_cq = StubPollCq;
  ctx.ops.req_notify_cq = StubNotify;
  ibv_qp qp{};
  qp.context = &ctx;
  ibv_cq cq{};
  cq.context = &ctx;

  SetChecking(true);  // counters count checked calls
  WrapContext(&ctx);
  ASSERT_TRUE(IsWrapped(&ctx));
  EXPECT_NE(ctx.ops.post_send, StubPostSend);
  Counters& c = GetCounters();
  const uint64_t sends0 = c.post_send, polls0 = c.poll_cq;

  ibv_send_wr wr2{}, wr1{};
  wr1.next = &wr2;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(&qp, &wr1, &bad), ENOMEM);  // provider's result
  EXPECT_EQ(bad, &wr2);                               // and bad_wr, untouched
  EXPECT_EQ(g_stub.last_wr, &wr1);
  ibv_recv_wr rwr{};
  ibv_recv_wr* rbad = nullptr;
  EXPECT_EQ(ibv_post_recv(&qp, &rwr, &rbad), 0);
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(&cq, 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 0x1234u);
  EXPECT_EQ(ibv_req_notify_cq(&cq, 1), 0);
  ibv_port_attr pa;
  EXPECT_EQ(ibv_query_port(&ctx, 1, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_ARMED);

  EXPECT_EQ(g_stub.post_send, 1);
  EXPECT_EQ(g_stub.post_recv, 1);
  EXPECT_EQ(g_stub.poll_cq, 1);
  EXPECT_EQ(g_stub.notify, 1);
  EXPECT_EQ(g_stub.query_port, 1);
  EXPECT_EQ(c.post_send - sends0, 1u);
  EXPECT_EQ(c.poll_cq - polls0, 1u);

  WrapContext(&ctx);  // idempotent: no double wrapping
  EXPECT_EQ(ibv_poll_cq(&cq, 1, &wc), 1);
  EXPECT_EQ(g_stub.poll_cq, 2);
  EXPECT_EQ(c.poll_cq - polls0, 2u);

  SetChecking(false);
  UnwrapContext(&ctx);
  EXPECT_FALSE(IsWrapped(&ctx));
  EXPECT_EQ(ctx.ops.post_send, StubPostSend);
  EXPECT_EQ(v.query_port, StubQueryPort);
}

// A poll names its CQ by the id the CQ at that address has now: the poll
// remembers the id of the CQ its thread polled last only while no object
// was forgotten (a CQ destroyed and another made at its address).
std::vector<core::ObjId> g_polled_cqs;
void NotePolledCq(const core::Event& e, const std::vector<core::Finding>&) {
  if (e.kind == core::EventKind::kPollCq) g_polled_cqs.push_back(e.obj);
}

TEST(WrapRealContext, APollNamesTheCqNowAtItsAddress) {
  verbs_context v{};
  v.sz = sizeof(v);
  ibv_context& ctx = v.context;
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  ctx.ops.poll_cq = StubPollCq;
  ibv_cq cq{};
  cq.context = &ctx;
  SetChecking(true);
  WrapContext(&ctx);
  const core::ObjId first = Assign(&cq);
  ASSERT_NE(first, 0u);
  g_polled_cqs.clear();
  SetFuzzEventHook(NotePolledCq);  // sees each poll's event
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(&cq, 1, &wc), 1);
  EXPECT_EQ(ibv_poll_cq(&cq, 1, &wc), 1);
  Forget(&cq);
  const core::ObjId second = Assign(&cq);
  ASSERT_NE(second, first);
  EXPECT_EQ(ibv_poll_cq(&cq, 1, &wc), 1);
  SetFuzzEventHook(nullptr);
  EXPECT_EQ(g_polled_cqs, (std::vector<core::ObjId>{first, first, second}));
  Forget(&cq);
  SetChecking(false);
  UnwrapContext(&ctx);
}

}  // namespace
}  // namespace rdmasan::interpose

namespace rdmasan::interpose {
namespace {

// A real provider's ibv_wr_* batch (stubbed here) becomes one post_send
// Event at ibv_wr_complete, with the provider's functions still called.
struct StubQpEx {
  ibv_qp_ex qpx{};
  int sends = 0, sges = 0, completes = 0;
} g_sq;

void StubWrStart(ibv_qp_ex*) {}
void StubWrSend(ibv_qp_ex*) { ++g_sq.sends; }
void StubWrSetSge(ibv_qp_ex*, uint32_t, uint64_t, uint32_t) { ++g_sq.sges; }
int StubWrComplete(ibv_qp_ex*) { return ++g_sq.completes, 0; }
void StubWrAbort(ibv_qp_ex*) {}

ibv_qp* StubCreateQpEx(ibv_context* ctx, ibv_qp_init_attr_ex* attr) {
  g_sq.qpx.qp_base.context = ctx;
  g_sq.qpx.qp_base.qp_num = 0x77;
  g_sq.qpx.wr_start = StubWrStart;
  g_sq.qpx.wr_send = StubWrSend;
  g_sq.qpx.wr_set_sge = StubWrSetSge;
  g_sq.qpx.wr_complete = StubWrComplete;
  g_sq.qpx.wr_abort = StubWrAbort;
  return &g_sq.qpx.qp_base;
}

// ibv_wr_atomic_write through the shadow: a WR with the remote address and
// no SGE (the value is copied at the call), which atomic-misaligned judges
// by the address alone, and no key check trips over.
struct StubAwQp {
  ibv_qp_ex qpx{};
  int atomic_writes = 0;
  uint64_t last_value = 0;
} g_aw;

void StubWrAtomicWrite(ibv_qp_ex*, uint32_t, uint64_t, const void* v) {
  ++g_aw.atomic_writes;
  std::memcpy(&g_aw.last_value, v, 8);
}

int StubAwComplete(ibv_qp_ex*) { return 0; }

ibv_qp* StubCreateAwQp(ibv_context* ctx, ibv_qp_init_attr_ex*) {
  g_aw.qpx.qp_base.context = ctx;
  g_aw.qpx.qp_base.qp_num = 0x78;
  g_aw.qpx.wr_start = StubWrStart;
  g_aw.qpx.wr_atomic_write = StubWrAtomicWrite;
  g_aw.qpx.wr_complete = StubAwComplete;
  g_aw.qpx.wr_abort = StubWrAbort;
  return &g_aw.qpx.qp_base;
}

TEST(WrapRealContext, AtomicWriteIsAWrTheCheckersJudge) {
  verbs_context v{};
  v.sz = sizeof(v);
  v.create_qp_ex = StubCreateAwQp;
  ibv_context& ctx = v.context;
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  ctx.ops.post_send = StubPostSend;
  SetChecking(true);
  WrapContext(&ctx);
  ibv_qp_init_attr_ex attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = 8;
  attr.cap.max_send_sge = 1;
  attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  attr.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE;
  ibv_qp* qp = ibv_create_qp_ex(&ctx, &attr);
  ASSERT_EQ(qp, &g_aw.qpx.qp_base);
  ibv_qp_ex* x = reinterpret_cast<ibv_qp_ex*>(qp);
  EXPECT_NE(x->wr_atomic_write, StubWrAtomicWrite) << "shadowed";
  auto& r = core::GlobalReporter();
  const size_t misaligned = r.Count(core::CheckId::kAtomicMisaligned);
  const size_t lkeys = r.Count(core::CheckId::kInvalidLkey);
  const uint64_t value = 0x1234;
  ibv_wr_start(x);
  x->wr_id = 1;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_write(x, 0x99, 0x10000, &value);
  EXPECT_EQ(ibv_wr_complete(x), 0);
  EXPECT_EQ(g_aw.atomic_writes, 1);
  EXPECT_EQ(g_aw.last_value, value);
  EXPECT_EQ(r.Count(core::CheckId::kAtomicMisaligned), misaligned);
  EXPECT_EQ(r.Count(core::CheckId::kInvalidLkey), lkeys);
  ibv_wr_start(x);
  x->wr_id = 2;
  ibv_wr_atomic_write(x, 0x99, 0x10004, &value);
  EXPECT_EQ(ibv_wr_complete(x), 0);
  EXPECT_EQ(r.Count(core::CheckId::kAtomicMisaligned), misaligned + 1);
  ForgetQp(qp);
  SetChecking(false);
  UnwrapContext(&ctx);
}

TEST(WrapRealContext, QpExBatchesOfARealProviderAreEvents) {
  verbs_context v{};
  v.sz = sizeof(v);
  v.create_qp_ex = StubCreateQpEx;
  ibv_context& ctx = v.context;
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  ctx.ops.post_send = StubPostSend;
  SetChecking(true);
  WrapContext(&ctx);
  ibv_qp_init_attr_ex attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = 1;
  attr.cap.max_send_sge = 1;
  attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  attr.send_ops_flags = IBV_QP_EX_WITH_SEND;
  ibv_qp* qp = ibv_create_qp_ex(&ctx, &attr);
  ASSERT_EQ(qp, &g_sq.qpx.qp_base);
  ibv_qp_ex* x = reinterpret_cast<ibv_qp_ex*>(qp);
  EXPECT_NE(x->wr_send, StubWrSend) << "the setters are shadowed";
  const size_t overflows = core::GlobalReporter().Count(core::CheckId::kSqOverflow);
  // Two WRs into an SQ of one: an sq-overflow the checkers can only see if
  // the batch became an Event.
  ibv_wr_start(x);
  x->wr_id = 1;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(x);
  ibv_wr_set_sge(x, 0x10, 0x1000, 8);
  x->wr_id = 2;
  ibv_wr_send(x);
  ibv_wr_set_sge(x, 0x10, 0x2000, 8);
  EXPECT_EQ(ibv_wr_complete(x), 0);
  EXPECT_EQ(g_sq.sends, 2);
  EXPECT_EQ(g_sq.sges, 2);
  EXPECT_EQ(g_sq.completes, 1);
  EXPECT_EQ(core::GlobalReporter().Count(core::CheckId::kSqOverflow), overflows + 1);
  ForgetQp(qp);
  SetChecking(false);
  UnwrapContext(&ctx);
}

}  // namespace
}  // namespace rdmasan::interpose

namespace rdmasan::interpose {
namespace {

// num_sge past the object's limit (issue 10 item 6): no SGE is read (the
// list may hold one entry), num_sge is kept for sge-count.
TEST(ChainCopy, NumSgePastTheLimitReadsNoSge) {
  ibv_sge one = {0x1000, 8, 0x11};
  ibv_send_wr s{};
  s.sg_list = &one;
  s.num_sge = 1000;
  core::Event e;
  EXPECT_EQ(CopySendChain(&s, nullptr, &e, false, /*max_sge=*/2), 1u);
  ASSERT_EQ(e.send_wrs.size(), 1u);
  EXPECT_EQ(e.send_wrs[0].num_sge, 1000);
  EXPECT_TRUE(e.send_wrs[0].sges.empty());
  ibv_recv_wr r{};
  r.sg_list = &one;
  r.num_sge = 1000;
  core::Event re;
  EXPECT_EQ(CopyRecvChain(&r, nullptr, &re, /*max_sge=*/2), 1u);
  EXPECT_EQ(re.recv_wrs[0].num_sge, 1000);
  EXPECT_TRUE(re.recv_wrs[0].sges.empty());
  // Within the limit: every SGE.
  s.num_sge = 1;
  core::Event ok;
  CopySendChain(&s, nullptr, &ok, false, 2);
  ASSERT_EQ(ok.send_wrs[0].sges.size(), 1u);
  EXPECT_EQ(ok.send_wrs[0].sges[0].addr, 0x1000u);
}

// A cyclic chain (issue 10 item 4): the copy stops at the bound, and the
// refused WR is placed at its last occurrence.
TEST(ChainCopy, CyclicReceiveChainStopsAtTheBound) {
  ibv_sge one = {0x1000, 8, 0x11};
  ibv_recv_wr r{};
  r.sg_list = &one;
  r.num_sge = 1;
  r.next = &r;
  core::Event e;
  EXPECT_EQ(CopyRecvChain(&r, &r, &e, 2, ChainBound(16, 65536)), 17u);
  EXPECT_EQ(e.recv_wrs.size(), 17u);
  EXPECT_EQ(e.bad_index, 16u);
  EXPECT_EQ(ChainBound(0, 4096), 4096u);  // unknown depth: the old bound
}

}  // namespace
}  // namespace rdmasan::interpose

namespace rdmasan::interpose {
namespace {

// Memory windows on a real provider (stubbed): ibv_alloc_mw, ibv_dealloc_mw
// and ibv_bind_mw (context ops), BIND_MW and LOCAL_INV through
// ibv_post_send and the ibv_qp_ex setters all become events the window
// checks see.
struct StubMw {
  ibv_qp_ex qpx{};
  ibv_mw mw{};
  int allocs = 0, deallocs = 0, binds = 0, wr_binds = 0, wr_invs = 0;
} g_mw;

ibv_mw* StubAllocMw(ibv_pd* pd, ibv_mw_type type) {
  ++g_mw.allocs;
  g_mw.mw.context = pd->context;
  g_mw.mw.pd = pd;
  g_mw.mw.type = type;
  g_mw.mw.rkey = 0x4000100;
  return &g_mw.mw;
}
int StubDeallocMw(ibv_mw*) { return ++g_mw.deallocs, 0; }
int StubBindMw(ibv_qp*, ibv_mw* mw, ibv_mw_bind*) {
  ++g_mw.binds;
  mw->rkey = ibv_inc_rkey(mw->rkey);
  return 0;
}
void StubWrBindMw(ibv_qp_ex*, ibv_mw*, uint32_t, const ibv_mw_bind_info*) { ++g_mw.wr_binds; }
void StubWrLocalInv(ibv_qp_ex*, uint32_t) { ++g_mw.wr_invs; }
int StubMwPostSend(ibv_qp*, ibv_send_wr*, ibv_send_wr**) { return 0; }

ibv_qp* StubCreateQpExMw(ibv_context* ctx, ibv_qp_init_attr_ex*) {
  g_mw.qpx.qp_base.context = ctx;
  g_mw.qpx.qp_base.qp_num = 0x78;
  g_mw.qpx.wr_start = StubWrStart;
  g_mw.qpx.wr_complete = StubWrComplete;
  g_mw.qpx.wr_abort = StubWrAbort;
  g_mw.qpx.wr_bind_mw = StubWrBindMw;
  g_mw.qpx.wr_local_inv = StubWrLocalInv;
  return &g_mw.qpx.qp_base;
}

TEST(WrapRealContext, WindowVerbsAndWrsAreEvents) {
  verbs_context v{};
  v.sz = sizeof(v);
  v.create_qp_ex = StubCreateQpExMw;
  ibv_context& ctx = v.context;
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  ctx.ops.post_send = StubMwPostSend;
  ctx.ops.alloc_mw = StubAllocMw;
  ctx.ops.dealloc_mw = StubDeallocMw;
  ctx.ops.bind_mw = StubBindMw;
  SetChecking(true);
  WrapContext(&ctx);
  EXPECT_NE(ctx.ops.alloc_mw, StubAllocMw);
  ibv_pd pd{};
  pd.context = &ctx;
  ibv_qp_init_attr_ex attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = 8;
  attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  attr.send_ops_flags = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
  ibv_qp* qp = ibv_create_qp_ex(&ctx, &attr);
  ASSERT_EQ(qp, &g_mw.qpx.qp_base);
  ibv_qp_ex* x = reinterpret_cast<ibv_qp_ex*>(qp);
  auto& rep = core::GlobalReporter();
  const size_t bumped0 = rep.Count(core::CheckId::kRkeyNotBumped);
  const size_t inflight0 = rep.Count(core::CheckId::kInvalidateInFlight);

  ibv_mw* mw = ibv_alloc_mw(&pd, IBV_MW_TYPE_2);
  ASSERT_EQ(mw, &g_mw.mw);
  const uint32_t key = ibv_inc_rkey(mw->rkey);
  ibv_send_wr bind{};
  bind.wr_id = 1;
  bind.opcode = IBV_WR_BIND_MW;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_mw.mw = mw;
  bind.bind_mw.rkey = key;
  bind.bind_mw.bind_info.addr = 0x10000;
  bind.bind_mw.bind_info.length = 64;
  bind.num_sge = 12345;  // not read for a bind
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(qp, &bind, &bad), 0);
  EXPECT_EQ(rep.Count(core::CheckId::kRkeyNotBumped), bumped0);
  // LOCAL_INV through the qp_ex setters, its completion never polled.
  ibv_wr_start(x);
  x->wr_id = 2;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_local_inv(x, key);
  EXPECT_EQ(ibv_wr_complete(x), 0);
  EXPECT_EQ(g_mw.wr_invs, 1);
  // Bound again, with the same key, before that completion.
  ibv_wr_start(x);
  x->wr_id = 3;
  ibv_mw_bind_info info{};
  info.addr = 0x10000;
  info.length = 64;
  ibv_wr_bind_mw(x, mw, key, &info);
  EXPECT_EQ(ibv_wr_complete(x), 0);
  EXPECT_EQ(g_mw.wr_binds, 1);
  EXPECT_EQ(rep.Count(core::CheckId::kRkeyNotBumped), bumped0 + 1);
  EXPECT_EQ(rep.Count(core::CheckId::kInvalidateInFlight), inflight0 + 1);

  // Type 1: ibv_bind_mw goes through the wrapper to the provider.
  ibv_mw_bind mb{};
  mb.wr_id = 4;
  mb.send_flags = IBV_SEND_SIGNALED;
  mw->type = IBV_MW_TYPE_1;
  EXPECT_EQ(ibv_bind_mw(qp, mw, &mb), 0);
  EXPECT_EQ(g_mw.binds, 1);
  mw->type = IBV_MW_TYPE_2;
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
  EXPECT_EQ(g_mw.deallocs, 1);
  ForgetQp(qp);
  SetChecking(false);
  UnwrapContext(&ctx);
  EXPECT_EQ(ctx.ops.alloc_mw, StubAllocMw);
}

// A BIND_MW's copy carries its binding and no SGE; a LOCAL_INV its key.
TEST(ChainCopy, BindAndLocalInvWrs) {
  ibv_mw mw{};
  ibv_send_wr inv{};
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.invalidate_rkey = 0x4000101;
  inv.num_sge = 3;
  ibv_send_wr b{};
  b.opcode = IBV_WR_BIND_MW;
  b.bind_mw.mw = &mw;
  b.bind_mw.rkey = 0x4000102;
  b.bind_mw.bind_info.addr = 0x2000;
  b.bind_mw.bind_info.length = 512;
  b.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  b.next = &inv;
  core::Event e;
  EXPECT_EQ(CopySendChain(&b, nullptr, &e, false, 2), 2u);
  EXPECT_EQ(e.send_wrs[0].rkey, 0x4000102u);
  EXPECT_EQ(e.send_wrs[0].bind.addr, 0x2000u);
  EXPECT_EQ(e.send_wrs[0].bind.length, 512u);
  EXPECT_EQ(e.send_wrs[0].bind.access, static_cast<uint32_t>(IBV_ACCESS_REMOTE_WRITE));
  EXPECT_TRUE(e.send_wrs[0].sges.empty());
  EXPECT_EQ(e.send_wrs[1].imm_data, 0x4000101u);
  EXPECT_TRUE(e.send_wrs[1].sges.empty());
  EXPECT_EQ(e.send_wrs[1].num_sge, 0);
}

}  // namespace
}  // namespace rdmasan::interpose

namespace rdmasan::interpose {
namespace {

// The saved-ops list (interpose/wrap_ops.inc), over every op it names: each
// op the provider has is saved and swapped for the shim's wrapper, and
// given back at unwrap; an op it left NULL, or an extended op its struct
// is too small to hold, is not touched.  A closed context's block leads to
// the refusing wrappers.
#define RDMASAN_TEST_OP_Ops(v, field) (v).context.ops.field
#define RDMASAN_TEST_OP_Ext(v, field) (v).field

TEST(WrapRealContext, SavedOpsGoBackAtUnwrap) {
  verbs_context v{};
  v.sz = sizeof(v);
  v.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
  uintptr_t fake = 0x1000;  // the provider's pointers, never called
#define RDMASAN_WRAPPED_OP(table, field, wrapper, on_closed) \
  RDMASAN_TEST_OP_##table(v, field) =                        \
      reinterpret_cast<decltype(RDMASAN_TEST_OP_##table(v, field))>(fake += 0x10);
#include "interpose/wrap_ops.inc"
#undef RDMASAN_WRAPPED_OP
  v.context.ops.bind_mw = nullptr;  // a provider without it
  verbs_context provider;
  std::memcpy(&provider, &v, sizeof(v));
  WrapContext(&v.context);
  ASSERT_TRUE(IsWrapped(&v.context));
  int swapped = 0;
#define RDMASAN_WRAPPED_OP(table, field, wrapper, on_closed)                                          \
  if (RDMASAN_TEST_OP_##table(provider, field)) {                                                     \
    EXPECT_NE(RDMASAN_TEST_OP_##table(v, field), RDMASAN_TEST_OP_##table(provider, field)) << #field; \
    ++swapped;                                                                                        \
  }
#include "interpose/wrap_ops.inc"
#undef RDMASAN_WRAPPED_OP
  EXPECT_GE(swapped, 14);
  EXPECT_EQ(v.context.ops.bind_mw, nullptr);
  UnwrapContext(&v.context);
  EXPECT_FALSE(IsWrapped(&v.context));
#define RDMASAN_WRAPPED_OP(table, field, wrapper, on_closed) \
  EXPECT_EQ(RDMASAN_TEST_OP_##table(v, field), RDMASAN_TEST_OP_##table(provider, field)) << #field;
#include "interpose/wrap_ops.inc"
#undef RDMASAN_WRAPPED_OP

  // A provider whose verbs_context ends before query_port (the newest op).
  v.sz = sizeof(v) - offsetof(verbs_context, advise_mr);
  WrapContext(&v.context);
  EXPECT_EQ(v.query_port, provider.query_port);
  EXPECT_NE(v.create_qp_ex, provider.create_qp_ex);
  UnwrapContext(&v.context);
  EXPECT_EQ(v.create_qp_ex, provider.create_qp_ex);

  // Closed (its block held): the ops the list refuses on lead to the shim.
  RefuseOnClosedContext(&v.context);
  EXPECT_NE(v.context.ops.post_send, provider.context.ops.post_send);
  EXPECT_NE(v.context.ops.bind_mw, nullptr);
  EXPECT_EQ(v.reg_dm_mr, provider.reg_dm_mr);
}

#undef RDMASAN_TEST_OP_Ops
#undef RDMASAN_TEST_OP_Ext

// Every post entry point starts alike (wrap_internal.h, PostEntry):
// post_srq_ops refuses a dead SRQ as post_srq_recv does, and reaches the
// SRQ's fault point; bind_mw reaches post_send's.
struct StubOps {
  int ops = 0, binds = 0;
} g_ops;

int StubPostSrqOps(ibv_srq*, ibv_ops_wr* wr, ibv_ops_wr** bad) {
  for (; wr; wr = wr->next) {
    ++g_ops.ops;
    if (wr->opcode == IBV_WR_TAG_ADD) wr->tm.handle = 0x40 + g_ops.ops;
  }
  *bad = nullptr;
  return 0;
}
int StubBindMwOnly(ibv_qp*, ibv_mw*, ibv_mw_bind*) { return ++g_ops.binds, 0; }

TEST(WrapRealContext, PostSrqOpsStartsAsEveryPost) {
  verbs_context v{};
  v.sz = sizeof(v);
  v.post_srq_ops = StubPostSrqOps;
  ibv_context& ctx = v.context;
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  ctx.ops.bind_mw = StubBindMwOnly;
  WrapContext(&ctx);
  ibv_srq srq{};
  srq.context = &ctx;
  ibv_ops_wr add2{}, add1{};
  add1.opcode = add2.opcode = IBV_WR_TAG_ADD;
  add1.next = &add2;
  ibv_ops_wr* bad = nullptr;
  for (bool checking : {false, true}) {
    SetChecking(checking);
    g_ops = {};
    EXPECT_EQ(ibv_post_srq_ops(&srq, &add1, &bad), 0);
    EXPECT_EQ(g_ops.ops, 2);

    // A destroyed SRQ: refused whole, the provider never called.
    NoteDestroyed(&srq, 0, /*kept=*/true);
    ASSERT_NE(DestroyedId(&srq), 0u);
    bad = nullptr;
    EXPECT_EQ(ibv_post_srq_ops(&srq, &add1, &bad), EINVAL);
    EXPECT_EQ(bad, &add1);
    EXPECT_EQ(g_ops.ops, 2);
    ForgetDestroyed(&srq);

    // The SRQ's fault point fails the chain at its second op: the first is
    // done, its handle written into the program's WR.
    ResetDecisionsForTest("faults=post_srq_recv:once:wr=1:errno=ENOMEM");
    g_ops = {};
    add1.tm.handle = add2.tm.handle = 0;
    EXPECT_EQ(ibv_post_srq_ops(&srq, &add1, &bad), ENOMEM);
    EXPECT_EQ(bad, &add2);
    EXPECT_EQ(g_ops.ops, 1);
    EXPECT_EQ(add1.tm.handle, 0x41u);
    EXPECT_EQ(add2.tm.handle, 0u);

    // ibv_bind_mw posts one bind WR: post_send's fault point fails it.
    ResetDecisionsForTest("faults=post_send:once:errno=ENOMEM");
    ibv_pd pd{};
    pd.context = &ctx;
    ibv_mw mw{};
    mw.context = &ctx;
    mw.pd = &pd;
    mw.type = IBV_MW_TYPE_1;
    ibv_qp qp{};
    qp.context = &ctx;
    qp.pd = &pd;
    ibv_mw_bind mb{};
    EXPECT_EQ(ibv_bind_mw(&qp, &mw, &mb), ENOMEM);
    EXPECT_EQ(g_ops.binds, 0);
    EXPECT_EQ(ibv_bind_mw(&qp, &mw, &mb), 0);
    EXPECT_EQ(g_ops.binds, 1);
    ResetDecisionsForTest("faults=");
  }
  SetChecking(false);
  UnwrapContext(&ctx);
}

}  // namespace
}  // namespace rdmasan::interpose

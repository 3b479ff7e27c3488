// checkers_test: memory windows: rkey-not-bumped, invalidate-in-flight, and the window
// parts of destroy-in-use and free-registered.
// Hand-built events in, the findings' CheckIds out (tests/unit/checkers_fixture.h).
#include <infiniband/verbs.h>

#include <cerrno>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "checkers/engine.h"
#include "checkers/state.h"
#include "core/checks.h"
#include "core/event.h"
#include "core/report.h"
#include "tests/unit/checkers_fixture.h"

namespace rdmasan::checkers_testing {
namespace {

// ===================================================== memory windows ==
// rkey-not-bumped, invalidate-in-flight, and the window extensions of
// destroy-in-use and free-registered (issue 13).

TEST(CheckersWindows, RebindWithTheSameKeyIsRkeyNotBumped) {
  Windows w;
  ObjId mw = w.AllocMw(0x4000100);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(1, mw, w.mr, 0x4000101)}), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 1, IBV_WC_SUCCESS, IBV_WC_BIND_MW)}), kNone);
  EXPECT_EQ(w.RemoteInv(0x4000101), kNone);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(2, mw, w.mr, 0x4000101)}), Ids{"rkey-not-bumped"});
  EXPECT_NE(w.f.last[0].message.find("rkey 0x4000101"), std::string::npos) << w.f.last[0].message;
  // The near miss: bumped before the rebind.
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 2, IBV_WC_SUCCESS, IBV_WC_BIND_MW)}), kNone);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::LocalInv(3, 0x4000101)}), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 3, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV)}), kNone);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(4, mw, w.mr, 0x4000102)}), kNone);
}

TEST(CheckersWindows, FirstBindWithTheAllocatedKeyAndType1AreSilent) {
  Windows w;
  ObjId mw2 = w.AllocMw(0x4000200);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(1, mw2, w.mr, 0x4000200)}), kNone);
  // Type 1: ibv_bind_mw picks the key; the same key again is not the
  // program's doing.
  ObjId mw1 = w.AllocMw(0x4000300, IBV_MW_TYPE_1);
  EXPECT_EQ(w.BindMwVerb(mw1, 0x4000301, 2), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 2, IBV_WC_SUCCESS, IBV_WC_BIND_MW)}), kNone);
  EXPECT_EQ(w.BindMwVerb(mw1, 0x4000301, 3), kNone);
}

TEST(CheckersWindows, RebindBeforeTheLocalInvCompletedIsInvalidateInFlight) {
  Windows w;
  ObjId mw = w.AllocMw(0x4000100);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(1, mw, w.mr, 0x4000101)}), kNone);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::LocalInv(2, 0x4000101)}), kNone);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(3, mw, w.mr, 0x4000102)}), Ids{"invalidate-in-flight"});
  EXPECT_NE(w.f.last[0].message.find("while its LOCAL_INV (rkey 0x4000101"), std::string::npos)
      << w.f.last[0].message;
}

TEST(CheckersWindows, PolledLocalInvThenDeallocIsSilent) {
  Windows w;
  ObjId mw = w.AllocMw(0x4000100);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(1, mw, w.mr, 0x4000101, 0x10100, 0x100, false)}), kNone);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::LocalInv(2, 0x4000101)}), kNone);
  // The signaled LOCAL_INV retires the unsignaled bind with it.
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 2, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV)}), kNone);
  EXPECT_EQ(w.DeallocMw(mw), kNone);
  EXPECT_EQ(w.f.DeregMr(w.mr), kNone);
  EXPECT_EQ(FreeRange(w.f, 0x10000, 0x10000), kNone);
}

TEST(CheckersWindows, DeallocDeregAndFreeDuringTheLocalInv) {
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    Windows w;
    ObjId mw = w.AllocMw(0x4000100);
    EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(1, mw, w.mr, 0x4000101)}), kNone);
    EXPECT_EQ(w.f.PostSend(w.qp, {Windows::LocalInv(2, 0x4000101)}), kNone);
    if (variant == 0) {
      EXPECT_EQ(w.DeallocMw(mw), Ids{"invalidate-in-flight"});
    }
    if (variant == 1) {
      EXPECT_EQ(w.f.DeregMr(w.mr), Ids{"invalidate-in-flight"});
    }
    if (variant == 2) {
      EXPECT_EQ(FreeRange(w.f, 0x10180, 0x10), (Ids{"free-registered", "invalidate-in-flight"}));
      // The window covered [0x10100, +0x100) only.
      EXPECT_EQ(FreeRange(w.f, 0x10400, 0x10), Ids{"free-registered"});
    }
  }
}

TEST(CheckersWindows, RemoteInvalidationSeenThenRebindIsSilent) {
  Windows w;
  ObjId mw = w.AllocMw(0x4000100);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(1, mw, w.mr, 0x4000101)}), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 1, IBV_WC_SUCCESS, IBV_WC_BIND_MW)}), kNone);
  EXPECT_EQ(w.RemoteInv(0x4000101), kNone);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(2, mw, w.mr, 0x4000102)}), kNone);
  EXPECT_EQ(w.RemoteInv(0x4000102), kNone);
  EXPECT_EQ(w.DeallocMw(mw), kNone);
  EXPECT_EQ(w.f.DeregMr(w.mr), kNone);
}

TEST(CheckersWindows, DeregWithAValidWindowIsDestroyInUse) {
  Windows w;
  ObjId mw = w.AllocMw(0x4000100);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(1, mw, w.mr, 0x4000101)}), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 1, IBV_WC_SUCCESS, IBV_WC_BIND_MW)}), kNone);
  Event e;
  e.kind = EventKind::kDeregMr;
  e.obj = w.mr;
  e.ret = EBUSY;  // as a NIC refuses it
  e.err = EBUSY;
  EXPECT_EQ(w.f.Feed(e), Ids{"destroy-in-use"});
  EXPECT_NE(w.f.last[0].message.find("rkey 0x4000101"), std::string::npos) << w.f.last[0].message;
  // A zero-length bind unbinds: then the dereg is fine.
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(2, mw, w.mr, 0x4000102, 0, 0)}), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 2, IBV_WC_SUCCESS, IBV_WC_BIND_MW)}), kNone);
  EXPECT_EQ(w.f.DeregMr(w.mr), kNone);
}

TEST(CheckersWindows, DeallocPdWithAWindowIsDestroyInUse) {
  Fx f;
  ObjId pd = f.AllocPd();
  Event e;
  e.kind = EventKind::kAllocMw;
  e.parent = pd;
  e.rkey = 0x4000100;
  e.count = IBV_MW_TYPE_1;
  ObjId mw = f.Created(e);
  EXPECT_EQ(f.DeallocPd(pd), Ids{"destroy-in-use"});
  EXPECT_NE(f.last[0].message.find("memory window"), std::string::npos) << f.last[0].message;
  EXPECT_EQ(f.Simple(EventKind::kDeallocMw, mw), kNone);
  EXPECT_EQ(f.DeallocPd(pd), kNone);
}

TEST(CheckersWindows, FreeUnderAValidWindowNamesItsKey) {
  Windows w;
  ObjId mw = w.AllocMw(0x4000100);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(1, mw, w.mr, 0x4000101)}), kNone);
  EXPECT_EQ(FreeRange(w.f, 0x10100, 0x10), Ids{"free-registered"});
  EXPECT_NE(w.f.last[0].message.find("rkey 0x4000101"), std::string::npos) << w.f.last[0].message;
  // Outside the window: the MR's message.
  EXPECT_EQ(FreeRange(w.f, 0x10800, 0x10), Ids{"free-registered"});
  EXPECT_EQ(w.f.last[0].message.find("window"), std::string::npos) << w.f.last[0].message;
}

TEST(CheckersWindows, ReregMrFollowsTheNewKeysAndRange) {
  Windows w;
  Event e;
  e.kind = EventKind::kReregMr;
  e.obj = w.mr;
  e.count = IBV_REREG_MR_CHANGE_TRANSLATION;
  e.addr = e.iova = 0x80000;
  e.length = 0x1000;
  e.lkey = 0x22;
  e.rkey = 0x10022;
  EXPECT_EQ(w.f.Feed(e), kNone);
  // The old lkey is gone, the new one names [0x80000, +0x1000).
  EXPECT_EQ(w.f.PostSend(w.qp, {Wr(1, true, {Sg(0x10000, 8, 0x11)})}), Ids{"invalid-lkey"});
  EXPECT_EQ(w.f.PostSend(w.qp, {Wr(2, true, {Sg(0x80000, 8, 0x22)})}), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 1, IBV_WC_LOC_PROT_ERR)}), Ids{"error-completion"});
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 2, IBV_WC_WR_FLUSH_ERR)}), kNone);
  EXPECT_EQ(FreeRange(w.f, 0x10000, 0x100), kNone);
  EXPECT_EQ(FreeRange(w.f, 0x80000, 0x100), Ids{"free-registered"});
}

TEST(CheckersWindows, ErrorCompletionCarriesTheDevicesReason) {
  Windows w;
  EXPECT_EQ(w.f.PostSend(w.qp, {Wr(7, true, {w.sg()}, IBV_WR_RDMA_WRITE)}), kNone);
  Event r;
  r.kind = EventKind::kWcReason;
  r.obj = w.cq;
  r.wcs.push_back(Wc(w.qpn, 7, IBV_WC_REM_ACCESS_ERR));
  r.text = "REM_ACCESS_ERR: rkey 0x40001a02 was invalidated by LOCAL_INV (pid 4242, wr_id 0x7)";
  EXPECT_EQ(w.f.Feed(r), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 7, IBV_WC_REM_ACCESS_ERR)}), Ids{"error-completion"});
  EXPECT_NE(w.f.last[0].message.find("reason (softnic): REM_ACCESS_ERR: rkey 0x40001a02 was invalidated"),
            std::string::npos)
      << w.f.last[0].message;
}

TEST(CheckersWindows, WindowPostsReplayAlike) {
  // The same events through a fresh one-thread engine (replay) give the
  // same findings.
  Windows w;
  ObjId mw = w.AllocMw(0x4000100);
  w.f.PostSend(w.qp, {Windows::Bind(1, mw, w.mr, 0x4000101)});
  w.f.PostSend(w.qp, {Windows::LocalInv(2, 0x4000101)});
  w.f.PostSend(w.qp, {Windows::Bind(3, mw, w.mr, 0x4000101)});
  FreeRange(w.f, 0x10100, 8);
  Engine live(false), replay(false, core::CheckSet::All(), true);
  std::vector<std::string> a, b;
  for (const Event& e : w.f.log) {
    for (const auto& x : live.OnEvent(e)) a.push_back(x.message);
    for (const auto& x : replay.OnEvent(e)) b.push_back(x.message);
  }
  EXPECT_EQ(a, b);
  EXPECT_GE(a.size(), 3u);
}

}  // namespace
}  // namespace rdmasan::checkers_testing

// Unit tests of use-after-destroy (checkers/use_after_destroy.{h,cc}) over
// the whole table of verbs × handle kinds: hand-built events as the
// interposer makes them when it refuses a call on a dead handle (the old
// id where the handle goes, ret EINVAL or -1, err EINVAL, the verb's code
// in attr_mask when it is not the kind's own).
#include <infiniband/verbs.h>

#include <cerrno>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "checkers/use_after_destroy.h"
#include "tests/unit/checkers_fixture.h"

namespace rdmasan::checkers_testing {
namespace {

using checkers::UadVerb;

enum class Where { kObj, kParent, kSendCq, kRecvCq, kSrq, kChannel, kAh, kMw };

Event Dead(EventKind k, ObjId id, Where w = Where::kObj, UadVerb verb = UadVerb::kByKind,
           int32_t ret = EINVAL) {
  Event e;
  e.kind = k;
  switch (w) {
    case Where::kObj:
      e.obj = id;
      break;
    case Where::kParent:
      e.parent = id;
      break;
    case Where::kSendCq:
      e.send_cq = id;
      break;
    case Where::kRecvCq:
      e.recv_cq = id;
      break;
    case Where::kSrq:
      e.srq = id;
      break;
    case Where::kChannel:
      e.channel = id;
      break;
    case Where::kAh:
      e.send_wrs.emplace_back().ah = id;
      break;
    case Where::kMw:
      e.send_wrs.emplace_back().bind.mw = id;
      break;
  }
  e.attr_mask = static_cast<uint32_t>(verb);
  e.ret = ret;
  e.err = EINVAL;
  return e;
}

Event Destroyed(EventKind k, ObjId id) {
  Event e;
  e.kind = k;
  e.obj = id;
  return e;
}

const Ids kUad = {"use-after-destroy"};

TEST(CheckersUseAfterDestroyTable, CreationsOnADeallocatedPd) {
  Fx f;
  ObjId pd = f.AllocPd();
  EXPECT_EQ(f.Feed(Destroyed(EventKind::kDeallocPd, pd)), kNone);
  for (EventKind k : {EventKind::kCreateQp, EventKind::kRegMr, EventKind::kCreateSrq, EventKind::kCreateAh,
                      EventKind::kAllocMw})
    EXPECT_EQ(f.Feed(Dead(k, pd, Where::kParent, UadVerb::kByKind, -1)), kUad) << core::EventKindName(k);
  EXPECT_EQ(f.Feed(Dead(EventKind::kCreateAh, pd, Where::kParent, UadVerb::kCreateAhFromWc, -1)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kRegMr, pd, Where::kParent, UadVerb::kRegDmabufMr, -1)), kUad);
  EXPECT_NE(f.last[0].message.find("ibv_reg_dmabuf_mr on PD"), std::string::npos) << f.last[0].message;
}

TEST(CheckersUseAfterDestroyTable, QpVerbsOfADestroyedQp) {
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId cq = f.CreateCq(16);
  ObjId qp = f.CreateQp(pd, cq, cq, Caps(8));
  EXPECT_EQ(f.Feed(Destroyed(EventKind::kDestroyQp, qp)), kNone);
  EXPECT_EQ(f.Feed(Dead(EventKind::kModifyQp, qp)), kUad);
  EXPECT_NE(f.last[0].message.find("ibv_modify_qp of QP"), std::string::npos) << f.last[0].message;
  for (UadVerb v : {UadVerb::kQueryQp, UadVerb::kAttachMcast, UadVerb::kDetachMcast, UadVerb::kQueryEce,
                    UadVerb::kSetEce, UadVerb::kQueryQpDataInOrder}) {
    EXPECT_EQ(f.Feed(Dead(EventKind::kModifyQp, qp, Where::kObj, v)), kUad);
    EXPECT_NE(f.last[0].message.find(std::string("ibv_") + checkers::UadVerbName(static_cast<uint32_t>(v))),
              std::string::npos)
        << f.last[0].message;
  }
  EXPECT_EQ(f.Feed(Dead(EventKind::kPostSend, qp, Where::kObj, UadVerb::kWrComplete)), kUad);
  EXPECT_NE(f.last[0].message.find("ibv_wr_complete of QP"), std::string::npos) << f.last[0].message;
  EXPECT_EQ(f.Feed(Dead(EventKind::kBindMw, qp)), kUad);
}

TEST(CheckersUseAfterDestroyTable, CqChannelSrqMrAhMw) {
  Windows w;
  Fx& f = w.f;
  ObjId ch = f.CreateChannel();
  ObjId cq2 = f.CreateCq(16, ch);
  ObjId srq = f.CreateSrq(w.pd, 8);
  ObjId mr = f.RegMr(w.pd, 0x1000, 64, 7);
  ObjId ah = f.CreateAh(w.pd);
  ObjId mw = w.AllocMw(0x55);
  EXPECT_EQ(f.Feed(Destroyed(EventKind::kDestroyCq, cq2)), kNone);
  EXPECT_EQ(f.Feed(Dead(EventKind::kAckCqEvents, cq2)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kResizeCq, cq2)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kPollCq, cq2, Where::kObj, UadVerb::kStartPoll, -1)), kUad);
  EXPECT_NE(f.last[0].message.find("ibv_start_poll of CQ"), std::string::npos) << f.last[0].message;
  EXPECT_EQ(f.Feed(Dead(EventKind::kCreateQp, cq2, Where::kSendCq, UadVerb::kByKind, -1)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kCreateQp, cq2, Where::kRecvCq, UadVerb::kByKind, -1)), kUad);
  EXPECT_EQ(f.Feed(Destroyed(EventKind::kDestroyCompChannel, ch)), kNone);
  EXPECT_EQ(f.Feed(Dead(EventKind::kCreateCq, ch, Where::kChannel, UadVerb::kByKind, -1)), kUad);
  EXPECT_NE(f.last[0].message.find("completion channel"), std::string::npos) << f.last[0].message;
  EXPECT_EQ(f.Feed(Dead(EventKind::kDestroyCompChannel, ch)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kGetCqEvent, ch, Where::kChannel, UadVerb::kByKind, -1)), kUad);
  EXPECT_EQ(f.Feed(Destroyed(EventKind::kDestroySrq, srq)), kNone);
  EXPECT_EQ(f.Feed(Dead(EventKind::kModifySrq, srq)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kModifySrq, srq, Where::kObj, UadVerb::kQuerySrq)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kCreateQp, srq, Where::kSrq, UadVerb::kByKind, -1)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kPostSrqOps, srq)), kUad);
  EXPECT_EQ(f.Feed(Destroyed(EventKind::kDeregMr, mr)), kNone);
  EXPECT_EQ(f.Feed(Dead(EventKind::kReregMr, mr, Where::kObj, UadVerb::kByKind, -1)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kDeregMr, mr, Where::kObj, UadVerb::kUnimportMr)), kUad);
  EXPECT_EQ(f.Feed(Destroyed(EventKind::kDestroyAh, ah)), kNone);
  EXPECT_EQ(f.Feed(Dead(EventKind::kPostSend, ah, Where::kAh)), kUad);
  EXPECT_NE(f.last[0].message.find("through AH"), std::string::npos) << f.last[0].message;
  EXPECT_EQ(f.Feed(Destroyed(EventKind::kDeallocMw, mw)), kNone);
  EXPECT_EQ(f.Feed(Dead(EventKind::kDeallocMw, mw)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kBindMw, mw, Where::kMw)), kUad);
}

TEST(CheckersUseAfterDestroyTable, EveryVerbOfAClosedContext) {
  Fx f;
  Event close;
  close.kind = EventKind::kCloseDevice;
  close.obj = 4242;
  EXPECT_EQ(f.Feed(close), kNone);
  for (uint32_t v = 1; v < static_cast<uint32_t>(UadVerb::kCount); ++v) {
    EXPECT_EQ(f.Feed(Dead(EventKind::kOpenDevice, 4242, Where::kParent, static_cast<UadVerb>(v))), kUad) << v;
    EXPECT_NE(f.last[0].message.find("on device context 0x"), std::string::npos) << f.last[0].message;
    EXPECT_NE(f.last[0].message.find("already closed"), std::string::npos) << f.last[0].message;
  }
  // A post through a live QP of the closed context names the context.
  EXPECT_EQ(f.Feed(Dead(EventKind::kPostSend, 4242, Where::kParent)), kUad);
  EXPECT_NE(f.last[0].message.find("ibv_post_send on device context"), std::string::npos)
      << f.last[0].message;
}

TEST(CheckersUseAfterDestroyTable, LiveHandlesAndOtherErrorsAreSilent) {
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId cq = f.CreateCq(16);
  ObjId qp = f.CreateQp(pd, cq, cq, Caps(8));
  EXPECT_EQ(f.Feed(Dead(EventKind::kModifyQp, qp)), kNone);  // live: EINVAL for another reason
  EXPECT_EQ(f.Feed(Dead(EventKind::kCreateQp, pd, Where::kParent, UadVerb::kByKind, -1)), kNone);
  Event other = Dead(EventKind::kModifyQp, 999);
  other.err = ENOMEM;
  EXPECT_EQ(f.Feed(other), kNone);
  EXPECT_EQ(checkers::UadVerbName(0), nullptr);
  EXPECT_EQ(checkers::UadVerbName(static_cast<uint32_t>(UadVerb::kCount)), nullptr);
}

}  // namespace
}  // namespace rdmasan::checkers_testing

// checkers_test: the engine itself: the same findings in every engine (determinism, the
// quiet filters), lock domains and their races.
// Hand-built events in, the findings' CheckIds out (tests/unit/checkers_fixture.h).
#include <infiniband/verbs.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_split.h"

#include "checkers/engine.h"
#include "checkers/state.h"
#include "core/checks.h"
#include "core/event.h"
#include "core/report.h"
#include "tests/unit/checkers_fixture.h"

namespace rdmasan::checkers_testing {
namespace {

// ========================================================= determinism ==

// One run touching every check whose message or stacks pick "an example"
// out of several candidates (CQ with many QPs, PD with many MRs, MR used by
// WRs of many QPs, fork with many MRs, a channel with many armed CQs).
std::vector<Event> RichTrace() {
  Fx f;
  ObjId pd = f.AllocPd();
  std::vector<ObjId> mrs;
  for (int i = 0; i < 12; ++i) mrs.push_back(f.RegMr(pd, 0x100000 * (i + 1), 0x10000, 0x100 + i));
  ObjId ch = f.CreateChannel();
  std::vector<ObjId> cqs, qps;
  for (int i = 0; i < 4; ++i) cqs.push_back(f.CreateCq(8, ch));
  for (int i = 0; i < 12; ++i) {
    ObjId qp = f.CreateQp(pd, cqs[i % 4], cqs[i % 4], Caps(4, 4));
    f.ToRts(qp);
    qps.push_back(qp);
  }
  // Every QP sends from MR 0 and from its own MR.
  for (int i = 0; i < 12; ++i)
    f.PostSend(qps[i],
               {Wr(1, true, {Sg(0x100000, 8, 0x100)}), Wr(2, true, {Sg(0x100000 * (i + 1), 8, 0x100 + i)})},
               1000 + i);
  for (ObjId cq : cqs) f.ReqNotify(cq);
  f.Wait(ch);                                                   // notify-without-poll: which CQ?
  f.DeregMr(mrs[0]);                                            // dereg-in-flight: which QP is the example?
  FreeRange(f, 0x100000, 8);                                    // free-in-flight: which QP?
  f.Fork();                                                     // fork-with-mrs: which MR?
  f.DestroyCq(cqs[1]);                                          // destroy-in-use: which QP?
  f.DeallocPd(pd);                                              // destroy-in-use: which MR?
  f.PostSend(qps[0], {Wr(3, true), Wr(4, true), Wr(5, true)});  // sq-overflow, cq-overrun
  for (int i = 0; i < 12; ++i)
    f.Poll(cqs[i % 4],
           {Wc(Fx::Qpn(qps[i]), 1, IBV_WC_REM_ACCESS_ERR), Wc(Fx::Qpn(qps[i]), 2, IBV_WC_WR_FLUSH_ERR)});
  return f.log;
}

std::string Render(const std::vector<Finding>& fs) {
  std::string s;
  for (const auto& f : fs) {
    s += std::string(core::CheckName(f.check)) + "|" + f.message + "|" + std::to_string(f.stack);
    for (const auto& r : f.related) s += "|" + r.label + "@" + std::to_string(r.stack);
    s += "\n";
  }
  return s;
}

TEST(CheckersDeterminism, SameEventsSameFindingsInFreshEngines) {
  const std::vector<Event> events = RichTrace();
  // Many engines alive at once (their tables at different addresses), with
  // unrelated allocations in between.
  std::vector<std::unique_ptr<Engine>> engines;
  std::vector<std::unique_ptr<char[]>> spacers;
  std::vector<std::string> outputs;
  for (int k = 0; k < 8; ++k) {
    // Half of them as a replay builds them (one thread, no locks), half as
    // the live pipeline does (locking, numbering): the same findings.
    engines.push_back(
        k % 2 ? std::make_unique<Engine>(/*assign_seq=*/false, core::CheckSet::All(), /*one_thread=*/true)
              : std::make_unique<Engine>(/*assign_seq=*/true));
    spacers.push_back(std::make_unique<char[]>(4096 * (k + 1)));
    std::vector<Finding> all;
    for (const auto& e : events) {
      auto fs = engines.back()->OnEvent(e);
      all.insert(all.end(), fs.begin(), fs.end());
    }
    outputs.push_back(Render(all));
  }
  EXPECT_FALSE(outputs[0].empty());
  for (size_t k = 1; k < outputs.size(); ++k) {
    if (outputs[0] == outputs[k]) continue;
    // Show the first differing finding only.
    std::vector<std::string> a = absl::StrSplit(outputs[0], '\n'), b = absl::StrSplit(outputs[k], '\n');
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    ADD_FAILURE() << "engine " << k << " differs from engine 0 at finding " << i
                  << ":\n  engine 0: " << (i < a.size() ? a[i] : "<none>") << "\n  engine " << k << ": "
                  << (i < b.size() ? b[i] : "<none>");
    break;
  }
}

TEST(CheckersDeterminism, RichTraceRaisesTheExpectedChecks) {
  const std::vector<Event> events = RichTrace();
  Engine eng;
  Ids all;
  for (const auto& e : events) {
    Ids got = Names(eng.OnEvent(e));
    all.insert(all.end(), got.begin(), got.end());
  }
  Ids want = {"notify-without-poll", "dereg-in-flight", "free-in-flight", "fork-with-mrs",
              "destroy-in-use",      "destroy-in-use",  "sq-overflow",    "cq-overrun"};
  want.insert(want.end(), 12, std::string("error-completion"));
  EXPECT_EQ(all, want);
}

// ======================================================= quiet filters ==

// Random streams of the data path's events (and the control events that
// change what they may say) over a small, crowded setup: two PDs, MRs of
// both with and without local write, CQs and QPs with small random limits,
// an SRQ, random QP states.  Posts use random opcodes, flags, wr_ids from a
// small range, lkeys (live, dead, of the other PD), addresses in and out of
// bounds, failed posts; polls retire the queues' heads or random wr_ids,
// with some error completions.  An engine with the quiet filters
// (checkers/quiet.h) and one without must report the same findings, event
// by event.
std::vector<Event> RandomDataPath(uint32_t seed, int n_events) {
  std::mt19937 rng(seed);
  auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  auto chance = [&](int percent) { return static_cast<int>(rng() % 100) < percent; };
  // How often a stream breaks a rule: a third of the streams rarely, a
  // third often, a third in between (a post that no check speaks about
  // must be common, or the filters' "quiet" answer goes untested).
  const int chaos = static_cast<int>(seed % 3);
  auto fault = [&](int percent) {
    return chance(chaos == 0 ? percent / 4 : chaos == 1 ? percent : 3 * percent);
  };
  Fx f;
  ObjId pd = f.AllocPd(), other_pd = f.AllocPd();
  struct Mr {
    uint64_t addr;
    uint32_t lkey;
    ObjId id;
  };
  std::vector<Mr> mrs;
  for (uint32_t i = 0; i < 4; ++i) {
    const uint64_t addr = 0x100000 * (i + 1);
    const uint32_t access =
        i == 2 ? uint32_t{IBV_ACCESS_REMOTE_READ} : kAllAccess;  // one without local write
    mrs.push_back({addr, 0x100 + i, f.RegMr(i == 3 ? other_pd : pd, addr, 0x1000, 0x100 + i, access)});
  }
  std::vector<ObjId> cqs;
  for (int i = 0; i < 2; ++i) cqs.push_back(f.CreateCq(chaos == 2 ? 2 + pick(12) : 24 + pick(40)));
  ObjId srq = f.CreateSrq(pd, 2 + pick(6));
  std::vector<ObjId> qps;
  for (int i = 0; i < 3; ++i) {
    QpCaps caps = Caps(1 + pick(8), 2 + pick(8), 1 + pick(3), 1 + pick(3), pick(2) ? 0 : 8 + pick(64));
    ObjId scq = cqs[pick(2)], rcq = cqs[pick(2)];
    Ids ignored;
    qps.push_back(f.CreateQp(pd, scq, rcq, caps, chance(20), i == 2 ? srq : 0, IBV_QPT_RC, &ignored));
    f.ToRts(qps.back());
  }
  auto sges = [&](bool atomic) {
    std::vector<Sge> v;
    const uint32_t n = fault(10) ? pick(4) : 1;
    for (uint32_t k = 0; k < n; ++k) {
      const Mr& m = mrs[fault(20) ? pick(mrs.size()) : pick(2)];
      uint32_t lkey = fault(3) ? 0x999 : m.lkey;
      uint64_t addr = m.addr + (fault(3) ? 0xff8 : pick(64));
      uint32_t len = atomic && !fault(10) ? 8 : pick(5) == 0 ? 0 : 1 + pick(32);
      v.push_back(Sg(addr, len, lkey));
    }
    return v;
  };
  static constexpr uint32_t kOpcodes[] = {IBV_WR_SEND,
                                          IBV_WR_RDMA_WRITE,
                                          IBV_WR_RDMA_READ,
                                          IBV_WR_ATOMIC_CMP_AND_SWP,
                                          IBV_WR_ATOMIC_FETCH_AND_ADD,
                                          IBV_WR_SEND_WITH_IMM,
                                          IBV_WR_RDMA_WRITE_WITH_IMM};
  for (int i = 0; i < n_events; ++i) {
    const ObjId qp = qps[pick(qps.size())];
    const StackId stack = 1 + pick(6);  // repeats: reports deduplicate per (check, stack)
    const uint32_t action = pick(100);
    static uint64_t next_wr_id = 100;
    if (action < 40) {
      std::vector<SendWr> wrs;
      for (uint32_t k = 0, n = 1 + pick(3); k < n; ++k) {
        const uint32_t op = kOpcodes[fault(30) ? pick(7) : pick(2)];
        const bool atomic = op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
        SendWr w = Wr(fault(10) ? pick(6) : next_wr_id++, chance(50), sges(atomic), op,
                      fault(10) ? IBV_SEND_INLINE : 0);
        if (fault(3)) w.num_sge = 7;
        w.remote_addr = 0x5000 + (fault(10) ? 1 + pick(7) : 8 * pick(8));
        wrs.push_back(w);
      }
      if (fault(3)) {
        const uint32_t bad = pick(wrs.size());
        f.PostSend(qp, std::move(wrs), stack, ENOMEM, bad);
      } else {
        f.PostSend(qp, std::move(wrs), stack);
      }
    } else if (action < 60) {
      std::vector<RecvWr> wrs;
      for (uint32_t k = 0, n = fault(20) ? 2 : 1; k < n; ++k) wrs.push_back(Rwr(pick(6), sges(false)));
      if (qp == qps[2] && chance(50))
        f.PostSrqRecv(srq, std::move(wrs), stack);
      else
        f.PostRecv(qp, std::move(wrs), stack);
    } else if (action < 90) {
      const checkers::QpState& q = f.Qp(qp);
      std::vector<Completion> wcs;
      const bool send = pick(2);
      uint64_t wr_id = pick(6);
      if (send && !q.sq.empty()) wr_id = q.sq[pick(q.sq.size())].wr_id;
      if (!send && !q.rq.empty()) wr_id = q.rq.front().wr_id;
      const uint32_t status = !fault(5)    ? IBV_WC_SUCCESS
                              : chance(50) ? IBV_WC_WR_FLUSH_ERR
                                           : IBV_WC_REM_ACCESS_ERR;
      wcs.push_back(Wc(Fx::Qpn(qp), wr_id, status, send ? IBV_WC_RDMA_WRITE : IBV_WC_RECV));
      f.Poll(send ? q.send_cq : q.recv_cq, wcs);
    } else if (action < 93) {
      static constexpr uint32_t kStates[] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
                                             IBV_QPS_SQD,   IBV_QPS_ERR,  IBV_QPS_RTS, IBV_QPS_RTS};
      f.ModifyQp(qp, fault(50) ? kStates[pick(8)] : uint32_t{IBV_QPS_RTS});
    } else {
      // Re-register one MR: the lkey dies for a while (the MR caches must
      // notice), then comes back.
      Mr& m = mrs[pick(mrs.size())];
      f.DeregMr(m.id);
      m.id = f.RegMr(m.lkey == 0x103 ? other_pd : pd, m.addr, 0x1000, m.lkey);
    }
  }
  return f.log;
}

TEST(CheckersQuietFilters, SameFindingsWithAndWithoutThem) {
  absl::flat_hash_map<std::string, int> fired;  // check -> findings, over every stream
  int posts = 0, silent_posts = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    const std::vector<Event> events = RandomDataPath(seed, 300);
    Engine filtered, full;
    full.DisableQuietFiltersForTest();
    for (size_t i = 0; i < events.size(); ++i) {
      const std::string a = Render(filtered.OnEvent(events[i])), b = Render(full.OnEvent(events[i]));
      if (a != b) {
        ADD_FAILURE() << "seed " << seed << ", event " << i << " (" << core::EventKindName(events[i].kind)
                      << "):\n  with the filters:\n"
                      << a << "  without:\n"
                      << b;
        return;
      }
      for (absl::string_view line : absl::StrSplit(b, '\n', absl::SkipEmpty()))
        ++fired[std::string(line.substr(0, line.find('|')))];
      const EventKind k = events[i].kind;
      if (k == EventKind::kPostSend || k == EventKind::kPostRecv) {
        ++posts;
        silent_posts += b.empty();
      }
    }
  }
  // The streams reach every check the filters stand in for, and plenty of
  // posts that none of them speaks about.
  for (const char* id :
       {"post-bad-qp-state", "post-after-error", "sq-overflow", "unsignaled-deadlock", "unsignaled-run",
        "cq-overrun", "sge-count", "invalid-lkey", "sge-out-of-bounds", "mr-access", "inline-too-large",
        "atomic-misaligned", "wr-id-duplicate", "rq-overflow", "error-completion"})
    EXPECT_GT(fired[id], 0) << id;
  EXPECT_GT(silent_posts, posts / 4) << silent_posts << " of " << posts;
}

// The data path's compact entries (Engine::PostOneSend, PollSucceeded):
// an engine fed them wherever the interposer would (a post of one
// OneSendable WR with at most one SGE, accepted; a poll of successful
// completions), the event when they decline, finds what an engine fed
// only the events finds, event after event; and they take most of what
// they are offered.
// The compact entries against the events, with every check on (the
// destinations index keeps receives: PostOneRecv declines) and with the
// default set (it takes them).
void CompareCompactEntries(const core::CheckSet& checks, bool recv_taken) {
  int offered = 0, taken = 0, recv_offered = 0, recv_done = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    std::vector<Event> events = RandomDataPath(seed, 300);
    Engine compact(false, checks), plain(false, checks);
    for (size_t i = 0; i < events.size(); ++i) {
      Event& e = events[i];
      if (e.kind == EventKind::kPostSend && i % 2)  // payloads hashed at the post (the books keep them)
        for (SendWr& w : e.send_wrs)
          for (Sge& g : w.sges) g.hash = 1 + i % 7;
      const std::string want = Render(plain.OnEvent(e));
      std::vector<checkers::RetiredWr> want_retired = plain.TakeRetired();
      bool done = false;
      std::vector<checkers::RetiredWr> retired;
      checkers::OneSend one_send;
      checkers::OneRecv one_recv;
      if (checkers::OneSendOf(e, &one_send)) {
        ++offered;
        done = compact.PostOneSend(one_send);
      } else if (checkers::OneRecvOf(e, &one_recv)) {
        ++offered;
        ++recv_offered;
        done = compact.PostOneRecv(one_recv);
        recv_done += done;
      } else if (e.kind == EventKind::kPollCq && !e.wcs.empty()) {
        bool ok = true;
        for (const Completion& c : e.wcs) ok &= c.status == IBV_WC_SUCCESS;
        if (ok) {
          ++offered;
          done = compact.PollSucceeded(e.obj, e.wcs.data(), e.wcs.size(), &retired);
        }
      }
      taken += done;
      const std::string got = done ? std::string() : Render(compact.OnEvent(e));
      if (!done) retired = compact.TakeRetired();
      if (got != want || retired.size() != want_retired.size()) {
        ADD_FAILURE() << "seed " << seed << ", event " << i << " (" << core::EventKindName(e.kind)
                      << (done ? ", compact" : "") << "):\n  compact:\n"
                      << got << "  events:\n"
                      << want << "  retired " << retired.size() << " / " << want_retired.size();
        return;
      }
    }
  }
  EXPECT_GT(taken, offered / 2) << taken << " of " << offered;
  ASSERT_GT(recv_offered, 1000);
  if (recv_taken) {
    EXPECT_GT(recv_done, recv_offered / 4) << recv_done << " of " << recv_offered;
  } else {
    EXPECT_EQ(recv_done, 0);
  }
}

TEST(CheckersCompactEntries, SameFindingsAsTheEvents) { CompareCompactEntries(core::CheckSet::All(), false); }

TEST(CheckersCompactEntries, SameFindingsAsTheEventsWithTheDefaultChecks) {
  CompareCompactEntries(core::CheckSet::Defaults(), true);
}

// A poll of one successful completion through the compact entry (in line
// for a send retiring its SQ's head or a receive of a QP without SRQ, of
// the CQ's last QP; Retire for the rest) leaves the books as its event:
// each queue, the signaled count and the CQ's pending count, completion
// after completion, over two QPs taking turns on one CQ.
TEST(CheckersCompactEntries, OneCompletionPollsLeaveTheBooksAsTheirEvents) {
  Basic events, compact;
  ObjId other[2];
  for (Basic* b : {&events, &compact}) {
    const ObjId q = b->f.CreateQp(b->pd, b->cq, b->cq, Caps(8));
    b->f.ToRts(q);
    other[b == &compact] = q;
  }
  ASSERT_EQ(other[0], other[1]);
  const ObjId qps[2] = {events.qp, other[0]};
  uint64_t id = 1;
  for (int round = 0; round < 6; ++round) {
    std::vector<Completion> wcs;
    for (ObjId q : qps) {
      const uint32_t qpn = Fx::Qpn(q);
      for (Basic* b : {&events, &compact}) {
        b->f.PostRecv(q, {Rwr(id, {b->sg(0x100)})});
        // Two WRs, the second signaled: its completion retires both (Retire).
        b->f.PostSend(q, {Wr(id + 1, round % 2 == 0, {b->sg()}), Wr(id + 2, true, {b->sg(0x40)})});
      }
      wcs.push_back(Wc(qpn, id, IBV_WC_SUCCESS, round % 3 ? IBV_WC_RECV : IBV_WC_RECV_RDMA_WITH_IMM));
      if (round % 2 == 0) wcs.push_back(Wc(qpn, id + 1));
      wcs.push_back(Wc(qpn, id + 2));
      id += 3;
    }
    for (const Completion& c : wcs) {
      events.f.Poll(events.cq, {c});
      std::vector<checkers::RetiredWr> retired;
      ASSERT_TRUE(compact.f.eng.PollSucceeded(compact.cq, &c, 1, &retired));
      for (ObjId q : qps) {
        const checkers::QpState& want = events.f.Qp(q);
        const checkers::QpState& got = compact.f.Qp(q);
        EXPECT_EQ(got.sq.size(), want.sq.size()) << "round " << round << ", wr_id " << c.wr_id;
        EXPECT_EQ(got.rq.size(), want.rq.size()) << "round " << round << ", wr_id " << c.wr_id;
        EXPECT_EQ(got.sq_signaled, want.sq_signaled) << "round " << round << ", wr_id " << c.wr_id;
      }
      EXPECT_EQ(compact.f.eng.state().PendingOn(compact.cq), events.f.eng.state().PendingOn(events.cq));
    }
    EXPECT_EQ(compact.f.SqSize(compact.qp), 0u);
    EXPECT_EQ(compact.f.Qp(compact.qp).rq.size(), 0u);
  }
  EXPECT_EQ(compact.f.eng.state().PendingOn(compact.cq), 0u);
}

// ====================================================== lock domains ==

TEST(CheckersDomains, QueuesThatShareNoCqOrSrqHaveTheirOwnDomains) {
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId cq1 = f.CreateCq(64), cq2 = f.CreateCq(64), cq3 = f.CreateCq(64), srq = f.CreateSrq(pd, 16);
  EXPECT_NE(f.eng.DomainOf(cq1), 0u);
  EXPECT_NE(f.eng.DomainOf(cq1), f.eng.DomainOf(cq2));
  ObjId a = f.CreateQp(pd, cq1, cq1, Caps(8));
  ObjId b = f.CreateQp(pd, cq2, cq2, Caps(8));
  EXPECT_EQ(f.eng.DomainOf(a), f.eng.DomainOf(cq1));
  EXPECT_EQ(f.eng.DomainOf(b), f.eng.DomainOf(cq2));
  EXPECT_NE(f.eng.DomainOf(a), f.eng.DomainOf(b));
  // A QP whose send and receive CQs differ joins them; a QP on an SRQ joins
  // the SRQ (and so every CQ its receives can complete on).
  ObjId c = f.CreateQp(pd, cq1, cq3, Caps(8));
  EXPECT_EQ(f.eng.DomainOf(cq3), f.eng.DomainOf(cq1));
  EXPECT_EQ(f.eng.DomainOf(c), f.eng.DomainOf(a));
  ObjId d = f.CreateQp(pd, cq2, cq2, Caps(8), false, srq);
  EXPECT_EQ(f.eng.DomainOf(srq), f.eng.DomainOf(b));
  EXPECT_EQ(f.eng.DomainOf(d), f.eng.DomainOf(b));
  EXPECT_NE(f.eng.DomainOf(a), f.eng.DomainOf(b));
  // Destroyed objects leave their domain; unknown ones have none.
  EXPECT_TRUE(f.Simple(EventKind::kDestroyQp, c).empty());
  EXPECT_EQ(f.eng.DomainOf(c), 0u);
  EXPECT_EQ(f.eng.DomainOf(9999), 0u);
}

TEST(CheckersDomains, LargeObjectIdsWorkLikeSmallOnes) {
  // The engine indexes small ids directly and hashes the rest: both kinds
  // side by side, with the same books and findings.
  for (ObjId first : {ObjId{1}, ObjId{1} << 40, ~ObjId{0} - 100}) {
    Fx f;
    f.NumberFrom(first);
    ObjId pd = f.AllocPd();
    f.RegMr(pd, 0x10000, 0x10000, 0x11);
    ObjId cq = f.CreateCq(64);
    ObjId qp = f.CreateQp(pd, cq, cq, Caps(2));
    f.ToRts(qp);
    EXPECT_NE(f.eng.DomainOf(qp), 0u) << first;
    EXPECT_EQ(f.eng.DomainOf(qp), f.eng.DomainOf(cq)) << first;
    EXPECT_EQ(f.PostSend(qp, {Wr(1, true, {Sg(0x10000, 8, 0x11)}), Wr(2, true)}), kNone) << first;
    EXPECT_EQ(f.PostSend(qp, {Wr(3, true)}), Ids{"sq-overflow"}) << first;
    EXPECT_EQ(f.Poll(cq, {Wc(Fx::Qpn(qp), 2)}), kNone) << first;
    EXPECT_EQ(f.SqSize(qp), 1u) << first;  // wr 3 (posted past the limit) is still booked
    EXPECT_TRUE(f.Simple(EventKind::kDestroyQp, qp).empty());
    EXPECT_EQ(f.eng.DomainOf(qp), 0u) << first;
  }
}

TEST(CheckersDomains, AnEventOnAnotherDomainRunsWhileOneIsHeld) {
  Basic b(8);
  ObjId cq2 = b.f.CreateCq(64);
  ObjId qp2 = b.f.CreateQp(b.pd, cq2, cq2, Caps(8));
  b.f.ToRts(qp2);
  auto post = [&](ObjId qp) {
    Event e;
    e.kind = EventKind::kPostSend;
    e.obj = qp;
    e.stack = 77;
    e.send_wrs.push_back(Wr(1, true, {b.sg()}));
    std::vector<Finding> out;
    b.f.eng.OnEvent(e, &out, nullptr);
  };
  auto held = b.f.eng.LockDomainForTest(b.qp);
  ASSERT_TRUE(held.owns_lock());
  // A post to the other QP completes while the first QP's domain is held.
  std::atomic<bool> other_done{false};
  std::thread other([&] {
    post(qp2);
    other_done = true;
  });
  for (int i = 0; i < 2000 && !other_done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(other_done) << "a post to a QP of another domain waited for a held domain";
  other.join();
  // A post to the held QP waits, and so does an event that takes every lock.
  std::atomic<bool> same_done{false}, control_done{false};
  std::thread same([&] {
    post(b.qp);
    same_done = true;
  });
  std::thread control([&] {
    Event e;
    e.kind = EventKind::kAllocPd;
    e.obj = 5000;
    std::vector<Finding> out;
    b.f.eng.OnEvent(e, &out, nullptr);
    control_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(same_done);
  EXPECT_FALSE(control_done);
  held.unlock();
  same.join();
  control.join();
  EXPECT_EQ(b.f.SqSize(b.qp), 1u);
  EXPECT_EQ(b.f.SqSize(qp2), 1u);
}

TEST(CheckersDomains, NumberedEventsGetIncreasingSeqsUnderTheirLocks) {
  Engine eng(/*assign_seq=*/true);
  std::vector<uint64_t> seqs;
  for (EventKind k : {EventKind::kAllocPd, EventKind::kCreateCq, EventKind::kPollCq}) {
    Event e;
    e.kind = k;
    e.obj = k == EventKind::kPollCq ? 2 : seqs.size() + 1;
    std::vector<Finding> out;
    eng.OnEvent(e, &out, nullptr);
    seqs.push_back(e.seq);
  }
  EXPECT_EQ(seqs, (std::vector<uint64_t>{1, 2, 3}));
}

// Threads posting and polling on their own queues while another thread
// keeps creating, merging and destroying domains and registering MRs: the
// books stay exact (every WR retired) and, under TSan, nothing races.
TEST(CheckersDomains, DataPathRacesControlPathSafely) {
  Engine eng(/*assign_seq=*/true);
  std::atomic<ObjId> next{1};
  auto feed = [&](Event e) {
    std::vector<Finding> out;
    eng.OnEvent(e, &out, nullptr);
    return out.size();
  };
  auto make = [&](EventKind k, auto fill) {
    Event e;
    e.kind = k;
    e.obj = next.fetch_add(1);
    fill(e);
    feed(e);
    return e.obj;
  };
  const ObjId pd = make(EventKind::kAllocPd, [](Event&) {});
  make(EventKind::kRegMr, [&](Event& e) {
    e.parent = pd;
    e.addr = e.iova = 0x10000;
    e.length = 0x10000;
    e.lkey = 0x11;
    e.access = kAllAccess;
  });
  auto create_qp = [&](ObjId scq, ObjId rcq, uint32_t qpn) {
    ObjId qp = make(EventKind::kCreateQp, [&](Event& e) {
      e.parent = pd;
      e.send_cq = scq;
      e.recv_cq = rcq;
      e.qp_type = IBV_QPT_RC;
      e.qp_num = qpn;
      e.caps = Caps(64);
    });
    for (uint32_t s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
      Event m;
      m.kind = EventKind::kModifyQp;
      m.obj = qp;
      m.attr_mask = IBV_QP_STATE;
      m.qp_state = s;
      feed(m);
    }
    return qp;
  };
  constexpr int kThreads = 4, kPairs = 3000;
  std::vector<ObjId> cqs, qps;
  for (int t = 0; t < kThreads; ++t) {
    cqs.push_back(make(EventKind::kCreateCq, [](Event& e) { e.cqe = 256; }));
    qps.push_back(create_qp(cqs.back(), cqs.back(), 0x100 + t));
  }
  std::atomic<bool> stop{false};
  std::atomic<size_t> findings{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t)
    workers.emplace_back([&, t] {
      for (int i = 0; i < kPairs; ++i) {
        Event post;
        post.kind = EventKind::kPostSend;
        post.obj = qps[t];
        post.stack = 10 + t;
        post.send_wrs.push_back(Wr(i, true, {Sg(0x10000 + 64 * t, 8, 0x11)}));
        findings += feed(post);
        Event poll;
        poll.kind = EventKind::kPollCq;
        poll.obj = cqs[t];
        poll.wcs.push_back(Wc(0x100 + t, i));
        findings += feed(poll);
      }
    });
  std::thread control([&] {
    for (uint32_t round = 0; !stop; ++round) {
      // Two CQs joined by one QP (a merge), then all destroyed; an MR
      // registered and deregistered (the MR caches' generation moves).
      ObjId a = make(EventKind::kCreateCq, [](Event& e) { e.cqe = 16; });
      ObjId b = make(EventKind::kCreateCq, [](Event& e) { e.cqe = 16; });
      ObjId q = create_qp(a, b, 0x1000 + round % 1000);
      ObjId mr = make(EventKind::kRegMr, [&](Event& e) {
        e.parent = pd;
        e.addr = e.iova = 0x900000;
        e.length = 4096;
        e.lkey = 0x900 + round % 16;
      });
      for (auto [k, o] : {std::pair{EventKind::kDeregMr, mr},
                          {EventKind::kDestroyQp, q},
                          {EventKind::kDestroyCq, a},
                          {EventKind::kDestroyCq, b}}) {
        Event d;
        d.kind = k;
        d.obj = o;
        feed(d);
      }
    }
  });
  for (auto& w : workers) w.join();
  stop = true;
  control.join();
  EXPECT_EQ(findings.load(), 0u);
  for (ObjId q : qps) EXPECT_EQ(eng.state().Qp(q)->sq.size(), 0u);
}

}  // namespace
}  // namespace rdmasan::checkers_testing

// core/decision: the decision sources (PRNG per key, byte stream, recorded
// log), the decision log's text format, the --faults grammar, and the
// Decider's activation rules (BUGGIFY, nth, once, qp=); and faults= inside
// RDMASAN_OPTIONS.
#include "core/decision.h"

#include <errno.h>
#include <infiniband/verbs.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/options.h"

namespace rdmasan::core {
namespace {

// Two draws of one key, as one number (so a test sees the whole stream).
uint64_t TwoDraws(DecisionSource& s, const DecisionKey& k) {
  return s.Draw(k, [](Draws& d) { return d.Below(uint64_t{1} << 30) << 30 | d.Below(uint64_t{1} << 30); });
}

TEST(DecisionPrng, EachKeyDrawsTheSameWhateverTheOrderOfOthers) {
  const std::vector<DecisionKey> keys = {{Point::kWcError, 5, 1},  {Point::kWcError, 5, 2},
                                         {Point::kPostSend, 5, 1}, {Point::kSchedPick, 9, 1},
                                         {Point::kWcError, 6, 1},  {Point::kRegMr, 0, 3}};
  auto a = MakePrngSource(42), b = MakePrngSource(42), other = MakePrngSource(43);
  std::vector<uint64_t> forward;
  for (const auto& k : keys) forward.push_back(TwoDraws(*a, k));
  // Backwards, and each key drawn twice: a key's draws depend on nothing else.
  for (size_t i = keys.size(); i-- > 0;) {
    EXPECT_EQ(TwoDraws(*b, keys[i]), forward[i]) << i;
    EXPECT_EQ(TwoDraws(*b, keys[i]), forward[i]) << i;
  }
  // Different keys and another seed draw differently.
  for (size_t i = 1; i < keys.size(); ++i) EXPECT_NE(forward[i], forward[0]);
  int same = 0;
  for (size_t i = 0; i < keys.size(); ++i) same += TwoDraws(*other, keys[i]) == forward[i];
  EXPECT_EQ(same, 0);
  // Run draws: a pure function of (seed, tag, a, b).
  EXPECT_EQ(a->RunDraw(1, 2, 3, 1000000), b->RunDraw(1, 2, 3, 1000000));
  EXPECT_EQ(a->Describe(), "seed 42");
}

TEST(DecisionBytes, ConsumedInOrderThenZero) {
  const uint8_t bytes[] = {0x05, 0x01, 0x02, 0xff};
  auto s = MakeByteSource(bytes, sizeof bytes);
  const DecisionKey k{Point::kWcError, 1, 1};
  EXPECT_EQ(s->Draw(k, [](Draws& d) { return d.Below(256); }), 5u);
  EXPECT_EQ(s->Draw(k, [](Draws& d) { return d.Below(65536); }), 0x0102u);  // two bytes, big-endian
  EXPECT_EQ(s->Draw(k, [](Draws& d) { return d.Below(2); }), 1u);           // 0xff % 2
  // Exhausted: every draw is 0, the natural run.
  EXPECT_EQ(s->Draw(k, [](Draws& d) { return d.Below(256); }), 0u);
  EXPECT_EQ(s->Draw(k, [](Draws& d) { return d.Below(uint64_t{1} << 40); }), 0u);
  EXPECT_EQ(s->RunDraw(1, 0, 0, 100), 0u);
  // An empty input is the natural run: no chance fires, so no p= rule does.
  auto empty = MakeByteSource(nullptr, 0);
  EXPECT_EQ(empty->Draw(k, [](Draws& d) { return d.Chance(0.999) ? 1 : 0; }), 0u);
  EXPECT_EQ(empty->Draw(k, [](Draws& d) { return d.Chance(1.0) ? 1 : 0; }), 1u);
  Decider natural(MakeByteSource(nullptr, 0), ParseFaultSpec("wc.error:p=0.9,post:p=0.5").value());
  for (int h = 0; h < 20; ++h) {
    EXPECT_EQ(natural.Fault(Point::kWcError, 1, 0, [](const FaultRule&, Draws&) -> uint64_t { return 12; }),
              0u);
    EXPECT_EQ(natural.Fault(Point::kPostRecv, 1, 0, [](const FaultRule&, Draws&) -> uint64_t { return 1; }),
              0u);
  }
  // A byte stream of all 0xff fires them.
  const std::vector<uint8_t> ones(64, 0xff);
  Decider fired(MakeByteSource(ones.data(), ones.size()), ParseFaultSpec("wc.error:p=0.9").value());
  EXPECT_NE(fired.Fault(Point::kWcError, 1, 0, [](const FaultRule&, Draws&) -> uint64_t { return 12; }), 0u);
}

TEST(DecisionLog, FormatThenParseRoundTrips) {
  std::vector<Decision> in = {
      {{Point::kWcError, 3, 2}, IBV_WC_RETRY_EXC_ERR, "RETRY_EXC_ERR on QP 0x5 wr_id=0x12", 5, 0x12},
      {{Point::kPostSend, 7, 1}, (uint64_t{ENOMEM} << 32) | 3, "", 0, 0},
      {{Point::kSchedPick, 0x10, 99}, 2, "# a note with a hash", 0, 0},
      {{Point::kRegMr, 0, 1}, uint64_t{1} << 63, "", 0, 0},
  };
  std::string text = FormatLogHeader("pct", "wc.error:p=0.01:status=retry-exc,post_send:nth=3", "seed 42");
  for (const auto& d : in) text += FormatDecision(d);
  auto log = ParseDecisionLog(text);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(log->reorder, "pct");
  EXPECT_EQ(log->faults, "wc.error:p=0.01:status=retry-exc,post_send:nth=3");
  ASSERT_EQ(log->decisions.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(log->decisions[i].key, in[i].key) << i;
    EXPECT_EQ(log->decisions[i].outcome, in[i].outcome) << i;
  }
  // As a source: each recorded key's outcome, 0 for any other.
  auto src = MakeLogSource(log->decisions, "x.log");
  EXPECT_TRUE(src->Replaying());
  EXPECT_EQ(src->Recorded({Point::kWcError, 3, 2}), uint64_t{IBV_WC_RETRY_EXC_ERR});
  EXPECT_EQ(src->Recorded({Point::kWcError, 3, 1}), 0u);
  EXPECT_EQ(src->Recorded({Point::kWcError, 4, 2}), 0u);
}

TEST(DecisionLog, ErrorsNameTheLineAndTheToken) {
  struct Case {
    const char* text;
    const char* says;
  } cases[] = {
      {"post_send obj=1 hit=1 outcome=5\nbogus obj=1 hit=1 outcome=1\n",
       "decision log line 2: unknown decision point 'bogus'"},
      {"# comment\n\nwc.error obj=x hit=1 outcome=1", "decision log line 3: bad number in 'obj=x'"},
      {"wc.error obj=1 hit=1 outcome=1 color=red", "line 1: unknown field 'color=red'"},
      {"wc.error obj=1 hit=0 outcome=1", "line 1: missing or zero hit="},
      {"wc.error obj=1 outcome=1", "line 1: missing or zero hit="},
      {"wc.error obj=1 hit=2 outcome=0", "line 1: missing or zero outcome="},
      {"wc.error obj=1 hit=2 outcome=99999999999999999999999", "bad number in 'outcome="},
  };
  for (const auto& c : cases) {
    auto log = ParseDecisionLog(c.text);
    ASSERT_FALSE(log.ok()) << c.text;
    EXPECT_NE(log.status().message().find(c.says), std::string::npos) << log.status() << " for " << c.text;
  }
  // Empty and comment-only logs are valid and empty.
  EXPECT_TRUE(ParseDecisionLog("").ok());
  EXPECT_TRUE(ParseDecisionLog("  # only\n\t\n").value().decisions.empty());
}

TEST(FaultSpec, Grammar) {
  auto spec = ParseFaultSpec("wc.error:p=0.01:status=retry-exc|IBV_WC_REM_ACCESS_ERR,post_send:nth=3");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->rules.size(), 2u);
  EXPECT_EQ(spec->rules[0].name, "wc.error");
  EXPECT_DOUBLE_EQ(spec->rules[0].p, 0.01);
  EXPECT_EQ(spec->rules[0].statuses, (std::vector<uint32_t>{IBV_WC_RETRY_EXC_ERR, IBV_WC_REM_ACCESS_ERR}));
  EXPECT_EQ(spec->rules[1].name, "post_send");
  EXPECT_EQ(spec->rules[1].nth, 3u);
  EXPECT_LT(spec->rules[1].p, 0);
  spec = ParseFaultSpec("post_send:once:qp=0x1a:wr=2, reg_mr:errno=ENOMEM|efault:enable=0.25");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->rules.size(), 2u);
  EXPECT_TRUE(spec->rules[0].once);
  EXPECT_EQ(spec->rules[0].qp, 0x1au);
  EXPECT_EQ(spec->rules[0].wr, 2);
  EXPECT_EQ(spec->rules[1].errnos, (std::vector<int>{ENOMEM, EFAULT}));
  EXPECT_DOUBLE_EQ(spec->rules[1].enable, 0.25);
  EXPECT_TRUE(ParseFaultSpec("").value().empty());
}

TEST(FaultSpec, ErrorsNameTheBadToken) {
  struct Case {
    const char* spec;
    const char* says;
  } cases[] = {
      {"post_snd:nth=3", "unknown fault point 'post_snd' in 'post_snd:nth=3'"},
      {"sched.pick:p=1", "unknown fault point 'sched.pick'"},
      {"pos", "unknown fault point 'pos'"},
      {"wc.error:color=red", "unknown setting 'color=red'"},
      {"wc.error:once=1", "unknown setting 'once=1'"},
      {"wc.error:status=nope", "unknown or unusable status 'nope'"},
      {"wc.error:status=wr-flush", "unknown or unusable status 'wr-flush'"},
      {"wc.error:status=retry-exc|0", "unknown or unusable status '0'"},
      {"reg_mr:errno=EWHAT", "unknown errno 'EWHAT'"},
      {"wc.error:p=0.1,", "an empty rule in 'wc.error:p=0.1,' (a stray ',')"},
      {",post_send:once", "an empty rule"},
      {"post_send:once,,reg_mr:once", "an empty rule"},
      {"reg_mr:errno=0", "unknown errno '0'"},
      {"wc.error:p=1.5", "bad value in 'p=1.5'"},
      {"wc.error:p=-0.1", "bad value in 'p=-0.1'"},
      {"wc.error:p=nan", "bad value in 'p=nan'"},
      {"wc.error:enable=2", "bad value in 'enable=2'"},
      {"post_send:nth=0", "bad value in 'nth=0'"},
      {"post_send:qp=0", "bad value in 'qp=0'"},
      {"post_send:qp=0x1000000", "bad value in 'qp=0x1000000'"},
      {"post_send:nth=3:p=0.5", "nth= and p= exclude each other in 'post_send:nth=3:p=0.5'"},
      {"wc.error,post_send:nth=x", "bad value in 'nth=x' in 'post_send:nth=x'"},
  };
  for (const auto& c : cases) {
    auto spec = ParseFaultSpec(c.spec);
    ASSERT_FALSE(spec.ok()) << c.spec;
    EXPECT_NE(spec.status().message().find(c.says), std::string::npos) << spec.status() << " for " << c.spec;
    EXPECT_EQ(spec.status().message().rfind("faults: ", 0), 0u) << spec.status();
  }
}

TEST(FaultSpec, GroupsMatchByNamePrefix) {
  auto matches = [](const char* name) {
    FaultRule r;
    r.name = name;
    std::vector<std::string> out;
    for (int i = 0; i < kNumPoints; ++i)
      if (r.Matches(static_cast<Point>(i))) out.push_back(PointName(static_cast<Point>(i)));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(matches("post"), (V{"post_send", "post_recv", "post_srq_recv"}));
  EXPECT_EQ(matches("create"),
            (V{"create_cq", "create_qp", "create_srq", "create_ah", "create_comp_channel"}));
  EXPECT_EQ(matches("wc"), V{"wc.error"});
  EXPECT_EQ(matches("async"), (V{"async.port_err", "async.cq_err", "async.qp_fatal"}));
  EXPECT_EQ(matches("post_send"), V{"post_send"});
  EXPECT_EQ(matches("reg_mr"), V{"reg_mr"});
  EXPECT_EQ(matches("post_s"), V{});  // a prefix must end at '_' or '.'
  EXPECT_EQ(matches("sched"), V{});   // the scheduler's points are not faults
  V all;
  for (int i = 0; i < kNumPoints; ++i)
    if (IsFaultPoint(static_cast<Point>(i))) all.push_back(PointName(static_cast<Point>(i)));
  EXPECT_EQ(all.size(), 14u);
  EXPECT_EQ(matches("*"), all);
  for (int i = 0; i < kNumPoints; ++i)
    EXPECT_EQ(PointByName(PointName(static_cast<Point>(i))), static_cast<Point>(i));
  EXPECT_EQ(PointByName("post"), Point::kCount);
}

// A Decider from a spec and a seed (the spec must parse).
std::unique_ptr<Decider> Make(const char* spec, uint64_t seed) {
  auto parsed = ParseFaultSpec(spec);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return std::make_unique<Decider>(MakePrngSource(seed), parsed.ok() ? *parsed : FaultSpec());
}

uint64_t WcFault(Decider& d, uint64_t obj = 1, uint32_t qpn = 0x11) {
  return d.Fault(Point::kWcError, obj, qpn,
                 [](const FaultRule&, Draws&) -> uint64_t { return IBV_WC_RETRY_EXC_ERR; });
}

// BUGGIFY: a rule with neither p, nth nor once is enabled for a run with
// probability enable (default 0.5), then fires with p=0.05 per hit.
TEST(Decider, BuggifyActivationFrequencyOverSeeds) {
  int enabled_runs = 0;
  uint64_t fired = 0, hits_in_enabled = 0;
  const int kSeeds = 400, kHits = 200;
  for (int seed = 1; seed <= kSeeds; ++seed) {
    auto d = Make("wc.error", seed);
    EXPECT_TRUE(d->Active(Point::kWcError));
    EXPECT_FALSE(d->Active(Point::kPostSend));
    uint64_t n = 0;
    for (int h = 0; h < kHits; ++h) n += WcFault(*d) != 0;
    EXPECT_EQ(d->Count(Point::kWcError), n);
    if (n) {
      ++enabled_runs;
      fired += n;
      hits_in_enabled += kHits;
    }
  }
  // Enabled in about half the runs (an enabled run fires with probability
  // 1 - 0.95^200, about 1): mean 200, sd 10.
  EXPECT_GT(enabled_runs, 150);
  EXPECT_LT(enabled_runs, 250);
  // About 5% of the hits of an enabled run: mean ~2000 of ~40000.
  const double rate = static_cast<double>(fired) / static_cast<double>(hits_in_enabled);
  EXPECT_GT(rate, 0.04);
  EXPECT_LT(rate, 0.06);
  // enable= sets the activation probability.
  int always = 0, never = 0;
  for (int seed = 1; seed <= 50; ++seed) {
    auto on = Make("wc.error:enable=1", seed), off = Make("wc.error:enable=0", seed);
    uint64_t n_on = 0, n_off = 0;
    for (int h = 0; h < kHits; ++h) {
      n_on += WcFault(*on) != 0;
      n_off += WcFault(*off) != 0;
    }
    always += n_on > 0;
    never += n_off == 0;
  }
  EXPECT_EQ(always, 50);
  EXPECT_EQ(never, 50);
}

TEST(Decider, NthFiresAtExactlyThatHit) {
  auto d = Make("post_send:nth=3", 1);
  std::vector<uint64_t> got;
  for (int h = 0; h < 6; ++h)
    got.push_back(d->Fault(Point::kPostSend, 7, 0, [](const FaultRule&, Draws&) -> uint64_t { return 9; }));
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 0, 9, 0, 0, 0}));
  EXPECT_EQ(d->Count(Point::kPostSend), 1u);
  // Another point is not counted with it.
  EXPECT_EQ(WcFault(*d), 0u);
}

// A run with `p=0` rules injects nothing but counts every fault point it
// reaches; the "# reached" lines of its log list them for enumeration
// (fail-nth: the n-th hit of one point), and a schedule reader skips them.
TEST(Decider, ReachedCountsEveryHitAndTheLogListsThem) {
  auto d = Make("post_send:p=0,reg_mr:p=0", 1);
  for (int h = 0; h < 4; ++h)
    EXPECT_EQ(
        d->Fault(Point::kPostSend, 7 + h % 2, 0, [](const FaultRule&, Draws&) -> uint64_t { return 9; }), 0u);
  EXPECT_EQ(d->Fault(Point::kRegMr, 0, 0, [](const FaultRule&, Draws&) -> uint64_t { return ENOMEM; }), 0u);
  EXPECT_EQ(d->Reached(Point::kPostSend), 4u);
  EXPECT_EQ(d->Reached(Point::kRegMr), 1u);
  EXPECT_EQ(d->Reached(Point::kWcError), 0u);
  EXPECT_EQ(d->Count(Point::kPostSend), 0u);
  const std::string text = FormatLogHeader("off", "post_send:p=0", "seed 1") + FormatReached(*d);
  EXPECT_NE(text.find("# reached post_send 4\n"), std::string::npos) << text;
  EXPECT_EQ(ParseReached(text),
            (std::vector<std::pair<Point, uint64_t>>{{Point::kPostSend, 4}, {Point::kRegMr, 1}}));
  auto log = ParseDecisionLog(text);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_TRUE(log->decisions.empty());
  // Malformed, unknown or scheduler points are not fault points to enumerate.
  EXPECT_TRUE(
      ParseReached("# reached post_snd 3\n# reached sched.hold 2\n# reached reg_mr x\n# reached wc.error 0\n")
          .empty());
}

// A caller's own hit counters (the scheduler's per CQ) are part of
// Reached, and FaultCounted decides as Fault: the same key sequence.
TEST(Decider, HitCountersAddToReachedAndFaultCountedDecidesAsFault) {
  auto d = Make("wc.error:nth=3", 1);
  Decider::HitCounter* a = d->NewHitCounter(Point::kWcError);
  Decider::HitCounter* b = d->NewHitCounter(Point::kWcError);
  Decider::HitCounter* other = d->NewHitCounter(Point::kPostSend);
  auto status = [](const FaultRule&, Draws&) -> uint64_t { return 12; };
  std::vector<uint64_t> got;
  got.push_back(d->FaultCounted(a, Point::kWcError, 5, 0, status));
  got.push_back(d->FaultCounted(b, Point::kWcError, 6, 0, status));
  got.push_back(d->Fault(Point::kWcError, 5, 0, status));
  got.push_back(d->FaultCounted(a, Point::kWcError, 5, 0, status));
  got.push_back(d->FaultCounted(a, Point::kWcError, 5, 0, status));
  other->Bump();
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 0, 12, 0, 0}));  // the rule's third hit, counted or not
  EXPECT_EQ(d->Reached(Point::kWcError), 5u);
  EXPECT_EQ(d->Reached(Point::kPostSend), 1u);
  EXPECT_EQ(d->Count(Point::kWcError), 1u);
  const std::string text = FormatReached(*d);
  EXPECT_NE(text.find("# reached wc.error 5\n"), std::string::npos) << text;
}

TEST(Decider, OnceFiresOnlyOnce) {
  auto d = Make("reg_mr:once", 1);
  std::vector<uint64_t> got;
  for (int h = 0; h < 5; ++h)
    got.push_back(d->Fault(Point::kRegMr, 0, 0, [](const FaultRule&, Draws&) -> uint64_t { return ENOMEM; }));
  EXPECT_EQ(got, (std::vector<uint64_t>{ENOMEM, 0, 0, 0, 0}));
  // once with p: at most once, whatever the draws.
  for (int seed = 1; seed <= 20; ++seed) {
    auto e = Make("wc.error:once:p=0.5", seed);
    uint64_t n = 0;
    for (int h = 0; h < 50; ++h) n += WcFault(*e) != 0;
    EXPECT_EQ(n, 1u) << seed;  // 0.5^50: never zero in practice
  }
}

TEST(Decider, QpFilterLimitsTheRuleToOneQp) {
  auto d = Make("wc.error:p=1:qp=0x1a", 1);
  for (int h = 0; h < 10; ++h) {
    EXPECT_EQ(WcFault(*d, 1, 0x1b), 0u);
    EXPECT_EQ(WcFault(*d, 1, 0x1a), uint64_t{IBV_WC_RETRY_EXC_ERR});
  }
  EXPECT_EQ(d->Count(Point::kWcError), 10u);
}

// The sink sees each non-zero decision with its key; a Decider replaying
// that log decides the same at the same keys.
TEST(Decider, RecordedDecisionsReplay) {
  auto d = Make("wc.error:p=0.3,post_send:nth=2", 5);
  std::vector<Decision> log;
  d->SetSink([&](const Decision& x) { log.push_back(x); });
  std::vector<uint64_t> live;
  for (int h = 0; h < 40; ++h) {
    live.push_back(WcFault(*d, h % 3));
    live.push_back(
        d->Fault(Point::kPostSend, h % 2, 0, [](const FaultRule&, Draws&) -> uint64_t { return 4; }));
  }
  ASSERT_FALSE(log.empty());
  for (const auto& x : log) EXPECT_NE(x.outcome, 0u);
  std::string text;
  for (const auto& x : log) text += FormatDecision(x);
  auto parsed = ParseDecisionLog(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  Decider replay(MakeLogSource(parsed->decisions, "log"), FaultSpec());
  EXPECT_TRUE(replay.replaying());
  EXPECT_TRUE(replay.Active(Point::kWcError));
  std::vector<uint64_t> again;
  for (int h = 0; h < 40; ++h) {
    again.push_back(WcFault(replay, h % 3));
    again.push_back(
        replay.Fault(Point::kPostSend, h % 2, 0, [](const FaultRule&, Draws&) -> uint64_t { return 4; }));
  }
  EXPECT_EQ(again, live);
}

TEST(DecisionNames, StatusesAndErrnos) {
  uint32_t st = 0;
  EXPECT_TRUE(ParseWcStatus("retry-exc", &st));
  EXPECT_EQ(st, uint32_t{IBV_WC_RETRY_EXC_ERR});
  EXPECT_TRUE(ParseWcStatus("IBV_WC_RNR_RETRY_EXC_ERR", &st));
  EXPECT_EQ(st, uint32_t{IBV_WC_RNR_RETRY_EXC_ERR});
  EXPECT_TRUE(ParseWcStatus("10", &st));
  EXPECT_EQ(st, 10u);
  EXPECT_FALSE(ParseWcStatus("0", &st));
  EXPECT_FALSE(ParseWcStatus("retry", &st));
  EXPECT_STREQ(WcStatusName(IBV_WC_RETRY_EXC_ERR), "RETRY_EXC_ERR");
  EXPECT_STREQ(WcStatusName(IBV_WC_SUCCESS), "SUCCESS");
  EXPECT_STREQ(WcStatusName(9999), "?");
  int e = 0;
  EXPECT_TRUE(ParseErrno("enomem", &e));
  EXPECT_EQ(e, ENOMEM);
  EXPECT_TRUE(ParseErrno("EFAULT", &e));
  EXPECT_EQ(e, EFAULT);
  EXPECT_FALSE(ParseErrno("ENOPE", &e));
  EXPECT_STREQ(ErrnoName(EINVAL), "EINVAL");
  EXPECT_STREQ(ErrnoName(4000), "E?");
}

// faults= in RDMASAN_OPTIONS: the spec's settings are ':'-separated like
// the options, and items that are no option's name continue the spec.
TEST(DecisionOptions, FaultsKeepTheirSettingsBesideOtherOptions) {
  Options o;
  absl::Status s = ParseOptions("faults=wc.error:p=0.1:status=retry-exc:verbosity=1", &o);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(o.faults, "wc.error:p=0.1:status=retry-exc");
  EXPECT_EQ(o.verbosity, 1);
  Options o2;
  s = ParseOptions("seed=7:faults=post_send:once:qp=0x1a,reg_mr:nth=2:reorder=pct", &o2);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(o2.faults, "post_send:once:qp=0x1a,reg_mr:nth=2");
  EXPECT_EQ(o2.seed, 7);
  EXPECT_EQ(o2.reorder, "pct");
  auto spec = ParseFaultSpec(o.faults);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->rules.size(), 1u);
  EXPECT_DOUBLE_EQ(spec->rules[0].p, 0.1);
  EXPECT_EQ(spec->rules[0].statuses, std::vector<uint32_t>{IBV_WC_RETRY_EXC_ERR});
  // A bad spec is an option error naming the token.
  Options o3;
  s = ParseOptions("faults=post_snd:nth=3", &o3);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("post_snd"), std::string::npos) << s;
}

}  // namespace
}  // namespace rdmasan::core

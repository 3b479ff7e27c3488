// core/decision's chaos points: the --chaos grammar (the settings of
// --faults, points named without "chaos.", the ones softnic does not show
// yet refused by name), the Decider's chaos decisions (default
// probability, p, nth, once, qp=, outcomes in [1, n), replay from a log),
// "# chaos=" in a decision log's header, and chaos= inside RDMASAN_OPTIONS.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/decision.h"
#include "core/options.h"

namespace rdmasan::core {
namespace {

// The points softnic shows now, as the error messages list them.
std::string Available() {
  std::string out;
  for (int i = static_cast<int>(Point::kChaosPlace); i < kNumPoints; ++i)
    if (ChaosPointAvailable(static_cast<Point>(i)))
      out += (out.empty() ? "" : ", ") + std::string(PointName(static_cast<Point>(i))).substr(6);
  return out;
}

TEST(ChaosSpec, PointsComeAfterTheOthersAndAreNoFaults) {
  // Traces store a point's number: the chaos points were appended.
  EXPECT_EQ(static_cast<int>(Point::kSchedPick), 15);
  EXPECT_EQ(static_cast<int>(Point::kChaosPlace), 16);
  EXPECT_EQ(static_cast<int>(Point::kChaosCqEvent), 21);
  const std::vector<std::string> names = {"chaos.place", "chaos.gather",  "chaos.fence",
                                          "chaos.lag",   "chaos.relaxed", "chaos.cq_event"};
  for (size_t i = 0; i < names.size(); ++i) {
    const auto p = static_cast<Point>(static_cast<int>(Point::kChaosPlace) + static_cast<int>(i));
    EXPECT_EQ(PointName(p), names[i]);
    EXPECT_EQ(PointByName(names[i]), p);
    EXPECT_TRUE(IsChaosPoint(p));
    EXPECT_FALSE(IsFaultPoint(p));
  }
  EXPECT_FALSE(IsChaosPoint(Point::kSchedPick));
  EXPECT_FALSE(IsChaosPoint(Point::kCount));
  for (int i = static_cast<int>(Point::kChaosPlace); i < kNumPoints; ++i)
    EXPECT_TRUE(ChaosPointAvailable(static_cast<Point>(i))) << i;
  EXPECT_FALSE(ChaosPointAvailable(Point::kWcError));
  // --faults does not name them.
  EXPECT_FALSE(ParseFaultSpec("chaos.cq_event").ok());
  EXPECT_FALSE(ParseFaultSpec("cq_event").ok());
}

TEST(ChaosSpec, Grammar) {
  auto spec = ParseChaosSpec("cq_event");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->rules.size(), 1u);
  EXPECT_LT(spec->rules[0].p, 0);
  EXPECT_EQ(spec->Mask(), 1u << 5);
  EXPECT_TRUE(spec->Names(Point::kChaosCqEvent));
  EXPECT_FALSE(spec->Names(Point::kChaosPlace));
  spec = ParseChaosSpec("cq_event:p=0.5:qp=0x1a:once, chaos.cq_event:nth=3:enable=0.25");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->rules.size(), 2u);
  EXPECT_DOUBLE_EQ(spec->rules[0].p, 0.5);
  EXPECT_EQ(spec->rules[0].qp, 0x1au);
  EXPECT_TRUE(spec->rules[0].once);
  EXPECT_EQ(spec->rules[1].nth, 3u);
  EXPECT_DOUBLE_EQ(spec->rules[1].enable, 0.25);
  EXPECT_TRUE(spec->Names(Point::kChaosCqEvent, 0x1b)) << "the second rule names any QP";
  // all and * name every point softnic shows, and nothing else.
  for (const char* every : {"all", "*", "all:p=0.1"}) {
    spec = ParseChaosSpec(every);
    ASSERT_TRUE(spec.ok()) << spec.status();
    for (int i = static_cast<int>(Point::kChaosPlace); i < kNumPoints; ++i) {
      const auto p = static_cast<Point>(i);
      EXPECT_EQ(spec->Names(p), ChaosPointAvailable(p)) << every << " " << PointName(p);
    }
  }
  EXPECT_TRUE(ParseChaosSpec("").value().empty());
  EXPECT_EQ(ParseChaosSpec("").value().Mask(), 0u);
}

TEST(ChaosSpec, ErrorsNameTheBadToken) {
  const std::string available = "(available: " + Available() + ")";
  struct Case {
    std::string spec;
    std::string says;
  } cases[] = {
      {"bogus", "chaos: unknown point 'bogus' in 'bogus' " + available},
      {"post_send", "unknown point 'post_send'"},
      {"chaos", "unknown point 'chaos'"},
      {"cq_event:status=retry-exc", "unknown setting (p=, nth=, once, enable=, qp=) 'status=retry-exc'"},
      {"cq_event:wr=2", "unknown setting"},
      {"cq_event:once=1", "unknown setting"},
      {"cq_event:p=2", "bad value in 'p=2' in 'cq_event:p=2'"},
      {"cq_event:enable=-1", "bad value in 'enable=-1'"},
      {"cq_event:nth=0", "bad value in 'nth=0'"},
      {"cq_event:qp=0", "bad value in 'qp=0'"},
      {"cq_event:nth=2:p=0.5", "nth= and p= exclude each other"},
      {"cq_event,", "chaos: an empty rule in 'cq_event,' (a stray ',')"},
  };
  for (const auto& c : cases) {
    auto spec = ParseChaosSpec(c.spec);
    ASSERT_FALSE(spec.ok()) << c.spec;
    EXPECT_NE(spec.status().message().find(c.says), std::string::npos) << spec.status() << " for " << c.spec;
  }
}

std::unique_ptr<Decider> MakeChaos(const char* spec, uint64_t seed) {
  auto parsed = ParseChaosSpec(spec);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return std::make_unique<Decider>(MakePrngSource(seed), FaultSpec(), parsed.ok() ? *parsed : ChaosSpec());
}

// A rule with neither p, nth nor once fires at kChaosDefaultP of the hits,
// in every run (no BUGGIFY activation), with an outcome in [1, n).
TEST(ChaosDecider, DefaultProbabilityAndOutcomeRange) {
  uint64_t fired = 0, hits = 0;
  int runs_with_one = 0;
  for (int seed = 1; seed <= 100; ++seed) {
    auto d = MakeChaos("cq_event", seed);
    EXPECT_TRUE(d->Active(Point::kChaosCqEvent));
    EXPECT_FALSE(d->Active(Point::kChaosPlace));
    EXPECT_FALSE(d->Active(Point::kWcError));
    uint64_t n = 0;
    for (int h = 0; h < 100; ++h) {
      const uint64_t o = d->Chaos(Point::kChaosCqEvent, 3, 4);
      EXPECT_LT(o, 4u);
      n += o != 0;
    }
    EXPECT_EQ(d->Count(Point::kChaosCqEvent), n);
    runs_with_one += n > 0;
    fired += n;
    hits += 100;
  }
  EXPECT_EQ(runs_with_one, 100);
  const double rate = static_cast<double>(fired) / static_cast<double>(hits);
  EXPECT_GT(rate, kChaosDefaultP - 0.03);  // mean 2500 of 10000, sd ~43
  EXPECT_LT(rate, kChaosDefaultP + 0.03);
  // Every non-zero outcome of n = 4 comes up.
  auto d = MakeChaos("cq_event:p=1", 7);
  std::vector<int> seen(4);
  for (int h = 0; h < 200; ++h) ++seen[d->Chaos(Point::kChaosCqEvent, 1, 4)];
  EXPECT_EQ(seen[0], 0);
  for (int o = 1; o < 4; ++o) EXPECT_GT(seen[o], 30) << o;
  // n <= 1 leaves no choice; a point no rule names decides nothing.
  EXPECT_EQ(d->Chaos(Point::kChaosCqEvent, 1, 1), 0u);
  EXPECT_EQ(d->Chaos(Point::kChaosPlace, 1, 4), 0u);
  EXPECT_EQ(d->Count(Point::kChaosPlace), 0u);
}

TEST(ChaosDecider, NthOnceQpAndEnable) {
  auto nth = MakeChaos("cq_event:nth=3", 1);
  std::vector<uint64_t> got;
  for (int h = 0; h < 5; ++h) got.push_back(nth->Chaos(Point::kChaosCqEvent, 1, 2));
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 0, 1, 0, 0}));
  auto once = MakeChaos("cq_event:once:p=1", 1);
  uint64_t n = 0;
  for (int h = 0; h < 10; ++h) n += once->Chaos(Point::kChaosCqEvent, h % 2, 2) != 0;
  EXPECT_EQ(n, 1u);
  auto qp = MakeChaos("cq_event:p=1:qp=0x1a", 1);
  EXPECT_EQ(qp->Chaos(Point::kChaosCqEvent, 1, 2, nullptr, 0x1b), 0u);
  EXPECT_EQ(qp->Chaos(Point::kChaosCqEvent, 1, 2, nullptr, 0x1a), 1u);
  auto off = MakeChaos("cq_event:enable=0", 1);
  for (int h = 0; h < 50; ++h) EXPECT_EQ(off->Chaos(Point::kChaosCqEvent, 1, 2), 0u);
}

// The sink records each chaos decision with its note; a log with the
// chaos= header replays them at the same keys, and only a log's outcome
// below n is taken.
TEST(ChaosDecider, RecordedDecisionsReplayWithTheirHeader) {
  auto d = MakeChaos("cq_event:p=0.5", 11);
  std::vector<Decision> log;
  d->SetSink([&](const Decision& x) { log.push_back(x); });
  std::vector<uint64_t> live;
  for (int h = 0; h < 40; ++h)
    live.push_back(d->Chaos(Point::kChaosCqEvent, 1 + h % 2, 2,
                            [](uint64_t o) { return "spurious " + std::to_string(o); }));
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log[0].note, "spurious 1");
  std::string text = FormatLogHeader("off", "", "seed 11", "cq_event:p=0.5");
  EXPECT_NE(text.find("\n# chaos=cq_event:p=0.5\n"), std::string::npos) << text;
  EXPECT_EQ(FormatLogHeader("off", "", "seed 11").find("chaos"), std::string::npos);
  for (const auto& x : log) text += FormatDecision(x);
  EXPECT_NE(text.find("chaos.cq_event obj="), std::string::npos) << text;
  auto parsed = ParseDecisionLog(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->chaos, "cq_event:p=0.5");
  Decider replay(MakeLogSource(parsed->decisions, "log"), FaultSpec(), ParseChaosSpec(parsed->chaos).value());
  EXPECT_TRUE(replay.Active(Point::kChaosCqEvent));
  std::vector<uint64_t> again;
  for (int h = 0; h < 40; ++h) again.push_back(replay.Chaos(Point::kChaosCqEvent, 1 + h % 2, 2));
  EXPECT_EQ(again, live);
  // An outcome the call cannot take (a log from another program) is 0.
  Decider odd(MakeLogSource({{{Point::kChaosCqEvent, 1, 1}, 5, "", 0, 0}}, "log"), FaultSpec(),
              ParseChaosSpec("cq_event").value());
  EXPECT_EQ(odd.Chaos(Point::kChaosCqEvent, 1, 2), 0u);
  EXPECT_EQ(odd.Count(Point::kChaosCqEvent), 0u);
}

TEST(ChaosOptions, ChaosKeepsItsSettingsBesideOtherOptions) {
  Options o;
  absl::Status s = ParseOptions("chaos=cq_event:p=0.5:qp=0x1a:verbosity=1", &o);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(o.chaos, "cq_event:p=0.5:qp=0x1a");
  EXPECT_EQ(o.verbosity, 1);
  Options o2;
  s = ParseOptions("faults=post_send:once:chaos=all:seed=3", &o2);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(o2.faults, "post_send:once");
  EXPECT_EQ(o2.chaos, "all");
  EXPECT_EQ(o2.seed, 3);
  Options o3;
  s = ParseOptions("chaos=fence:p=0.5,lag", &o3);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(o3.chaos, "fence:p=0.5,lag");
  Options o4;
  EXPECT_FALSE(ParseOptions("chaos=bogus", &o4).ok());
  EXPECT_TRUE(o4.chaos.empty());
}

}  // namespace
}  // namespace rdmasan::core

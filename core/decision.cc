// core/decision: see decision.h.
#include "core/decision.h"

#include <errno.h>
#include <infiniband/verbs.h>

#include <cmath>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace rdmasan::core {
namespace {

constexpr const char* kPointNames[kNumPoints] = {
    "post_send",           "post_recv",      "post_srq_recv", "reg_mr",
    "create_cq",           "create_qp",      "create_srq",    "create_ah",
    "create_comp_channel", "alloc_pd",       "wc.error",      "async.port_err",
    "async.cq_err",        "async.qp_fatal", "sched.hold",    "sched.pick",
    "chaos.place",         "chaos.gather",   "chaos.fence",   "chaos.lag",
    "chaos.relaxed",       "chaos.cq_event",
};

using prng::Mix;
using prng::Reduce;

class PrngSource : public DecisionSource {
 public:
  explicit PrngSource(uint64_t seed) : seed_(seed) {}
  uint64_t Draw(const DecisionKey& key, absl::FunctionRef<uint64_t(Draws&)> f) override {
    PrngDraws d(prng::KeyState(prng::KeyBase(seed_, key.point, key.obj), key.hit));
    return f(d);
  }
  bool KeyBase(Point p, uint64_t obj, uint64_t* base) const override {
    *base = prng::KeyBase(seed_, p, obj);
    return true;
  }
  uint64_t RunDraw(uint64_t tag, uint64_t a, uint64_t b, uint64_t n) override {
    return Reduce(Mix(Mix(Mix(Mix(seed_ + 0x5851f42d4c957f2dULL) ^ tag) ^ a) ^ b), n);
  }
  std::string Describe() const override { return absl::StrCat("seed ", seed_); }

 private:
  uint64_t seed_;
};

class ByteSource : public DecisionSource {
 public:
  ByteSource(const uint8_t* data, size_t size) : bytes_(data, data + size) {}
  uint64_t Draw(const DecisionKey&, absl::FunctionRef<uint64_t(Draws&)> f) override {
    std::lock_guard<std::mutex> l(mu_);
    StreamDraws d(this);
    return f(d);
  }
  uint64_t RunDraw(uint64_t, uint64_t, uint64_t, uint64_t n) override {
    std::lock_guard<std::mutex> l(mu_);
    StreamDraws d(this);
    return d.Below(n);
  }
  std::string Describe() const override { return absl::StrCat("bytes (", bytes_.size(), ")"); }

 private:
  // Takes as few bytes as n needs, big-endian; zeros once exhausted (so an
  // empty input is the natural run).
  class StreamDraws : public Draws {
   public:
    explicit StreamDraws(ByteSource* s) : s_(s) {}
    uint64_t Below(uint64_t n) override ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (n <= 1) return 0;
      uint64_t v = 0;
      for (uint64_t span = n - 1; span; span >>= 8) {
        const uint8_t b = s_->pos_ < s_->bytes_.size() ? s_->bytes_[s_->pos_++] : 0;
        v = (v << 8) | b;
      }
      return v % n;
    }

   private:
    ByteSource* s_;
  };
  std::mutex mu_;
  std::vector<uint8_t> bytes_;
  size_t pos_ ABSL_GUARDED_BY(mu_) = 0;
};

class LogSource : public DecisionSource {
 public:
  LogSource(std::vector<Decision> log, std::string name) : name_(std::move(name)) {
    for (auto& d : log) outcomes_[d.key] = d.outcome;
  }
  bool Replaying() const override { return true; }
  uint64_t Recorded(const DecisionKey& key) const override {
    auto it = outcomes_.find(key);
    return it == outcomes_.end() ? 0 : it->second;
  }
  uint64_t Draw(const DecisionKey& key, absl::FunctionRef<uint64_t(Draws&)>) override {
    return Recorded(key);
  }
  uint64_t RunDraw(uint64_t, uint64_t, uint64_t, uint64_t) override { return 0; }
  std::string Describe() const override { return absl::StrCat("log ", name_); }

 private:
  absl::flat_hash_map<DecisionKey, uint64_t> outcomes_;
  std::string name_;
};

struct NamedValue {
  const char* name;
  const char* alias;
  int value;
};

constexpr NamedValue kStatuses[] = {
    {"LOC_LEN_ERR", "loc-len", IBV_WC_LOC_LEN_ERR},
    {"LOC_QP_OP_ERR", "loc-qp-op", IBV_WC_LOC_QP_OP_ERR},
    {"LOC_EEC_OP_ERR", "loc-eec-op", IBV_WC_LOC_EEC_OP_ERR},
    {"LOC_PROT_ERR", "loc-prot", IBV_WC_LOC_PROT_ERR},
    {"WR_FLUSH_ERR", "wr-flush", IBV_WC_WR_FLUSH_ERR},
    {"MW_BIND_ERR", "mw-bind", IBV_WC_MW_BIND_ERR},
    {"BAD_RESP_ERR", "bad-resp", IBV_WC_BAD_RESP_ERR},
    {"LOC_ACCESS_ERR", "loc-access", IBV_WC_LOC_ACCESS_ERR},
    {"REM_INV_REQ_ERR", "rem-inv-req", IBV_WC_REM_INV_REQ_ERR},
    {"REM_ACCESS_ERR", "rem-access", IBV_WC_REM_ACCESS_ERR},
    {"REM_OP_ERR", "rem-op", IBV_WC_REM_OP_ERR},
    {"RETRY_EXC_ERR", "retry-exc", IBV_WC_RETRY_EXC_ERR},
    {"RNR_RETRY_EXC_ERR", "rnr-retry-exc", IBV_WC_RNR_RETRY_EXC_ERR},
    {"LOC_RDD_VIOL_ERR", "loc-rdd-viol", IBV_WC_LOC_RDD_VIOL_ERR},
    {"REM_INV_RD_REQ_ERR", "rem-inv-rd-req", IBV_WC_REM_INV_RD_REQ_ERR},
    {"REM_ABORT_ERR", "rem-abort", IBV_WC_REM_ABORT_ERR},
    {"INV_EECN_ERR", "inv-eecn", IBV_WC_INV_EECN_ERR},
    {"INV_EEC_STATE_ERR", "inv-eec-state", IBV_WC_INV_EEC_STATE_ERR},
    {"FATAL_ERR", "fatal", IBV_WC_FATAL_ERR},
    {"RESP_TIMEOUT_ERR", "resp-timeout", IBV_WC_RESP_TIMEOUT_ERR},
    {"GENERAL_ERR", "general", IBV_WC_GENERAL_ERR},
};

constexpr NamedValue kErrnos[] = {
    {"ENOMEM", "enomem", ENOMEM}, {"EINVAL", "einval", EINVAL}, {"EFAULT", "efault", EFAULT},
    {"EAGAIN", "eagain", EAGAIN}, {"ENOSPC", "enospc", ENOSPC}, {"EPERM", "eperm", EPERM},
    {"EACCES", "eacces", EACCES}, {"EBUSY", "ebusy", EBUSY},    {"EIO", "eio", EIO},
    {"ENODEV", "enodev", ENODEV}, {"ENOSYS", "enosys", ENOSYS}, {"EOPNOTSUPP", "eopnotsupp", EOPNOTSUPP},
};

bool ParseProb(absl::string_view v, double* out) {
  double d;
  if (!absl::SimpleAtod(v, &d) || !(d >= 0 && d <= 1)) return false;
  *out = d;
  return true;
}

bool ParseNum(absl::string_view v, uint64_t* out) {
  if (absl::ConsumePrefix(&v, "0x") || absl::ConsumePrefix(&v, "0X")) return absl::SimpleHexAtoi(v, out);
  return absl::SimpleAtoi(v, out);
}

// The settings --faults and --chaos share (p, enable, nth, once, qp):
// false if `key` is none of them, else true with *ok saying whether its
// value is good.
bool ParseCommonSetting(absl::string_view key, absl::string_view val, bool has_value, FaultRule* r,
                        bool* ok) {
  if (key == "once" && !has_value) {
    r->once = true;
  } else if (key == "p") {
    *ok = ParseProb(val, &r->p);
  } else if (key == "enable") {
    *ok = ParseProb(val, &r->enable);
  } else if (key == "nth") {
    *ok = ParseNum(val, &r->nth) && r->nth > 0;
  } else if (key == "qp") {
    uint64_t q = 0;
    *ok = ParseNum(val, &q) && q > 0 && q <= 0xffffff;
    r->qp = static_cast<uint32_t>(q);
  } else {
    return false;
  }
  return true;
}

}  // namespace

const char* PointName(Point p) {
  const int i = static_cast<int>(p);
  return i >= 0 && i < kNumPoints ? kPointNames[i] : "?";
}

Point PointByName(absl::string_view name) {
  for (int i = 0; i < kNumPoints; ++i)
    if (name == kPointNames[i]) return static_cast<Point>(i);
  return Point::kCount;
}

std::unique_ptr<DecisionSource> MakePrngSource(uint64_t seed) { return std::make_unique<PrngSource>(seed); }
std::unique_ptr<DecisionSource> MakeByteSource(const uint8_t* data, size_t size) {
  return std::make_unique<ByteSource>(data, size);
}
std::unique_ptr<DecisionSource> MakeLogSource(std::vector<Decision> log, std::string name) {
  return std::make_unique<LogSource>(std::move(log), std::move(name));
}

// ------------------------------------------------------------ decision log --

std::string FormatDecision(const Decision& d) {
  std::string line =
      absl::StrCat(PointName(d.key.point), " obj=", d.key.obj, " hit=", d.key.hit, " outcome=", d.outcome);
  if (!d.note.empty()) absl::StrAppend(&line, "  # ", d.note);
  line += '\n';
  return line;
}

std::string FormatLogHeader(absl::string_view reorder, absl::string_view faults, absl::string_view source,
                            absl::string_view chaos) {
  std::string out = absl::StrCat("# rdmasan decision log v1 (", source, ")\n# reorder=", reorder,
                                 "\n# faults=", faults, "\n");
  if (!chaos.empty()) absl::StrAppend(&out, "# chaos=", chaos, "\n");
  return out;
}

absl::StatusOr<DecisionLog> ParseDecisionLog(absl::string_view text) {
  DecisionLog log;
  int lineno = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++lineno;
    absl::string_view body = line;
    if (size_t hash = body.find('#'); hash != absl::string_view::npos) {
      absl::string_view comment = absl::StripAsciiWhitespace(body.substr(hash + 1));
      if (hash == 0 || absl::StripAsciiWhitespace(body.substr(0, hash)).empty()) {
        if (absl::ConsumePrefix(&comment, "reorder="))
          log.reorder = std::string(comment);
        else if (absl::ConsumePrefix(&comment, "faults="))
          log.faults = std::string(comment);
        else if (absl::ConsumePrefix(&comment, "chaos="))
          log.chaos = std::string(comment);
      }
      body = body.substr(0, hash);
    }
    body = absl::StripAsciiWhitespace(body);
    if (body.empty()) continue;
    auto bad = [&](absl::string_view what, absl::string_view token) {
      return absl::InvalidArgumentError(
          absl::StrCat("decision log line ", lineno, ": ", what, " '", token.substr(0, 80), "'"));
    };
    std::vector<absl::string_view> words = absl::StrSplit(body, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    Decision d;
    d.key.point = PointByName(words[0]);
    if (d.key.point == Point::kCount) return bad("unknown decision point", words[0]);
    bool have_hit = false, have_outcome = false;
    for (size_t i = 1; i < words.size(); ++i) {
      absl::string_view w = words[i];
      uint64_t* field = nullptr;
      if (absl::ConsumePrefix(&w, "obj=")) {
        field = &d.key.obj;
      } else if (absl::ConsumePrefix(&w, "hit=")) {
        field = &d.key.hit;
        have_hit = true;
      } else if (absl::ConsumePrefix(&w, "outcome=")) {
        field = &d.outcome;
        have_outcome = true;
      } else {
        return bad("unknown field", words[i]);
      }
      if (!ParseNum(w, field)) return bad("bad number in", words[i]);
    }
    if (!have_hit || d.key.hit == 0) return bad("missing or zero hit= in", body);
    if (!have_outcome || d.outcome == 0) return bad("missing or zero outcome= in", body);
    log.decisions.push_back(std::move(d));
  }
  return log;
}

// ------------------------------------------------------------------ faults --

bool ParseWcStatus(absl::string_view s, uint32_t* out) {
  uint64_t n;
  if (ParseNum(s, &n)) {
    if (n == 0 || n > IBV_WC_TM_RNDV_INCOMPLETE) return false;
    *out = static_cast<uint32_t>(n);
    return true;
  }
  absl::ConsumePrefix(&s, "IBV_WC_");
  for (const auto& v : kStatuses)
    if (s == v.name || s == v.alias) {
      *out = static_cast<uint32_t>(v.value);
      return true;
    }
  return false;
}

bool ParseErrno(absl::string_view s, int* out) {
  uint64_t n;
  if (ParseNum(s, &n)) {
    if (n == 0 || n > 4095) return false;
    *out = static_cast<int>(n);
    return true;
  }
  for (const auto& v : kErrnos)
    if (s == v.name || s == v.alias) {
      *out = v.value;
      return true;
    }
  return false;
}

const char* ErrnoName(int e) {
  for (const auto& v : kErrnos)
    if (v.value == e) return v.name;
  return "E?";
}

const char* WcStatusName(uint32_t status) {
  if (status == IBV_WC_SUCCESS) return "SUCCESS";
  for (const auto& v : kStatuses)
    if (static_cast<uint32_t>(v.value) == status) return v.name;
  return "?";
}

bool FaultRule::Matches(Point p) const {
  if (!IsFaultPoint(p)) return false;
  if (name == "*" || name == "all") return true;
  absl::string_view full = PointName(p);
  if (full == name) return true;
  return absl::StartsWith(full, name) && (full[name.size()] == '_' || full[name.size()] == '.');
}

absl::StatusOr<FaultSpec> ParseFaultSpec(absl::string_view spec) {
  FaultSpec out;
  if (absl::StripAsciiWhitespace(spec).empty()) return out;  // no faults (the default)
  for (absl::string_view rule_text : absl::StrSplit(spec, ',')) {
    rule_text = absl::StripAsciiWhitespace(rule_text);
    if (rule_text.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("faults: an empty rule in '", spec.substr(0, 120), "' (a stray ',')"));
    std::vector<absl::string_view> parts = absl::StrSplit(rule_text, ':');
    FaultRule r;
    r.name = std::string(parts[0]);
    auto bad = [&](absl::string_view what, absl::string_view token) {
      return absl::InvalidArgumentError(
          absl::StrCat("faults: ", what, " '", token.substr(0, 80), "' in '", rule_text.substr(0, 120), "'"));
    };
    bool any = false;
    for (int i = 0; i < kNumPoints && !any; ++i) any = r.Matches(static_cast<Point>(i));
    if (!any) return bad("unknown fault point", parts[0]);
    for (size_t i = 1; i < parts.size(); ++i) {
      absl::string_view s = parts[i];
      size_t eq = s.find('=');
      absl::string_view key = s.substr(0, eq), val = eq == absl::string_view::npos ? "" : s.substr(eq + 1);
      bool ok = true;
      if (ParseCommonSetting(key, val, eq != absl::string_view::npos, &r, &ok)) {
        // p, enable, nth, once, qp: as --chaos has them
      } else if (key == "wr") {
        uint64_t w;
        ok = ParseNum(val, &w) && w < (1u << 20);
        r.wr = static_cast<int64_t>(w);
      } else if (key == "status") {
        for (absl::string_view one : absl::StrSplit(val, '|')) {
          uint32_t st;
          if (!ParseWcStatus(one, &st) || st == IBV_WC_WR_FLUSH_ERR)
            return bad("unknown or unusable status", one);
          r.statuses.push_back(st);
        }
      } else if (key == "errno") {
        for (absl::string_view one : absl::StrSplit(val, '|')) {
          int e;
          if (!ParseErrno(one, &e)) return bad("unknown errno", one);
          r.errnos.push_back(e);
        }
      } else {
        return bad("unknown setting", s);
      }
      if (!ok) return bad("bad value in", s);
    }
    if (r.nth && r.p >= 0) return bad("nth= and p= exclude each other in", rule_text);
    out.rules.push_back(std::move(r));
  }
  return out;
}

// ------------------------------------------------------------------- chaos --

bool ChaosPointAvailable(Point p) {
  return IsChaosPoint(p);  // softnic shows every one
}

bool ChaosRuleMatches(const FaultRule& r, Point p) {
  if (!IsChaosPoint(p)) return false;
  if (r.name == "*" || r.name == "all") return ChaosPointAvailable(p);
  absl::string_view full = PointName(p);
  return full == r.name || full.substr(sizeof("chaos.") - 1) == r.name;
}

uint32_t ChaosSpec::Mask() const {
  uint32_t mask = 0;
  for (int i = static_cast<int>(Point::kChaosPlace); i < kNumPoints; ++i)
    for (const auto& r : rules)
      if (ChaosRuleMatches(r, static_cast<Point>(i)))
        mask |= 1u << (i - static_cast<int>(Point::kChaosPlace));
  return mask;
}

bool ChaosSpec::Names(Point p, uint32_t qp_num) const {
  for (const auto& r : rules)
    if (ChaosRuleMatches(r, p) && (!r.qp || !qp_num || r.qp == qp_num)) return true;
  return false;
}

absl::StatusOr<ChaosSpec> ParseChaosSpec(absl::string_view spec) {
  ChaosSpec out;
  if (absl::StripAsciiWhitespace(spec).empty()) return out;  // no chaos (the default)
  std::string available;
  for (int i = static_cast<int>(Point::kChaosPlace); i < kNumPoints; ++i)
    if (ChaosPointAvailable(static_cast<Point>(i)))
      absl::StrAppend(&available, available.empty() ? "" : ", ", PointName(static_cast<Point>(i)) + 6);
  for (absl::string_view rule_text : absl::StrSplit(spec, ',')) {
    rule_text = absl::StripAsciiWhitespace(rule_text);
    if (rule_text.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("chaos: an empty rule in '", spec.substr(0, 120), "' (a stray ',')"));
    std::vector<absl::string_view> parts = absl::StrSplit(rule_text, ':');
    FaultRule r;
    r.name = std::string(parts[0]);
    auto bad = [&](absl::string_view what, absl::string_view token) {
      return absl::InvalidArgumentError(
          absl::StrCat("chaos: ", what, " '", token.substr(0, 80), "' in '", rule_text.substr(0, 120), "'"));
    };
    const bool every = r.name == "*" || r.name == "all";
    Point named = Point::kCount;
    for (int i = static_cast<int>(Point::kChaosPlace); i < kNumPoints && !every; ++i)
      if (ChaosRuleMatches(r, static_cast<Point>(i))) named = static_cast<Point>(i);
    if (named == Point::kCount && !every)
      return absl::InvalidArgumentError(absl::StrCat("chaos: unknown point '", parts[0].substr(0, 80),
                                                     "' in '", rule_text.substr(0, 120),
                                                     "' (available: ", available, ")"));
    for (size_t i = 1; i < parts.size(); ++i) {
      absl::string_view s = parts[i];
      size_t eq = s.find('=');
      absl::string_view key = s.substr(0, eq), val = eq == absl::string_view::npos ? "" : s.substr(eq + 1);
      bool ok = true;
      if (!ParseCommonSetting(key, val, eq != absl::string_view::npos, &r, &ok))
        return bad("unknown setting (p=, nth=, once, enable=, qp=)", s);
      if (!ok) return bad("bad value in", s);
    }
    if (r.nth && r.p >= 0) return bad("nth= and p= exclude each other in", rule_text);
    out.rules.push_back(std::move(r));
  }
  return out;
}

// --------------------------------------------------------------- decider --

Decider::Decider(std::unique_ptr<DecisionSource> source, FaultSpec faults, ChaosSpec chaos)
    : source_(std::move(source)), faults_(std::move(faults)), chaos_(std::move(chaos)) {
  // Replaying a log: every fault point asks it (a point the log does not
  // name decides 0, and each point counts its own hits).
  if (source_->Replaying())
    for (int i = 0; i < kNumPoints; ++i) active_[i] = IsFaultPoint(static_cast<Point>(i));
  for (int i = 0; i < kNumPoints; ++i) {
    for (const auto& r : faults_.rules)
      if (r.Matches(static_cast<Point>(i))) active_[i] = true;
    if (chaos_.Names(static_cast<Point>(i))) active_[i] = true;
  }
  // Which points each rule names, found once (a rule's name is matched as
  // text).  A fault rule of p=0 alone (no nth, once or enable) never fires
  // and draws nothing (Draws::Chance(0) takes no draw, RuleEnabled none):
  // skipping it changes no outcome, no draw and no other rule's count.
  fault_state_.resize(faults_.rules.size());
  for (size_t r = 0; r < faults_.rules.size(); ++r) {
    const FaultRule& rule = faults_.rules[r];
    for (int i = 0; i < kNumPoints; ++i)
      if (rule.Matches(static_cast<Point>(i))) fault_state_[r].points |= uint32_t{1} << i;
    fault_state_[r].never = rule.p == 0 && !rule.nth && !rule.once && rule.enable < 0;
    if (!fault_state_[r].never)
      for (int i = 0; i < kNumPoints; ++i) may_fire_[i] |= (fault_state_[r].points >> i & 1) != 0;
  }
  if (source_->Replaying())
    for (int i = 0; i < kNumPoints; ++i) may_fire_[i] = true;
  chaos_state_.resize(chaos_.rules.size());
  for (size_t r = 0; r < chaos_.rules.size(); ++r)
    for (int i = 0; i < kNumPoints; ++i)
      if (ChaosRuleMatches(chaos_.rules[r], static_cast<Point>(i)))
        chaos_state_[r].points |= uint32_t{1} << i;
}

DecisionKey Decider::NextKeyLocked(Point p, uint64_t obj) {
  LastHit& last = last_hit_[static_cast<int>(p)];
  if (!last.count || last.obj != obj) {
    last.obj = obj;
    last.count = &hits_[{static_cast<uint16_t>(p), obj}];
  }
  return DecisionKey{p, obj, ++*last.count};
}

DecisionKey Decider::NextKey(Point p, uint64_t obj) {
  std::lock_guard<std::mutex> l(mu_);
  return NextKeyLocked(p, obj);
}

bool Decider::RuleEnabled(const FaultRule& r, RuleState& st, size_t rule_key, Point p, bool chaos) {
  if (r.nth || r.once || (r.p >= 0 && r.enable < 0)) return true;
  if (chaos && r.enable < 0) return true;  // chaos: enabled unless enable= says otherwise
  const double enable = r.enable >= 0 ? r.enable : 0.5;
  int8_t& state = st.enabled[static_cast<int>(p)];
  if (state == 0) {
    // BUGGIFY: decided once per run and point, from the run's draws.
    const uint64_t draw =
        source_->RunDraw(chaos ? 2 : 1, rule_key, static_cast<uint64_t>(p), uint64_t(1) << 32);
    state = draw < static_cast<uint64_t>(enable * double(uint64_t(1) << 32)) ? 1 : -1;
  }
  return state > 0;
}

uint64_t Decider::FirstFiring(const std::vector<FaultRule>& rules, std::vector<RuleState>& states,
                              size_t key_base, bool chaos, Point p, uint32_t qp_num, const DecisionKey& key,
                              absl::FunctionRef<uint64_t(const FaultRule&, Draws&)> outcome) {
  const uint32_t bit = uint32_t{1} << static_cast<int>(p);
  // The first rule that fires decides; each rule counts its own hits.
  for (size_t i = 0; i < rules.size(); ++i) {
    RuleState& st = states[i];
    const FaultRule& r = rules[i];
    if (!(st.points & bit) || st.never || (r.qp && r.qp != qp_num)) continue;
    if (!RuleEnabled(r, st, key_base + i, p, chaos)) continue;
    const uint64_t hit = ++st.hits[static_cast<int>(p)];
    if (r.once && st.fired) continue;
    const double dflt = chaos ? kChaosDefaultP : 0.05;
    const uint64_t result = source_->Draw(key, [&](Draws& d) -> uint64_t {
      bool fire;
      if (r.nth)
        fire = hit == r.nth;
      else if (r.p >= 0)
        fire = d.Chance(r.p);
      else if (r.once)
        fire = true;
      else
        fire = d.Chance(dflt);
      return fire ? outcome(r, d) : 0;
    });
    if (result) {
      if (r.once) st.fired = true;
      return result;
    }
  }
  return 0;
}

void Decider::Record(const DecisionKey& key, uint64_t outcome, NoteFn note, uint32_t qp_num, uint64_t wr_id) {
  counts_[static_cast<int>(key.point)].fetch_add(1, std::memory_order_relaxed);
  if (!sink_) return;
  Decision d{key, outcome, note && notes_ ? note(outcome) : std::string(), qp_num, wr_id};
  sink_(d);
}

uint64_t Decider::FaultMayFire(Point p, uint64_t obj, uint32_t qp_num,
                               absl::FunctionRef<uint64_t(const FaultRule&, Draws&)> outcome, NoteFn note,
                               uint64_t wr_id) {
  DecisionKey key;
  uint64_t result = 0;
  {
    // One lock for the key and the rules' state (the source's draws are
    // pure, or take their own lock).
    std::lock_guard<std::mutex> l(mu_);
    key = NextKeyLocked(p, obj);
    if (source_->Replaying())
      result = source_->Recorded(key);
    else
      result = FirstFiring(faults_.rules, fault_state_, 0, false, p, qp_num, key, outcome);
  }
  if (result) Record(key, result, note, qp_num, wr_id);
  return result;
}

uint64_t Decider::Schedule(Point p, uint64_t obj, absl::FunctionRef<uint64_t(Draws&)> f, NoteFn note,
                           uint32_t qp_num, uint64_t wr_id) {
  const DecisionKey key = NextKey(p, obj);
  const uint64_t result = source_->Replaying() ? source_->Recorded(key) : source_->Draw(key, f);
  if (result) Record(key, result, note, qp_num, wr_id);
  return result;
}

uint64_t Decider::ScheduleAt(Point p, uint64_t obj, uint64_t hit, absl::FunctionRef<uint64_t(Draws&)> f,
                             NoteFn note, uint32_t qp_num, uint64_t wr_id) {
  const DecisionKey key{p, obj, hit};
  const uint64_t result = source_->Replaying() ? source_->Recorded(key) : source_->Draw(key, f);
  if (result) Record(key, result, note, qp_num, wr_id);
  return result;
}

uint64_t Decider::Chaos(Point p, uint64_t obj, uint64_t n, NoteFn note, uint32_t qp_num, uint64_t wr_id) {
  if (n <= 1 || !active_[static_cast<int>(p)]) return 0;
  DecisionKey key;
  uint64_t result = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    key = NextKeyLocked(p, obj);
    if (source_->Replaying()) {
      result = source_->Recorded(key);
      if (result >= n) result = 0;  // a log from another build or program: the natural behaviour
    } else {
      // As for faults; chaos rules keep their once/nth state apart from
      // the fault rules' (their BUGGIFY draws keyed from kChaosRuleKey).
      constexpr size_t kChaosRuleKey = size_t(1) << 20;
      result = FirstFiring(chaos_.rules, chaos_state_, kChaosRuleKey, true, p, qp_num, key,
                           [n](const FaultRule&, Draws& d) { return 1 + d.Below(n - 1); });
    }
  }
  if (result) Record(key, result, note, qp_num, wr_id);
  return result;
}

uint64_t Decider::Count(Point p) const {
  return counts_[static_cast<int>(p)].load(std::memory_order_relaxed);
}

uint64_t Decider::Reached(Point p) const {
  uint64_t n = reached_[static_cast<int>(p)].load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& c : hit_counters_)
    if (c->p_ == p) n += c->n_.load(std::memory_order_relaxed);
  return n;
}

Decider::HitCounter* Decider::NewHitCounter(Point p) {
  std::lock_guard<std::mutex> l(mu_);
  hit_counters_.push_back(std::unique_ptr<HitCounter>(new HitCounter(p)));
  return hit_counters_.back().get();
}

std::string FormatReached(const Decider& d) {
  std::string out;
  for (int i = 0; i < kNumPoints; ++i) {
    const auto p = static_cast<Point>(i);
    if (uint64_t n = d.Reached(p)) absl::StrAppend(&out, "# reached ", PointName(p), " ", n, "\n");
  }
  return out;
}

std::vector<std::pair<Point, uint64_t>> ParseReached(absl::string_view text) {
  std::vector<std::pair<Point, uint64_t>> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "# reached ")) continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    uint64_t n = 0;
    if (f.size() != 2 || !absl::SimpleAtoi(f[1], &n) || n == 0) continue;
    const Point p = PointByName(f[0]);
    if (p == Point::kCount || !IsFaultPoint(p)) continue;
    out.emplace_back(p, n);
  }
  return out;
}

}  // namespace rdmasan::core

// libFuzzer target: arbitrary bytes as a decision log (--schedule=FILE) and
// as a fault spec (--faults=SPEC).  Both parsers must never crash, hang or
// leak, whatever the input; what parses must survive its own round trip
// (a log formatted again parses to the same decisions), and a parsed spec
// drives a Decider fed by the same bytes without incident.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "core/decision.h"

namespace {

using rdmasan::core::Decision;
using rdmasan::core::Draws;
using rdmasan::core::FaultRule;
using rdmasan::core::Point;

void Log(absl::string_view text) {
  auto log = rdmasan::core::ParseDecisionLog(text);
  if (!log.ok()) return;
  std::string again = rdmasan::core::FormatLogHeader(log->reorder, log->faults, "fuzz");
  for (const Decision& d : log->decisions) again += rdmasan::core::FormatDecision(d);
  auto back = rdmasan::core::ParseDecisionLog(again);
  if (!back.ok() || back->decisions.size() != log->decisions.size()) std::abort();
  for (size_t i = 0; i < log->decisions.size(); ++i)
    if (!(back->decisions[i].key == log->decisions[i].key) ||
        back->decisions[i].outcome != log->decisions[i].outcome)
      std::abort();
}

void Spec(absl::string_view text, const uint8_t* data, size_t size) {
  auto spec = rdmasan::core::ParseFaultSpec(text);
  if (!spec.ok()) return;
  rdmasan::core::Decider d(rdmasan::core::MakeByteSource(data, size), *spec);
  for (int i = 0; i < 64; ++i) {
    const auto p = static_cast<Point>(i % static_cast<int>(Point::kSchedHold));
    (void)d.Fault(p, static_cast<uint64_t>(i % 3), static_cast<uint32_t>(i % 2 ? 0x1a : 0),
                  [](const FaultRule& r, Draws& draws) -> uint64_t {
                    if (!r.statuses.empty()) return r.statuses[draws.Below(r.statuses.size())];
                    if (!r.errnos.empty())
                      return static_cast<uint64_t>(r.errnos[draws.Below(r.errnos.size())]);
                    return 1;
                  });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  Log(text);
  Spec(text, data, size);
  return 0;
}
